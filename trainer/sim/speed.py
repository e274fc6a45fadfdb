"""Speed models: how long a job runs given where it was placed.

A speed model maps a started job (and its nodes) to its actual run time in the replay.
The engine asks it once per job, when the job starts (:meth:`SpeedModel.run_time`), and
tells it when jobs start and finish (:meth:`SpeedModel.on_start`,
:meth:`SpeedModel.on_finish`) so that a model may keep state about what runs where.

Registered models (:data:`SPEED_MODELS`):

``none``
    The run time recorded in history, wherever the job runs.

``locality`` (:class:`LocalitySpeedModel`; SCHED², Gandiva, RL-TAPS)
    The recorded run time ``T`` is read as the job's run time on its *best* placement:
    its GPUs/CPUs packed on the fewest nodes that can hold them (``n_min``) within the
    fewest leaf switches (``L_min``). A job placed on ``n`` nodes over ``L`` leaves runs

    ``T * (1 + E * Q(n, L)) / (1 + E * Q(n_min, L_min))``

    where ``E = s / (1 - s)`` is the job's *excess slowdown* from its locality
    sensitivity ``s`` (:attr:`~trainer.sim.state.JobTable.locality`), and ``Q`` the
    communication volume of its placement:

    - ``Q(n, L) = R(n) * (1 + leaf_penalty * (L - 1))``;
    - ``R(k) = 2 (k - 1) / k`` is what each member of a ring all-reduce over ``k``
      servers sends per byte of gradient, normalised so that ``R(1) = 0`` (no network)
      and ``R(2) = 1``. So two servers instead of one give ``1 + E = 1 / (1 - s)``, the
      definition of ``s`` from the papers' measurements of "the same job on two
      servers instead of one": SCHED² Fig. 1, 4 GPUs on two servers: VGG16 5.9x slower,
      Transformer 2.7x, DeepSpeech 1.6x, Inception3 1.4x; Gandiva Fig. 4, 2-GPU jobs
      split over two servers: ResNet-50 +47%, InceptionV3 +30%, DeepSpeech +5%. More
      servers cost more, up to ``R -> 2`` (twice the two-server excess);
    - ``leaf_penalty = 0.2``: RL-TAPS eq. 12 multiplies the reduction time by
      ``1 + (r - 1) / 5`` for a job over ``r`` racks (1.2, 1.4, 1.6 for 2, 3, 4 racks).

    A one-node job never slows down (``R(1) = 0``); a whole-node job, or one whose
    per-node share cannot be packed tighter, only slows when spread over more leaves
    than it needs. ``n`` is fixed by the request in this simulator (a job gets the node
    count it asked for), so ``n > n_min`` only for requests that themselves spread GPUs
    (e.g. 8 GPUs as 4 nodes x 2): the placement decides ``L``. Sensitivities above
    ``max_sensitivity`` (0.95) count as it. The model is deterministic and keeps no
    state.

``bandwidth`` (:class:`BandwidthSpeedModel`; RL-TAPS)
    The ``locality`` model, with the communication part also slowed by the other jobs
    sharing the job's links. The cluster is a graph: each node's link to its leaf switch
    (``node_gbs``), each leaf switch's uplink to its parent, and the uplink of every
    upper switch that does not span all leaves (each ``1 / oversubscription`` of what
    the nodes below it can send: RL-TAPS' 8:1, 6.25 GB/s for a 4-node leaf; or a fixed
    ``uplink_gbs``). A multi-node job uses its nodes' links; a job over several leaves
    also every uplink on the paths between its leaves (up to their lowest common
    switch); a one-node job uses none and is never slowed. As in
    RL-TAPS (eq. 13-15), the communication part is scaled by
    ``min_e bw(e) / min_e (bw(e) / jobs(e))`` over the links ``e`` the job uses, where
    ``jobs(e)`` counts the multi-node jobs on link ``e`` (the job included): the
    slowdown of its most constrained link. Run time:
    ``T * (1 + E * Q(n, L) * scale) / (1 + E * Q(n_min, L_min))``.

    **Approximation**: the engine fixes a job's end when it starts, so ``jobs(e)`` is
    counted at the job's start (the model keeps the link loads up to date through the
    start/finish hooks) and held for its whole run; running jobs are not re-timed when
    others start or finish on their links. A job that starts on a busy link is slowed
    for its whole run, one that others join later is not.

Both placement-dependent models cap a slowed run at the job's time limit when the record
gave one (Slurm kills a job at its limit; a recorded run already past it is kept).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from .state import BIG, Cluster, JobTable

__all__ = [
    "SPEED_MODELS",
    "BandwidthParams",
    "BandwidthSpeedModel",
    "LocalityParams",
    "LocalitySpeedModel",
    "NoSpeedModel",
    "SpeedModel",
    "comm_volume",
    "make_speed_model",
    "min_leaves",
    "spread_factor",
]


class SpeedModel(ABC):
    """Actual run time of a job on the nodes it got."""

    name: ClassVar[str] = ""

    @abstractmethod
    def run_time(self, jobs: JobTable, cluster: Cluster, job: int, nodes: np.ndarray,
                 leaves: int) -> int:
        """Seconds job ``job`` runs on ``nodes`` (spanning ``leaves`` leaf switches)."""

    def on_start(self, job: int, nodes: np.ndarray, leaves: int, t: int) -> None:
        """Job ``job`` started at ``t`` on ``nodes`` (after :meth:`run_time` for it)."""
        return None

    def on_finish(self, job: int, t: int) -> None:
        """Job ``job`` finished at ``t``."""
        return None

    def to_dict(self) -> dict[str, Any]:
        """The model's name and parameters, JSON-able."""
        return {"name": self.name}


class NoSpeedModel(SpeedModel):
    """The run time as recorded (``end - start`` of the record), wherever the job runs."""

    name = "none"

    def run_time(self, jobs: JobTable, cluster: Cluster, job: int, nodes: np.ndarray,
                 leaves: int) -> int:
        """The recorded run time."""
        return int(jobs.run[job])


# ---------------------------------------------------------------------------- formulas
def comm_volume(nodes: int, leaves: int, leaf_penalty: float) -> float:
    """``Q(n, L)``: the communication volume of a placement (module docstring).

    ``2 (n - 1) / n`` (a ring all-reduce over ``n`` servers; 0 for one node, 1 for two)
    times ``1 + leaf_penalty * (leaves - 1)``.
    """
    if nodes <= 1:
        return 0.0
    return 2.0 * (nodes - 1) / nodes * (1.0 + leaf_penalty * (max(1, leaves) - 1))


def spread_factor(s: float, nodes: int, leaves: int, min_nodes: int, min_leaves: int,
                  leaf_penalty: float, contention: float = 1.0) -> float:
    """How much longer a job runs on ``nodes``/``leaves`` than packed (module docstring).

    Args:
        s: Locality sensitivity in [0, 1).
        nodes: Nodes the job got.
        leaves: Leaf switches they span.
        min_nodes: Fewest nodes that can hold the job.
        min_leaves: Fewest leaves that can hold ``min_nodes`` nodes.
        leaf_penalty: Extra communication per extra leaf (RL-TAPS: 0.2).
        contention: Factor on the communication part (bandwidth sharing), >= 1.

    Raises:
        ValueError: If ``s`` is not in [0, 1).
    """
    if not 0.0 <= s < 1.0:
        raise ValueError(f"locality sensitivity must be in [0, 1), got {s}")
    e = s / (1.0 - s)
    best = comm_volume(min_nodes, min_leaves, leaf_penalty)
    return (1.0 + e * comm_volume(nodes, leaves, leaf_penalty) * contention) / (1.0 + e * best)


def min_leaves(cluster: Cluster) -> np.ndarray:
    """Cumulative sizes of the leaves, largest first.

    The fewest leaves holding ``k`` nodes is ``np.searchsorted(out, k) + 1``.
    """
    out: np.ndarray = np.cumsum(np.sort(cluster.leaf_size)[::-1])
    return out


def _min_nodes(jobs: JobTable, cluster: Cluster) -> np.ndarray:
    """Per job, the fewest nodes that could hold its CPUs, GPUs and memory."""
    n = jobs.nodes.astype(np.int64)
    need = np.ones_like(n)
    for per, cap in ((jobs.cpus, cluster.cap_c), (jobs.gpus, cluster.cap_g),
                     (jobs.mem, cluster.cap_m[cluster.cap_m < BIG])):
        top = int(cap.max()) if cap.size else 0
        if top > 0:
            need = np.maximum(need, -(-(per * n) // top))
    out: np.ndarray = np.where(jobs.exclusive, n, np.minimum(n, need))
    return out


# ---------------------------------------------------------------------------- locality
@dataclass(frozen=True)
class LocalityParams:
    """Parameters of the ``locality`` model (sources in the module docstring).

    Attributes:
        leaf_penalty: Extra communication per leaf switch beyond the first: RL-TAPS eq.
            12, ``1 + (r - 1) / 5`` over ``r`` racks, i.e. 0.2.
        max_sensitivity: Sensitivities above this are read as this (``s = 1`` would
            never finish); the synthetic workload draws at most 0.95.
        cap_at_limit: A slowed run ends at the job's time limit when the record gave one
            (Slurm's TIMEOUT); a recorded run longer than its limit is kept.
    """

    leaf_penalty: float = 0.2
    max_sensitivity: float = 0.95
    cap_at_limit: bool = True

    def __post_init__(self) -> None:
        if not self.leaf_penalty >= 0:
            raise ValueError(f"leaf_penalty must be >= 0, got {self.leaf_penalty}")
        if not 0.0 <= self.max_sensitivity < 1.0:
            raise ValueError(f"max_sensitivity must be in [0, 1), got {self.max_sensitivity}")


class LocalitySpeedModel(SpeedModel):
    """Slower when spread over more nodes or leaf switches than needed (module docstring).

    Per-job constants are computed once per job table and cluster.
    """

    name = "locality"

    def __init__(self, params: LocalityParams | None = None) -> None:
        self.params = params or LocalityParams()
        self._jobs: JobTable | None = None
        self._cluster: Cluster | None = None
        self._cum_leaves = np.zeros(0, dtype=np.int64)
        self._excess: list[float] = []
        self._best: list[float] = []
        self._run: list[int] = []
        self._cap: list[int] = []

    def to_dict(self) -> dict[str, Any]:
        """The model's name and parameters, JSON-able."""
        return {"name": self.name, **asdict(self.params)}

    def _bind(self, jobs: JobTable, cluster: Cluster) -> None:
        if self._jobs is jobs and self._cluster is cluster:
            return
        p = self.params
        self._jobs, self._cluster = jobs, cluster
        self._cum_leaves = min_leaves(cluster)
        s = np.minimum(jobs.locality.astype(np.float64), p.max_sensitivity)
        if s.size and not (s >= 0).all():
            raise ValueError("job locality sensitivities must be in [0, 1]")
        self._excess = (s / (1.0 - s)).tolist()
        n_min = _min_nodes(jobs, cluster)
        l_min = np.searchsorted(self._cum_leaves, n_min) + 1
        self._best = [comm_volume(int(a), int(b), p.leaf_penalty)
                      for a, b in zip(n_min.tolist(), l_min.tolist(), strict=True)]
        self._run = jobs.run.tolist()
        cap = np.where(jobs.limit_known, np.maximum(jobs.limit, jobs.run), -1)
        self._cap = cap.tolist() if p.cap_at_limit else [-1] * jobs.n

    def min_leaves_for(self, nodes: int) -> int:
        """Fewest leaf switches that hold ``nodes`` nodes (of the last cluster seen)."""
        return int(np.searchsorted(self._cum_leaves, nodes)) + 1

    def _seconds(self, job: int, comm: float) -> int:
        """Run time of ``job`` whose placement's communication volume is ``comm``."""
        run = self._run[job]
        e = self._excess[job]
        if comm <= 0.0 or e <= 0.0:
            return run
        out = math.floor(run * (1.0 + e * comm) / (1.0 + e * self._best[job]) + 0.5)
        cap = self._cap[job]
        return min(out, cap) if cap >= 0 else out

    def run_time(self, jobs: JobTable, cluster: Cluster, job: int, nodes: np.ndarray,
                 leaves: int) -> int:
        """The recorded run time times the spread factor of this placement."""
        self._bind(jobs, cluster)
        n = int(nodes.size)
        if n <= 1:
            return self._run[job]
        return self._seconds(job, comm_volume(n, leaves, self.params.leaf_penalty))


# ---------------------------------------------------------------------------- bandwidth
@dataclass(frozen=True)
class BandwidthParams(LocalityParams):
    """Parameters of the ``bandwidth`` model (sources in the module docstring).

    Attributes:
        node_gbs: Bandwidth of a node's link to its leaf switch, GB/s: RL-TAPS Table 1,
            Infiniband card to top-of-rack switch, 12.5 GB/s (100 Gb/s EDR).
        oversubscription: What the nodes below a switch can send over what its uplink
            carries: each uplink gets ``nodes below * node_gbs / oversubscription``.
            RL-TAPS' racks have 2 machines x 2 Infiniband cards x 12.5 GB/s over one
            6.25 GB/s top-of-rack to director link (Table 1, §4.6.1): 8:1, so a 4-node
            leaf (the synthetic clusters' default) gets their 6.25 GB/s.
        uplink_gbs: Every uplink's bandwidth in GB/s instead (``None``: from
            ``oversubscription``).
    """

    node_gbs: float = 12.5
    oversubscription: float = 8.0
    uplink_gbs: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.node_gbs > 0 and self.oversubscription > 0
                and (self.uplink_gbs is None or self.uplink_gbs > 0)):
            raise ValueError("node_gbs, oversubscription and uplink_gbs must be > 0, got"
                             f" {self.node_gbs}, {self.oversubscription}, {self.uplink_gbs}")


class BandwidthSpeedModel(LocalitySpeedModel):
    """``locality`` plus bandwidth sharing on the links a job uses (module docstring).

    Links are numbered: node links ``0..N-1`` (node index), leaf uplinks ``N..N+L-1``,
    then the uplinks of :attr:`Cluster.uppers` in order. :attr:`load` holds the
    multi-node jobs running on each link.
    """

    name = "bandwidth"
    params: BandwidthParams

    def __init__(self, params: BandwidthParams | None = None) -> None:
        super().__init__(params or BandwidthParams())
        self.load = np.zeros(0, dtype=np.int64)
        self._bw = np.zeros(0, dtype=np.float64)
        self._topo: Cluster | None = None
        self._job_links: dict[int, np.ndarray] = {}
        self._pending: tuple[int, np.ndarray] | None = None

    def _bind(self, jobs: JobTable, cluster: Cluster) -> None:
        super()._bind(jobs, cluster)
        if self._topo is cluster:
            return
        if self._job_links:
            raise RuntimeError("a bandwidth model tracks one replay: jobs still run on"
                               f" cluster {self._topo.name if self._topo else '?'}")
        self._topo = cluster
        p = self.params
        n = cluster.num_nodes
        below = np.concatenate((cluster.leaf_size.astype(np.float64),
                                [float(cluster.leaf_size[ids].sum())
                                 for _, _, ids in cluster.uppers]))
        up = (np.full(below.size, p.uplink_gbs) if p.uplink_gbs is not None
              else below * p.node_gbs / p.oversubscription)
        self._bw = np.concatenate((np.full(n, p.node_gbs), up))
        self.load = np.zeros(self._bw.size, dtype=np.int64)

    def links(self, nodes: np.ndarray) -> np.ndarray:
        """The links a job on ``nodes`` uses (none for one node).

        Raises:
            RuntimeError: If no cluster is known yet (call :meth:`run_time` first).
        """
        cl = self._topo
        if cl is None:
            raise RuntimeError("the bandwidth model has no cluster yet: call run_time first")
        if nodes.size <= 1:
            return np.zeros(0, dtype=np.int64)
        n = cl.num_nodes
        leaves = np.unique(cl.leaf_of[nodes])
        parts = [nodes.astype(np.int64)]
        if leaves.size > 1:
            parts.append(n + leaves.astype(np.int64))
            base = n + cl.num_leaves
            ups = [base + k for k, (_, _, ids) in enumerate(cl.uppers)
                   if 0 < int(np.isin(leaves, ids).sum()) < leaves.size]
            if ups:
                parts.append(np.array(ups, dtype=np.int64))
        out: np.ndarray = np.concatenate(parts)
        return out

    def contention(self, links: np.ndarray) -> float:
        """RL-TAPS' scale factor if one more job used ``links``: ``min bw / min (bw / jobs)``."""
        if not links.size:
            return 1.0
        bw = self._bw[links]
        return float(bw.min() / (bw / (self.load[links] + 1)).min())

    def run_time(self, jobs: JobTable, cluster: Cluster, job: int, nodes: np.ndarray,
                 leaves: int) -> int:
        """The ``locality`` run time with the communication part scaled by contention."""
        self._bind(jobs, cluster)
        links = self.links(nodes)
        self._pending = (job, links)
        if not links.size:
            return self._run[job]
        comm = comm_volume(int(nodes.size), leaves, self.params.leaf_penalty)
        return self._seconds(job, comm * self.contention(links))

    def on_start(self, job: int, nodes: np.ndarray, leaves: int, t: int) -> None:
        """Count ``job`` on its links until it finishes."""
        pend = self._pending
        links = pend[1] if pend is not None and pend[0] == job else self.links(nodes)
        self._pending = None
        if links.size:
            self.load[links] += 1
            self._job_links[job] = links

    def on_finish(self, job: int, t: int) -> None:
        """Take ``job`` off its links."""
        links = self._job_links.pop(job, None)
        if links is not None:
            self.load[links] -= 1


#: Speed models by name.
SPEED_MODELS: dict[str, type[SpeedModel]] = {
    "none": NoSpeedModel,
    "locality": LocalitySpeedModel,
    "bandwidth": BandwidthSpeedModel,
}


def make_speed_model(name: str) -> SpeedModel:
    """A speed model by name, with its default parameters.

    Raises:
        KeyError: If the name is not registered.
    """
    try:
        cls = SPEED_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown speed model {name!r}: {sorted(SPEED_MODELS)}") from None
    return cls()
