"""A step-able replay: the decision core under the Gymnasium environment (no torch, no gym).

The batch :class:`~trainer.sim.engine.Simulator` runs a policy to the end by itself. A
:class:`Stepper` instead stops at every moment a decision can be taken and lets the
caller take it: start a pending job on nodes of its choice (:meth:`Stepper.start`, any
number of times at one moment), or let time run to the next event
(:meth:`Stepper.advance`). ``trainer/env.py`` wraps it as a Gymnasium environment; a
rollout worker may drive it directly.

Events and their order (the engine's rules)
    Completions sit in a heap of ``(time, seq, job)`` (``seq`` counts the starts, so
    ties go to the job started first); arrivals come from the job table, already in
    arrival order (eligible time, submit time, job id). :meth:`Stepper.advance` moves
    time to the next event time ``t`` and processes *every* event at ``t``:
    completions first (they free their resources), then the arrivals at ``t`` in table
    order. A job that runs 0 s completes at the moment it starts, in the next
    :meth:`~Stepper.advance` (which then moves time by 0 s), as in the engine.

State
    :class:`~trainer.sim.state.NodeState` (free resources, expected ends), the pending
    jobs in arrival order, the running jobs with their nodes, per-job start and end
    times and leaf switches spanned, and a
    :class:`~slurm_plugin.features.UserHistory` fed with each job as it finishes (user
    name, end, run, time limit, CPUs, leaves), so observations carry the same history
    estimates the live helper computes.

Rewards
    A :class:`Reward` (registry :data:`REWARDS`, by name) turns what happened into
    increments: over each elapsed interval, from the jobs in the system during it
    (:meth:`Reward.interval`), and at each start and completion. The stepper adds them
    up; :meth:`Stepper.pop_reward` hands out what accrued since the last call. With
    ``"bsld"`` the increments of a whole replay add up to exactly minus the sum of the
    jobs' bounded slowdowns as :mod:`trainer.sim.metrics` computes them.

Run times come from the speed model (:mod:`trainer.sim.speed`), named as for the
engine; its optional ``on_start(job, nodes, leaves, t)`` and ``on_finish(job, t)`` hooks
are called when a model defines them.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from slurm_plugin import placement as candidate_sets
from slurm_plugin.features import NodesRaw, Normalisation, Observation, UserHistory

from .engine import (
    EngineOptions,
    Reservation,
    SimResult,
    outside,
    reserve_shared,
    whole_shadow,
)
from .metrics import TAU, fragmentation, jain
from .observe import nodes_raw, observe
from .placement import PLACEMENTS, Request
from .profile import FreeProfile
from .slurm import SchedulerOptions
from .speed import make_speed_model
from .state import BIG, Cluster, JobTable, NodeState

__all__ = [
    "REWARDS",
    "Advance",
    "CachedUserHistory",
    "BacklogReward",
    "Reward",
    "RewardSum",
    "Stepper",
    "StrandingReward",
    "dominant_share",
    "make_reward",
    "mean_inverse_run",
    "per_user_bsld",
    "take",
    "window",
]

_INF = 2**62


# ---------------------------------------------------------------------------- job windows
def window(jobs: JobTable, lo: int, hi: int, *, shift: bool = True) -> JobTable:
    """Rows ``lo..hi-1`` of ``jobs`` as a table of their own (arrival order kept).

    Every per-job column is sliced (request shapes and name tuples are shared, so the
    shape indices stay valid). With ``shift``, times are moved so that the first job
    of the window arrives at 0.

    Raises:
        ValueError: If the range is empty or out of bounds.
    """
    if not 0 <= lo < hi <= jobs.n:
        raise ValueError(f"window [{lo}, {hi}) is not a non-empty range of {jobs.n} jobs")
    return take(jobs, np.arange(lo, hi), int(jobs.eligible[lo]) if shift else 0)


def take(jobs: JobTable, rows: np.ndarray, t0: int = 0) -> JobTable:
    """Rows ``rows`` (increasing) of ``jobs`` as a table of their own, times moved by ``-t0``.

    As :func:`window`, for rows that need not be contiguous (a warm start's jobs still
    in the system, then a window).

    Raises:
        ValueError: If ``rows`` is empty, out of bounds or not increasing.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if not rows.size or rows[0] < 0 or rows[-1] >= jobs.n or (np.diff(rows) <= 0).any():
        raise ValueError(f"rows must be increasing indices of the {jobs.n} jobs")
    cols: dict[str, Any] = {}
    for f in fields(JobTable):
        v = getattr(jobs, f.name)
        if isinstance(v, np.ndarray) and not f.name.startswith("shape_"):
            cols[f.name] = v[rows]
    cols["eligible"] = cols["eligible"] - t0
    cols["submit"] = cols["submit"] - t0
    out: JobTable = replace(jobs, **cols, skipped=Counter())
    return out


def per_user_bsld(users: np.ndarray, bsld: np.ndarray) -> np.ndarray:
    """Mean bounded slowdown per user (user indices ``users``, one per value of ``bsld``)."""
    if not bsld.size:
        return np.zeros(0)
    counts = np.bincount(users)
    sums = np.bincount(users, weights=bsld)
    has = counts > 0
    out: np.ndarray = sums[has] / counts[has]
    return out


# ---------------------------------------------------------------------------- history
class CachedUserHistory(UserHistory):
    """A :class:`~slurm_plugin.features.UserHistory` that caches its per-user estimates.

    Between two :meth:`record` calls a user's run-time ratio and locality do not
    change, and neither do the usage *shares* (every user's usage decays by the same
    factor), so each user's estimates are computed once (by
    :meth:`UserHistory.estimates` itself) and reused until the next finished job.
    The results equal the uncached ones up to floating-point rounding of the decay.
    """

    def __init__(self, norm: Normalisation | None = None) -> None:
        super().__init__(norm)
        self._slot: dict[Any, int] = {}
        self._vals = np.zeros((0, 3), dtype=np.float64)

    def record(self, user: Any, end: int, run: int, limit: int, cpus: int,
               leaves: int = 1) -> None:
        """One finished job (see :meth:`UserHistory.record`); drops the cache."""
        super().record(user, end, run, limit, cpus, leaves)
        self._slot = {}

    def estimates(self, users: Sequence[Any], limits: Iterable[int], now: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per job ``(est_run, usage_share, locality)``, as :meth:`UserHistory.estimates`."""
        slot = self._slot
        missing = list(dict.fromkeys(u for u in users if u not in slot))
        if missing:
            if not slot:
                self._vals = np.zeros((0, 3), dtype=np.float64)
            r, s, loc = super().estimates(missing, [1] * len(missing), now)
            base = self._vals.shape[0]
            for k, u in enumerate(missing):
                slot[u] = base + k
            self._vals = np.concatenate((self._vals, np.stack((r, s, loc), axis=1)))
        v = self._vals[[slot[u] for u in users]]
        lim = np.asarray(list(limits), dtype=np.float64)
        lim = np.where(lim > 0, lim, self.norm.unknown_limit)
        return v[:, 0] * lim, v[:, 1], v[:, 2]


# ---------------------------------------------------------------------------- rewards
class Reward(ABC):
    """Reward increments of a replay (see the module docstring).

    A reward is made once per job table (:func:`make_reward`), which fixes its scale,
    and may serve many steppers over windows of that table: it keeps no per-replay
    state.

    Attributes:
        name: Registry name.
        scale: What one unit of reward stands for (seconds, or 1).
    """

    name: str = ""

    def __init__(self, jobs: JobTable, cluster: Cluster, tau: float = TAU) -> None:
        self.tau = float(tau)
        self.scale = 1.0

    @abstractmethod
    def interval(self, st: Stepper, dt: int) -> float:
        """Increment for ``dt`` seconds from ``st.now``, before the events at its end."""

    def started(self, st: Stepper, row: int, run: int) -> float:
        """Increment when job ``row`` starts now and will run ``run`` s."""
        return 0.0

    def finished(self, st: Stepper, row: int) -> float:
        """Increment when job ``row`` completes now."""
        return 0.0


class BsldReward(Reward):
    """Minus the bounded slowdown accrued: the return is ``-sum(bsld)`` of the jobs.

    Over an interval ``dt``: ``-sum(dt / max(run_j, tau))`` over the jobs in the system
    (pending or running), ``run_j`` the actual run time (the recorded one while the job
    waits; corrected when it starts, should its placement change it). When a job
    completes, ``-(1 - x)`` more is added if its accrued ``x = jct / max(run, tau)`` is
    below 1, so that each job's total is ``max(1, x)``: its bounded slowdown.
    """

    name = "bsld"

    def interval(self, st: Stepper, dt: int) -> float:
        """Minus ``dt`` over ``max(run, tau)`` summed over the jobs in the system."""
        if not dt:
            return 0.0
        return -float(dt) * float(st.inv_run[st.in_system].sum())

    def started(self, st: Stepper, row: int, run: int) -> float:
        """Re-weigh the wait with the actual run time (0 under the ``none`` model)."""
        rec = int(st.jobs.run[row])
        if run == rec:
            return 0.0
        wait = float(st.now - int(st.jobs.eligible[row]))
        return -wait * (1.0 / max(run, self.tau) - 1.0 / max(rec, self.tau))

    def finished(self, st: Stepper, row: int) -> float:
        """Lift the job's total to 1 when it was below (a short job that hardly waited)."""
        run = int(st.end_time[row] - st.start_time[row])
        x = float(st.end_time[row] - int(st.jobs.eligible[row])) / max(run, self.tau)
        return x - 1.0 if x < 1.0 else 0.0


class WaitReward(Reward):
    """Minus the waiting job-seconds, in units of the table's mean recorded run time.

    The return is ``-sum(wait_j) / mean(run)`` (a job-count-sized number, as the bsld
    return is).
    """

    name = "wait"

    def __init__(self, jobs: JobTable, cluster: Cluster, tau: float = TAU) -> None:
        super().__init__(jobs, cluster, tau)
        self.scale = max(1.0, float(jobs.run.mean())) if jobs.n else 1.0

    def interval(self, st: Stepper, dt: int) -> float:
        """Minus pending jobs times ``dt`` over the scale."""
        return -float(dt) * st.n_pending / self.scale


class JctReward(Reward):
    """Minus the job-seconds in the system (wait + run), over the mean recorded run time.

    The return is ``-sum(jct_j) / mean(run)``.
    """

    name = "jct"

    def __init__(self, jobs: JobTable, cluster: Cluster, tau: float = TAU) -> None:
        super().__init__(jobs, cluster, tau)
        self.scale = max(1.0, float(jobs.run.mean())) if jobs.n else 1.0

    def interval(self, st: Stepper, dt: int) -> float:
        """Minus jobs in the system times ``dt`` over the scale."""
        return -float(dt) * (st.n_pending + st.n_running) / self.scale


class UtilReward(Reward):
    """Allocated share of the GPUs (of the CPUs on a cluster without GPUs), integrated.

    Over an interval: ``used / total * dt / gap``, ``gap`` the table's mean time between
    arrivals, so that a busy cluster earns about one per arrival.
    """

    name = "util"

    def __init__(self, jobs: JobTable, cluster: Cluster, tau: float = TAU) -> None:
        super().__init__(jobs, cluster, tau)
        span = float(jobs.eligible[-1] - jobs.eligible[0]) if jobs.n > 1 else 0.0
        self.scale = max(1.0, span / max(1, jobs.n - 1))
        self.gpus = cluster.total_gpus > 0
        self.total = float(cluster.total_gpus if self.gpus else cluster.total_cpus)

    def interval(self, st: Stepper, dt: int) -> float:
        """The allocated share times ``dt`` over the scale."""
        used = st.state.used_g if self.gpus else st.state.used_c
        return float(dt) * used / self.total / self.scale


class EffectivenessReward(Reward):
    """SCHED²'s execution effectiveness of each job, earned when it starts (eq. 2).

    ``E = T_ideal / (T_wait + T_actual)``: the recorded run time (the run with the best
    locality) over the wait plus the run time the speed model gives this placement (1
    when both are 0). The return is ``sum(E_j)``; SCHED² rewards each start with it.
    """

    name = "effectiveness"

    def interval(self, st: Stepper, dt: int) -> float:
        """Nothing accrues over time."""
        return 0.0

    def started(self, st: Stepper, row: int, run: int) -> float:
        """The job's execution effectiveness."""
        ideal = float(st.jobs.run[row])
        total = float(st.now - int(st.jobs.eligible[row]) + run)
        return min(1.0, ideal / total) if total > 0 else 1.0


def dominant_share(jobs: JobTable, cluster: Cluster) -> np.ndarray:
    """Per job, its dominant share of the machine: of its CPUs or of its GPUs, the larger."""
    share = jobs.total_cpus(cluster) / max(1, cluster.total_cpus)
    if cluster.total_gpus:
        share = np.maximum(share, jobs.total_gpus(cluster) / cluster.total_gpus)
    return share


def mean_inverse_run(jobs: JobTable, tau: float) -> float:
    """``mean(1 / max(run, tau))`` over the jobs (0 without jobs).

    What one second of an average job's wait costs under :class:`BsldReward`.
    """
    if not jobs.n:
        return 0.0
    return float((1.0 / np.maximum(jobs.run.astype(np.float64), tau)).mean())


class BacklogReward(Reward):
    """Minus the work left waiting: each pending job weighs its area, not its count.

    A job's area is its dominant share of the machine (of the GPUs or of the CPUs it
    holds, whichever is larger) times its recorded run time. Over an interval:
    ``-dt * k * sum(area_j)`` over the pending jobs, so the return is
    ``-k * sum(area_j * wait_j)``. ``k = mean(1 / max(run, tau)) / mean(area)`` makes
    the weights of all the table's jobs add up to what :class:`BsldReward`'s add up to:
    with equal weights the two rewards put as much on waiting, bsld spread by inverse
    run time, this one by area.

    Why: once a replay has run to its end, the work it did is fixed, so the integral of
    utilisation (:class:`UtilReward`) hardly differs between schedules. What differs is
    how long work waited, and minus ``sum(area_j * wait_j)`` is, up to a constant, minus
    the integral of the work not yet done: work held back (a wide job kept for later)
    is what lengthens a finite replay's makespan and lowers its utilisation. Added to
    bsld (``EnvConfig.backlog``), it prices holding wide jobs back.
    """

    name = "backlog"

    def __init__(self, jobs: JobTable, cluster: Cluster, tau: float = TAU) -> None:
        super().__init__(jobs, cluster, tau)
        area = dominant_share(jobs, cluster) * jobs.run.astype(np.float64)
        mean_area = float(area.mean()) if jobs.n else 0.0
        inv = mean_inverse_run(jobs, self.tau)
        #: Per job, what one second of its wait costs.
        self.weight = area * (inv / mean_area) if mean_area > 0 else np.zeros(jobs.n)

    def interval(self, st: Stepper, dt: int) -> float:
        """Minus ``dt`` times the pending jobs' weights."""
        if not dt or not st.n_pending:
            return 0.0
        return -float(dt) * float(self.weight[st.pending()].sum())


class StrandingReward(Reward):
    """Minus the capacity left idle while some job waits: stranded capacity, priced.

    Over an interval with at least one job pending: ``-dt * k * idle``, ``idle`` the
    share of the machine free (of the GPUs; of the nodes on a cluster without GPUs, as
    :func:`trainer.sim.metrics.compute`'s ``idle_waiting`` reads it); nothing while no
    job waits (idle capacity nobody asked for is not a scheduler's to use). The return
    is minus ``k`` times the integral of ``idle_waiting``.
    ``k = mean(1 / max(run, tau)) / mean(share)``, ``share`` a job's dominant share of
    the machine (:class:`BacklogReward`'s): at weight 1, idle capacity the size of an
    average job costs, per second, what one average job waiting costs in
    :class:`BsldReward`.

    Why: on a saturated queue an order that serves small jobs first leaves holes that
    the wide jobs still waiting cannot use (the admin guide's "where utilisation goes"),
    and that idle time is what the utilisation target loses. Neither the bsld reward
    nor :class:`UtilReward` (whose integral over a replay run to its end is the work
    done, the same for every schedule) prices it at the moment it happens. Added to
    bsld (``EnvConfig.stranding``), it does.
    """

    name = "stranding"

    def __init__(self, jobs: JobTable, cluster: Cluster, tau: float = TAU) -> None:
        super().__init__(jobs, cluster, tau)
        mean_share = float(dominant_share(jobs, cluster).mean()) if jobs.n else 0.0
        inv = mean_inverse_run(jobs, self.tau)
        self.gpus = cluster.total_gpus > 0
        self.total = float(cluster.total_gpus if self.gpus else cluster.num_nodes)
        #: What one second of a wholly idle machine costs while jobs wait.
        self.k = inv / mean_share if mean_share > 0 else 0.0

    def idle(self, st: Stepper) -> float:
        """The machine's free share now (GPUs, else nodes)."""
        used = st.state.used_g if self.gpus else st.state.busy_nodes
        return max(0.0, 1.0 - used / self.total)

    def interval(self, st: Stepper, dt: int) -> float:
        """Minus ``dt`` times ``k`` times the idle share, while some job waits."""
        if not dt or not st.n_pending:
            return 0.0
        return -float(dt) * self.k * self.idle(st)


class RewardSum(Reward):
    """A weighted sum of rewards: ``sum(w * r)`` of each increment.

    Its ``tau`` and ``scale`` are the first part's (the reward the others are added to).
    """

    def __init__(self, parts: Sequence[tuple[float, Reward]]) -> None:
        if not parts:
            raise ValueError("RewardSum needs at least one part")
        self.parts = [(float(w), r) for w, r in parts]
        first = self.parts[0][1]
        self.tau = first.tau
        self.scale = first.scale
        self.name = "+".join(r.name if w == 1.0 else f"{w:g}*{r.name}" for w, r in self.parts)

    def interval(self, st: Stepper, dt: int) -> float:
        """The parts' interval increments, weighted."""
        return sum(w * r.interval(st, dt) for w, r in self.parts)

    def started(self, st: Stepper, row: int, run: int) -> float:
        """The parts' start increments, weighted."""
        return sum(w * r.started(st, row, run) for w, r in self.parts)

    def finished(self, st: Stepper, row: int) -> float:
        """The parts' completion increments, weighted."""
        return sum(w * r.finished(st, row) for w, r in self.parts)


#: Rewards by name: ``factory(jobs, cluster, tau) -> Reward``.
REWARDS: dict[str, Callable[[JobTable, Cluster, float], Reward]] = {
    "bsld": BsldReward,
    "wait": WaitReward,
    "jct": JctReward,
    "util": UtilReward,
    "effectiveness": EffectivenessReward,
    "backlog": BacklogReward,
    "stranding": StrandingReward,
}


def make_reward(name: str, jobs: JobTable, cluster: Cluster, tau: float = TAU, *,
                backlog: float = 0.0, stranding: float = 0.0) -> Reward:
    """A reward from :data:`REWARDS`, scaled for ``jobs``.

    ``backlog > 0`` adds that weight of :class:`BacklogReward` to it, ``stranding > 0``
    that weight of :class:`StrandingReward` (:class:`RewardSum`).

    Raises:
        KeyError: If the name is not registered.
        ValueError: If a weight is negative.
    """
    try:
        factory = REWARDS[name]
    except KeyError:
        raise KeyError(f"unknown reward {name!r}: {sorted(REWARDS)}") from None
    terms = ((backlog, BacklogReward), (stranding, StrandingReward))
    for w, term in terms:
        if w < 0:
            raise ValueError(f"{term.name} weight must be >= 0, got {w:g}")
    base = factory(jobs, cluster, tau)
    parts = [(1.0, base)] + [(w, term(jobs, cluster, tau)) for w, term in terms if w]
    return base if len(parts) == 1 else RewardSum(parts)


# ---------------------------------------------------------------------------- stepper
@dataclass(frozen=True)
class Advance:
    """What one :meth:`Stepper.advance` did.

    Attributes:
        dt: Seconds elapsed.
        now: The new time.
        finished: Jobs (rows) that completed at ``now``, in completion order.
        arrived: Jobs (rows) that arrived at ``now``, in arrival order.
    """

    dt: int
    now: int
    finished: tuple[int, ...]
    arrived: tuple[int, ...]


class Stepper:
    """A replay driven one decision at a time (see the module docstring).

    Args:
        jobs: The jobs to replay (arrival order, as :func:`~trainer.sim.state.build_jobs`
            makes them); time starts at the first arrival.
        cluster: The cluster.
        speed_model: Name in :data:`trainer.sim.speed.SPEED_MODELS`.
        reward: A :class:`Reward`, or a name in :data:`REWARDS` (scaled for ``jobs``).
        tau: Bounded-slowdown threshold, s (for a reward made here by name).
        history: The user history to start from (it is fed as jobs finish); default
            an empty :class:`CachedUserHistory`.
        norm: Feature normalisation of the observations.
        samples: About how many fragmentation samples to take over the arrival span.
        name: Policy name written into :meth:`result`.
    """

    def __init__(self, jobs: JobTable, cluster: Cluster, speed_model: str = "none", *,
                 reward: Reward | str = "bsld", tau: float = TAU,
                 history: UserHistory | None = None, norm: Normalisation | None = None,
                 samples: int = 500, name: str = "env") -> None:
        self.jobs = jobs
        self.cluster = cluster
        self.speed_model = speed_model
        self.speed = make_speed_model(speed_model)
        self._on_start = getattr(self.speed, "on_start", None)
        self._on_finish = getattr(self.speed, "on_finish", None)
        self.reward = (make_reward(reward, jobs, cluster, tau) if isinstance(reward, str)
                       else reward)
        self.tau = float(self.reward.tau)
        self.history = history if history is not None else CachedUserHistory(norm)
        self.norm = norm or self.history.norm
        self.name = name
        self.samples = samples
        self.state = NodeState(cluster)
        self.state.whole_only = bool(jobs.exclusive.all()) if jobs.n else False
        n = jobs.n
        self.start_time = np.full(n, -1, dtype=np.int64)
        self.end_time = np.full(n, -1, dtype=np.int64)
        self.leaves = np.zeros(n, dtype=np.int32)
        self.in_system = np.zeros(n, dtype=bool)
        #: Per job ``1 / max(run, tau)``: the recorded run until it starts, then the actual.
        self.inv_run = 1.0 / np.maximum(jobs.run.astype(np.float64), self.tau)
        self._pending: list[int] = []
        self._pending_arr: np.ndarray | None = None
        self.n_running = 0
        self._finished = 0
        self._heap: list[tuple[int, int, int]] = []
        self._seq = 0
        self._next = 0  # next arrival row
        self._elig = jobs.eligible.tolist()
        self._nodes = jobs.nodes.tolist()
        self._limit = jobs.limit.tolist()
        self._shape = jobs.shape.tolist()
        self._sh = list(zip(jobs.shape_part.tolist(), jobs.shape_excl.tolist(),
                            jobs.shape_c.tolist(), jobs.shape_g.tolist(),
                            jobs.shape_m.tolist(), strict=True))
        self._job_nodes: dict[int, np.ndarray] = {}
        self._job_slots: dict[int, np.ndarray] = {}
        self._cap_c = int(cluster.cap_c.max())
        # usable-node counts per request shape, and the node-state version they are for
        self._shp = jobs.shape_part.astype(np.int64)
        self._shx = jobs.shape_excl.astype(bool)
        self._shc, self._shg, self._shm = jobs.shape_c, jobs.shape_g, jobs.shape_m
        self._cnt = np.zeros(self._shp.size, dtype=np.int64)
        self._cnt_ver = np.full(self._shp.size, -1, dtype=np.int64)
        self._place = PLACEMENTS["tree"]
        self.now = int(self._elig[0]) if n else 0
        self._reward = 0.0
        self.total_reward = 0.0
        # series, as the engine keeps them
        self._ut: list[int] = []
        self._un: list[int] = []
        self._uc: list[int] = []
        self._ug: list[int] = []
        self._ft: list[int] = []
        self._fv: list[float] = []
        if n:
            span = max(1, self._elig[-1] - self._elig[0])
            self._interval = max(1, span // max(1, samples))
            self._next_sample = self._elig[0]
        else:
            self._interval, self._next_sample = 1, _INF
        self.stats: dict[str, float] = {"events": 0, "advances": 0, "started": 0}

    # ------------------------------------------------------------------ queries
    @property
    def done(self) -> bool:
        """Every job has finished."""
        return self._finished == self.jobs.n

    @property
    def n_pending(self) -> int:
        """Jobs waiting."""
        return len(self._pending)

    @property
    def can_advance(self) -> bool:
        """Some event is still to come (a completion or an arrival)."""
        return bool(self._heap) or self._next < self.jobs.n

    @property
    def next_event(self) -> int | None:
        """Time of the next event, or ``None`` when none is left."""
        ta = self._elig[self._next] if self._next < self.jobs.n else _INF
        th = self._heap[0][0] if self._heap else _INF
        t = min(ta, th)
        return None if t >= _INF else int(t)

    def pending(self) -> np.ndarray:
        """Rows of the pending jobs, in arrival order."""
        if self._pending_arr is None:
            self._pending_arr = np.array(self._pending, dtype=np.int64)
        out: np.ndarray = self._pending_arr
        return out

    def visible(self, max_jobs: int | None = None) -> np.ndarray:
        """The first ``max_jobs`` pending rows in arrival order (all when ``None``)."""
        p = self.pending()
        return p if max_jobs is None else p[:max_jobs]

    def fits(self, rows: np.ndarray) -> np.ndarray:
        """Per job of ``rows``: enough nodes of its partition can take it now.

        Usable-node counts are computed once per request shape and node-state version,
        for all the shapes missing at once (one ``(shapes, nodes)`` comparison).
        """
        rows = np.asarray(rows, dtype=np.int64)
        if not rows.size:
            return np.zeros(0, dtype=bool)
        st = self.state
        sh = self.jobs.shape[rows]
        stale = self._cnt_ver[sh] != st.version
        if stale.any():
            need = sh[stale]  # repeated shapes are computed twice: cheaper than np.unique
            c = self._shc[need, None]
            g = self._shg[need, None]
            m = self._shm[need, None]
            ok = (st.free_c >= c) & (st.free_g >= g) & ((m == 0) | (st.free_m >= m))
            ok = np.where(self._shx[need, None], st.idle, ok)
            ok &= self.cluster.part_mask[self._shp[need]]
            self._cnt[need] = np.count_nonzero(ok, axis=1)
            self._cnt_ver[need] = st.version
        out: np.ndarray = self.jobs.nodes[rows] <= self._cnt[sh]
        return out

    def shadow(self, row: int) -> int:
        """When pending job ``row`` could start: EASY backfill's shadow time.

        The earliest time enough nodes of its partition can take it if every running
        job ends at its expected end (start + time limit), as the engine's backfill
        reserves for its first blocked job; ``now`` when it fits now;
        :data:`~trainer.sim.state.BIG` when it never can.
        """
        self._check_pending(row)
        p, excl, c, g, m = self._sh[self._shape[row]]
        pm = self.cluster.part_mask[p]
        st = self.state
        ready = (st.ready_whole(self.now, pm) if excl
                 else st.ready_shared(self.now, pm, c, g, m))
        n = self._nodes[row]
        if n > ready.size:
            return BIG
        return int(np.partition(ready, n - 1)[n - 1])

    def usable(self, row: int) -> np.ndarray:
        """Nodes of job ``row``'s partition that can take one node's share of it now."""
        p, excl, c, g, m = self._sh[self._shape[row]]
        return self.state.fit_mask(p, excl, c, g, m)

    def observation(self, max_jobs: int | None = None) -> Observation:
        """The :class:`~slurm_plugin.features.Observation` of the visible pending jobs."""
        return observe(self.jobs, self.visible(max_jobs), self.cluster, self.state,
                       self.now, self.history, self.norm)

    def nodes_raw(self, row: int | None = None) -> NodesRaw:
        """The node table now; with ``row``, nodes outside its partition are not ``up``."""
        nr = nodes_raw(self.cluster, self.state, self.now)
        if row is None:
            return nr
        p = self._sh[self._shape[row]][0]
        # free memory as the node state has it (unknown memory: unbounded), so that the
        # candidates agree with fits() exactly
        return replace(nr, up=nr.up & self.cluster.part_mask[p],
                       free_m=self.state.free_m.astype(np.int64))

    def candidates(self, row: int, max_sets: int = 8, usable: np.ndarray | None = None
                   ) -> candidate_sets.Candidates:
        """Candidate node sets for pending job ``row`` (none when it does not fit now).

        ``usable``: on those nodes only (e.g. from :meth:`backfill_view`).
        """
        self._check_pending(row)
        _, excl, c, g, m = self._sh[self._shape[row]]
        nr = self.nodes_raw(row)
        if usable is not None:
            nr = replace(nr, up=nr.up & usable)
        return candidate_sets.candidates(nr, self._nodes[row], c, g, m, excl, max_sets)

    def best_fit(self, row: int, usable: np.ndarray | None = None) -> np.ndarray | None:
        """Slurm's topology/tree best fit for job ``row`` now, or ``None`` if it does not fit.

        ``usable``: on those nodes only.
        """
        self._check_pending(row)
        return self._tree_fit(row, usable)

    def _tree_fit(self, row: int, usable: np.ndarray | None = None) -> np.ndarray | None:
        """:meth:`best_fit` for any job of the table (not checked to be pending)."""
        _, excl, c, g, _ = self._sh[self._shape[row]]
        res = self._place(self.cluster, self.state,
                          self.usable(row) if usable is None else usable,
                          Request(self._nodes[row], c, g, excl), None)
        return None if res is None else np.asarray(res[0], dtype=np.int64)

    # ------------------------------------------------------------------ backfill
    def reserve(self, row: int, window: int = BIG) -> Reservation | None:
        """EASY backfill's reservation for pending job ``row``.

        As the engine's backfill makes one for a partition's first blocked job: by count
        for whole nodes, on the nodes the tree placement gives it at its shadow time
        otherwise (:class:`~trainer.sim.engine.Reservation`). ``None`` when its shadow
        time lies more than ``window`` s ahead or it never fits.
        """
        self._check_pending(row)
        p, excl, c, g, m = self._sh[self._shape[row]]
        n, t = self._nodes[row], self.now
        if excl:
            found = whole_shadow(self.state, p, n, t)
            if found is None or found[0] - t > window:
                return None
            return Reservation(row, p, found[0], extra=found[1] - n)
        return reserve_shared(self.state, p, m, Request(n, c, g, excl, row, t), self._place,
                              t, window)

    def free_profile(self) -> FreeProfile:
        """Nodes free over time from the running jobs' expected ends (start + time limit).

        The start of conservative backfill's plan (:mod:`trainer.sim.profile`), as the
        engine's: a job past its limit frees its nodes from the next second, never now.
        Counts every node of the first partition (the plan needs every partition to hold
        every node: :func:`~trainer.sim.engine.conservative_unfit`).
        """
        st, t = self.state, self.now
        ready = np.where(st.idle, t, np.where(st.node_end > t, st.node_end, t + 1))
        return FreeProfile.of(np.where(self.cluster.part_mask[0], ready, BIG), t)

    def backfill_view(self, row: int, resv: Sequence[Reservation], resolution: int = 1
                      ) -> tuple[np.ndarray, tuple[Reservation, ...]] | None:
        """Where pending job ``row`` may start now without delaying any of ``resv``.

        As the engine's backfill: the reservations it would still run at (its expected
        end rounded up to ``resolution`` s past their shadow time) cap its node count
        (whole-node ones, by their spare count) and keep their nodes' reserved shares
        from it (shared ones). Returns ``(usable nodes, those reservations)`` (start it
        with them: :meth:`start`'s ``view``), or ``None`` when it cannot start.
        """
        self._check_pending(row)
        p, excl, c, g, m = self._sh[self._shape[row]]
        n = self._nodes[row]
        end = -(-(self.now + self._limit[row]) // resolution) * resolution
        view = tuple(r for r in resv if r.shadow < end)
        mask, cap = outside(self.usable(row), view, excl, c, g, m)
        if min(int(np.count_nonzero(mask)), cap) < n:
            return None
        return mask, view

    # ------------------------------------------------------------------ warm start
    def warm(self, now: int, running: Sequence[tuple[int, int, int]]) -> int:
        """Start at ``now`` from a moment of another replay, before any event.

        Every job that arrived before ``now`` (eligible earlier) is in the system then:
        those of ``running`` (``(row, start, end)``, started before ``now``, ending at
        ``end`` >= ``now``) run, the others wait. Running jobs are placed, in order of
        their start, by Slurm's topology/tree best fit on the cluster as the earlier
        ones left it (the replay's own nodes are not kept: the counts are the same, the
        layout may differ), expected to end at start + time limit, and complete at
        ``end``. They take no part in the reward (what they waited is done) and feed
        the user history when they end; the waiting jobs accrue reward from ``now``.

        Returns:
            How many running jobs found no place (left out; 0 when the replay's jobs
            all fitted by count, as on whole-node clusters).

        Raises:
            RuntimeError: If the replay has already moved or started a job.
            ValueError: If a running job arrived at or after ``now``, started at or after
                it, or ended before it.
        """
        if self.stats["advances"] or self.stats["started"]:
            raise RuntimeError("warm() must come before any advance or start")
        first = int(np.searchsorted(self.jobs.eligible, now, side="left"))
        run_rows: set[int] = set()
        skipped = 0
        seq = sorted(running, key=lambda x: (x[1], x[0]))
        for row, start, end in seq:
            if not (0 <= row < first and start < now <= end):
                raise ValueError(f"running job row {row} (start {start}, end {end}) must have"
                                 f" arrived and started before {now} and end at or after it")
            run_rows.add(row)
        self.now = int(now)
        for row, start, end in seq:
            idx = self._tree_fit(row)
            if idx is None:  # left out: it never runs here, and counts as done (unscored)
                skipped += 1
                self.start_time[row] = int(start)
                self.end_time[row] = int(end)
                self._finished += 1
                continue
            nl = int(np.unique(self.cluster.leaf_of[idx]).size)
            if self._on_start is not None:  # (after run_time, as in start(): the protocol)
                self.speed.run_time(self.jobs, self.cluster, row, idx, nl)
                self._on_start(row, idx, nl, int(start))
            self._occupy(row, idx, nl, int(start), int(end))
        waiting = [r for r in range(first) if r not in run_rows]
        self._pending = waiting
        self._pending_arr = None
        self.in_system[waiting] = True
        self._next = first
        self._next_sample = max(self._next_sample, self.now)
        self.stats["warm_running"] = len(seq) - skipped
        self.stats["warm_pending"] = len(waiting)
        self.stats["warm_skipped"] = skipped
        self._sample_util(self.now)
        return skipped

    # ------------------------------------------------------------------ actions
    def _check_pending(self, row: int) -> None:
        if not (0 <= row < self.jobs.n) or not self.in_system[row] or self.start_time[row] >= 0:
            raise ValueError(f"job row {row} is not pending at t={self.now}")

    def start(self, row: int, nodes: Sequence[int] | np.ndarray,
              view: Sequence[Reservation] = ()) -> int:
        """Start pending job ``row`` now on ``nodes``; returns its run time.

        ``view``: the backfill reservations it runs past (:meth:`backfill_view`), which
        it takes from.

        Raises:
            ValueError: If the job is not pending, or the nodes are not as many as it
                asks for, not distinct, outside its partition, or cannot take it now.
        """
        self._check_pending(row)
        idx = np.unique(np.asarray(nodes, dtype=np.int64))
        want = self._nodes[row]
        if idx.size != np.asarray(nodes).size or idx.size != want:
            raise ValueError(f"job row {row} needs {want} distinct nodes, got "
                             f"{np.asarray(nodes).tolist()}")
        if idx.size and (idx[0] < 0 or idx[-1] >= self.cluster.num_nodes):
            raise ValueError(f"node indices must lie in [0, {self.cluster.num_nodes})")
        ok = self.usable(row)[idx]
        if not ok.all():
            raise ValueError(f"job row {row} cannot start on nodes {idx[~ok].tolist()} now "
                             "(busy, too little free, or outside its partition)")
        nl = int(np.unique(self.cluster.leaf_of[idx]).size)
        t = self.now
        run = int(self.speed.run_time(self.jobs, self.cluster, row, idx, nl))
        if self._on_start is not None:
            self._on_start(row, idx, nl, t)
        self._occupy(row, idx, nl, t, t + run)
        if view:
            _, _, c, g, m = self._sh[self._shape[row]]
            for r in view:
                r.take(idx, c, g, m)
        self._pending.remove(row)
        self._pending_arr = None
        self._add(self.reward.started(self, row, run))
        self.stats["started"] += 1
        self._sample_util(t)
        return run

    def _occupy(self, row: int, idx: np.ndarray, nl: int, start: int, aend: int) -> None:
        """Job ``row`` runs on nodes ``idx`` (``nl`` leaves) from ``start`` until ``aend``."""
        _, excl, c, g, m = self._sh[self._shape[row]]
        exp = start + self._limit[row]
        if excl:
            self.state.allocate_whole(idx, exp, aend)
            self._job_nodes[row] = idx
        else:
            self._job_slots[row] = self.state.allocate_shared(idx, c, g, m, exp, aend)
        self.n_running += 1
        self.start_time[row] = start
        self.end_time[row] = aend
        self.leaves[row] = nl
        self.inv_run[row] = 1.0 / max(aend - start, self.tau)
        self._seq += 1
        heapq.heappush(self._heap, (aend, self._seq, row))

    def advance(self) -> Advance:
        """Move to the next event time and process every event there (module docstring).

        Raises:
            RuntimeError: If no event is left.
        """
        t = self.next_event
        if t is None:
            raise RuntimeError("no event left to advance to")
        dt = t - self.now
        self._add(self.reward.interval(self, dt))
        self._sample_frag(t)
        self.now = t
        heap = self._heap
        finished: list[int] = []
        while heap and heap[0][0] == t:
            row = heapq.heappop(heap)[2]
            self._finish(row, t)
            finished.append(row)
        arrived: list[int] = []
        n = self.jobs.n
        while self._next < n and self._elig[self._next] == t:
            arrived.append(self._next)
            self._next += 1
        if arrived:
            self._pending.extend(arrived)
            self._pending_arr = None
            self.in_system[arrived[0]:arrived[-1] + 1] = True
        self.stats["events"] += len(finished) + len(arrived)
        self.stats["advances"] += 1
        self._sample_util(t)
        return Advance(dt, t, tuple(finished), tuple(arrived))

    def _finish(self, row: int, t: int) -> None:
        nodes = self._job_nodes.pop(row, None)
        if nodes is not None:
            self.state.release_whole(nodes)
        else:
            self.state.release_shared(self._job_slots.pop(row))
        if self._on_finish is not None:
            self._on_finish(row, t)
        self.in_system[row] = False
        self.n_running -= 1
        self._finished += 1
        self._add(self.reward.finished(self, row))
        jobs = self.jobs
        _, excl, c, _, _ = self._sh[self._shape[row]]
        cpus = (self._cap_c if excl else c) * self._nodes[row]
        limit = self._limit[row] if bool(jobs.limit_known[row]) else 0
        user = jobs.users[int(jobs.user[row])] if jobs.users else ""
        self.history.record(user, t, int(t - self.start_time[row]), limit, cpus,
                            int(self.leaves[row]))

    # ------------------------------------------------------------------ rewards, series
    def _add(self, x: float) -> None:
        if x:
            self._reward += x
            self.total_reward += x

    def pop_reward(self) -> float:
        """The reward accrued since the last call."""
        r, self._reward = self._reward, 0.0
        return r

    def fairness(self) -> float:
        """Jain's index of the users' mean bounded slowdowns over the finished jobs."""
        done = (self.start_time >= 0) & ~self.in_system
        if not done.any():
            return 1.0
        jobs = self.jobs
        run = (self.end_time[done] - self.start_time[done]).astype(np.float64)
        jct = (self.end_time[done] - jobs.eligible[done]).astype(np.float64)
        bsld = np.maximum(1.0, jct / np.maximum(run, self.tau))
        return jain(per_user_bsld(jobs.user[done], bsld))

    def _sample_util(self, t: int) -> None:
        st = self.state
        if self._ut and self._ut[-1] == t:
            self._un[-1], self._uc[-1], self._ug[-1] = st.busy_nodes, st.used_c, st.used_g
            return
        self._ut.append(t)
        self._un.append(st.busy_nodes)
        self._uc.append(st.used_c)
        self._ug.append(st.used_g)

    def _sample_frag(self, t: int) -> None:
        while self._next_sample < t:
            self._ft.append(self._next_sample)
            self._fv.append(fragmentation(self.cluster, self.state, self._next_sample))
            self._next_sample += self._interval
            if len(self._ft) >= 2 * max(1, self.samples):  # a long drain: coarser grid
                del self._ft[1::2], self._fv[1::2]
                self._interval *= 2
                self._next_sample = self._ft[-1] + self._interval

    def result(self) -> SimResult:
        """The replay as a :class:`~trainer.sim.engine.SimResult` (for :mod:`metrics`).

        Raises:
            RuntimeError: If some job has not finished yet.
        """
        if not self.done:
            raise RuntimeError(f"{self.jobs.n - self._finished} jobs have not finished: "
                               "advance until done first")
        stats = dict(self.stats)
        stats["reward"] = self.total_reward
        return SimResult(
            jobs=self.jobs, cluster=self.cluster, policy=self.name,
            options=SchedulerOptions(backfill=False),
            engine=EngineOptions(speed_model=self.speed_model, samples=self.samples),
            start=self.start_time.copy(), end=self.end_time.copy(), leaves=self.leaves.copy(),
            backfilled=np.zeros(self.jobs.n, dtype=bool),
            util_t=np.array(self._ut, dtype=np.int64),
            util_nodes=np.array(self._un, dtype=np.int64),
            util_cpus=np.array(self._uc, dtype=np.int64),
            util_gpus=np.array(self._ug, dtype=np.int64),
            frag_t=np.array(self._ft, dtype=np.int64),
            frag=np.array(self._fv, dtype=np.float64), stats=stats)
