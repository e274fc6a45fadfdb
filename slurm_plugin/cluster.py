"""``ClusterSpec``: the static shape of a cluster, shared by the store, simulator and helper.

A spec is built from the live cluster (:meth:`ClusterSpec.from_slurm`), synthesised for a
trace (:meth:`ClusterSpec.synthetic`), or read back from its JSON snapshot in the store
(:meth:`ClusterSpec.from_dict`). It holds no job state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .slurm.hostlist import compress, expand
from .slurm.types import SlurmNode, Switch, SwitchTree

#: Bumped when the JSON layout of :meth:`ClusterSpec.to_dict` changes.
SPEC_VERSION = 1


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node's configured resources."""

    name: str
    cpus: int
    gpus: int = 0
    mem_mb: int = 0
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Nodes, the switch tree and partitions of one cluster.

    Attributes:
        name: Cluster name (Slurm's ``ClusterName`` or a trace's name).
        nodes: Nodes in a stable order (as Slurm lists them).
        switches: The switch tree; empty when the cluster has no topology.
        partitions: Partition name to the node names in it.
    """

    name: str
    nodes: tuple[NodeSpec, ...]
    switches: SwitchTree = field(default_factory=SwitchTree)
    partitions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    # ------------------------------------------------------------------ builders
    @classmethod
    def from_slurm(cls, name: str, nodes: Iterable[SlurmNode], tree: SwitchTree) -> ClusterSpec:
        """From what a :class:`~slurm_plugin.slurm.SlurmClient` reads."""
        specs = tuple(
            NodeSpec(n.name, n.cpus, n.gpus, n.real_memory_mb, n.features, n.partitions)
            for n in nodes
        )
        parts: dict[str, list[str]] = {}
        for n in specs:
            for p in n.partitions:
                parts.setdefault(p, []).append(n.name)
        return cls(name, specs, tree, {p: tuple(ns) for p, ns in parts.items()})

    @classmethod
    def synthetic(
        cls,
        name: str,
        num_nodes: int,
        *,
        cpus_per_node: int = 64,
        gpus_per_node: int = 8,
        mem_mb_per_node: int = 512_000,
        nodes_per_leaf: int = 4,
        partition: str = "batch",
        node_prefix: str = "node",
    ) -> ClusterSpec:
        """A homogeneous cluster, as for a trace that records no machine layout.

        ``num_nodes`` nodes in leaf switches of ``nodes_per_leaf`` nodes under one spine,
        one partition; each node's features name its leaf switch.

        Raises:
            ValueError: On non-positive sizes.
        """
        if num_nodes < 1 or nodes_per_leaf < 1 or cpus_per_node < 1:
            raise ValueError("num_nodes, nodes_per_leaf and cpus_per_node must be >= 1")
        if gpus_per_node < 0 or mem_mb_per_node < 0:
            raise ValueError("gpus_per_node and mem_mb_per_node must be >= 0")
        width = max(2, len(str(num_nodes)))
        names = [f"{node_prefix}{i:0{width}d}" for i in range(1, num_nodes + 1)]
        leaves: list[Switch] = []
        for start in range(0, num_nodes, nodes_per_leaf):
            members = tuple(names[start:start + nodes_per_leaf])
            leaves.append(Switch(f"leaf{len(leaves) + 1}", 0, members))
        leaf_of = {n: s.name for s in leaves for n in s.nodes}
        nodes = tuple(
            NodeSpec(n, cpus_per_node, gpus_per_node, mem_mb_per_node, (leaf_of[n],),
                     (partition,))
            for n in names
        )
        switches = list(leaves)
        if len(leaves) > 1:
            switches.append(Switch("spine", 1, tuple(names), tuple(s.name for s in leaves)))
        return cls(name, nodes, SwitchTree.from_switches(switches), {partition: tuple(names)})

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        """GPUs in the whole cluster."""
        return sum(n.gpus for n in self.nodes)

    @property
    def total_cpus(self) -> int:
        """CPUs in the whole cluster."""
        return sum(n.cpus for n in self.nodes)

    def switch_tree_hash(self) -> str:
        """A short sha256 of the switch tree (names, levels, members), order-independent."""
        items = sorted(
            (s.name, s.level, tuple(sorted(s.nodes)), tuple(sorted(s.switches)))
            for s in self.switches.switches.values()
        )
        return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able snapshot (node lists compressed as hostlists)."""
        return {
            "spec_version": SPEC_VERSION,
            "name": self.name,
            "nodes": [
                {"name": n.name, "cpus": n.cpus, "gpus": n.gpus, "mem_mb": n.mem_mb,
                 "features": list(n.features), "partitions": list(n.partitions)}
                for n in self.nodes
            ],
            "switches": [
                {"name": s.name, "level": s.level, "nodes": compress(s.nodes),
                 "switches": list(s.switches), "link_speed": s.link_speed}
                for s in self.switches.switches.values()
            ],
            "partitions": {p: compress(ns) for p, ns in self.partitions.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterSpec:
        """Read a snapshot written by :meth:`to_dict`.

        Raises:
            ValueError: If the snapshot is of an unknown version or malformed.
        """
        version = data.get("spec_version")
        if version != SPEC_VERSION:
            raise ValueError(f"ClusterSpec snapshot version {version!r}, expected {SPEC_VERSION}")
        try:
            nodes = tuple(
                NodeSpec(str(n["name"]), int(n["cpus"]), int(n.get("gpus", 0)),
                         int(n.get("mem_mb", 0)), tuple(n.get("features", ())),
                         tuple(n.get("partitions", ())))
                for n in data["nodes"]
            )
            switches = [
                Switch(str(s["name"]), int(s["level"]), tuple(expand(s.get("nodes", ""))),
                       tuple(s.get("switches", ())), s.get("link_speed"))
                for s in data.get("switches", ())
            ]
            parts = {str(p): tuple(expand(ns)) for p, ns in data.get("partitions", {}).items()}
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed ClusterSpec snapshot: {exc!r}") from None
        return cls(str(data["name"]), nodes, SwitchTree.from_switches(switches), parts)
