"""Scheduling policies behind one narrow interface, and the baselines built from them.

A :class:`Policy` does two things:

- ``score(jobs, idx, ctx)``: one score per pending job ``idx`` (higher runs first),
  computed vectorised from the columns of the :class:`~trainer.sim.state.JobTable`
  (submit/eligible time, time limit, size, user...) and the context (now, per-user
  usage, the cluster). Ties keep arrival order. A policy whose scores change while jobs
  wait (``dynamic = True``) is re-scored every ``priority_calc_period``; otherwise a
  job is scored once, when it arrives.
- ``place(cluster, state, usable, request)``: which nodes a job gets among the usable
  ones (the engine computes the usable-node mask once per request shape and view and
  shares it); by default the placement named by ``placement`` in
  :data:`trainer.sim.placement.PLACEMENTS`.

Backfill on/off is a scheduler option (:class:`~trainer.sim.slurm.SchedulerOptions`),
not part of a policy: :data:`BASELINES` pairs a policy with it (and, for some, with a
placement of :data:`~trainer.sim.placement.PLACEMENTS`).

Seed heuristics (:data:`POLICIES`; ties always keep arrival order). SCHED²'s baselines
(§IV-A) are named as that paper names them; its *ideal* execution time (measured by
profiling, an oracle) is here the job's recorded run time, which is the speed model's run
time at the best placement (``none``: the run time wherever it runs); SJF, by contrast,
orders by the user's time limit:

- ``sif``, Shortest Ideal time job First: the shortest recorded run time.
- ``saf``, Shortest Actual time job First: the shortest run time the job would have if
  it started now on the nodes the placement would give it (SCHED²'s oracle of placement
  and speed), from :attr:`ScoreContext.speed`; a job that cannot start now counts its
  ideal time. Re-scored every calc period. With the ``none`` speed model it orders as
  ``sif``.
- ``dsif``, Delayed SIF: ``sif``, but a job whose placement now spans more leaf
  switches than its best locality (the fewest leaves its node count can span) is not
  started, up to 3 times (distinct decision times, :attr:`Request.now
  <trainer.sim.placement.Request.now>`); then it takes any placement. A refused job gets
  no backfill reservation either, so the jobs behind it go ahead (SCHED²'s "delay").
  SCHED²'s locality is the servers a job spans; here a request fixes its node count,
  so the leaves it spans are what a placement can change (no tree: ``dsif`` = ``sif``).
- ``lrf``, Least Resource job First: the fewest GPUs in total (CPUs on a cluster
  without GPUs; a whole-node job counts its nodes' GPUs/CPUs).
- ``spf``, Smallest Product job First: the smallest resource amount (as ``lrf``) times
  ideal time.
- ``tetris`` (Tetris as DL² uses it, §6.1: "jobs with the shortest remaining completion
  time and highest resource packing efficiency"): alignment ``a = sum_r d_r * f_r`` of
  the job's demand ``d`` (its total CPUs and GPUs over the cluster's) with the free
  resources ``f`` now (free CPUs and GPUs over the cluster's), plus shortest remaining
  time (its time limit ``l``), as ``a / (a + a_mean) - l / (l + l_mean)``, the means
  over the job table (each term in [0, 1), weighted equally, Tetris' epsilon = 1). As
  Tetris only considers tasks that fit, a job that cannot start now scores below every
  job that can. Re-scored every calc period (free resources change).
- ``drf``, Dominant Resource Fairness (DL²'s baseline): the user with the smallest
  dominant share first, then arrival. The share is the user's part of the per-user
  usage the engine tracks (:attr:`ScoreContext.usage`: CPU-seconds decayed with
  ``PriorityDecayHalfLife``, Slurm's default billing), so the dominant resource is
  CPUs: DRF's GPU share is not tracked (on the synthetic GPU workloads CPUs go with
  GPUs, so the two shares agree). Re-scored every calc period.
- ``random``: a random priority per job, drawn when it arrives from the replay's
  generator (:attr:`ScoreContext.rng`): reproducible with the engine's seed.

Not seed heuristics (they are rlsched's own, and not counted as "the best seed
heuristic" by :func:`trainer.evaluate.check_targets`):

- ``sef``, Shortest Estimated run First: the run-time estimate the helper's features
  compute from the user's history (:class:`slurm_plugin.features.UserHistory`: the time
  limit times the mean ``run / limit`` of the user's recent jobs), shortest first.
  Deployable: it reads what a scheduler knows, not the recorded run time. The history
  grows with the replay's own completions (:meth:`Policy.bind`), from what it held when
  the replay began (empty, or warm-started by the caller). Re-scored every calc period.
- ``seaf``, Smallest Estimated Area First: SCHED²'s SPF with ``sef``'s estimate instead
  of the recorded run time (GPUs, or CPUs, times the estimate). Deployable as ``sef``.

How the learned policy plugs in (LATER, with ``slurm_plugin/features.py``): an adapter
``LearnedPolicy(Policy)`` wraps the DESIGN's ``Policy.score(obs)`` /
``place(obs, job, candidates)``. Its ``score`` builds the ``Observation`` from the same
arrays this interface passes (the pending rows ``idx`` of the job table; the node
state's free CPUs/GPUs, ``node_end`` remaining times and per-leaf counts; the switch
tree), through the one featurizer shared with the live helper, and returns the model's
per-job scores (``dynamic = True``, so it is re-scored each calc period); the "hold"
score becomes a threshold below which a job is not started. Its ``place`` turns the
usable mask into candidate node sets (e.g. one per leaf switch, plus the tree best fit)
and returns the model's choice. The engine, metrics and CLI need no change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
from mypy_extensions import mypyc_attr

from .placement import PLACEMENTS, Request, best_leaf_span
from .slurm import (
    PrioritySettings,
    SchedulerOptions,
    fairshare_factor,
    multifactor_priority,
    static_priority,
)
from .speed import NoSpeedModel, SpeedModel
from .state import Cluster, JobTable, NodeState

if TYPE_CHECKING:
    from slurm_plugin.features import Normalisation, UserHistory

    from .observe import CompletionFeed

__all__ = [
    "BASELINES",
    "POLICIES",
    "SEED_BASELINES",
    "Baseline",
    "Drf",
    "Dsif",
    "Fifo",
    "Lrf",
    "Multifactor",
    "Policy",
    "RandomOrder",
    "Saf",
    "ScoreContext",
    "Seaf",
    "Sef",
    "Sif",
    "Sjf",
    "Spf",
    "Tetris",
    "fits_now",
    "make_policy",
]


class ScoreContext(NamedTuple):
    """What a policy may look at besides the job columns (read-only).

    A named tuple, not a frozen dataclass: the engine makes one per arrival and
    re-scoring, and a tuple is made several times faster (a frozen dataclass sets each
    field through ``object.__setattr__``).

    Attributes:
        now: Current time, epoch s.
        cluster: The cluster.
        state: The node state now (free resources, expected ends).
        usage: Decayed usage per user (CPU-seconds), when the policy asked for it
            (``uses_usage``); else zeros.
        rng: The replay's random generator (seeded: a replay repeats exactly).
        speed: The replay's speed model (``None``: run times as recorded).
    """

    now: int
    cluster: Cluster
    state: NodeState
    usage: np.ndarray
    rng: np.random.Generator
    speed: SpeedModel | None = None


# (compiled by rlsched build-sim: policies are subclassed in Python and pickled to rollout
# workers as Python classes are, without calling __init__)
@mypyc_attr(allow_interpreted_subclasses=True, serializable=True)
class Policy:
    """The scheduling policy interface (see the module docstring).

    Attributes:
        name: Registry name.
        dynamic: Scores change while jobs wait (re-scored every calc period).
        rescore_period: Seconds between a dynamic policy's re-scorings of the queue; 0:
            the scheduler's ``priority_calc_period`` (Slurm's own factors). A learned
            policy deployed by the helper is re-scored every helper cycle instead.
        uses_usage: The engine must track per-user usage for :attr:`ScoreContext.usage`.
        settles_after: For a dynamic policy, seconds after its eligible time from which a
            job's score no longer changes while it waits (the engine then re-scores
            only the jobs younger than that); ``None``: it may change at any time.
        placement: Name of the placement in :data:`~trainer.sim.placement.PLACEMENTS`.
        reads_state: Its scores read :attr:`ScoreContext.state` (the nodes), so the
            engine must keep the node arrays; False lets a whole-node replay run on idle
            counts per leaf (:mod:`trainer.sim.leaves`). True unless a policy says not.
    """

    name: ClassVar[str] = ""
    dynamic: bool = False
    rescore_period: int = 0
    uses_usage: bool = False
    settles_after: int | None = None
    reads_state: ClassVar[bool] = True

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {placement!r}: {sorted(PLACEMENTS)}")
        self.settings = settings or PrioritySettings()
        self.placement = placement
        self._place = PLACEMENTS[placement]

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """One float score per job of ``idx`` (higher runs first): every policy has one.

        (Not an ``abc`` abstract method: compiled by mypyc, classes deriving from
        ``abc.ABC`` share one ``isinstance`` cache, so ``isinstance(sjf, Sef)`` could
        come out true.)
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement score()")

    def static_part(self, jobs: JobTable, cluster: Cluster) -> np.ndarray | None:
        """Per job, the part of its score that waiting does not change, if it has one.

        A policy returns it when its score is ``g(static part, age)`` for one function
        ``g`` of every job, non-decreasing in the age (``now - eligible``), that reads
        nothing else of the context (no usage, state or random draws). Pending jobs with
        equal static parts then keep their arrival order whenever they are re-scored,
        and a job arriving (age 0) with that static part never scores above them: the
        engine uses this to defer re-scorings that could change nothing. ``None``: not
        so.
        """
        return None

    def score_few(self, jobs: JobTable, idx: list[int], ctx: ScoreContext
                  ) -> list[float] | None:
        """:meth:`score` of a few jobs in Python floats, or ``None`` (no scalar form).

        The engine scores a lone arrival this way: on one job numpy's cost per call, not
        the arithmetic, is what counts. A policy that implements it must return exactly
        the values :meth:`score` would (the same float operations in the same order), so
        a replay is bit for bit the same either way.
        """
        return None

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The nodes a job gets among ``usable`` and the leaves they span, or ``None``.

        ``leaf_counts`` (usable nodes per leaf switch) is passed when the engine has it.
        """
        return self._place(cluster, state, usable, req, leaf_counts)

    def bind(self, sim: Any) -> None:
        """Called once by the :class:`~trainer.sim.engine.Simulator` replaying this policy.

        Before its first event, with the simulator itself: a policy that learns from the
        replay's completions (its ``start``, ``end`` and ``leaves`` arrays, which hold a
        job's actual end from its start on) keeps what it needs. The default does
        nothing; a wrapper forwards it to the policy it wraps.
        """
        return None  # (deliberately empty: most policies keep nothing)


@mypyc_attr(allow_interpreted_subclasses=True)
class Fifo(Policy):
    """First come, first served: by eligible time (then job id)."""

    name = "fifo"
    reads_state = False

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Earlier arrival scores higher."""
        out: np.ndarray = -jobs.eligible[idx].astype(np.float64)
        return out

    def score_few(self, jobs: JobTable, idx: list[int], ctx: ScoreContext) -> list[float]:
        """As :meth:`score`, in Python floats."""
        col = jobs.eligible
        return [-float(col[j]) for j in idx]


@mypyc_attr(allow_interpreted_subclasses=True)
class Sjf(Policy):
    """Shortest job first, by time limit (the user's estimate), then arrival."""

    name = "sjf"
    reads_state = False

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A shorter time limit scores higher."""
        out: np.ndarray = -jobs.limit[idx].astype(np.float64)
        return out

    def score_few(self, jobs: JobTable, idx: list[int], ctx: ScoreContext) -> list[float]:
        """As :meth:`score`, in Python floats."""
        col = jobs.limit
        return [-float(col[j]) for j in idx]


@mypyc_attr(allow_interpreted_subclasses=True)
class Multifactor(Policy):
    """Slurm's multifactor priority (see :mod:`trainer.sim.slurm` for the formula)."""

    name = "multifactor"
    reads_state = False

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        super().__init__(settings, placement)
        self.dynamic = self.settings.time_dependent
        self.uses_usage = self.settings.uses_usage
        # only the age factor moves (no fair-share): constant once it reaches max_age
        self.settles_after = None if self.uses_usage else max(0, self.settings.max_age)
        self._static: tuple[int, np.ndarray] | None = None
        self._static_list: tuple[np.ndarray, list[float]] | None = None

    def static(self, jobs: JobTable, cluster: Cluster) -> np.ndarray:
        """Per job, the priority terms that do not change while it waits (cached)."""
        if self._static is None or self._static[0] != id(jobs):
            pf = self.settings.partition_factor
            qf = self.settings.qos_factor
            part = np.array([float(pf.get(p, 1.0)) for p in cluster.part_names])
            qos = np.array([float(qf.get(q, 0.0)) for q in jobs.qos_names] or [0.0])
            cpus = np.where(jobs.exclusive, int(cluster.cap_c.max()), jobs.cpus) * jobs.nodes
            values = static_priority(
                self.settings, nodes=jobs.nodes, cpus=cpus, part_factor=part[jobs.part],
                qos_factor=qos[jobs.qos], nice=jobs.nice, total_nodes=cluster.num_nodes,
                total_cpus=cluster.total_cpus)
            self._static = (id(jobs), values)
        return self._static[1]

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The multifactor priority now (the site factor is read live from the table)."""
        fs = None
        if self.settings.weight_fairshare:
            fs = fairshare_factor(ctx.usage)[jobs.user[idx]]
        return multifactor_priority(
            self.settings, now=ctx.now, eligible=jobs.eligible[idx],
            static=self.static(jobs, ctx.cluster)[idx], fair_share=fs,
            site_factor=jobs.site_factor[idx])

    def static_part(self, jobs: JobTable, cluster: Cluster) -> np.ndarray | None:
        """Without fair-share: the static terms plus the site factor (the age moves)."""
        if self.settings.weight_fairshare:
            return None
        out: np.ndarray = self.static(jobs, cluster) + jobs.site_factor
        return out

    def score_few(self, jobs: JobTable, idx: list[int], ctx: ScoreContext
                  ) -> list[float] | None:
        """As :meth:`score` without fair-share, in Python floats (``None`` with it).

        :func:`~trainer.sim.slurm.multifactor_priority` step by step: ``static +
        site``, plus ``weight_age * age`` (``age`` an exact integer quotient, as numpy
        divides int64 by int64), floored (zeros, infinities and NaN kept, as ``np.floor``).
        """
        s = self.settings
        if s.weight_fairshare:
            return None
        arr = self.static(jobs, ctx.cluster)
        if self._static_list is None or self._static_list[0] is not arr:
            self._static_list = (arr, arr.tolist())
        static = self._static_list[1]
        now, w, a = ctx.now, float(s.weight_age), s.max_age
        elig, site = jobs.eligible, jobs.site_factor
        out = []
        for j in idx:
            p = static[j] + float(site[j])
            if w:
                p = p + w * (min(max(now - int(elig[j]), 0), a) / a) if a > 0 else p + w
            out.append(float(math.floor(p)) if p and math.isfinite(p) else p)
        return out


# ---------------------------------------------------------------------------- seed heuristics
def _amount(jobs: JobTable, idx: np.ndarray, cluster: Cluster) -> np.ndarray:
    """GPUs each job of ``idx`` holds in total (CPUs on a cluster without GPUs)."""
    if cluster.total_gpus > 0:
        per = np.where(jobs.exclusive[idx], int(cluster.cap_g.max()), jobs.gpus[idx])
    else:
        per = np.where(jobs.exclusive[idx], int(cluster.cap_c.max()), jobs.cpus[idx])
    out: np.ndarray = (per * jobs.nodes[idx]).astype(np.float64)
    return out


def fits_now(jobs: JobTable, idx: np.ndarray, state: NodeState) -> np.ndarray:
    """Per job of ``idx``, True when enough nodes can take it now.

    One usable-node count per request shape (not per job).
    """
    shapes, inv = np.unique(jobs.shape[idx], return_inverse=True)
    cnt = np.zeros(shapes.size, dtype=np.int64)
    for k, s in enumerate(shapes.tolist()):
        p = int(jobs.shape_part[s])
        if jobs.shape_excl[s]:
            cnt[k] = int(state.idle_count[p])
        else:
            cnt[k] = int(np.count_nonzero(state.fit_mask(
                p, False, int(jobs.shape_c[s]), int(jobs.shape_g[s]), int(jobs.shape_m[s]))))
    out: np.ndarray = jobs.nodes[idx] <= cnt[inv.reshape(-1)]
    return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Sif(Policy):
    """SCHED²'s Shortest Ideal time job First: the shortest recorded run time."""

    name = "sif"
    reads_state = False

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A shorter ideal (recorded) run time scores higher."""
        out: np.ndarray = -jobs.run[idx].astype(np.float64)
        return out

    def score_few(self, jobs: JobTable, idx: list[int], ctx: ScoreContext) -> list[float]:
        """As :meth:`score`, in Python floats."""
        col = jobs.run
        return [-float(col[j]) for j in idx]


@mypyc_attr(allow_interpreted_subclasses=True)
class Saf(Policy):
    """SCHED²'s Shortest Actual time job First (see the module docstring)."""

    name = "saf"
    dynamic = True

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A shorter run time on the nodes the job would get now scores higher."""
        actual = jobs.run[idx].astype(np.float64)
        speed = ctx.speed
        if speed is None or isinstance(speed, NoSpeedModel) or not idx.size:
            out: np.ndarray = -actual
            return out
        st, cl = ctx.state, ctx.cluster
        key = jobs.shape[idx].astype(np.int64) * (int(jobs.nodes.max()) + 1) + jobs.nodes[idx]
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        for k, f in enumerate(first.tolist()):  # one placement per request
            j0 = int(idx[f])
            s, n = int(jobs.shape[j0]), int(jobs.nodes[j0])
            p, excl = int(jobs.shape_part[s]), bool(jobs.shape_excl[s])
            c, g = int(jobs.shape_c[s]), int(jobs.shape_g[s])
            mask = st.fit_mask(p, excl, c, g, int(jobs.shape_m[s]))
            if int(np.count_nonzero(mask)) < n:
                continue
            res = self.place(cl, st, mask, Request(n, c, g, excl, -1, ctx.now))
            if res is None:
                continue
            nodes, nl = res
            for pos in np.flatnonzero(inv == k).tolist():
                actual[pos] = speed.run_time(jobs, cl, int(idx[pos]), nodes, nl)
        out = -actual
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Dsif(Sif):
    """SCHED²'s Delayed SIF: SIF, delaying a job up to 3 times for its best locality.

    Attributes:
        max_delays: Decision times at which a job may be refused a placement that spans
            more leaves than its best locality.
        delays: Per job row, the times it was refused so far.
    """

    name = "dsif"
    max_delays: ClassVar[int] = 3

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        super().__init__(settings, placement)
        self.delays: dict[int, int] = {}
        self._refused_at: dict[int, int] = {}
        self._table = -1

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """As :class:`Sif` (a new job table starts the delay counts afresh)."""
        if id(jobs) != self._table:
            self._table = id(jobs)
            self.delays.clear()
            self._refused_at.clear()
        return super().score(jobs, idx, ctx)

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The placement's choice, or ``None`` while the job is delayed for locality."""
        res = super().place(cluster, state, usable, req, leaf_counts)
        if (res is None or req.job < 0 or res[1] <= 1
                or res[1] <= best_leaf_span(cluster, req.nodes)):
            return res
        j = req.job
        if self._refused_at.get(j) == req.now:  # refused once at this time: still delayed
            return None
        done = self.delays.get(j, 0)
        if done >= self.max_delays:
            return res
        self.delays[j] = done + 1
        self._refused_at[j] = req.now
        return None


@mypyc_attr(allow_interpreted_subclasses=True)
class Lrf(Policy):
    """SCHED²'s Least Resource job First: the fewest GPUs (CPUs without GPUs)."""

    name = "lrf"
    reads_state = False

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Fewer GPUs in total score higher."""
        out: np.ndarray = -_amount(jobs, idx, ctx.cluster)
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Spf(Policy):
    """SCHED²'s Smallest Product job First: GPUs (CPUs without GPUs) x ideal time."""

    name = "spf"
    reads_state = False

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A smaller product of resource amount and recorded run time scores higher."""
        out: np.ndarray = -_amount(jobs, idx, ctx.cluster) * jobs.run[idx].astype(np.float64)
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Sef(Policy):
    """Shortest estimated run first: the user's history estimate of the run time.

    The estimate is the one the helper's features compute
    (:meth:`slurm_plugin.features.UserHistory.estimates`: the time limit, or
    ``Normalisation.unknown_limit`` without one, times the mean ``run / limit`` of the
    user's last jobs; ``default_ratio`` for a user without history), so a net trained to
    imitate it sees exactly what it orders by. Ties keep arrival order.

    The history grows with the replay's completions once :meth:`bind` ed (the engine does
    it); :attr:`history` may be replaced before that by one warm-started with the jobs
    that ended before the replay (:func:`trainer.evaluate.user_history`).

    Attributes:
        norm: Normalisation of the estimates (the features' defaults).
        history: The users' history the estimates come from.
    """

    name = "sef"
    reads_state = False

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree",
                 norm: Normalisation | None = None):
        from slurm_plugin.features import Normalisation, UserHistory

        super().__init__(settings, placement)
        self.dynamic = True  # the estimates move as the history grows
        self.norm = norm or Normalisation()
        self.history: UserHistory = UserHistory(self.norm)
        self._feed: CompletionFeed | None = None

    def bind(self, sim: Any) -> None:
        """Follow ``sim``'s completions (recorded as they are due, at each scoring)."""
        from .observe import CompletionFeed

        self._feed = CompletionFeed(self.history, sim.jobs, sim.cluster, sim.start, sim.end,
                                    sim.leaves)

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A shorter estimated run time scores higher (the features' ``est_run``)."""
        from .observe import history_estimates

        if self._feed is not None:
            self._feed.advance(ctx.now)
        _, (est, _, _) = history_estimates(jobs, np.asarray(idx, dtype=np.int64),
                                           self.history, ctx.now)
        out: np.ndarray = -np.asarray(est, dtype=np.float64)
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Seaf(Sef):
    """Smallest estimated area first: :class:`Sef`'s estimate times the resource amount.

    SCHED²'s SPF (GPUs, or CPUs, times the run time) with the run time a scheduler can
    know: the user's history estimate of :class:`Sef` instead of the recorded one. Where
    job sizes spread over orders of magnitude (a 256-CPU machine with one-CPU and
    whole-machine jobs), a small job waiting behind a large short one costs more
    slowdown than the size-blind :class:`Sef` order admits.
    """

    name = "seaf"

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A smaller product of the estimated run time and the amount scores higher."""
        out: np.ndarray = super().score(jobs, idx, ctx) * _amount(jobs, idx, ctx.cluster)
        return out  # (Sef's score is minus the estimate)


@mypyc_attr(allow_interpreted_subclasses=True)
class Tetris(Policy):
    """Tetris as in DL²'s baselines: packing alignment plus shortest remaining time.

    See the module docstring for the score.

    Attributes:
        srtf_weight: Weight of the remaining-time term against the alignment term.
    """

    name = "tetris"
    dynamic = True
    srtf_weight: ClassVar[float] = 1.0
    #: Subtracted from the score of a job that cannot start now (both terms lie in
    #: [0, 1) and [-weight, 0]: it then scores below every job that can).
    _NO_FIT: ClassVar[float] = 10.0

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        super().__init__(settings, placement)
        self._means: tuple[int, float, float] | None = None

    @staticmethod
    def _demand(jobs: JobTable, idx: np.ndarray, cluster: Cluster) -> np.ndarray:
        """Per job, its total CPUs (and GPUs) over the cluster's: shape (jobs, resources)."""
        cpus = np.where(jobs.exclusive[idx], int(cluster.cap_c.max()), jobs.cpus[idx])
        cols = [cpus * jobs.nodes[idx] / cluster.total_cpus]
        if cluster.total_gpus > 0:
            gpus = np.where(jobs.exclusive[idx], int(cluster.cap_g.max()), jobs.gpus[idx])
            cols.append(gpus * jobs.nodes[idx] / cluster.total_gpus)
        return np.stack(cols, axis=1).astype(np.float64)

    def means(self, jobs: JobTable, cluster: Cluster) -> tuple[float, float]:
        """Mean alignment with an idle cluster and mean time limit over the table (cached)."""
        if self._means is None or self._means[0] != id(jobs):
            everyone = np.arange(jobs.n)
            a = float(self._demand(jobs, everyone, cluster).sum(axis=1).mean()) if jobs.n else 1.0
            lim = float(jobs.limit.mean()) if jobs.n else 1.0
            self._means = (id(jobs), a if a > 0 else 1.0, max(lim, 1.0))
        return self._means[1], self._means[2]

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Alignment with the free resources now plus shortest remaining time."""
        cl, st = ctx.cluster, ctx.state
        a_mean, l_mean = self.means(jobs, cl)
        free = [(cl.total_cpus - st.used_c) / cl.total_cpus]
        if cl.total_gpus > 0:
            free.append((cl.total_gpus - st.used_g) / cl.total_gpus)
        a = self._demand(jobs, idx, cl) @ np.asarray(free, dtype=np.float64)
        lim = jobs.limit[idx].astype(np.float64)
        out: np.ndarray = a / (a + a_mean) - self.srtf_weight * lim / (lim + l_mean)
        out -= self._NO_FIT * ~fits_now(jobs, idx, st)
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Drf(Policy):
    """Dominant Resource Fairness: the user with the smallest dominant share first."""

    name = "drf"
    reads_state = False
    dynamic = True
    uses_usage = True

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A user's smaller share of the decayed usage scores higher."""
        u = np.asarray(ctx.usage, dtype=np.float64)
        total = float(u.sum())
        share = u / total if total > 0 else np.zeros_like(u)
        out: np.ndarray = -share[jobs.user[idx]]
        return out


@mypyc_attr(allow_interpreted_subclasses=True)
class RandomOrder(Policy):
    """A random priority per job, drawn at arrival from the replay's generator."""

    name = "random"
    reads_state = False

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Uniform random scores from :attr:`ScoreContext.rng`."""
        out: np.ndarray = ctx.rng.random(idx.size)
        return out


#: Policies by name: ``factory(settings, placement) -> Policy``.
POLICIES: dict[str, Callable[[PrioritySettings | None, str], Policy]] = {
    "fifo": Fifo,
    "sjf": Sjf,
    "multifactor": Multifactor,
    "sif": Sif,
    "saf": Saf,
    "dsif": Dsif,
    "lrf": Lrf,
    "spf": Spf,
    "tetris": Tetris,
    "drf": Drf,
    "sef": Sef,
    "seaf": Seaf,
    "random": RandomOrder,
}


@dataclass(frozen=True)
class Baseline:
    """A named baseline: a policy plus backfill on or off, and maybe a placement.

    Attributes:
        policy: Key in :data:`POLICIES`.
        backfill: Backfill on/off; ``None``: as the Slurm configuration says
            (``SchedulerType``).
        help: One line for ``--help``.
        placement: Key in :data:`~trainer.sim.placement.PLACEMENTS`; ``None``: the
            run's placement option (``--placement``, default ``tree``).
        seed: One of the seed papers' heuristics (or Slurm); ``False`` for rlsched's
            own (``sef``, ``seaf``), which the quality targets do not count as "the best
            seed heuristic".
        oracle: It orders by the recorded run time, which no scheduler knows before a
            job ends (SCHED²'s profiled ideal time: ``sif``, ``saf``, ``dsif``, ``spf``).
            On a trace without time limits every job's limit is its run time, so the
            time limit is an oracle there too; that is the data's, not the policy's.
    """

    policy: str
    backfill: bool | None
    help: str
    placement: str | None = None
    seed: bool = True
    oracle: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}: {sorted(POLICIES)}")
        if self.placement is not None and self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}: {sorted(PLACEMENTS)}")

    def describe(self, options: SchedulerOptions) -> str:
        """``help`` for a replay under ``options`` (``help`` names the default plan, EASY)."""
        if options.bf_plan == "easy":
            return self.help
        return self.help.replace("EASY backfill", f"{options.bf_plan} backfill")

    def build(self, priority: PrioritySettings | None, options: SchedulerOptions
              ) -> tuple[Policy, SchedulerOptions]:
        """Its policy and the scheduler options it replays under.

        ``options`` with the baseline's backfill setting when it has one; the policy
        places jobs with the baseline's placement, else ``options.placement``.
        """
        policy = make_policy(self.policy, priority, self.placement or options.placement)
        bf = options.backfill if self.backfill is None else self.backfill
        return policy, replace(options, backfill=bf)


#: Baselines by name, as ``rlsched simulate --policy`` and ``rlsched compare`` know them.
BASELINES: dict[str, Baseline] = {
    "slurm": Baseline("multifactor", None,
                      "Slurm as configured: multifactor priority, backfill per SchedulerType"),
    "fifo": Baseline("fifo", True, "FIFO by eligible time, with EASY backfill"),
    "fifo-nobf": Baseline("fifo", False, "FIFO by eligible time, no backfill"),
    "sjf": Baseline("sjf", True, "shortest time limit first, with EASY backfill"),
    "sjf-nobf": Baseline("sjf", False, "shortest time limit first, no backfill"),
    "sif": Baseline("sif", True, "SCHED² SIF: shortest recorded run time first, EASY backfill",
                    oracle=True),
    "saf": Baseline("saf", True, "SCHED² SAF: shortest run time at today's placement first,"
                                 " EASY backfill", oracle=True),
    "dsif": Baseline("dsif", True, "SCHED² DSIF: SIF, delaying a job up to 3 times for its"
                                   " best leaf locality, EASY backfill", oracle=True),
    "lrf": Baseline("lrf", True, "SCHED² LRF: fewest GPUs (CPUs) first, EASY backfill"),
    "spf": Baseline("spf", True, "SCHED² SPF: smallest GPUs x run time first, EASY backfill",
                    oracle=True),
    "tetris": Baseline("tetris", True, "Tetris: alignment with free resources plus shortest"
                                       " time limit, EASY backfill"),
    "drf": Baseline("drf", True, "DRF: user with the smallest dominant (CPU) share first,"
                                 " EASY backfill"),
    "random": Baseline("random", True, "random order (seeded), EASY backfill"),
    "gandiva": Baseline("fifo", True, "FIFO + Gandiva's affinity placement, EASY backfill",
                        "gandiva"),
    "sched2-pack": Baseline("fifo", True, "FIFO + SCHED²'s packing placement, EASY backfill",
                            "pack"),
    "sef": Baseline("sef", True, "rlsched: shortest run time estimated from the user's"
                                 " history (the helper's estimate) first, EASY backfill",
                    seed=False),
    "seaf": Baseline("seaf", True, "rlsched: smallest GPUs (CPUs) x estimated run time (sef's"
                                   " estimate) first, EASY backfill", seed=False),
}


#: The baselines a learned policy is held against as "the best seed heuristic": every
#: one but rlsched's own (:attr:`Baseline.seed`), Slurm included (callers leave it out).
SEED_BASELINES: tuple[str, ...] = tuple(n for n, b in BASELINES.items() if b.seed)


def make_policy(name: str, settings: PrioritySettings | None = None,
                placement: str = "tree") -> Policy:
    """A policy from :data:`POLICIES` by name.

    Raises:
        KeyError: If the name is not registered.
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}: {sorted(POLICIES)}") from None
    return factory(settings, placement)
