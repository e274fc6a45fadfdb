"""The Gymnasium environment for learning to schedule: a thin wrapper over the stepper.

:class:`SchedEnv` drives a :class:`~trainer.sim.stepper.Stepper` (the pure decision
core in ``trainer/sim``) one decision at a time.

Decisions
    *Job phase*: action ``k < max_jobs`` starts the ``k``-th visible pending job (the
    first ``max_jobs`` pending jobs in arrival order) now; action ``max_jobs`` is
    *hold*: time runs to the next event (a completion or an arrival), which is
    processed. With ``place=False`` the job goes where Slurm's topology/tree best fit
    puts it (``trainer.sim.placement.PLACEMENTS["tree"]``, the batch simulator's
    default placement). With ``place=True`` a *placement phase* follows: action ``k``
    picks candidate node set ``k`` of
    :func:`slurm_plugin.placement.candidates` for that job (the ``phase`` entry of the
    observation says which phase it is).

Queue order (``actions="queue"``)
    The deployed policy does not start jobs: it orders the queue, and Slurm starts the
    jobs in that order while they fit, reserves nodes for the first one that does not
    (at its shadow time) and backfills the rest around it. With ``actions="queue"``
    the agent makes the same choice. At a decision every visible job is legal; a job
    that fits starts, and the first one of a partition picked that does not fit is
    *reserved*, as the batch engine's backfill reserves
    (:meth:`~trainer.sim.stepper.Stepper.reserve`: by count for whole nodes, on the
    nodes it would get at its shadow time otherwise; none beyond Slurm's default
    ``bf_window``). From then on, until time moves on, the jobs of that partition that
    do not fit are not legal, and those that fit only if they would not delay a
    reservation (:meth:`~trainer.sim.stepper.Stepper.backfill_view`; expected ends are
    compared to the second, where Slurm rounds them up to ``bf_resolution`` on its own
    clock, which an episode's shifted times do not keep). Picking jobs one at a time
    from a softmax over the legal ones samples an order of the queue (a Plackett-Luce
    order) and Slurm's walk down it, so the job scores of jobs that do not fit are
    trained too; with FIFO picks the env starts every job when the engine's FIFO with
    EASY backfill does (``tests/unit/test_env.py``). The reservations are dropped
    whenever time moves on (Slurm's next pass orders the queue again). Hold is never
    legal while a job may start (the deployed policy cannot leave resources idle on
    purpose), and moments where no job may start are skipped, as below (a reservation
    cannot change anything then). With ``bf_plan="conservative"`` every pick plans, as
    Slurm's conservative backfill plans every job of its window
    (:mod:`trainer.sim.profile`; whole-node jobs on partitions holding every node): the
    job takes the earliest start where its node count stays free for its time limit,
    given the running jobs' expected ends and the jobs picked before it; it starts if
    that is now, and is reserved then (within ``bf_window``; beyond, left unplanned)
    otherwise. Every visible job not yet picked is legal while one may start, so a job
    that fits but would delay one picked before it is reserved too; with FIFO picks the
    env starts every job when the engine's FIFO with conservative backfill does. Behind
    the starvation guard the picks follow the helper's ranking: while a job of a higher
    tier is still to be picked, only those are legal (the express lane's, starving ones
    first; then the starving ones; with ``age`` the starving ones of a tier one at a
    time, the oldest first; then the rest), so
    the plan reserves in the order the guarded ranking gives Slurm, and picks by shortest
    limit start every job when the engine's guarded ``sjf`` does. With
    the default ``actions="fits"`` only the jobs
    that fit are legal and the agent starts one of them or holds: it never reserves,
    and its scores of the jobs that do not fit are never trained.

Masks
    ``info["action_mask"]`` (bool, ``max_jobs + 1``; also :meth:`SchedEnv.action_masks`)
    allows, in the job phase, the visible jobs that fit now (enough free nodes of their
    partition; behind the starvation guard, those it lets start; with ``queue`` order,
    as above) and hold, unless holding could change nothing (no job running and none
    still to arrive) or a visible job may start and ``hold=False`` or ``queue`` order;
    in the placement phase, the
    job's candidates. An action outside the mask is rejected: by default the state does
    not change, the step earns ``-invalid_penalty`` and ``info["invalid_action"]`` says
    why; with ``invalid_action="raise"`` it raises :class:`ValueError`.

Starvation guard
    With ``starvation_limit > 0`` the episodes run behind the helper's guard, as the
    deployed policy does (:class:`trainer.evaluate.StarvationGuard`): while a visible
    job has waited longer than the limit, the legal jobs are, with ``starvation_order``
    ``age``, the oldest such job if it fits, and with ``policy`` the starving jobs that
    fit (the agent's choice among them, as the net's order ranks them there). When
    none of those can start, the other jobs that fit may start only if they end, by
    their time limit, before the oldest starving job's shadow time
    (:meth:`~trainer.sim.stepper.Stepper.shadow`): EASY backfill around its
    reservation, conservatively (Slurm also lets jobs run past the shadow time on nodes
    the reservation does not need). With ``express_limit`` (either order), while a
    visible job whose time limit is at most that fits, those are the legal jobs, before
    any starving one: the helper's express lane ranks them above every other job (the
    lane's jobs that do not fit hold no reservation here). ``job_mask`` and the action
    mask say the same. With ``queue`` order, while the guard picks the legal jobs
    (a starving job, the express lane) the agent's choice is among those, as the
    helper's order puts them first; otherwise the agent reserves as above. All of this
    is EASY's: in conservative ``queue`` order the guard ranks the picks instead, in
    tiers, and every job is planned (*Queue order* above).

Time skips ahead by itself
    Whenever no visible job fits, hold is the only legal action, so the environment
    takes it itself (as often as needed) before returning: an agent only sees moments
    where it has a real choice. Episodes get much shorter (a busy cluster spends most
    events with nothing that fits), and the reward of the skipped time is part of the
    step that led there. With ``take_forced`` the same goes for a pick that is the
    only legal action (one job may be picked and hold is not legal; not at
    :meth:`~SchedEnv.reset`): the schedule is the one those picks give, in fewer steps.

Observations
    A :class:`gymnasium.spaces.Dict` of fixed-shape arrays (padded to ``max_jobs`` jobs
    and the cluster's nodes): ``jobs`` (:data:`~slurm_plugin.features.JOB_FEATURES`),
    ``job_present`` (row holds a job), ``job_mask`` (the job fits now), ``nodes``
    (:data:`~slurm_plugin.features.NODE_FEATURES`), ``node_leaf``, ``globals``,
    ``phase`` (0 job, 1 placement), ``selected`` (the job being placed, one-hot),
    ``candidates`` (``max_candidates x nodes``) and ``candidate_mask``. The unpadded
    :class:`~slurm_plugin.features.Observation` (the same the live helper builds) is in
    ``info["observation"]`` and the :class:`~slurm_plugin.placement.Candidates` in
    ``info["candidates"]`` (``None`` in the job phase), for a policy that takes
    variable-length input. Both compare by value. A pick that reserves or plans a job
    (``queue`` order) changes neither the cluster nor the queue, so the next decision
    keeps the last observation (the same arrays) rather than featurising it again.

Episodes
    A window of ``episode_jobs`` consecutive jobs (by arrival), its first row drawn
    with ``self.np_random`` (or ``options={"start": row}``), from the job table given;
    the whole table when ``episode_jobs`` is ``None`` or not smaller. Times are shifted
    so the window's first job arrives at 0; the cluster starts empty; the user history
    starts from up to ``history_jobs`` earlier jobs that ended (as recorded: arrival +
    run) before the window. With ``warm_start`` the cluster does not start empty: the
    episode starts at the window's first arrival from the state an incumbent replay
    of the whole table had then (its waiting jobs wait, its running jobs run; see
    :attr:`EnvConfig.warm_start`). The episode terminates when every job of the window has
    finished, and is truncated after ``max_steps`` steps.

Rewards
    By name from :data:`trainer.sim.stepper.REWARDS` (``bsld`` by default: the return is
    minus the sum of the window's bounded slowdowns). ``fairness > 0`` adds, once at the
    end of the episode, ``fairness * jobs * (J - 1)``, ``J`` Jain's index of the users'
    mean bounded slowdowns over the finished jobs (0 when every user is slowed down
    alike; the same index as :func:`trainer.sim.metrics.compute`'s ``jain_bsld``),
    sized like the bsld return so a weight of about 1 makes it count. ``backlog > 0``
    adds that weight of :class:`~trainer.sim.stepper.BacklogReward` to every increment:
    minus the area-weighted wait, the work held back that lowers utilisation on a
    finite replay.
    ``stranding > 0`` adds that weight of
    :class:`~trainer.sim.stepper.StrandingReward`: minus the capacity idle while some
    job waits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces

from slurm_plugin.features import (
    GLOBAL_FEATURES,
    JOB_FEATURES,
    NODE_FEATURES,
    Normalisation,
    Observation,
)
from slurm_plugin.helper.decide import STARVATION_ORDERS, check_express_limit, in_lane
from slurm_plugin.placement import Candidates

from .sim import metrics
from .sim.engine import EngineOptions, Reservation, SimResult, Simulator, conservative_unfit
from .sim.observe import history_before
from .sim.policies import Policy
from .sim.profile import FreeProfile
from .sim.slurm import BF_PLANS, SchedulerOptions
from .sim.speed import SPEED_MODELS
from .sim.state import Cluster, JobTable, build_jobs
from .sim.stepper import REWARDS, CachedUserHistory, Stepper, make_reward, take, window
from .sim.workload import WorkloadConfig, default_cluster, generate, replay_records

__all__ = [
    "ACTIONS",
    "EnvCandidates",
    "EnvConfig",
    "EnvObservation",
    "SchedEnv",
    "from_table",
    "from_workload",
    "incumbent_times",
]

#: Backfill's window in ``queue`` order (Slurm's default, as the batch engine's
#: :class:`~trainer.sim.slurm.SchedulerOptions`).
_BF = SchedulerOptions()

#: What the agent chooses among (:attr:`EnvConfig.actions`; module docstring).
ACTIONS = ("fits", "queue")

#: Bound of the feature boxes (features are logs and shares, far inside it).
FEATURE_BOUND = 1e3


@dataclass(frozen=True)
class EnvConfig:
    """Settings of :class:`SchedEnv` (the single source of its defaults)."""

    max_jobs: int = 64
    """Pending jobs visible at a decision (the first ones in arrival order); the job
    actions are ``0..max_jobs-1``, hold is ``max_jobs``."""
    max_candidates: int = 8
    """Candidate node sets proposed in the placement phase (at most ``max_jobs + 1``)."""
    place: bool = False
    """Let the agent pick the node set of each job it starts (a second step); else
    Slurm's topology/tree best fit places it."""
    episode_jobs: int | None = 256
    """Jobs per episode: a window of consecutive jobs drawn from the table; ``None``:
    the whole table."""
    reward: str = "bsld"
    """Reward name in :data:`trainer.sim.stepper.REWARDS`: ``bsld``, ``wait``, ``jct``,
    ``util``, ``effectiveness``, ``backlog`` or ``stranding``."""
    fairness: float = 0.0
    """Weight of the end-of-episode fairness term (module docstring); 0: none."""
    backlog: float = 0.0
    """Weight of the backlog term added to the reward
    (:class:`~trainer.sim.stepper.BacklogReward`: minus the waiting jobs' areas, sized
    so that 1 weighs waiting as much in total as bsld does); 0: none."""
    stranding: float = 0.0
    """Weight of the stranding term added to the reward
    (:class:`~trainer.sim.stepper.StrandingReward`: minus the machine's idle share while
    some job waits, sized so that at 1 idle capacity the size of an average job costs
    what an average job waiting costs); 0: none."""
    speed_model: str = "none"
    """Speed model name in :data:`trainer.sim.speed.SPEED_MODELS`."""
    max_steps: int | None = None
    """Steps after which an episode is truncated; ``None``: 8 x the window's jobs (an
    episode takes at most about 4 x its jobs steps), times ``max_jobs`` in conservative
    ``queue`` order (every visible job may be picked at every moment)."""
    tau: float = 10.0
    """Bounded-slowdown threshold, s (:data:`trainer.sim.metrics.TAU`)."""
    history_jobs: int = 256
    """Earlier jobs (ended before the window starts) the user history starts from."""
    actions: str = "fits"
    """What the agent chooses among (module docstring): ``fits``, the jobs that fit now
    (and hold); ``queue``, every visible job, as an order of the queue Slurm walks with
    its backfill (a job that cannot start is reserved: :attr:`bf_plan`), as the helper
    deploys it."""
    bf_plan: str = "easy"
    """Which picked jobs ``queue`` order reserves, as the batch engine's
    :attr:`~trainer.sim.slurm.SchedulerOptions.bf_plan` (module docstring): ``easy``, the
    first one of a partition that does not fit; ``conservative``, every one that cannot
    start now without delaying a job picked before it (whole-node jobs on partitions
    holding every node only). With ``fits`` the agent reserves nothing either way."""
    hold: bool = True
    """Hold is legal while a visible job fits; ``False``: only the jobs that fit are
    (the agent is work-conserving, as the deployed policy is: it orders the queue and
    Slurm starts what fits, so it can never leave resources idle on purpose). With
    ``actions="queue"`` hold is never legal while a job may start."""
    warmup_jobs: int = 0
    """Jobs just before the window replayed first, in the same episode, so that the
    window does not start on an empty cluster (validation); the agent acts on them too,
    but ``info["episode_metrics"]`` counts the window's jobs only. 0: none."""
    starvation_limit: float = 0.0
    """The helper's starvation guard in the episodes (seconds; 0: none), so that the agent
    learns behind the guard it is deployed with (module docstring, *Starvation guard*)."""
    starvation_order: str = "age"
    """How the guard orders the starving jobs, as the helper's ``starvation_order``:
    ``age`` (oldest first) or ``policy`` (the agent's choice)."""
    express_limit: float = 0.0
    """The guard's express lane, as the helper's ``express_limit`` (seconds; 0: none;
    a guard only): while a visible job whose time limit is at most
    this fits, the legal jobs are those (module docstring, *Starvation guard*)."""
    warm_start: bool = False
    """Start each episode from the state another replay of the whole table (the
    incumbent scheduler's: :func:`incumbent_times`, given to :class:`SchedEnv`) had
    at the window's first arrival: the jobs that arrived before it and were still
    waiting wait (and are the agent's to schedule, scored from then on), those
    running run to their end on a best-fit layout (:meth:`Stepper.warm`). So
    training sees the queues and the busy cluster a deployed policy meets, not a
    window starting on an empty cluster. ``info["episode_metrics"]`` counts the
    window's jobs only. Exclusive with ``warmup_jobs``."""
    take_forced: bool = False
    """A pick of the job phase with one legal action (one job, hold not legal) is taken
    by the environment itself, as it takes a hold that is the only legal action (module
    docstring, *Time skips ahead by itself*): the agent sees only real choices. In
    conservative ``queue`` order about one step in eight is such a pick (Lublin,
    behind the guard). The schedule of an episode is the same, in fewer steps; a
    learner's discount and advantage estimates count steps, so training changes.
    ``False`` (the default): every pick is a step."""
    invalid_action: Literal["reject", "raise"] = "reject"
    """What a masked action does: ``reject`` (no change, ``-invalid_penalty``,
    ``info["invalid_action"]``) or ``raise`` (:class:`ValueError`)."""
    invalid_penalty: float = 1.0
    """Reward of a rejected action, negated."""
    frag_samples: int = 100
    """About how many fragmentation samples an episode's result takes (over the
    window's arrival span)."""

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"EnvConfig: {what}")

        need(self.max_jobs >= 1, "max_jobs must be at least 1")
        need(1 <= self.max_candidates <= self.max_jobs + 1,
             "max_candidates must lie in [1, max_jobs + 1] (one action space serves both"
             " phases)")
        need(self.episode_jobs is None or self.episode_jobs >= 1,
             "episode_jobs must be None or at least 1")
        need(self.actions in ACTIONS, f"actions must be one of {list(ACTIONS)}")
        need(self.bf_plan in BF_PLANS, f"bf_plan must be one of {list(BF_PLANS)}")
        need(self.reward in REWARDS, f"reward must be one of {sorted(REWARDS)}")
        need(self.speed_model in SPEED_MODELS,
             f"speed_model must be one of {sorted(SPEED_MODELS)}")
        need(self.max_steps is None or self.max_steps >= 1, "max_steps must be None or >= 1")
        need(self.tau > 0, "tau must be positive")
        need(self.fairness >= 0, "fairness must be >= 0")
        need(self.backlog >= 0, "backlog must be >= 0")
        need(self.stranding >= 0, "stranding must be >= 0")
        need(self.history_jobs >= 0, "history_jobs must be >= 0")
        need(self.warmup_jobs >= 0, "warmup_jobs must be >= 0")
        need(not (self.warm_start and self.warmup_jobs),
             "warm_start and warmup_jobs exclude each other: pick one")
        need(self.frag_samples >= 1, "frag_samples must be >= 1")
        need(self.starvation_limit >= 0, "starvation_limit must be >= 0 (0: no guard)")
        need(self.starvation_order in STARVATION_ORDERS,
             f"starvation_order must be one of {sorted(STARVATION_ORDERS)}")
        check_express_limit(self.express_limit, self.starvation_order,
                            self.starvation_limit)
        need(self.invalid_action in ("reject", "raise"),
             "invalid_action must be 'reject' or 'raise'")

    def to_dict(self) -> dict[str, Any]:
        """The config as a JSON-able dict."""
        return asdict(self)


# ---------------------------------------------------------------------------- info objects
def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.shape == y.shape
                    and x.dtype == y.dtype and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


@dataclass(frozen=True, eq=False)
class EnvObservation(Observation):
    """A :class:`~slurm_plugin.features.Observation` that compares by value."""

    def __eq__(self, other: object) -> bool:
        return _same(self, other) if is_dataclass(other) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of(cls, obs: Observation) -> EnvObservation:
        """The same observation (its arrays shared)."""
        return cls(**{f.name: getattr(obs, f.name) for f in fields(obs)})


@dataclass(frozen=True, eq=False)
class EnvCandidates(Candidates):
    """:class:`~slurm_plugin.placement.Candidates` that compare by value."""

    def __eq__(self, other: object) -> bool:
        return _same(self, other) if is_dataclass(other) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of(cls, c: Candidates) -> EnvCandidates:
        """The same candidates (arrays shared)."""
        return cls(sets=c.sets, kinds=c.kinds, leaves=c.leaves)


# ---------------------------------------------------------------------------- environment
class SchedEnv(gymnasium.Env[dict[str, Any], np.int64]):
    """Pick the next job to start (and optionally its nodes), or hold (module docstring).

    Args:
        jobs: The job table episodes are drawn from.
        cluster: The cluster.
        config: Settings; default :class:`EnvConfig`.
        norm: Feature normalisation.
        incumbent: ``(start, end)`` per job of ``jobs`` in a replay of the whole table
            (:func:`incumbent_times`); needed by ``config.warm_start``.

    Raises:
        ValueError: If the table is empty, or ``warm_start`` lacks a matching
            ``incumbent``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, jobs: JobTable, cluster: Cluster, config: EnvConfig | None = None,
                 norm: Normalisation | None = None,
                 incumbent: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        super().__init__()
        if jobs.n == 0:
            raise ValueError("the job table is empty: nothing to schedule")
        self.jobs = jobs
        self.cluster = cluster
        self.config = cfg = config or EnvConfig()
        if cfg.warm_start and (incumbent is None or len(incumbent[0]) != jobs.n
                               or len(incumbent[1]) != jobs.n):
            raise ValueError("warm_start needs the incumbent's (start, end) per job of the"
                             " table: incumbent_times(jobs, cluster, ...)")
        self._incumbent = incumbent
        if cfg.bf_plan == "conservative":
            why = conservative_unfit(jobs, cluster)
            if why is not None:
                raise ValueError(f"bf_plan 'conservative': {why}; use 'easy'")
        self._conservative = cfg.bf_plan == "conservative" and cfg.actions == "queue"
        self.norm = norm or Normalisation()
        self.reward_fn = make_reward(cfg.reward, jobs, cluster, cfg.tau, backlog=cfg.backlog,
                                     stranding=cfg.stranding)
        n_nodes = cluster.num_nodes
        mj, mc = cfg.max_jobs, cfg.max_candidates
        b = FEATURE_BOUND
        self.action_space = spaces.Discrete(mj + 1)
        self.observation_space = spaces.Dict({
            "jobs": spaces.Box(-b, b, (mj, len(JOB_FEATURES)), np.float32),
            "job_present": spaces.MultiBinary(mj),
            "job_mask": spaces.MultiBinary(mj),
            "nodes": spaces.Box(-b, b, (n_nodes, len(NODE_FEATURES)), np.float32),
            "node_leaf": spaces.Box(0, max(0, cluster.num_leaves - 1), (n_nodes,), np.int64),
            "globals": spaces.Box(-b, b, (len(GLOBAL_FEATURES),), np.float32),
            "phase": spaces.Discrete(2),
            "selected": spaces.MultiBinary(mj),
            "candidates": spaces.MultiBinary((mc, n_nodes)),
            "candidate_mask": spaces.MultiBinary(mc),
        })
        self._node_leaf = cluster.leaf_of.astype(np.int64)
        self._stepper: Stepper | None = None
        self._rows = np.zeros(0, dtype=np.int64)
        self._legal = np.zeros(0, dtype=bool)
        self._fit_now = np.zeros(0, dtype=bool)
        #: the visible jobs that may start now (queue order: the rest are reserved if picked)
        self._may = np.zeros(0, dtype=bool)
        self._resv: list[Reservation] = []
        self._resv_parts: set[int] = set()
        #: per action index, where that job may start under the reservations (queue order)
        self._views: dict[int, tuple[np.ndarray, tuple[Reservation, ...]]] = {}
        self._view: tuple[Reservation, ...] = ()
        #: conservative ``queue`` order: the plan of this moment, and the rows picked
        #: that could not start (reserved, or left unplanned beyond the window)
        self._profile: FreeProfile | None = None
        self._planned: set[int] = set()
        self._obs: Observation | None = None
        self._phase = 0
        self._selected = -1
        self._cands: Candidates | None = None
        self._steps = 0
        self._over = True
        self._window_jobs = 0
        self._warm = 0
        self._max_steps = 0

    # ------------------------------------------------------------------ properties
    @property
    def stepper(self) -> Stepper:
        """The decision core of the current episode.

        Raises:
            RuntimeError: Before the first :meth:`reset`.
        """
        if self._stepper is None:
            raise RuntimeError("call reset() first")
        return self._stepper

    @property
    def rows(self) -> np.ndarray:
        """Rows (of the episode's job table) of the visible pending jobs, by action index."""
        return self._rows.copy()

    def action_masks(self) -> np.ndarray:
        """The legal actions now (as ``info["action_mask"]``)."""
        cfg = self.config
        mask = np.zeros(cfg.max_jobs + 1, dtype=bool)
        if self._over:
            return mask
        if self._phase == 1:
            assert self._cands is not None
            mask[:len(self._cands)] = True
        else:
            mask[:self._rows.size] = self._legal
            mask[cfg.max_jobs] = self.stepper.can_advance and (
                (cfg.hold and cfg.actions == "fits") or not bool(self._legal.any()))
        return mask

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode on a window of jobs (module docstring).

        Options:
            start: First row of the window (instead of a random one).

        Raises:
            ValueError: If ``options["start"]`` leaves no full window.
        """
        super().reset(seed=seed)
        cfg = self.config
        n = self.jobs.n
        size = n if cfg.episode_jobs is None else min(cfg.episode_jobs, n)
        if options and "start" in options:
            lo = int(options["start"])
            if not 0 <= lo <= n - size:
                raise ValueError(f"options['start'] must lie in [0, {n - size}]")
        else:
            lo = int(self.np_random.integers(0, n - size + 1))
        running: list[tuple[int, int, int]] | None = None
        if cfg.warm_start and lo > 0:
            assert self._incumbent is not None
            s_inc, e_inc = self._incumbent
            t0 = int(self.jobs.eligible[lo])
            prior = np.flatnonzero(e_inc[:lo] >= t0)  # still in the system at t0
            warm, hist_lo = int(prior.size), lo
            jobs = take(self.jobs, np.concatenate((prior, np.arange(lo, lo + size))), t0)
            running = [(k, int(s_inc[r]) - t0, int(e_inc[r]) - t0)
                       for k, r in enumerate(prior.tolist()) if s_inc[r] < t0]
        else:
            warm = min(cfg.warmup_jobs, lo)  # rows before the window, replayed first
            hist_lo = lo - warm
            jobs = window(self.jobs, hist_lo, lo + size)
        self._stepper = Stepper(jobs, self.cluster, cfg.speed_model, reward=self.reward_fn,
                                history=self._history(hist_lo), norm=self.norm,
                                samples=cfg.frag_samples)
        if running is not None:
            self._stepper.warm(0, running)
        self._warm = warm
        self._window_jobs = size + warm
        self._max_steps = (cfg.max_steps if cfg.max_steps is not None
                           else 8 * (size + warm) * (cfg.max_jobs if self._conservative else 1))
        self._steps = 0
        self._over = False
        self._phase = 0
        self._cands = None
        self._selected = -1
        self._resv, self._resv_parts = [], set()
        self._profile, self._planned = None, set()
        self._refresh(take=False)
        self.stepper.pop_reward()  # nothing accrues before the first arrival
        return self._observe(), self._info()

    def _history(self, lo: int) -> CachedUserHistory:
        """The user history before row ``lo``: earlier jobs that ended by its arrival."""
        hist = CachedUserHistory(self.norm)
        history_before(hist, self.jobs, self.cluster, lo, self.config.history_jobs,
                       relative=True)
        return hist

    def _advance(self) -> None:
        """Run time to the next event; a reservation ends with the pass it was made in."""
        self.stepper.advance()
        self._resv, self._resv_parts = [], set()
        self._profile, self._planned = None, set()

    def _refresh(self, same: bool = False, take: bool = True) -> None:
        """Skip ahead while no visible job may start; then observe the decision.

        ``same``: the last action left the cluster and the queue as they were (a pick
        that reserved or planned a job), so the visible jobs, which of them fit and the
        observation are those of the last decision, until time moves on; only which
        jobs are legal changed. With ``take_forced`` (and ``take``), a pick with one
        legal action is taken here (:meth:`_pick`), as often as needed; not at
        :meth:`reset`, so that an episode's first decision is always the agent's and the
        reward of every pick is part of a step.
        """
        st = self.stepper
        mj = self.config.max_jobs
        stale = not same  # the last observation no longer describes the state
        while True:
            if same:
                rows, fit_now = self._rows, self._fit_now
            else:
                rows = st.visible(mj)
                fit_now = st.fits(rows)
                stale = True
            start, legal = self._legal_jobs(rows, fit_now)
            if not (start.any() or not st.can_advance):
                self._advance()
                same = False
                continue
            self._rows, self._legal, self._fit_now, self._may = rows, legal, fit_now, start
            if not (take and self._forced()):
                break
            same = self._pick(int(np.flatnonzero(legal)[0]))
            if self._phase == 1:  # the agent places it
                break
        if stale:
            self._obs = st.observation(mj) if not st.done else None

    def _forced(self) -> bool:
        """With ``take_forced``: the job phase has one legal action, a job (not hold)."""
        if not self.config.take_forced or self._phase != 0 or self.stepper.done:
            return False
        legal = self.action_masks()
        return bool(legal.sum() == 1 and not legal[self.config.max_jobs])

    def _legal_jobs(self, rows: np.ndarray, fits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(may start now, legal to pick)`` among the visible jobs (module docstring)."""
        self._views = {}
        if self._conservative:
            return self._planned_jobs(rows, fits)
        guarded = self._guarded(rows, fits)
        if guarded is not None:
            return guarded, guarded
        if self.config.actions == "fits":
            return fits, fits
        start = fits
        if self._resv:
            st = self.stepper
            start = fits.copy()
            for k in np.flatnonzero(fits).tolist():
                found = st.backfill_view(int(rows[k]), self._resv)
                start[k] = found is not None
                if found is not None:
                    self._views[k] = found
        if not start.any():
            return start, start
        # a job that does not fit may be picked while its partition has no reservation
        open_part = ~np.isin(self.stepper.jobs.part[rows], list(self._resv_parts))
        return start, start | (~fits & open_part)

    def _planned_jobs(self, rows: np.ndarray, fits: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Conservative ``queue`` order: ``(may start now, legal to pick)``.

        A job not yet picked may start now if the plan of this moment (running jobs, and
        the jobs picked before it reserved) keeps its node count free for its time limit
        from now. While one may, the legal jobs are those not yet picked of the first of
        the guard's tiers that has any (:meth:`_tiers`).
        """
        st = self.stepper
        if self._profile is None:
            self._profile = st.free_profile()
        left = ~np.isin(rows, list(self._planned))
        start = left & fits & self._profile.starts_now(st.jobs.nodes[rows],
                                                        st.jobs.limit[rows])
        if not start.any():
            return start, start
        for tier in self._tiers(rows, left):
            pick = tier & left
            if pick.any():
                return start, pick
        return start, left

    def _tiers(self, rows: np.ndarray, left: np.ndarray) -> list[np.ndarray]:
        """The starvation guard's tiers, highest first, as the helper ranks the queue.

        The express lane's jobs (starving ones first), then the starving ones; with
        ``starvation_order`` ``age`` the starving ones of each tier one at a time, the
        oldest first (Slurm's age factor orders them). The rest of the visible jobs come
        after them all. None without a guard. ``left``: the visible jobs not yet picked.
        """
        cfg = self.config
        if cfg.starvation_limit <= 0 or not rows.size:
            return []
        st = self.stepper
        starving = self._starving(rows)
        lane = (in_lane(st.jobs.limit[rows], cfg.express_limit) if cfg.express_limit > 0
                else np.zeros_like(starving))
        if cfg.starvation_order == "age":
            return [_oldest(lane & starving & left), lane, _oldest(starving & left)]
        return [lane & starving, lane, starving]

    def _starving(self, rows: np.ndarray) -> np.ndarray:
        """Which visible jobs have waited longer than the guard's limit."""
        st = self.stepper
        out: np.ndarray = (st.now - st.jobs.eligible[rows]) > self.config.starvation_limit
        return out

    def _plan(self, row: int, now: bool) -> None:
        """Conservative ``queue`` order: take picked job ``row``'s span from the plan.

        From now if it starts now; else from its earliest start, if that lies within
        ``bf_window`` (beyond, it is left unplanned, as Slurm leaves it).
        """
        st = self.stepper
        assert self._profile is not None  # (made by _planned_jobs, before any pick)
        n, span = int(st.jobs.nodes[row]), int(st.jobs.limit[row])
        at = st.now if now else self._profile.earliest(n, span)
        if not now:
            self._planned.add(row)
        if at is not None and at - st.now <= _BF.bf_window:
            self._profile.take(at, at + span, n)

    def _guarded(self, rows: np.ndarray, fits: np.ndarray) -> np.ndarray | None:
        """The visible jobs the starvation guard lets start now (module docstring).

        ``None`` while it lets every job that fits.
        """
        cfg = self.config
        if cfg.starvation_limit <= 0 or not rows.size:
            return None
        st = self.stepper
        if cfg.express_limit > 0:
            quick: np.ndarray = fits & in_lane(st.jobs.limit[rows], cfg.express_limit)
            if quick.any():
                return quick
        starving = self._starving(rows)
        if not starving.any():
            return None
        head = int(np.flatnonzero(starving)[0])  # the oldest (rows are in arrival order)
        out: np.ndarray
        if cfg.starvation_order == "age":
            if fits[head]:
                out = np.zeros_like(fits)
                out[head] = True
                return out
        elif (starving & fits).any():
            out = starving & fits
            return out
        shadow = st.shadow(int(rows[head]))
        ends = st.now + st.jobs.limit[rows].astype(np.int64)
        out = fits & (ends <= shadow)
        return out

    # ------------------------------------------------------------------ step
    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Take one decision (module docstring).

        Raises:
            RuntimeError: If the episode is over (call :meth:`reset`).
            ValueError: On a masked action with ``invalid_action="raise"``.
        """
        if self._over:
            raise RuntimeError("the episode is over: call reset()")
        cfg = self.config
        st = self.stepper
        self._steps += 1
        a = int(action)
        mask = self.action_masks()
        invalid = None
        if not 0 <= a < mask.size:
            invalid = f"action {a} is outside [0, {mask.size})"
        elif not mask[a]:
            invalid = self._why(a)
        reward = 0.0
        if invalid is not None:
            if cfg.invalid_action == "raise":
                raise ValueError(f"masked action: {invalid} (see info['action_mask'])")
            reward = -cfg.invalid_penalty
        elif self._phase == 1:
            assert self._cands is not None
            row = int(self._rows[self._selected])
            st.start(row, self._cands.nodes(a), self._view)
            self._phase, self._cands, self._selected = 0, None, -1
            self._refresh()
        elif a == cfg.max_jobs:
            self._advance()
            self._refresh()
        else:
            same = self._pick(a)
            if self._phase == 0:
                self._refresh(same)
        reward += st.pop_reward()
        terminated = st.done
        truncated = not terminated and self._steps >= self._max_steps
        if terminated or truncated:
            self._over = True
            if cfg.fairness:
                reward += cfg.fairness * self._window_jobs * (st.fairness() - 1.0)
        info = self._info()
        if invalid is not None:
            info["invalid_action"] = invalid
        if terminated:
            info["episode_metrics"] = self._episode_metrics()
        return self._observe(), float(reward), terminated, truncated, info

    def _pick(self, a: int) -> bool:
        """Carry out legal job action ``a`` of the job phase (module docstring).

        Returns whether the cluster and the queue are as they were (the job was reserved
        or planned later, not started). With ``place`` and a job that may start, the
        placement phase follows instead (its candidates are set).
        """
        cfg = self.config
        st = self.stepper
        row = int(self._rows[a])
        if self._conservative and not self._may[a]:
            self._plan(row, now=False)
            return True
        if not self._fit_now[a]:  # queue order: its partition's first blocked job
            r = st.reserve(row, _BF.bf_window)
            self._resv_parts.add(int(st.jobs.part[row]))
            if r is not None:
                self._resv.append(r)
            return True
        if self._conservative:
            self._plan(row, now=True)
        usable, self._view = self._views.get(a, (None, ()))
        if cfg.place:
            self._cands = st.candidates(row, cfg.max_candidates, usable)
            self._phase, self._selected = 1, a
        else:
            nodes = st.best_fit(row, usable)
            assert nodes is not None  # it may start: the mask said so
            st.start(row, nodes, self._view)
        return False

    def _why(self, a: int) -> str:
        mj = self.config.max_jobs
        if self._phase == 1:
            k = len(self._cands) if self._cands is not None else 0
            return f"placement phase: action {a} is not one of the {k} candidates"
        if a == mj:
            return "hold: no job is running and none is still to arrive"
        if a >= self._rows.size:
            return f"job {a}: only {self._rows.size} jobs are pending"
        row = int(self._rows[a])
        jid = int(self.stepper.jobs.job_id[row])
        if row in self._planned:
            return (f"job {a} (job id {jid}) was picked at this moment already and could not"
                    " start (conservative backfill planned it later)")
        if self._conservative:
            return (f"job {a} (job id {jid}) ranks below a job the starvation guard lifts"
                    " (express lane or starving) that is still to be picked")
        if self._fit_now[a]:
            return (f"job {a} (job id {jid}) fits now but would delay a reserved job"
                    " (EASY backfill) or the starvation guard's")
        if self.config.actions == "queue":
            return (f"job {a} (job id {jid}) does not fit now and its partition already"
                    " has a reserved job")
        return f"job {a} (job id {jid}) does not fit now"

    # ------------------------------------------------------------------ output
    def _observe(self) -> dict[str, Any]:
        cfg = self.config
        mj, mc = cfg.max_jobs, cfg.max_candidates
        n_nodes = self.cluster.num_nodes
        b = FEATURE_BOUND
        jobs = np.zeros((mj, len(JOB_FEATURES)), dtype=np.float32)
        present = np.zeros(mj, dtype=np.int8)
        job_mask = np.zeros(mj, dtype=np.int8)
        selected = np.zeros(mj, dtype=np.int8)
        cands = np.zeros((mc, n_nodes), dtype=np.int8)
        cmask = np.zeros(mc, dtype=np.int8)
        obs = self._obs
        if obs is not None:
            k = obs.n_jobs
            np.clip(obs.jobs, -b, b, out=jobs[:k])
            present[:k] = 1
            job_mask[:k] = self._legal
            nodes = np.clip(obs.nodes, -b, b)
            glob = np.clip(obs.globals, -b, b)
        else:  # the episode is over: no pending job, an empty cluster
            nodes = np.zeros((n_nodes, len(NODE_FEATURES)), dtype=np.float32)
            glob = np.zeros(len(GLOBAL_FEATURES), dtype=np.float32)
        if self._phase == 1 and self._cands is not None:
            selected[self._selected] = 1
            kc = len(self._cands)
            cands[:kc] = self._cands.sets
            cmask[:kc] = 1
        return {
            "jobs": jobs, "job_present": present, "job_mask": job_mask,
            "nodes": nodes.astype(np.float32, copy=False),
            "node_leaf": self._node_leaf.copy(),
            "globals": glob.astype(np.float32, copy=False),
            "phase": np.int64(self._phase), "selected": selected,
            "candidates": cands, "candidate_mask": cmask,
        }

    def _info(self) -> dict[str, Any]:
        st = self.stepper
        return {
            "observation": EnvObservation.of(self._obs) if self._obs is not None else None,
            "candidates": EnvCandidates.of(self._cands) if self._cands is not None else None,
            "action_mask": self.action_masks(),
            "phase": self._phase,
            "now": st.now,
            "rows": self._rows.copy(),
        }

    def _episode_metrics(self) -> dict[str, float]:
        res = self.stepper.result()
        w = self._warm  # warm-up rows lead the window (arrival order): not counted
        pj = {k: v[w:] for k, v in metrics.job_metrics(res).items()}
        return {
            "jobs": float(res.jobs.n - w),
            "bsld_mean": float(pj["bsld"].mean()),
            "wait_mean": float(pj["wait"].mean()),
            "wait_p99": metrics.summary(pj["wait"])["p99"],
            "jct_mean": float(pj["jct"].mean()),
            "effectiveness_mean": float(pj["effectiveness"].mean()),
            "jain_bsld": self.stepper.fairness(),
            "makespan": float(res.end[w:].max() - res.jobs.eligible[w:].min()),
            "reward_sum": self.stepper.total_reward,
        }

    def result(self) -> SimResult:
        """The finished episode as a :class:`~trainer.sim.engine.SimResult` (for metrics).

        Raises:
            RuntimeError: If the episode's jobs have not all finished.
        """
        return self.stepper.result()


# ---------------------------------------------------------------------------- constructors
def _oldest(mask: np.ndarray) -> np.ndarray:
    """The first job of ``mask`` only (visible rows are in arrival order: the oldest)."""
    out = np.zeros_like(mask)
    if mask.any():
        out[int(np.flatnonzero(mask)[0])] = True
    return out


def incumbent_times(jobs: JobTable, cluster: Cluster, policy: Policy,
                    options: SchedulerOptions, speed_model: str = "none", seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` per job of a batch replay of the whole table (a warm start's source).

    The replay of :class:`~trainer.sim.engine.Simulator` under ``policy`` (the site's
    scheduler: the ``slurm`` baseline) with ``options`` and the speed model, as
    :attr:`EnvConfig.warm_start` reads it.
    """
    r = Simulator(jobs, cluster, policy, options,
                  EngineOptions(seed=seed, speed_model=speed_model)).run()
    return r.start.copy(), r.end.copy()


def from_table(jobs: JobTable, cluster: Cluster, env_config: EnvConfig | None = None,
               norm: Normalisation | None = None) -> SchedEnv:
    """An environment over an existing job table (a trace or the job store)."""
    return SchedEnv(jobs, cluster, env_config, norm)


def from_workload(config: WorkloadConfig | None = None, env_config: EnvConfig | None = None,
                  norm: Normalisation | None = None) -> SchedEnv:
    """An environment over a synthetic workload on its default cluster."""
    wc = config or WorkloadConfig()
    spec = default_cluster(wc)
    cluster = Cluster.from_spec(spec)
    jobs = build_jobs(replay_records(generate(wc), spec), cluster)
    return SchedEnv(jobs, cluster, env_config, norm)
