"""The event-driven replay: arrivals, completions, and Slurm-style scheduling passes.

Events
    Completions and timers sit in a heap of ``(time, kind, seq, job)`` (as SimPy's
    ``(time, priority, event_id, event)``): at equal times, completions (kind 0) come
    before timers (kind 1), and ``seq`` (a counter) orders the rest, so a replay repeats
    exactly. Arrivals come from the job table, already sorted by (eligible time, submit
    time, job id), and are merged in between: at one time, completions free their
    resources first, then jobs arrive, then timers fire, then one scheduling pass runs.
    Randomness comes from one generator seeded from :attr:`EngineOptions.seed` (the
    ``random`` policy draws from it; placements that draw derive theirs from the seed,
    the node state's version and the job): the same trace and seed give identical results.

Scheduling pass (at every event time where something changed)
    1. *Priorities*: a ``dynamic`` policy (Slurm's multifactor with age or fair-share) is
       re-scored every ``priority_calc_period`` (a learned policy every
       :attr:`~trainer.sim.policies.Policy.rescore_period`: the helper's cycle), at the first event
       after it elapsed (no timer events); a job is scored when it arrives. The pending queue is
       kept sorted by score (ties: arrival order). A re-scoring that leaves the order as it was
       changes nothing else (the passes already made stand). When the queue is in arrival order and
       the policy's scores settle (:attr:`Policy.settles_after`: Slurm's multifactor without
       fair-share is constant once the age factor reaches ``PriorityMaxAge``), only the jobs
       younger than that are re-scored. When moreover every pending job has the same static part of
       its score (:meth:`Policy.static_part`: Slurm's baseline on one partition), a re-scoring
       cannot change the order nor let an arrival pass a waiting job: it is deferred, and the keys
       are brought up to its time only before a job with another static part arrives or a
       re-scoring that might matter runs (same keys, far less work).
    2. *Main scheduler* (Slurm's main loop): pending jobs in priority order start where
       they fit; the first job of a partition that cannot start blocks the rest of that
       partition (strict priority order per partition). It runs when resources were
       freed, the queue was re-scored, or a job arrived ahead of a partition's blocked
       head.
    3. *Backfill* (``backfill=True``; every ``bf_interval`` seconds, or at every event
       when 0): EASY backfill over the first ``bf_max_job_test`` pending jobs in
       priority order. The first job of each partition that cannot start gets a
       reservation at its *shadow time* (the earliest time enough nodes of its
       partition will be free for it, from the running jobs' expected ends, start +
       time limit, or now for a job past its limit), if that time is within
       ``bf_window``. Any other job starts now if it fits the free resources and,
       should it still run at a reservation's shadow time (its expected end rounded up
       to ``bf_resolution``), leaves the reserved job what it needs then: it can never
       delay a reservation. A job taking whole nodes is reserved by count (EASY's
       "extra" nodes: each node a backfilled job past the shadow time takes counts); a
       job sharing nodes on the nodes the placement would give it at the shadow time
       (a backfilled job may use there only what it leaves). A full pass recomputes
       reservations after resources were freed, the queue was re-ordered or the main
       scheduler ran; a job that merely arrived behind the blocked heads is tested
       against the standing reservations (the common case with a deep queue).
       Reservations are computed lazily, when some job could start now, and those of
       different partitions independently of each other. With only whole-node jobs
       running the shadow time comes from the running jobs kept sorted by expected
       end, not from a pass over the nodes.
       With ``bf_plan="conservative"`` (whole-node jobs, partitions holding every node)
       each pass instead plans every job of the window, as Slurm's ``sched/backfill``
       does: each that cannot start now is reserved at its earliest start, in priority
       order, and a later job starts now only if it delays none of them
       (:meth:`Simulator._backfill_plan`). Every pass plans afresh.
    4. *Placement*: the policy's placement (Slurm's topology/tree best fit by default,
       :mod:`trainer.sim.placement`) on the nodes that can take the job. A job with a
       ``switches`` count waits for a placement within that many leaf switches for up
       to ``switches_wait`` (at most ``max_switch_wait``) seconds after it became
       eligible, then takes any placement.

Run times come from the speed model (:mod:`trainer.sim.speed`; ``none``: as recorded).
Node state, pending queue and job results are numpy arrays (see :mod:`trainer.sim.state`).

Fast path (:attr:`Simulator.leafy`)
    A whole-node replay under tree placement with no speed model (the HPC traces) runs
    on idle counts per leaf switch (:class:`~trainer.sim.leaves.LeafState`) instead of
    the node arrays, the main pass and short backfill windows are walked in plain
    Python, and a long window of one partition in arrival order is searched through
    the pending jobs filed by node count (:meth:`Simulator._backfill_deep`); each such
    pass leaves what it found unable to start (its last free count, extra nodes and
    the time limit that fits before the shadow time), so the next one searches only
    the node counts that grew past that and the jobs that entered the window. Every
    walk tests the same jobs in the same order and computes reservations at the same
    moments as the vectorised pass, so the schedule, the series and the counters are
    the same (``tests/unit/test_sim_leaves.py`` replays both ways and compares).
The pending queue lives in the middle of two growable buffers: an arrival behind the
queue is an append, and dropping the jobs started from its head touches only the head,
so a queue of tens of thousands of jobs costs no copy of itself per event. One item, a
bisection or an overlapping move of a few hundred entries goes through memoryviews of
the buffers (and a started job's entries in the per-job arrays likewise): numpy's cost
per call, not the bytes moved, is what such small operations pay.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
from mypy_extensions import mypyc_attr

from db.records import JobRecord
from slurm_plugin.cluster import ClusterSpec

from . import leaves
from .metrics import fragmentation
from .placement import Request
from .policies import Policy, ScoreContext
from .slurm import SchedulerOptions, decay_usage
from .speed import NoSpeedModel, make_speed_model
from .state import Cluster, JobTable, NodeState, build_jobs

__all__ = ["EngineOptions", "Reservation", "SimResult", "Simulator", "conservative_unfit",
           "simulate"]

_INF = 2**62
#: The (read-only) node list of a reservation by count.
_NO_NODES = np.zeros(0, dtype=np.int64)
_NO_NODES.flags.writeable = False
_COMPLETE = 0
_TIMER = 1
#: Backfill windows up to this many jobs are walked in Python on the fast path.
_PY_WINDOW = 48
#: The pass counters of :attr:`Simulator.stats` (``events`` is counted apart).
_COUNTERS = ("passes", "main_passes", "backfill_full", "backfill_incremental",
             "reservations", "recalcs", "started", "backfilled")


@dataclass(frozen=True)
class EngineOptions:
    """Options of the replay itself (not of the scheduler being replayed).

    Attributes:
        seed: Seed of the replay's random generator.
        speed_model: Name in :data:`trainer.sim.speed.SPEED_MODELS`.
        samples: About how many fragmentation samples to take over the arrival span.
        keep_placements: Keep each job's node list in :attr:`SimResult.placements`.
        fast_path: Replay whole-node workloads on idle counts per leaf switch
            (:mod:`trainer.sim.leaves`) when the run allows it (see
            :attr:`Simulator.leafy`); the schedule is the same, only faster. False:
            always on the node arrays.
        plan_probes: Times (epoch s, ascending) at which to keep the backfill plan in
            effect, the one the last pass at or before each made (after every event of
            that second), in :attr:`SimResult.plans`
            (as ``squeue`` shows Slurm's expected starts at that moment). Only the
            conservative plan (``SchedulerOptions.bf_plan``) plans every blocked job;
            under EASY the plans stay empty.
    """

    seed: int = 0
    speed_model: str = "none"
    samples: int = 500
    keep_placements: bool = False
    fast_path: bool = True
    plan_probes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The options as a JSON-able dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Reservation:
    """A backfill reservation: a blocked job's shadow time and what is kept for it.

    A job taking whole nodes is reserved by count (EASY's "extra nodes"): at the shadow
    time ``extra`` more nodes of its partition are expected free than it needs, and a
    backfilled job still running then may use at most that many nodes (each node it
    takes counts, conservatively). A job sharing nodes is reserved on the nodes the
    placement would give it at the shadow time; a backfilled job still running then may
    use on those nodes only what the reserved job leaves (``spare_*``).

    Attributes:
        job: The reserved job.
        part: Its partition.
        shadow: Shadow time (epoch s).
        whole: Reserved by count (the job takes whole nodes).
        extra: Nodes a backfilled job running past the shadow time may still take (whole).
        nodes: Reserved nodes, sorted (shared-node reservations).
        spare_c, spare_g, spare_m: What the reserved nodes have beyond the reserved
            job's needs at the shadow time (decremented as backfilled jobs take it).
        version: Bumped when ``extra`` or a spare changes (cache key).
        serial: Unique per reservation made in this process (cache key).
    """

    __slots__ = ("extra", "job", "nodes", "part", "serial", "shadow", "spare_c", "spare_g",
                 "spare_m", "version", "whole")
    _serials: ClassVar[itertools.count[int]] = itertools.count()

    def __init__(self, job: int, part: int, shadow: int, *, extra: int = 0,
                 nodes: np.ndarray | None = None, spare_c: np.ndarray | None = None,
                 spare_g: np.ndarray | None = None, spare_m: np.ndarray | None = None) -> None:
        z = _NO_NODES
        self.job = job
        self.part = part
        self.shadow = shadow
        self.whole = nodes is None
        self.extra = extra
        self.nodes = z if nodes is None else nodes
        self.spare_c = z if spare_c is None else spare_c
        self.spare_g = z if spare_g is None else spare_g
        self.spare_m = z if spare_m is None else spare_m
        self.version = 0
        self.serial = next(Reservation._serials)

    def blocked(self, excl: bool, c: int, g: int, m: int) -> np.ndarray:
        """Reserved nodes a job of this per-node request may not use past the shadow time."""
        if excl:
            return self.nodes
        bad = self.spare_c < c
        if g:
            bad |= self.spare_g < g
        if m:
            bad |= self.spare_m < m
        return self.nodes[bad]

    def take_whole(self, n: int) -> None:
        """A backfilled job running past the shadow time took ``n`` whole nodes."""
        self.extra -= n
        self.version += 1

    def take(self, nodes: np.ndarray, c: int, g: int, m: int) -> None:
        """A backfilled job running past the shadow time took ``c, g, m`` on ``nodes``."""
        if self.whole:
            self.extra -= int(nodes.size)
            self.version += 1
            return
        pos = np.searchsorted(self.nodes, nodes)
        pos = pos[pos < self.nodes.size]
        hit = pos[np.isin(self.nodes[pos], nodes)]
        if hit.size:
            self.spare_c[hit] -= c
            self.spare_g[hit] -= g
            self.spare_m[hit] -= m
            self.version += 1


def outside(mask: np.ndarray, view: Iterable[Reservation], excl: bool, c: int, g: int,
            m: int) -> tuple[np.ndarray, int]:
    """Where a job running past the shadow times of ``view``'s reservations may go.

    Returns ``mask`` less the nodes those reservations keep from a job asking ``c, g,
    m`` per node (``excl``: whole nodes), the same array when none is taken out (else a
    copy), and the most nodes their whole-node reservations leave it (``_INF``: no cap).
    """
    cap = _INF
    copied = False
    for r in view:
        if r.whole:
            cap = min(cap, r.extra)
            continue
        blocked = r.blocked(excl, c, g, m)
        if blocked.size:
            if not copied:
                mask = mask.copy()
                copied = True
            mask[blocked] = False
    return mask, cap


def whole_shadow(state: NodeState, p: int, n: int, t: int) -> tuple[int, int] | None:
    """EASY backfill's shadow time of ``n`` whole nodes of partition ``p`` at ``t``.

    Returns ``(shadow time, the partition's nodes free by then)`` from the running jobs'
    expected ends, or ``None`` when it never fits.
    """
    ready = state.ready_whole(t, state.cluster.part_mask[p])
    shadow = int(np.partition(ready, n - 1)[n - 1])
    if shadow >= _INF:
        return None
    return shadow, int(np.count_nonzero(ready <= shadow))


def reserve_shared(state: NodeState, p: int, m: int, req: Request,
                   place: Callable[..., tuple[Any, int] | None], t: int,
                   window: int) -> Reservation | None:
    """The reservation of a blocked job sharing nodes (``req``; ``m`` MiB per node).

    On the nodes of partition ``p`` that ``place`` gives it at its shadow time, with
    what they have to spare then; ``None`` when that time lies more than ``window`` s
    ahead, it never fits, or the placement refuses.
    """
    cl = state.cluster
    n, c, g = req.nodes, req.cpus, req.gpus
    pm = cl.part_mask[p]
    ready = np.where(pm, state.ready_shared(t, pm, c, g, m), _INF)
    shadow = int(np.partition(ready, n - 1)[n - 1])
    if shadow >= _INF or shadow - t > window:
        return None
    res = place(cl, state, ready <= shadow, req)
    if res is None:  # n nodes are usable, but a policy may refuse (dsif delays)
        return None
    nodes = res[0]
    fc, fg, fm = state.free_at(nodes, shadow, t)
    return Reservation(req.job, p, shadow, nodes=nodes, spare_c=fc - c, spare_g=fg - g,
                       spare_m=fm - m)


def conservative_unfit(jobs: JobTable, cluster: Cluster) -> str | None:
    """Why conservative backfill (``bf_plan``) cannot replay ``jobs``, or ``None``.

    Its plan counts free nodes (see :meth:`Simulator._backfill_plan`), which is exact only
    when every job takes whole nodes and every partition holds every node.
    """
    if not bool(jobs.exclusive.all()):
        what = "jobs sharing nodes"
    elif not all(cluster.part_all):
        what = "a partition holding only some nodes"
    else:
        return None
    return ("conservative backfill is modelled for whole-node jobs on partitions that"
            f" hold every node; this replay has {what}")


@dataclass(eq=False)
class SimResult:
    """What a replay produced.

    Attributes:
        jobs: The job table replayed.
        cluster: The cluster.
        policy: Policy name.
        options: Scheduler options.
        engine: Engine options.
        start: Start time per job (epoch s).
        end: End time per job.
        leaves: Leaf switches each job's nodes span.
        backfilled: Jobs started by the backfill pass (out of priority order).
        util_t: Times of the utilisation series (one point per event time).
        util_nodes: Non-idle nodes after the events at that time.
        util_cpus: Allocated CPUs.
        util_gpus: Allocated GPUs.
        frag_t: Fragmentation sample times.
        frag: SCHED² fragmentation index at those times (see :mod:`trainer.sim.metrics`).
        stats: Counters of the replay (events, passes, backfilled jobs, wall time...).
        placements: Node names per job when :attr:`EngineOptions.keep_placements`.
        plans: Per time of :attr:`EngineOptions.plan_probes`, ``(time, {job id: planned
            start})``: the jobs the backfill plan in effect then had reserved, each at the
            start it was planned to (``None``: no probes asked for).
        util_waiting: Jobs waiting (arrived, not started) after the events at each
            ``util_t``, when not those of :attr:`jobs` alone (``None``: counted from the
            jobs; :func:`trainer.evaluate.restrict` keeps the warm-up jobs' count).
    """

    jobs: JobTable
    cluster: Cluster
    policy: str
    options: SchedulerOptions
    engine: EngineOptions
    start: np.ndarray
    end: np.ndarray
    leaves: np.ndarray
    backfilled: np.ndarray
    util_t: np.ndarray
    util_nodes: np.ndarray
    util_cpus: np.ndarray
    util_gpus: np.ndarray
    frag_t: np.ndarray
    frag: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)
    placements: dict[int, tuple[str, ...]] | None = None
    util_waiting: np.ndarray | None = None
    plans: list[tuple[int, dict[int, int]]] | None = None

    def nodes_of(self, job_id: int) -> tuple[str, ...]:
        """Node names job ``job_id`` ran on (needs ``keep_placements``).

        Raises:
            KeyError: If the job is unknown or placements were not kept.
        """
        if self.placements is None:
            raise KeyError("placements were not kept (EngineOptions.keep_placements)")
        idx = np.flatnonzero(self.jobs.job_id == job_id)
        if idx.size == 0:
            raise KeyError(job_id)
        return self.placements[int(idx[0])]


@mypyc_attr(allow_interpreted_subclasses=True)  # (tests record through subclasses)
class Simulator:
    """One replay of a job table on a cluster under a policy (see the module docstring).

    Attributes:
        leafy: The replay runs on idle counts per leaf switch (:mod:`trainer.sim.leaves`):
            every job takes whole nodes, the policy places them with Slurm's
            topology/tree best fit and reads nothing of the node state, no speed model
            runs, placements are not kept, and the cluster has the shape
            :func:`trainer.sim.leaves.eligible` asks for.
    """

    def __init__(self, jobs: JobTable, cluster: Cluster, policy: Policy,
                 options: SchedulerOptions | None = None,
                 engine: EngineOptions | None = None) -> None:
        self.jobs = jobs
        self.cluster = cluster
        self.policy = policy
        self.opt = options or SchedulerOptions()
        self.eng = engine or EngineOptions()
        # the options read on the hot path, as machine ints (the compiled engine reads a
        # frozen dataclass's fields through a dictionary)
        self._backfill = bool(self.opt.backfill)
        self._bf_max = int(self.opt.bf_max_job_test)
        self._bf_res = int(self.opt.bf_resolution)
        self._bf_window = int(self.opt.bf_window)
        self._bf_interval = int(self.opt.bf_interval)
        self._bf_plan = self.opt.bf_plan == "conservative"
        self._dynamic = bool(policy.dynamic)
        self._calc = max(1, int(policy.rescore_period or self.opt.priority_calc_period))
        self.state = NodeState(cluster)
        self.state.whole_only = bool(jobs.exclusive.all())
        if self._bf_plan and self._backfill:
            why = conservative_unfit(jobs, cluster)
            if why:
                raise ValueError(f"{why}: use bf_plan 'easy'")
        self.rng = np.random.default_rng(self.eng.seed)
        self.speed = make_speed_model(self.eng.speed_model)
        self._fast_speed = isinstance(self.speed, NoSpeedModel)
        self.leafy = bool(
            self.eng.fast_path and self.state.whole_only and self._fast_speed
            and not self.eng.keep_placements and policy.placement == "tree"
            and not policy.reads_state and type(policy).place is Policy.place
            and leaves.eligible(cluster))
        #: What the scheduler reads of the nodes: idle counts, busy nodes, used CPUs and
        #: GPUs (the node arrays, or the counts per leaf on the fast path)
        self.st: NodeState | leaves.LeafState = (
            leaves.LeafState(cluster) if self.leafy else self.state)
        self._ls = self.st if isinstance(self.st, leaves.LeafState) else None
        # fast path: pending jobs by node count (a list indexed by the count, read faster
        # than a dict), each list in arrival (index) order, and the counts that have some
        # (see _backfill_deep)
        self._bucket: list[list[int]] = (
            [[] for _ in range(int(jobs.nodes.max()) + 1)] if self.leafy and jobs.n else [])
        self._bvals: list[int] = []
        #: what the last deep backfill pass left known (see _backfill_deep)
        self._deep_known: tuple[int, int, int, int] | None = None
        n = jobs.n
        n_parts = cluster.part_mask.shape[0]
        self.start = np.full(n, -1, dtype=np.int64)
        self.end = np.full(n, -1, dtype=np.int64)
        self.leaves = np.zeros(n, dtype=np.int32)
        self.backfilled = np.zeros(n, dtype=bool)
        self.pending = np.zeros(n, dtype=bool)
        # (the same arrays as memoryviews, for writing one job's item: far cheaper than a
        # numpy scalar assignment; the arrays stay the ones policies may read live)
        self._m_start: memoryview = self.start.data
        self._m_end: memoryview = self.end.data
        self._m_leaves: memoryview = self.leaves.data
        self._m_bf: Any = self.backfilled.data
        self._m_pending: Any = self.pending.data
        # the pending queue (job, key) in priority order lives in [_qlo, _qhi) of two
        # buffers, so that appending and dropping started jobs at its head copy nothing
        # behind them (see :attr:`porder`)
        self._qjob = np.zeros(64, dtype=np.int64)
        self._qkey = np.zeros(64, dtype=np.float64)
        # memoryviews of the same buffers: one item, a bisection or an overlapping move
        # costs a fraction of numpy's per-call overhead (moves are memmoves either way)
        self._mj: memoryview = self._qjob.data
        self._mk: Any = self._qkey.data  # (items are floats: typeshed's are ints)
        self._qlo = 0
        self._qhi = 0
        self._qfifo = True  # the queue holds its jobs in arrival (index) order
        self._scored_at = -_INF  # time of the last recalculation
        # deferred re-scoring (see _defer_ok): the policy's static parts, whether the
        # pending jobs' differ (else all are _sp_val), and the time deferred to
        sp = policy.static_part(jobs, cluster) if policy.dynamic else None
        self._sp: list[float] | None = None if sp is None else sp.tolist()
        self._sp_val = 0.0
        self._sp_mixed = False
        self._lazy_at: int | None = None
        # pending jobs per partition, and how many partitions have some (python scalars:
        # read and changed one at a time)
        self.pend_count: list[int] = [0] * n_parts
        self._parts_pending = 0
        self._all_parts = np.ones(n_parts, dtype=bool)
        self._n_pending = 0  # pend_count.sum()
        self.blocked_key: list[float] = [math.inf] * n_parts
        self._head_job: dict[int, int] = {}
        self.key_of = np.zeros(n, dtype=np.float64)
        self._m_key: Any = self.key_of.data
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.job_nodes: dict[int, np.ndarray] = {}
        self.job_slots: dict[int, np.ndarray] = {}
        self._ends: list[tuple[int, int]] = []  # (expected end, job) of whole-node jobs
        self.placements: dict[int, tuple[str, ...]] | None = (
            {} if self.eng.keep_placements else None)
        probes = [int(x) for x in self.eng.plan_probes]
        if probes != sorted(probes):
            raise ValueError("plan_probes must be in ascending order")
        self._probes: list[int] = probes
        self._probe_i = 0
        self._plan_now: dict[int, int] = {}  # job -> planned start, of the last pass
        self._plans: list[tuple[int, dict[int, int]]] = []
        # python lists of hot per-job columns (scalar access is faster than numpy's)
        # (typed: the compiled engine, trainer.sim.native, reads them as machine ints)
        self._part: list[int] = jobs.part.tolist()
        self._shape: list[int] = jobs.shape.tolist()
        self._nodes: list[int] = jobs.nodes.tolist()
        self._limit: list[int] = jobs.limit.tolist()
        self._run: list[int] = jobs.run.tolist()
        self._elig: list[int] = jobs.eligible.tolist()
        self._user: list[int] = jobs.user.tolist()
        self._switches: list[int] = jobs.switches.tolist()
        self._sw_wait: list[int] = jobs.switches_wait.tolist()
        self._sh: list[tuple[int, bool, int, int, int]] = list(zip(
            jobs.shape_part.tolist(), jobs.shape_excl.tolist(), jobs.shape_c.tolist(),
            jobs.shape_g.tolist(), jobs.shape_m.tolist(), strict=True))
        self._n_shapes = len(self._sh)
        self._cap_c = int(cluster.cap_c.max())
        # caches of usable-node masks and counts, valid for one node-state version
        self._cache_ver = -1
        self._mask_cache: dict[tuple[Any, ...], tuple[np.ndarray, int]] = {}
        # scheduling flags
        self.main_dirty = False
        self.bf_full = False
        self.bf_new: list[int] = []
        self.resv: list[Reservation] = []
        self._lazy_heads: list[int] = []
        self.resv_valid = False
        self.next_bf = -_INF
        self.bf_timer_at = -1
        self.next_recalc = -_INF
        self._switch_timer: set[int] = set()
        self._started = 0
        self._started_jobs: list[int] = []  # started since the last _compact
        self._scan_upto = 0  # the main pass started jobs no further than this position
        self._pend_sum = 0
        self._pend_max = 0
        # fair-share usage per user
        self.track_usage = bool(policy.uses_usage)
        nu = max(1, len(jobs.users))
        self.usage = np.zeros(nu, dtype=np.float64)
        self.usage_t = np.zeros(nu, dtype=np.float64)
        self.rate = np.zeros(nu, dtype=np.float64)
        self._ran = False
        self.stats: dict[str, float] = dict.fromkeys(("events",) + _COUNTERS, 0)
        # the counters of :attr:`stats`, kept as machine ints while the replay runs
        self._n_passes = self._n_main = self._n_bf_full = self._n_bf_inc = 0
        self._n_resv = self._n_recalcs = self._n_started = self._n_backfilled = 0
        policy.bind(self)  # (a policy that learns from the replay's completions)

    # ------------------------------------------------------------------ context
    def _ctx(self, now: int) -> ScoreContext:
        if self.track_usage:
            self._usage_to(now)
        # (tuple.__new__: the named tuple's own __new__ is interpreted Python, one frame
        # per arrival)
        return tuple.__new__(ScoreContext, (now, self.cluster, self.state, self.usage,
                                            self.rng, self.speed))

    def _usage_to(self, now: int) -> None:
        dt = now - self.usage_t
        self.usage = decay_usage(self.usage, self.rate, dt,
                                 self.policy.settings.decay_half_life)
        self.usage_t[:] = now

    def _user_usage(self, u: int, now: int, delta_rate: float) -> None:
        dt = now - float(self.usage_t[u])
        hl = self.policy.settings.decay_half_life
        decay = math.exp2(-dt / hl) if hl > 0 else 1.0
        self.usage[u] = float(self.usage[u]) * decay + float(self.rate[u]) * dt
        self.usage_t[u] = now
        self.rate[u] += delta_rate

    # ------------------------------------------------------------------ queue
    @property
    def porder(self) -> np.ndarray:
        """Pending jobs in priority order (a view of the queue buffer: do not keep it)."""
        return self._qjob[self._qlo:self._qhi]

    @property
    def pkeys(self) -> np.ndarray:
        """Their sort keys (minus the score; a view, as :attr:`porder`)."""
        return self._qkey[self._qlo:self._qhi]

    def _set_queue(self, order: np.ndarray, keys: np.ndarray) -> None:
        """Replace the pending queue (copied into fresh buffers with room to grow)."""
        n = int(order.size)
        cap = max(64, 2 * n)
        qjob = np.empty(cap, dtype=np.int64)
        qkey = np.empty(cap, dtype=np.float64)
        qjob[:n] = order
        qkey[:n] = keys
        self._qjob, self._qkey, self._qlo, self._qhi = qjob, qkey, 0, n
        self._mj = qjob.data
        self._mk = qkey.data
        self._qfifo = bool((order[1:] > order[:-1]).all())

    def _insert(self, pos: int, j: int, key: float) -> None:
        """Insert job ``j`` with ``key`` at position ``pos`` of the pending queue."""
        lo, hi = self._qlo, self._qhi
        at = lo + pos
        if at < hi and lo > 0 and 2 * pos < hi - lo:  # shift the shorter head left
            mj, mk = self._mj, self._mk
            mj[lo - 1:at - 1] = mj[lo:at]
            mk[lo - 1:at - 1] = mk[lo:at]
            mj[at - 1] = j
            mk[at - 1] = key
            self._qlo = lo - 1
            self._qfifo = False  # jobs arrive in index order: only an append keeps it
            return
        if hi == self._qjob.size:  # no room at the tail: recentre or grow
            self._set_queue(self.porder, self.pkeys)
            lo, hi = 0, self._qhi
            at = pos
        mj, mk = self._mj, self._mk
        if at < hi:
            self._qfifo = False
            mj[at + 1:hi + 1] = mj[at:hi]
            mk[at + 1:hi + 1] = mk[at:hi]
        mj[at] = j
        mk[at] = key
        self._qhi = hi + 1

    def _arrive(self, lo: int, hi: int, t: int) -> None:
        """Jobs ``lo..hi-1`` arrive: score them and insert them in the pending queue."""
        self._compact()
        queued = self._qhi - self._qlo
        self._pend_sum += queued * (hi - lo)
        if queued > self._pend_max:
            self._pend_max = queued
        if self._sp is not None:
            self._note_static(lo, hi)
        ctx = self._ctx(t)
        if hi - lo == 1:  # the common case, in scalars
            few = self.policy.score_few(self.jobs, [lo], ctx)
            if few is not None:
                key = -few[0]
            else:
                key = -float(np.asarray(self.policy.score(
                    self.jobs, np.arange(lo, hi, dtype=np.int64), ctx), dtype=np.float64)[0])
            self._m_pending[lo] = True
            if self._ls is not None:
                self._bucket_add(lo, lo + 1)
            self._m_key[lo] = key
            p = self._part[lo]
            if not self.pend_count[p]:
                self._parts_pending += 1
            self.pend_count[p] += 1
            self._n_pending += 1
            hi_q = self._qhi
            if hi_q == self._qlo or key >= self._mk[hi_q - 1]:
                pos = hi_q - self._qlo  # (behind every queued job: the common case)
            else:
                pos = int(self.pkeys.searchsorted(key, side="right"))
            self._insert(pos, lo, key)
            if key < self.blocked_key[p]:
                self.main_dirty = True
            elif (self._backfill and not self.bf_full
                  and pos < self._bf_max):
                self.bf_new.append(lo)
            return
        idx = np.arange(lo, hi, dtype=np.int64)
        self.pending[lo:hi] = True
        if self._ls is not None:
            self._bucket_add(lo, hi)
        keys = -np.asarray(self.policy.score(self.jobs, idx, ctx), dtype=np.float64)
        self.key_of[lo:hi] = keys
        for p in self._part[lo:hi]:
            if not self.pend_count[p]:
                self._parts_pending += 1
            self.pend_count[p] += 1
        self._n_pending += hi - lo
        o = np.argsort(keys, kind="stable")
        idx, keys = idx[o], keys[o]
        where = np.searchsorted(self.pkeys, keys, side="right")
        self._set_queue(np.insert(self.porder, where, idx), np.insert(self.pkeys, where, keys))
        ahead = keys < np.asarray(self.blocked_key)[self.jobs.part[idx]]
        if np.count_nonzero(ahead):
            self.main_dirty = True
        if self._backfill and not self.bf_full:
            rank = where + np.arange(where.size)
            new = idx[(rank < self._bf_max) & ~ahead]
            if new.size:
                self.bf_new.extend(new.tolist())

    def _bucket_add(self, lo: int, hi: int) -> None:
        """Jobs ``lo..hi-1`` arrive: file them by node count (fast path)."""
        for j in range(lo, hi):
            v = self._nodes[j]
            b = self._bucket[v]
            if not b:
                bisect.insort(self._bvals, v)
            b.append(j)  # (jobs arrive in index order: the list stays sorted)

    def _note_static(self, lo: int, hi: int) -> None:
        """Jobs ``lo..hi-1`` arrive: note whether the pending jobs' static parts differ.

        A deferred re-scoring is done first when they will (see :meth:`_defer_ok`).
        """
        sp = self._sp
        assert sp is not None
        if not self._n_pending:  # an empty queue starts afresh
            self._sync_keys()
            self._sp_val = sp[lo]
            self._sp_mixed = False
        if not self._sp_mixed:
            v = self._sp_val
            for j in range(lo, hi):
                if sp[j] != v:
                    self._sync_keys()
                    self._sp_mixed = True
                    break

    def _recalc(self, t: int) -> None:
        """Re-score the pending jobs; re-sort (and re-plan) only if the order changed.

        Deferred when it cannot change anything (:meth:`_defer_ok`): the time is noted
        and the keys are brought up to it (:meth:`_sync_keys`) before anything that
        depends on their values.
        """
        self._compact()
        if self._qhi == self._qlo:
            return
        self._n_recalcs += 1
        if self._defer_ok():
            self._lazy_at = t
            return
        self._sync_keys()
        self._rescore(t, self._qhi - self._qlo)

    def _defer_ok(self) -> bool:
        """A re-scoring now could be deferred: it would change only key values.

        So it is when the policy scores ``g(static part, age)`` (see
        :meth:`Policy.static_part`), the queue is in arrival order and every pending
        job has the same static part: the order cannot change (older jobs score at
        least as high), and a job arriving with that static part (age 0) scores no
        higher than any of them, so it goes to the end of the queue and never ahead of
        a blocked head, whatever the keys in between. Backfill orders new jobs by key,
        which for such a queue is arrival order with any mix of fresh and stale keys.
        """
        return self._sp is not None and self._qfifo and not self._sp_mixed

    def _sync_keys(self) -> None:
        """Do the deferred re-scoring, as of the time it was deferred to.

        The policy's score is a function of the job and the time alone, so the keys
        come out as the re-scorings skipped would have left them; only the jobs that
        had arrived by then are re-scored (a prefix of the queue, in arrival order).
        """
        t = self._lazy_at
        if t is None:
            return
        self._lazy_at = None
        self._compact()
        assert self._qfifo  # (kept while deferred: only an arrival that syncs can break it)
        lo = self._qlo
        upto = bisect.bisect_left(self._mj, bisect.bisect_right(self._elig, t), lo,
                                  self._qhi) - lo
        if upto:
            self._rescore(t, upto)
        else:
            self._scored_at = t

    def _rescore(self, t: int, upto: int) -> None:
        """Re-score the first ``upto`` pending jobs at time ``t`` (see :meth:`_recalc`)."""
        idx = self.porder
        k = 0
        settle = self.policy.settles_after
        if settle is not None and self._qfifo:
            # the queue is in arrival order: the jobs eligible for ``settle`` s by the last
            # recalculation are a prefix, and their scores have not moved since
            first = bisect.bisect_right(self._elig, self._scored_at - settle)
            k = min(int(idx.searchsorted(first)), upto)
        sub = idx[k:upto]
        keys = -np.asarray(self.policy.score(self.jobs, sub, self._ctx(t)), dtype=np.float64)
        self._scored_at = t
        self.key_of[sub] = keys
        dk = keys[1:] - keys[:-1]
        if self._qfifo:  # ties already in arrival order: sorted by key is enough
            # (every dk >= 0, NaN failing as with .all(): argmin finds the first NaN)
            same = (not dk.size or bool(dk[dk.argmin()] >= 0)) and (
                not k or not keys.size or bool(keys[0] - self.pkeys[k - 1] >= 0))
        else:
            ok = (dk > 0) | ((dk == 0) & (sub[1:] > sub[:-1]))
            same = bool(np.count_nonzero(ok) == ok.size)
        if same:
            # same order (ties by arrival): the passes already made stand; keys moved
            self.pkeys[k:upto] = keys
            for p, j in self._head_job.items():
                if self.blocked_key[p] != math.inf:
                    self.blocked_key[p] = float(self.key_of[j])
            return
        keys = np.concatenate((self.pkeys[:k], keys, self.pkeys[upto:]))
        o = np.lexsort((idx, keys))
        self._set_queue(idx[o], keys[o])
        self.main_dirty = True
        self.bf_full = True

    def _compact(self) -> None:
        """Drop started jobs from the pending queue (they sit in its scanned prefix).

        A few jobs started from a queue in arrival order are found by binary search and
        the queue's head is shifted over them; otherwise the prefix is packed with a
        mask. Either way the queue ends as the same jobs, keys and order.
        """
        if not self._started:
            return
        if self._started <= 4 and self._qfifo and self._shift_out():
            return
        upto = min(self.porder.size, max(self._bf_max, self._scan_upto))
        head = self.porder[:upto]
        keep = self.pending[head]
        kept = int(np.count_nonzero(keep))
        if upto - kept == self._started:  # keep the head's pending jobs, packed to its end
            lo = self._qlo
            new_lo = lo + upto - kept
            self._qjob[new_lo:lo + upto] = head[keep]
            self._qkey[new_lo:lo + upto] = self._qkey[lo:lo + upto][keep]
            self._qlo = new_lo
        else:  # pragma: no cover - every start is within the scanned prefix
            keep = self.pending[self.porder]
            self._set_queue(self.porder[keep], self.pkeys[keep])
        self._started = 0
        self._started_jobs.clear()
        self._scan_upto = 0

    def _shift_out(self) -> bool:
        """:meth:`_compact` for a few started jobs of an arrival-ordered queue.

        Each segment of the queue's head between two started jobs moves right by the
        number of started jobs after it (the last segment first, so nothing is
        overwritten before it moved). False, changing nothing, if a job is not found.
        """
        lo, hi = self._qlo, self._qhi
        mj, mk = self._mj, self._mk
        if len(self._started_jobs) == 1 and mj[lo] == self._started_jobs[0]:
            self._qlo = lo + 1  # the head started (the common case)
            self._started = 0
            self._started_jobs.clear()
            self._scan_upto = 0
            return True
        at = []
        for j in self._started_jobs:
            k = bisect.bisect_left(mj, j, lo, hi)
            if k >= hi or mj[k] != j:  # pragma: no cover - started jobs are queued
                return False
            at.append(k)
        at.sort()
        n = len(at)
        for i in range(n - 1, -1, -1):
            a = lo if i == 0 else at[i - 1] + 1
            b = at[i]
            d = n - i
            if b > a:
                mj[a + d:b + d] = mj[a:b]
                mk[a + d:b + d] = mk[a:b]
        self._qlo = lo + n
        self._started = 0
        self._started_jobs.clear()
        self._scan_upto = 0
        return True

    # ------------------------------------------------------------------ masks
    def _usable(self, sh: int, view: tuple[Reservation, ...]) -> tuple[np.ndarray, int]:
        """Nodes that can take one node's share of shape ``sh`` in ``view``, and how many.

        The count is capped by the whole-node reservations of the view (their ``extra``).
        """
        if self._ls is not None:  # whole nodes, counts only: capped by the reservations
            cnt = self._ls.idle_count[self._sh[sh][0]]
            for r in view:
                cnt = min(cnt, r.extra)
            return _NO_NODES, cnt
        st = self.state
        if st.version != self._cache_ver:
            self._mask_cache.clear()
            self._cache_ver = st.version
        key: Any = (sh, *[(r.serial, r.version) for r in view]) if view else sh
        hit = self._mask_cache.get(key)
        if hit is not None:
            return hit
        p, excl, c, g, m = self._sh[sh]
        if view:
            mask, cnt = self._usable(sh, ())
            kept, cap = outside(mask, view, excl, c, g, m)
            if kept is not mask:
                cnt = int(np.count_nonzero(kept))
            out = (kept, min(cnt, cap))
        else:
            mask = st.fit_mask(p, excl, c, g, m)
            out = (mask, int(st.idle_count[p]) if excl else int(np.count_nonzero(mask)))
        self._mask_cache[key] = out
        return out

    def _max_count(self, shapes: list[int]) -> int:
        """The most nodes any of ``shapes`` could get now."""
        if len(shapes) == 1:
            return self._count_now(shapes[0])
        return max(self._count_now(s) for s in shapes)

    def _count_now(self, sh: int) -> int:
        p, excl, _, _, _ = self._sh[sh]
        if excl:
            return int(self.st.idle_count[p])
        return self._usable(sh, ())[1]

    # ------------------------------------------------------------------ start/finish
    def _try(self, j: int, t: int, view: tuple[Reservation, ...]
             ) -> tuple[Any, int] | None:
        """Where ``j`` would start now in ``view``: ``(nodes, leaves)`` or ``None``.

        The nodes are sorted node indices, or on the fast path a
        :data:`~trainer.sim.leaves.Alloc`.
        """
        n = self._nodes[j]
        sh = self._shape[j]
        p, excl, c, g, _ = self._sh[sh]
        ls = self._ls
        if excl:  # the count first (a whole-node reservation caps it), the mask later
            # (the leaf state typed: its counts read natively when compiled)
            if (ls.idle_count[p] if ls is not None else self.state.idle_count[p]) < n:
                return None
            for r in view:
                if r.whole and r.extra < n:
                    return None
        res: tuple[Any, int] | None
        if ls is not None:
            res = ls.place(n)
        else:
            mask, cnt = self._usable(sh, view)
            if cnt < n:
                return None
            leaf_counts = None
            if excl and self.cluster.part_all[p] and all(r.whole for r in view):
                leaf_counts = self.state.leaf_idle
            res = self.policy.place(self.cluster, self.state, mask,
                                    Request(n, c, g, excl, j, t, self.eng.seed),
                                    leaf_counts)
        if res is None:
            return None
        sw = self._switches[j]
        if sw and res[1] > sw:
            deadline = self._elig[j] + min(self._sw_wait[j], self.opt.max_switch_wait)
            if t < deadline:
                if j not in self._switch_timer:
                    self._switch_timer.add(j)
                    self._push(deadline, _TIMER, -1)
                return None
        return res

    def _push(self, t: int, kind: int, j: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, j))

    def _start(self, j: int, nodes: Any, nl: int, t: int, by_backfill: bool) -> None:
        sh = self._sh[self._shape[j]]
        if self._fast_speed:
            run = self._run[j]
        else:
            run = self.speed.run_time(self.jobs, self.cluster, j, nodes, nl)
            self.speed.on_start(j, nodes, nl, t)
        aend = t + run
        exp = t + self._limit[j]
        st = self.state
        if self._ls is not None:
            self._ls.allocate(j, nodes, aend)
            bisect.insort(self._ends, (exp, j))
        elif sh[1]:
            st.allocate_whole(nodes, exp, aend)
            self.job_nodes[j] = nodes
            bisect.insort(self._ends, (exp, j))
        else:
            self.job_slots[j] = st.allocate_shared(nodes, sh[2], sh[3], sh[4], exp, aend)
        self._m_pending[j] = False
        if self._ls is not None:
            v = self._nodes[j]
            b = self._bucket[v]
            del b[bisect.bisect_left(b, j)]
            if not b:
                del self._bvals[bisect.bisect_left(self._bvals, v)]
        p = self._part[j]
        self.pend_count[p] -= 1
        if not self.pend_count[p]:
            self._parts_pending -= 1
        self._n_pending -= 1
        self._started += 1
        self._started_jobs.append(j)
        self._m_start[j] = t
        self._m_end[j] = aend
        self._m_leaves[j] = nl
        self._n_started += 1
        if by_backfill:
            self._m_bf[j] = True
            self._n_backfilled += 1
        if self.placements is not None:
            names = self.cluster.node_names
            self.placements[j] = tuple(names[k] for k in nodes.tolist())
        if self.track_usage:
            cpus = (self._cap_c if sh[1] else sh[2]) * self._nodes[j]
            self._user_usage(self._user[j], t, float(cpus))
        self._push(aend, _COMPLETE, j)

    def _finish(self, j: int, t: int) -> None:
        if self._ls is not None:
            self._ls.release(j)
            item = (self._m_start[j] + self._limit[j], j)
            del self._ends[bisect.bisect_left(self._ends, item)]
            if self.track_usage:
                self._user_usage(self._user[j], t, -float(self._cap_c * self._nodes[j]))
            self.main_dirty = True
            self.bf_full = True
            return
        nodes = self.job_nodes.pop(j, None)
        if nodes is not None:
            self.state.release_whole(nodes)
            item = (self._m_start[j] + self._limit[j], j)
            k = bisect.bisect_left(self._ends, item)
            del self._ends[k]
            excl = True
        else:
            self.state.release_shared(self.job_slots.pop(j))
            excl = False
        if not self._fast_speed:
            self.speed.on_finish(j, t)
        if self.track_usage:
            sh = self._sh[self._shape[j]]
            cpus = (self._cap_c if excl else sh[2]) * self._nodes[j]
            self._user_usage(self._user[j], t, -float(cpus))
        self.main_dirty = True
        self.bf_full = True

    # ------------------------------------------------------------------ passes
    def _main(self, t: int) -> None:
        self._n_main += 1
        self._compact()
        if self._ls is not None:
            self._main_counts(t)
            return
        self.blocked_key[:] = [math.inf] * len(self.blocked_key)
        blocked: set[int] = set()
        porder = self.porder.tolist() if self.porder.size <= 64 else self.porder
        for pos, jj in enumerate(porder):
            j = int(jj)
            if not self.pending[j]:
                continue
            p = self._part[j]
            if p in blocked:
                continue
            res = self._try(j, t, ())
            if res is None:
                blocked.add(p)
                self.blocked_key[p] = float(self.pkeys[pos])
                self._head_job[p] = j
                if len(blocked) >= self._parts_pending:
                    break
            else:
                self._start(j, res[0], res[1], t, False)
                self._scan_upto = max(self._scan_upto, pos + 1)
        self.bf_full = True

    def _main_counts(self, t: int) -> None:
        """:meth:`_main` on the fast path (plain Python, same result).

        The queue is read one job at a time through its memoryview: with one partition
        the pass ends at the first job that does not start, however deep the queue.
        """
        ls = self._ls
        assert ls is not None
        lo, hi = self._qlo, self._qhi
        mj, mk = self._mj, self._mk
        bk = self.blocked_key
        bk[:] = [math.inf] * len(bk)
        blocked: set[int] = set()
        nodes, part, idle = self._nodes, self._part, ls.idle_count
        upto = self._scan_upto
        for k in range(lo, hi):
            j = int(mj[k])
            p = part[j]
            if p in blocked:
                continue
            res = self._try(j, t, ()) if nodes[j] <= idle[p] else None
            if res is None:
                blocked.add(p)
                bk[p] = float(mk[k])
                self._head_job[p] = j
                if len(blocked) >= self._parts_pending:
                    break
            else:
                self._start(j, res[0], res[1], t, False)
                upto = k - lo + 1
        self._scan_upto = max(self._scan_upto, upto)
        self.bf_full = True

    def _res_round(self, t: int) -> int:
        r = self._bf_res
        return -(-t // r) * r

    def _backfill_full(self, t: int) -> None:
        """EASY backfill over the window, recomputing the reservations.

        Feasibility of the rest of the window is re-evaluated vectorised (usable-node
        counts per request shape and reservation view) after each start or reservation,
        so the loop visits only jobs that can start, and each partition's first job that
        cannot (which gets the reservation). Reservations are computed lazily: only once
        a later job could start now (a pass where nothing fits computes none).
        """
        self._n_bf_full += 1
        self._compact()
        self.resv = []
        self._lazy_heads = []
        m = min(self._qhi - self._qlo, self._bf_max)
        if m == 0:
            return
        if self._ls is not None:
            if m <= _PY_WINDOW:
                self._backfill_walk(t, m)
                return
            if self._qfifo and self._parts_pending == 1:
                self._backfill_deep(t, m)
                return
        jobs = self.jobs
        w = self.porder[:m]
        nn = jobs.nodes[w]
        if self._n_shapes == 1:
            sh = w  # unused: one shape
            present = [0]
        else:
            sh = jobs.shape[w]
            present = (list(range(self._n_shapes)) if self._n_shapes <= 8 else
                       np.bincount(sh, minlength=self._n_shapes).nonzero()[0].tolist())
        nn_min = int(nn[nn.argmin()])
        single = self._parts_pending == 1
        if nn_min > self._max_count(present):
            # nothing fits now: only the blocked heads are noted (their reservations are
            # computed if an arriving job could start)
            if single:
                self._lazy_heads = [int(w[0])]
            else:
                _, first = np.unique(jobs.part[w], return_index=True)
                self._lazy_heads = [int(w[k]) for k in np.sort(first).tolist()]
            self.resv_valid = True
            return
        part = None if single else jobs.part[w]
        lim: np.ndarray | None = None
        late: np.ndarray | None = None  # jobs still running at resv[0]'s shadow time
        late_for: Reservation | None = None
        res = self._bf_res
        unreserved = self._all_parts.copy()
        n_unres = unreserved.size
        pos0 = 0
        while pos0 < m:
            if not n_unres and nn_min > self._max_count(present):
                break  # every head is noted and no job of the window fits any more
            # positions from pos0 that may start now, and the first blocked job of each
            # partition without a reservation yet (vectorised over the window). A job
            # still runs at a shadow time S (its end rounded up to bf_resolution is past
            # S) exactly when its time limit exceeds S // res * res - t.
            if self.resv and self._n_shapes == 1 and len(self.resv) == 1:
                if lim is None:
                    lim = jobs.limit[w]
                r0 = self.resv[0]
                c0 = self._count_now(0)
                c1 = (min(c0, r0.extra) if r0.whole and self._sh[0][1] else
                      self._usable(0, (r0,))[1])
                if c0 == c1:
                    feas = nn[pos0:] <= c0
                else:
                    if late_for is not r0:  # (a reservation's shadow time stays put)
                        late = lim > r0.shadow // res * res - t
                        late_for = r0
                    assert late is not None
                    feas = nn[pos0:] <= np.where(late[pos0:], c1, c0)
            elif self.resv:
                if lim is None:
                    lim = jobs.limit[w]
                thr = np.array([r.shadow // res * res - t for r in self.resv])
                k = np.searchsorted(thr, lim[pos0:], side="left")
                table = np.zeros((len(self.resv) + 1, self._n_shapes), dtype=np.int64)
                for kk in range(len(self.resv) + 1):
                    view = tuple(self.resv[:kk])
                    for s in present:
                        table[kk, s] = self._usable(s, view)[1] if kk else self._count_now(s)
                feas = nn[pos0:] <= table[k, sh[pos0:]]
            elif self._n_shapes == 1:
                feas = nn[pos0:] <= self._count_now(0)
            else:
                cnt = np.zeros(self._n_shapes, dtype=np.int64)
                for s in present:
                    cnt[s] = self._count_now(s)
                feas = nn[pos0:] <= cnt[sh[pos0:]]
            # visit, in order, the jobs that may start now (each found when needed) and
            # the first blocked job of each partition still unreserved
            size = int(feas.size)
            heads: list[int] = []
            if n_unres:
                if single:
                    h = int(feas.argmin())
                    if not feas[h]:
                        heads = [h]
                else:
                    assert part is not None
                    blocked = (~feas).nonzero()[0]
                    if blocked.size:
                        bp = part[pos0:][blocked]
                        _, first = np.unique(bp, return_index=True)
                        heads = np.sort(blocked[first[unreserved[bp[first]]]]).tolist()
            heads.append(size)
            nh = heads[0]
            hk = 1
            nf = -1  # next feasible offset (size: none), -1: not looked up yet
            refilter = False
            # walk them in order; starts only shrink what is free, so the filter stays a
            # superset: re-filter only when a job fails or a reservation appears
            cur = 0
            while True:
                if nf < 0:
                    nf = cur + int(feas[cur:].argmax()) if cur < size else size
                    if nf < size and not feas[nf]:
                        nf = size
                if nf < nh:
                    off = nf
                    nf = -1
                    fits = True
                elif nh < size:
                    off = nh
                    nh = heads[hk]
                    hk += 1
                    fits = False
                else:
                    break
                cur = off + 1
                pos = pos0 + off
                j = int(w[pos])
                p = self._part[j]
                if fits:
                    if self._lazy_heads:  # someone may start: reservations needed now
                        self._materialize(t)
                        pos0 = pos
                        refilter = True
                        break
                    if self._test(j, t):
                        continue
                    if not unreserved[p]:
                        pos0 = pos + 1
                        refilter = True
                        break
                if unreserved[p]:
                    unreserved[p] = False
                    n_unres -= 1
                    self._lazy_heads.append(j)
                    if single:
                        unreserved[:] = False
                        n_unres = 0
            if not refilter:
                break
        self.resv_valid = True

    def _backfill_walk(self, t: int, m: int) -> None:
        """:meth:`_backfill_full` on the fast path for a short window, job by job.

        The same walk without numpy (on a few jobs its cost per call is what counts),
        down to when reservations are computed: the vectorised pass filters the window
        with the counts and reservations of its last re-filtering (at the start, after
        computing the noted reservations, after a failed test), visits the jobs that
        filter lets through (computing the noted reservations before the first one,
        then testing it) and notes the first other job of each partition for a
        reservation; so does this walk, with that filter as a snapshot of the counts.
        """
        st = self.st
        nodes, part, limit = self._nodes, self._part, self._limit
        res = self._bf_res
        single = self._parts_pending == 1
        unreserved = set(range(len(self._all_parts)))

        def snapshot() -> tuple[int, list[tuple[int, int]]]:
            return st.idle_count[0], [(r.shadow // res * res - t, r.extra) for r in self.resv]

        free, caps = snapshot()
        order = self.porder[:m].tolist()
        i = 0
        while i < m:
            j = order[i]
            n = nodes[j]
            fits = n <= free
            if fits and caps:
                lim = limit[j]
                for thr, extra in caps:
                    if lim > thr and extra < n:  # still running at its shadow time
                        fits = False
                        break
            if fits:
                if self._lazy_heads:  # someone may start: reservations needed now
                    self._materialize(t)
                    free, caps = snapshot()
                    continue  # (this job again, on the new filter)
                if self._test(j, t):
                    i += 1
                    continue
                if part[j] not in unreserved:
                    free, caps = snapshot()
                    i += 1
                    continue
            p = part[j]
            if p in unreserved:
                unreserved.discard(p)
                self._lazy_heads.append(j)  # (materializing replaces the list)
                if single:
                    unreserved.clear()
            elif not unreserved and not free:
                break  # every head noted and nothing passes the filter
            i += 1
        self.resv_valid = True

    def _backfill_deep(self, t: int, m: int) -> None:
        """:meth:`_backfill_full` on the fast path for a long window of one partition.

        The queue is in arrival order, so a job's place in it is its index and the window
        is every pending job up to the ``m``-th. The head (the first job that does not
        start) is found from the front; after it, the next job to test is the one with the
        lowest index, past the last one tested, among the pending jobs filed under a node
        count no larger than what is free (:attr:`_bucket`), and, should it run past the
        reservation's shadow time, no larger than the reservation's extra nodes. What is
        free only shrinks during a pass, so a job passed over stays unable to start and
        the jobs are tested in the order the walk of :meth:`_backfill_full` tests them.

        The head's reservation is computed once some job of at most the free node count
        follows it in the window (as the vectorised pass computes it lazily). Each pass
        ends knowing that no pending job up to the window's last one could start with
        what it ended with (:attr:`_deep_known`: the free count, the extra nodes and the
        time limit that fit before the shadow time); the searches of later passes skip
        those jobs unless what is free, or the extra nodes, grew past what they needed
        (:meth:`_deep_find`), and the jobs that entered the window since are read from
        the queue. Jobs arrive in index order, so no job enters that range later.
        """
        ls = self._ls
        assert ls is not None
        lo = self._qlo
        mj = self._mj
        nodes = self._nodes
        p = self._part[int(mj[lo])]
        idle = ls.idle_count
        free0 = idle[p]  # what the first reservation waits for (see _backfill_walk)
        pos = 0
        j = -1
        while pos < m:  # jobs at the front that start, then the head
            j = int(mj[lo + pos])
            if nodes[j] <= free0 and self._test(j, t):
                pos += 1
                continue
            break
        known = self._deep_known
        self._deep_known = None
        if pos == m:
            self.resv_valid = True
            return
        self._lazy_heads.append(j)
        last = int(mj[lo + m - 1])  # the window's last job
        cur = j
        self.resv_valid = True
        if cur >= last:
            return
        # a job of at most free0 nodes behind the head: else no reservation is computed
        bucket, bvals = self._bucket, self._bvals
        for v in bvals:
            if v > free0:
                self._deep_known = (last, free0, _INF, _INF)
                return
            b = bucket[v]
            if b[-1] > cur:
                k = 0 if b[0] > cur else bisect.bisect_right(b, cur)
                if b[k] <= last:
                    break
        else:
            self._deep_known = (last, free0, _INF, _INF)
            return
        self._materialize(t)
        r0 = self.resv[0] if self.resv else None
        thr = r0.shadow // self._bf_res * self._bf_res - t \
            if r0 is not None else _INF
        if known is not None and (known[0] <= cur or thr > known[3]):
            known = None  # nothing it knows lies behind the head, or the limit fits more
        newer: list[int] = []  # the window's jobs past what is known, in index order
        if known is not None and last > known[0]:
            k = bisect.bisect_right(mj, known[0], lo, lo + m)
            newer = mj[k:lo + m].tolist()
        ok = True
        free = extra = 0
        while cur < last:
            free = idle[p]
            extra = r0.extra if r0 is not None else _INF
            best = self._deep_find(cur, last, free, extra, thr, known, newer)
            if best > last:
                break
            if not self._test(best, t):
                ok = False  # (it fitted by count: a placement rule held it back)
            cur = best
        else:
            free = idle[p]
            extra = r0.extra if r0 is not None else _INF
        if ok:
            self._deep_known = (last, free, extra, thr)

    def _deep_find(self, cur: int, last: int, free: int, extra: int, thr: int,
                   known: tuple[int, int, int, int] | None, newer: list[int]) -> int:
        """The lowest pending job past ``cur`` (up to ``last``) that may start by count.

        That is a job of at most ``free`` nodes that either takes at most ``extra`` nodes
        or has a time limit of at most ``thr`` (ends before the shadow time); ``last + 1``
        if none. ``known`` = ``(upto, free_k, extra_k, thr_k)`` says that no pending job
        up to ``upto`` met that test with those values; with ``thr <= thr_k`` such a job
        can only meet it now with more than ``free_k`` nodes, or with more than ``extra_k``
        nodes and at most ``extra``, so only those node counts are searched below
        ``upto``, and ``newer`` (the window's jobs past ``upto``) is read whole.
        """
        bucket, bvals = self._bucket, self._bvals
        limit = self._limit
        best = last + 1  # (nothing past the window)
        if known is None or cur >= known[0]:  # nothing known past cur: every count
            lo_v = 0
        else:
            _, free_k, extra_k, _ = known
            nodes = self._nodes
            for jj in newer:
                if jj > cur:
                    n = nodes[jj]
                    if n <= free and (n <= extra or limit[jj] <= thr):
                        best = jj
                        break
            # more than extra_k nodes, at most extra (and what is free): the first one
            top = min(extra, free, free_k)
            if top > extra_k:
                nv = len(bvals)
                for i in range(bisect.bisect_right(bvals, extra_k), nv):
                    v = bvals[i]
                    if v > top:
                        break
                    b = bucket[v]
                    if b[-1] > cur:
                        k = 0 if b[0] > cur else bisect.bisect_right(b, cur)
                        if b[k] < best:
                            best = b[k]
            if free <= free_k:
                return best
            lo_v = free_k  # and more than free_k nodes, as below
        for i in range(bisect.bisect_right(bvals, lo_v) if lo_v else 0, len(bvals)):
            v = bvals[i]
            if v > free:
                break
            b = bucket[v]
            if b[0] >= best or b[-1] <= cur:
                continue
            k = 0 if b[0] > cur else bisect.bisect_right(b, cur)
            jj = b[k]
            if jj >= best:
                continue
            if v <= extra:  # any job of this count may start: the first one
                best = jj
                continue
            nb = len(b)
            while k < nb:  # it must end by the shadow time
                jj = b[k]
                if jj >= best:
                    break
                if limit[jj] <= thr:
                    best = jj
                    break
                k += 1
        return best

    def _materialize(self, t: int) -> None:
        """Compute the reservations of the blocked heads noted by the last full pass."""
        for j in self._lazy_heads:
            r = self._reserve(j, t)
            if r is not None:
                self.resv.append(r)
                self._n_resv += 1
        self._lazy_heads = []
        if len(self.resv) > 1:
            self.resv.sort(key=lambda x: x.shadow)

    def _view(self, j: int, t: int) -> tuple[Reservation, ...]:
        """The reservations ``j`` would still be running at if it started now."""
        resv = self.resv
        if not resv:
            return ()
        end = self._res_round(t + self._limit[j])
        if len(resv) == 1:
            return (resv[0],) if resv[0].shadow < end else ()
        return tuple(r for r in resv if r.shadow < end)

    def _test(self, j: int, t: int) -> bool:
        """Start ``j`` now by backfill if it fits without delaying a reservation."""
        if self._lazy_heads:
            self._materialize(t)
        view = self._view(j, t)
        res = self._try(j, t, view)
        if res is None:
            return False
        nodes, nl = res
        if view:
            if self._ls is not None:
                for r in view:
                    r.take_whole(self._nodes[j])
            else:
                _, _, c, g, m = self._sh[self._shape[j]]
                for r in view:
                    r.take(nodes, c, g, m)
        self._start(j, nodes, nl, t, True)
        return True

    def _backfill_new(self, t: int) -> None:
        self._n_bf_inc += 1
        mp = self._m_pending
        new = [j for j in self.bf_new if mp[j]]
        if not new:
            return
        # the window: ranks among pending jobs, computed on the live queue
        self._compact()
        queued = self._qhi - self._qlo
        if queued <= self._bf_max:  # the whole queue is the window
            if len(new) > 1:
                new.sort(key=lambda j: (self.key_of[j], j))
            for j in new:
                self._test(j, t)
            return
        m = min(queued, self._bf_max)
        if self._qfifo:  # in arrival order: the window is every job up to its last one
            last = int(self._mj[self._qlo + m - 1])
            for j in sorted(j for j in new if j <= last):
                self._test(j, t)
            return
        w = self.porder[:m]
        if len(new) > 4:
            cand = w[np.isin(w, new)].tolist()
        else:
            cand = [j for j in new if np.count_nonzero(w == j)]
            cand.sort(key=lambda j: (self.key_of[j], j))
        for j in cand:
            self._test(int(j), t)

    def _reserve(self, j: int, t: int) -> Reservation | None:
        """The reservation of blocked job ``j`` (``None``: its shadow time is beyond the window)."""
        p, excl, c, g, m = self._sh[self._shape[j]]
        n = self._nodes[j]
        if excl:
            found = self._shadow_whole(j, p, n, t)
            if found is None:
                return None
            shadow, ready_nodes = found
            if shadow - t > self._bf_window:
                return None
            return Reservation(j, p, shadow, extra=ready_nodes - n)
        return reserve_shared(self.state, p, m, Request(n, c, g, excl, j, t, self.eng.seed),
                              self.policy.place, t, self._bf_window)

    def _shadow_whole(self, j: int, p: int, n: int, t: int) -> tuple[int, int] | None:
        """Shadow time of whole-node job ``j`` and the partition's nodes free by then.

        With only whole-node jobs running and a partition holding every node, this walks
        the running jobs in order of expected end (kept sorted as they start and end)
        until enough nodes are free: no pass over the nodes.
        """
        ls = self._ls
        idle = ls.idle_count[p] if ls is not None else int(self.state.idle_count[p])
        need = n - idle
        if need <= 0:
            return t, idle
        # (the leaf state: whole nodes only, every partition holds every node)
        if ls is not None or (self.state.shared_rows == 0 and self.cluster.part_all[p]):
            acc = 0
            shadow = -1
            nodes = self._nodes
            for e, k in self._ends:
                if e < t:
                    e = t
                if shadow >= 0 and e > shadow:
                    break
                acc += nodes[k]
                if shadow < 0 and acc >= need:
                    shadow = e
            if shadow < 0:
                return None
            return shadow, idle + acc
        return whole_shadow(self.state, p, n, t)

    def _backfill_plan(self, t: int) -> None:
        """Conservative backfill: every job of the window that cannot start is reserved.

        The plan is a profile of free nodes over time (``times[i]``: where segment ``i``
        begins, ``free[i]``: nodes free in it; the last runs on), built from the running
        jobs' expected ends. The window's jobs, in priority order, each take the earliest
        start where their node count stays free for their time limit (its end rounded up
        to ``bf_resolution``): now, and the job starts; within ``bf_window``, and that
        span is reserved (taken from the profile); later, and the job is left unplanned.
        So a job starts now only if it delays no job ahead of it in the window.

        Node counts are exact here: every job takes whole nodes of one pool (every
        partition holds every node, see ``__init__``) and only the running jobs hold
        particular nodes, each until its end, so reserved spans taken in order of start
        always find the nodes their counts promise.
        """
        self._n_bf_full += 1
        self._compact()
        probing = self._probe_i < len(self._probes)
        if probing:
            self._emit_plans(t)
            self._plan_now = {}
        lo = self._qlo
        m = min(self._qhi - lo, self._bf_max)
        if m == 0:
            return
        times: list[int] = [t]
        free: list[int] = [int(self.st.idle_count[0])]
        nodes = self._nodes
        for e, k in self._ends:  # (sorted by expected end)
            if e <= t:  # past its limit, still running: it frees its nodes from t + 1
                e = t + 1
            if e != times[-1]:
                times.append(e)
                free.append(free[-1])
            free[-1] += nodes[k]
        window = t + self._bf_window
        mj = self._mj
        queue = [int(mj[k]) for k in range(lo, lo + m)]
        for j in queue:
            n = nodes[j]
            span = self._limit[j]
            nseg = len(times)
            i = 0
            found = -1
            while i < nseg:
                if free[i] < n:
                    i += 1
                    continue
                end = self._res_round(times[i] + span)
                k = i + 1
                while k < nseg and times[k] < end and free[k] >= n:
                    k += 1
                if k < nseg and times[k] < end:  # segment k is short: start after it
                    i = k + 1
                    continue
                found = i
                break
            if found < 0:
                continue
            s = times[found]
            if s > window:
                continue
            if s == t:
                res = self._try(j, t, ())
                if res is None:  # (a --switches wait): neither started nor reserved
                    continue
                self._start(j, res[0], res[1], t, True)
            else:
                self._n_resv += 1
                if probing:
                    self._plan_now[j] = s
            end = self._res_round(s + span)
            k = bisect.bisect_left(times, end)
            if k == len(times) or times[k] != end:
                times.insert(k, end)
                free.insert(k, free[k - 1])
            for i in range(found, k):
                free[i] -= n

    def _emit_plans(self, t: int) -> None:
        """Keep the plan in effect (the last pass's) for every probe before ``t``.

        Less the jobs started by the probe's time: the main scheduler starts some between
        backfill passes.
        """
        probes = self._probes
        start = self.start
        ids = self.jobs.job_id
        while self._probe_i < len(probes) and probes[self._probe_i] < t:
            p = probes[self._probe_i]
            self._plans.append((p, {int(ids[j]): s for j, s in self._plan_now.items()
                                    if not 0 <= int(start[j]) <= p}))
            self._probe_i += 1

    def _schedule(self, t: int) -> None:
        self._n_passes += 1
        if self._dynamic and t >= self.next_recalc:
            self.next_recalc = t + self._calc
            self._recalc(t)
        if self.main_dirty:
            self.main_dirty = False
            self._main(t)
        if self._backfill and (self.bf_full or self.bf_new):
            if not self._n_pending:
                self.bf_full = False  # nothing to backfill: no pass
                self.bf_new.clear()
                self.resv_valid = False
            elif self._bf_interval == 0 or t >= self.next_bf:
                if self._bf_plan:  # Slurm's plan is made afresh on every pass
                    self._backfill_plan(t)
                elif self.bf_full or not self.resv_valid:
                    self._backfill_full(t)
                else:
                    self._backfill_new(t)
                self.bf_full = False
                self.bf_new.clear()
                self.next_bf = t + self._bf_interval
            elif self.bf_timer_at != self.next_bf:
                self.bf_timer_at = self.next_bf
                self._push(self.next_bf, _TIMER, -1)
        if self.bf_full:  # resources changed while backfill waits: standing plan is stale
            self.resv_valid = False

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        """Replay every job to completion (once per simulator).

        Raises:
            RuntimeError: If called a second time.
        """
        if self._ran:
            raise RuntimeError("a Simulator replays once: make a new one")
        self._ran = True
        wall0 = time.perf_counter()
        jobs = self.jobs
        n = jobs.n
        elig = self._elig
        heap = self.heap
        st = self.st
        ls = self._ls
        ut: list[int] = []
        un: list[int] = []
        uc: list[int] = []
        ug: list[int] = []
        ft: list[int] = []
        fv: list[float] = []
        if n:
            span = max(1, elig[-1] - elig[0])
            interval = max(1, span // max(1, self.eng.samples))
            next_sample = elig[0]
        else:
            interval, next_sample = 1, _INF
        i = 0
        events = 0
        while True:
            ta = elig[i] if i < n else _INF
            th = heap[0][0] if heap else _INF
            t = ta if ta < th else th
            if t >= _INF:
                break
            while next_sample < t:
                ft.append(next_sample)
                fv.append(self._ls.fragmentation(next_sample) if self._ls is not None
                          else fragmentation(self.cluster, self.state, next_sample))
                next_sample += interval
                if len(ft) >= 2 * max(1, self.eng.samples):  # a long drain: coarser grid
                    del ft[1::2], fv[1::2]
                    interval *= 2
                    next_sample = ft[-1] + interval
            while heap and heap[0][0] == t and heap[0][1] == _COMPLETE:
                self._finish(heapq.heappop(heap)[3], t)
                events += 1
            if ta == t:
                k = i + 1
                while k < n and elig[k] == t:
                    k += 1
                self._arrive(i, k, t)
                events += k - i
                i = k
            while heap and heap[0][0] == t:
                heapq.heappop(heap)
                self.bf_full = True
                self.main_dirty = True
                events += 1
            self._schedule(t)
            ut.append(t)
            if ls is not None:  # (CPUs and GPUs are busy nodes times the per-node count)
                un.append(ls.busy_nodes)
            else:
                un.append(st.busy_nodes)
                uc.append(st.used_c)
                ug.append(st.used_g)
        self.stats["events"] = events
        self.stats.update(zip(_COUNTERS, (
            self._n_passes, self._n_main, self._n_bf_full, self._n_bf_inc, self._n_resv,
            self._n_recalcs, self._n_started, self._n_backfilled), strict=True))
        self.stats["pending_mean"] = self._pend_sum / n if n else 0.0
        self.stats["pending_max"] = self._pend_max
        util_nodes = np.array(un, dtype=np.int64)
        if ls is not None:  # every busy node is whole: its CPUs and GPUs are all in use
            util_cpus = util_nodes * ls.cpus_per_node
            util_gpus = util_nodes * ls.gpus_per_node
        else:
            util_cpus = np.array(uc, dtype=np.int64)
            util_gpus = np.array(ug, dtype=np.int64)
        self._emit_plans(_INF)
        self.stats["wall_s"] = time.perf_counter() - wall0
        return SimResult(
            jobs=jobs, cluster=self.cluster, policy=self.policy.name, options=self.opt,
            engine=self.eng, start=self.start, end=self.end, leaves=self.leaves,
            backfilled=self.backfilled, util_t=np.array(ut, dtype=np.int64),
            util_nodes=util_nodes, util_cpus=util_cpus,
            util_gpus=util_gpus, frag_t=np.array(ft, dtype=np.int64),
            frag=np.array(fv, dtype=np.float64), stats=dict(self.stats),
            placements=self.placements,
            plans=self._plans if self._probes else None,
        )


def simulate(
    spec: ClusterSpec | Cluster,
    records: Iterable[JobRecord] | JobTable,
    policy: Policy,
    options: SchedulerOptions | None = None,
    engine: EngineOptions | None = None,
    *,
    default_time_limit: int | None = None,
) -> SimResult:
    """Replay ``records`` on ``spec`` under ``policy`` (building the arrays first)."""
    cluster = spec if isinstance(spec, Cluster) else Cluster.from_spec(spec)
    jobs = records if isinstance(records, JobTable) else build_jobs(
        records, cluster, default_time_limit=default_time_limit)
    return Simulator(jobs, cluster, policy, options, engine).run()
