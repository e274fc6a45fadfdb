"""Candidate node sets for one job: what the placement head of a policy chooses among.

Shared by the simulator's environment and the live helper (numpy only). Given the node
table of an :class:`~slurm_plugin.features.Observation`'s raw side
(:class:`~slurm_plugin.features.NodesRaw`) and one job's request, :func:`candidates`
proposes a handful of distinct node sets, each feasible now:

- ``leaf:<k>``: the job inside one leaf switch ``k`` (every leaf that can hold it, best
  fit first: the leaf with the fewest usable nodes), nodes chosen best fit (fewest free
  GPUs, then CPUs: packing, as Slurm's select plugin and SCHED²'s packing placement do);
- ``fewest-switches``: when no single leaf holds the job, the fewest leaves that do
  (largest usable counts first), best-fit nodes in each (Slurm's topology/tree idea);
- ``pack``: best fit over the whole cluster, ignoring switches;
- ``spread``: the least-loaded usable nodes (most free GPUs, then CPUs), Gandiva's
  fallback when no affinity applies.

Identical sets are proposed once. Ties go to the lowest node index, so the result is
deterministic. A job that cannot start now gets no candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .features import NodesRaw, usable_nodes

__all__ = ["Candidates", "candidates", "usable_nodes"]


@dataclass(frozen=True, eq=False)
class Candidates:
    """Candidate node sets for one job.

    Attributes:
        sets: ``(K, N)`` bool: row ``k`` marks the nodes of candidate ``k``.
        kinds: How each candidate was made (``"leaf:3"``, ``"pack"``...).
        leaves: Leaf switches each candidate spans.
    """

    sets: np.ndarray
    kinds: tuple[str, ...]
    leaves: np.ndarray

    def __len__(self) -> int:
        """Number of candidates."""
        return int(self.sets.shape[0])

    def nodes(self, k: int) -> np.ndarray:
        """Node indices of candidate ``k`` (sorted)."""
        out: np.ndarray = np.flatnonzero(self.sets[k])
        return out


def _best_fit(nodes: NodesRaw, idx: np.ndarray, k: int) -> np.ndarray:
    order = np.lexsort((idx, nodes.free_c[idx], nodes.free_g[idx]))
    return idx[order[:k]]


def candidates(nodes: NodesRaw, n_nodes: int, cpus: int = 0, gpus: int = 0, mem: int = 0,
               exclusive: bool = False, max_sets: int = 8) -> Candidates:
    """Up to ``max_sets`` distinct feasible node sets for a request (module docstring).

    Raises:
        ValueError: If ``n_nodes`` < 1 or ``max_sets`` < 1.
    """
    if n_nodes < 1 or max_sets < 1:
        raise ValueError("n_nodes and max_sets must be at least 1")
    n = nodes.n
    ok = usable_nodes(nodes, cpus, gpus, mem, exclusive)
    sets: list[np.ndarray] = []
    kinds: list[str] = []
    seen: set[bytes] = set()

    def add(idx: np.ndarray, kind: str) -> None:
        if len(sets) >= max_sets:
            return
        row = np.zeros(n, dtype=bool)
        row[idx] = True
        key = np.packbits(row).tobytes()
        if key not in seen:
            seen.add(key)
            sets.append(row)
            kinds.append(kind)

    usable = np.flatnonzero(ok)
    if usable.size >= n_nodes:
        per_leaf = np.bincount(nodes.leaf[usable], minlength=nodes.n_leaves)
        fitting = np.flatnonzero(per_leaf >= n_nodes)
        # one leaf: best fit first (fewest usable nodes), then the lowest index
        for leaf in fitting[np.argsort(per_leaf[fitting], kind="stable")].tolist():
            if len(sets) >= max_sets - 2 and kinds:
                break
            in_leaf = usable[nodes.leaf[usable] == leaf]
            add(_best_fit(nodes, in_leaf, n_nodes), f"leaf:{leaf}")
        if not fitting.size:
            order = np.argsort(-per_leaf, kind="stable")
            cs = np.cumsum(per_leaf[order])
            m = int(np.searchsorted(cs, n_nodes))
            chosen = order[:m + 1]
            need = n_nodes
            parts = []
            for leaf in chosen.tolist():
                in_leaf = usable[nodes.leaf[usable] == leaf]
                take = min(need, in_leaf.size)
                parts.append(_best_fit(nodes, in_leaf, take))
                need -= take
            add(np.concatenate(parts), "fewest-switches")
        add(_best_fit(nodes, usable, n_nodes), "pack")
        spread = usable[np.lexsort((usable, -nodes.free_c[usable],
                                    -nodes.free_g[usable]))][:n_nodes]
        add(spread, "spread")
    if sets:
        arr = np.stack(sets)
        leaves = np.array([np.unique(nodes.leaf[row]).size for row in arr], dtype=np.int64)
    else:
        arr = np.zeros((0, n), dtype=bool)
        leaves = np.zeros(0, dtype=np.int64)
    return Candidates(arr, tuple(kinds), leaves)
