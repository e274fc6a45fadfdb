"""Configuration of RL training: the loop's :class:`TrainConfig` and each algorithm's own.

Every dataclass here is the single source of its defaults, with one docstring per
field; the resolved configs are written as ``config.json`` next to what a run produced.
:func:`parse_overrides` turns ``KEY=VALUE`` strings (the CLI's ``--algo-opt``) into
typed field values of an algorithm's config.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, TypeVar

from slurm_plugin.helper.decide import (
    SiteFactorRule,
    check_express_limit,
    check_score_resolution,
    check_starvation_order,
)

from ..bounds import DEFAULT_UTIL_SLACK
from ..env import EnvConfig

__all__ = [
    "A2CConfig",
    "AUTO_WARMUP",
    "AlgoConfig",
    "CEMConfig",
    "DQNConfig",
    "EVAL_WARMUP",
    "GREEDY_WARMUP_JOBS",
    "PPOConfig",
    "ReinforceConfig",
    "TrainConfig",
    "VAL_METRICS",
    "parse_overrides",
]

#: ``TrainConfig.val_warmup``: the warm-up ``rlsched evaluate`` and ``tune-guard`` replay.
EVAL_WARMUP = "eval"
#: ``TrainConfig.val_warmup``'s default: :data:`EVAL_WARMUP` when the net is validated as
#: deployed (``val_deployed``), else :data:`GREEDY_WARMUP_JOBS` jobs.
AUTO_WARMUP = "auto"
#: The warm-up jobs of a greedy (env) validation by default (``val_warmup`` ``"auto"``).
GREEDY_WARMUP_JOBS = 500

#: Validation metrics (keys of the env's ``episode_metrics``) and whether lower is better.
VAL_METRICS: dict[str, bool] = {
    "bsld_mean": True,
    "wait_mean": True,
    "wait_p99": True,
    "jct_mean": True,
    "effectiveness_mean": False,
    "jain_bsld": False,
    "reward_sum": False,
}


def _need(ok: bool, cls: str, what: str) -> None:
    if not ok:
        raise ValueError(f"{cls}: {what}")


@dataclass(frozen=True)
class TrainConfig:
    """Settings of the training loop, shared by every algorithm."""

    algo: str = "ppo"
    """Algorithm name in :data:`trainer.rl.ALGORITHMS`."""
    budget_steps: int | None = 100_000
    """Stop after this many env steps (decisions) in training episodes; ``None``: no
    step budget. Checked after each update, so a run may overshoot by one update."""
    budget_updates: int | None = None
    """Stop after this many updates (an update = one round of rollouts and learning)."""
    max_seconds: float | None = None
    """Stop after this much wall time (s). Not reproducible: prefer step budgets."""
    seed: int = 0
    """Seed of the initial weights (without ``--init``), the windows and the action
    draws: the same data, config and seed give identical weights."""
    hidden: int = 64
    """Width of a freshly initialised net (ignored with initial weights)."""
    train_share: float = 0.7
    """Share of the jobs (first by arrival) training windows are drawn from."""
    val_share: float = 0.1
    """Share of the jobs after them: the validation period (the rest, the test period,
    is never loaded)."""
    episode_jobs: int = 256
    """Jobs per training episode (a window of consecutive jobs)."""
    val_jobs: int | None = 1000
    """Jobs of the validation episode: the first of the validation period; ``None``:
    all of it."""
    val_warmup: int | str = AUTO_WARMUP
    """Jobs just before the validation period (the end of the training period) replayed
    first in the validation episode, so that it does not start on an empty cluster
    (where every policy scores a bounded slowdown near 1); its metrics count the
    validation jobs only. ``"eval"``: as many as ``rlsched evaluate`` replays before the
    test period and ``tune-guard`` before each validation window (10% of the jobs,
    ``EvalConfig.warmup``), so that the choice reads as full a queue as the test.
    ``"auto"`` (the default): ``"eval"`` with ``val_deployed``, else 500 jobs
    (:meth:`val_warmup_rule`). On Lublin's overloaded history 500 warm-up jobs met a
    far emptier queue than the test period's (Slurm's mean bsld on the validation
    period 181 against 828 after evaluate's 1,000), and the deployed choice did not
    predict the test order; with ``"eval"`` it did, in seven runs of seven."""
    max_jobs: int = 64
    """Pending jobs the policy sees at a decision (the env's ``max_jobs``)."""
    place: bool = False
    """Let the policy pick node sets too (the env's placement phase)."""
    max_candidates: int = 8
    """Candidate node sets per placement."""
    reward: str = "bsld"
    """Reward name in :data:`trainer.sim.stepper.REWARDS`."""
    actions: str = "fits"
    """What the agent chooses among (the env's ``actions``): ``fits``, the jobs that fit
    now (or hold); ``queue``, every visible job, an order of the queue Slurm walks with
    EASY backfill, as the helper deploys it."""
    hold: bool = True
    """The agent may hold while a job fits (the env's ``hold``); ``False`` trains a
    work-conserving agent, as the deployed policy is (it orders the queue, Slurm starts
    what fits)."""
    take_forced: bool = False
    """The env takes every pick that is the only legal action itself (the env's
    ``take_forced``): the same schedules in fewer steps, about one in eight fewer in
    conservative ``queue`` order; the discount counts steps, so training changes."""
    warm_start: bool = False
    """Training episodes start from the state the Slurm baseline's replay of the
    whole table had at the window's first arrival (its queue and running jobs: the
    env's ``warm_start``) instead of an empty cluster; validation is unchanged."""
    fairness: float = 0.0
    """Weight of the env's end-of-episode fairness term."""
    backlog: float = 0.0
    """Weight of the env's backlog term (minus the area-weighted wait) added to the
    reward; 0: none."""
    stranding: float = 0.0
    """Weight of the env's stranding term (minus the machine's idle share while some
    job waits) added to the reward; 0: none."""
    speed_model: str = "none"
    """Speed model name in :data:`trainer.sim.speed.SPEED_MODELS`."""
    max_steps: int | None = None
    """Steps after which an episode is truncated (``None``: the env's default)."""
    reward_scale: float | None = None
    """Rewards are multiplied by this before learning; ``None``: fixed at the first
    update to one over the standard deviation of the discounted returns seen then."""
    eval_every: int = 5
    """Updates between validations (greedy policy on the validation window)."""
    checkpoint_every: int = 10
    """Updates between saves of the resumable training state (and at the end)."""
    keep_checkpoints: bool = False
    """Also save the net of every validation, ``checkpoints/update-NNNNN.pt`` with its
    validation figures, so that any checkpoint can be evaluated or chosen later (about
    0.3 MB each at the default width); ``best.pt`` and ``last.pt`` are saved anyway."""
    ensemble: int = 0
    """Also write ``ensemble.pt``: the :class:`~trainer.policy.PolicyEnsemble` of the
    ``ensemble`` checkpoints after the start that validated best, in the order that picks
    ``best.pt`` (:func:`trainer.rl.trainer.ensemble_members`; fewer if fewer were
    validated). Their nets are kept as with ``keep_checkpoints``. 0: none."""
    val_metric: str = "bsld_mean"
    """Episode metric that picks the best checkpoint (:data:`VAL_METRICS`)."""
    val_deployed: bool = False
    """Validate the net as deployed (it orders the queue of the batch engine, with EASY
    backfill: :func:`trainer.rl.report.deployed_metrics`) instead of greedy in the env
    (where it picks which fitting job starts): the best checkpoint is then the best
    deployed one. Costs an engine replay of the validation window per validation."""
    val_bounds: bool = False
    """With ``val_deployed``: a checkpoint that keeps the Slurm baseline's bounds on the
    validation window beats one that does not, in the order ``rlsched tune-guard`` keeps
    them (:data:`trainer.bounds.SLURM_BOUNDS`): the p99 wait at most ``val_p99_slack``
    above Slurm's, then the mean bounded slowdown not above Slurm's, then the
    utilisation not lower than Slurm's less ``val_util_slack``; among checkpoints alike,
    the better ``val_metric`` wins."""
    val_p99_slack: float = 0.10
    """The p99 bound of ``val_bounds``: this share above Slurm's p99 wait."""
    val_util_slack: float = DEFAULT_UTIL_SLACK
    """The utilisation bound of ``val_bounds``: this share below Slurm's utilisation
    still keeps it (``tune-guard``'s ``--util-slack`` default; 0: not lower, as the
    quality target reads it)."""
    rank_all: bool = True
    """How the deployed validation ranks the queue, as the helper's ``rank_all``: every
    job by its raw score, or (``False``) the jobs that fit now first."""
    starvation_limit: float = SiteFactorRule.starvation_limit
    """The helper's starvation guard in the deployed validation (seconds of waiting
    after which a job goes first, as ``rlsched evaluate``; 0: none), and with
    ``train_guard`` in the env's episodes too."""
    starvation_order: str = SiteFactorRule.starvation_order
    """How that guard orders the starving jobs, as the helper's ``starvation_order``:
    ``age`` (oldest first) or ``policy`` (the net's order)."""
    express_limit: float = 0.0
    """The guard's express lane, as the helper's ``express_limit`` (seconds; 0: none):
    in the deployed validation, and with ``train_guard`` in the env's episodes, a job
    whose time limit is at most this goes above every other, starving ones included.
    Needs a guard (either order)."""
    score_resolution: float = 0.0
    """The deployed validation rounds the net's scores to multiples of this, as the
    helper's ``score_resolution`` (jobs scored that close tie, the older first); 0:
    exact scores."""
    rescore: float = 15.0
    """Seconds between the net's re-rankings of the whole queue in the deployed
    validation, as the helper's ``interval`` (default 15 s, the helper's default:
    :data:`trainer.policy.HELPER_CYCLE`)."""
    train_guard: bool = False
    """Put that guard in the env too (training and env validation episodes:
    :attr:`trainer.env.EnvConfig.starvation_limit`), so that the agent learns behind
    the guard it is deployed with; default off (the env without a guard)."""
    references: tuple[str, ...] = ("sjf", "fifo", "random")
    """Heuristic agents (:data:`trainer.rl.acting.AGENTS`) run once on the validation
    window, for the curves and the summary."""
    workers: int = 1
    """Rollout processes: 1 runs rollouts in the trainer's process; N > 1 starts N
    local worker processes (or N Ray actors with ``ray_address``)."""
    group: int = 4
    """Episodes a worker runs in lockstep with batched inference. Fixes how tasks are
    grouped, so results do not depend on the number of workers."""
    ray_address: str | None = None
    """Address of a Ray cluster (``auto``, ``ray://host:10001``...) to run the workers
    as Ray actors; needs ``pip install 'rlsched[dist]'``."""
    threads: int | None = 1
    """torch CPU threads of the trainer's process (``None``: torch's default); workers
    always use one."""
    progress: bool | None = None
    """Show a progress bar (``None``: when stderr is a terminal)."""

    def __post_init__(self) -> None:
        c = "TrainConfig"
        _need(self.budget_steps is None or self.budget_steps >= 1, c, "budget_steps >= 1")
        _need(self.budget_updates is None or self.budget_updates >= 1, c,
              "budget_updates >= 1")
        _need(self.max_seconds is None or self.max_seconds > 0, c, "max_seconds > 0")
        _need(self.budget_steps is not None or self.budget_updates is not None
              or self.max_seconds is not None, c, "give at least one budget")
        _need(0 < self.train_share < 1 and 0 < self.val_share < 1
              and self.train_share + self.val_share <= 1, c,
              "0 < train_share, 0 < val_share, train_share + val_share <= 1")
        _need(self.episode_jobs >= 1 and (self.val_jobs is None or self.val_jobs >= 1), c,
              "episode_jobs and val_jobs must be >= 1")
        _need(self.val_warmup in (AUTO_WARMUP, EVAL_WARMUP)
              or (isinstance(self.val_warmup, int) and self.val_warmup >= 0), c,
              f"val_warmup must be an integer >= 0, {EVAL_WARMUP!r} or {AUTO_WARMUP!r}")
        _need(self.eval_every >= 1 and self.checkpoint_every >= 1, c,
              "eval_every and checkpoint_every must be >= 1")
        _need(self.val_metric in VAL_METRICS, c, f"val_metric must be one of {list(VAL_METRICS)}")
        _need(self.ensemble >= 0, c, f"ensemble must be >= 0 (0: none), not {self.ensemble}")
        _need(not (self.val_deployed and self.val_metric == "reward_sum"), c,
              "val_deployed has no reward_sum: pick another val_metric")
        _need(not self.val_bounds or self.val_deployed, c,
              "val_bounds needs val_deployed (the bounds are read in the batch engine)")
        _need(self.val_p99_slack >= 0, c, "val_p99_slack must be >= 0")
        _need(0 <= self.val_util_slack < 1, c, "0 <= val_util_slack < 1")
        _need(self.workers >= 1 and self.group >= 1, c, "workers and group must be >= 1")
        _need(self.hidden >= 1, c, "hidden must be >= 1")
        check_starvation_order(self.starvation_order)
        check_express_limit(self.express_limit, self.starvation_order, self.starvation_limit)
        check_score_resolution(self.score_resolution)
        _need(self.rescore >= 1, c, f"rescore must be at least 1 s, not {self.rescore}")
        _need(self.reward_scale is None or self.reward_scale > 0, c, "reward_scale > 0")
        _need(self.threads is None or self.threads >= 1, c, "threads must be >= 1")
        from .acting import AGENTS
        from .algorithms import ALGORITHMS

        _need(self.algo in ALGORITHMS, c, f"algo must be one of {sorted(ALGORITHMS)}")
        bad = [a for a in self.references if a not in AGENTS]
        _need(not bad, c, f"unknown reference agents {bad}: {sorted(AGENTS)}")
        self._env_configs(0)  # validates the env settings (without importing evaluate)

    def val_warmup_rule(self) -> int | str:
        """``val_warmup`` in effect.

        ``"auto"`` is ``"eval"`` with ``val_deployed``, else :data:`GREEDY_WARMUP_JOBS`;
        a number or ``"eval"`` as given.
        """
        if self.val_warmup == AUTO_WARMUP:
            return EVAL_WARMUP if self.val_deployed else GREEDY_WARMUP_JOBS
        return self.val_warmup

    def val_warmup_jobs(self, n_jobs: int) -> int:
        """The warm-up jobs of the validation episode on a history of ``n_jobs`` jobs.

        ``"eval"`` (:meth:`val_warmup_rule`): as many as :func:`trainer.evaluate.evaluate`
        replays before the test period of the same jobs (and ``tune-guard`` before each
        validation window); a number: that many.
        """
        rule = self.val_warmup_rule()
        if rule == EVAL_WARMUP:
            from ..evaluate import EvalConfig  # (heavy: only when asked)

            return EvalConfig().warmup_count(n_jobs)
        return int(rule)

    def env_configs(self, n_jobs: int) -> tuple[EnvConfig, EnvConfig]:
        """The env settings of training episodes and of the validation episode.

        ``n_jobs``: the jobs of the whole history (training, validation and test
        periods), which the validation warm-up ``"eval"`` is a share of
        (:meth:`val_warmup_jobs`).
        """
        return self._env_configs(self.val_warmup_jobs(n_jobs))

    def _env_configs(self, val_warmup_jobs: int) -> tuple[EnvConfig, EnvConfig]:
        common = EnvConfig(max_jobs=self.max_jobs, max_candidates=self.max_candidates,
                           place=self.place, reward=self.reward, fairness=self.fairness,
                           backlog=self.backlog, stranding=self.stranding,
                           speed_model=self.speed_model, max_steps=self.max_steps,
                           actions=self.actions, hold=self.hold,
                           take_forced=self.take_forced,
                           starvation_limit=self.starvation_limit if self.train_guard else 0.0,
                           starvation_order=self.starvation_order,
                           express_limit=self.express_limit if self.train_guard else 0.0)
        return (replace(common, episode_jobs=self.episode_jobs, warm_start=self.warm_start),
                replace(common, episode_jobs=self.val_jobs,
                        warmup_jobs=val_warmup_jobs))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (``val_warmup`` as in effect: :meth:`val_warmup_rule`)."""
        d = asdict(self)
        d["references"] = list(self.references)
        d["val_warmup"] = self.val_warmup_rule()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainConfig:
        """From :meth:`to_dict` output.

        Raises:
            ValueError: On an unknown key.
        """
        return _from_dict(cls, d)


_C = TypeVar("_C")


def _from_dict(cls: type[_C], d: Mapping[str, Any]) -> _C:
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    extra = set(d) - set(known)
    if extra:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(extra)}; known {sorted(known)}")
    vals = dict(d)
    for k, v in vals.items():
        if isinstance(v, list):
            vals[k] = tuple(v)
    return cls(**vals)


# ---------------------------------------------------------------------------- algorithms
@dataclass(frozen=True)
class AlgoConfig:
    """What every algorithm's config has."""

    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount per decision."""
    max_grad_norm: float = 0.5
    """Gradient norm clip."""
    lr_final: float | None = None
    """Learning rate at the end of the budget: the step size falls linearly from ``lr``
    at the first update to this at the end of the update or step budget, whichever the
    run is further through (PPO's annealing; a wall-time budget alone is refused as
    unrepeatable); ``None``: ``lr`` throughout."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        _need(self.lr > 0, name, "lr must be positive")
        _need(self.lr_final is None or self.lr_final >= 0, name, "lr_final must be >= 0")
        _need(0 <= self.gamma <= 1, name, "gamma must lie in [0, 1]")
        _need(self.max_grad_norm > 0, name, "max_grad_norm must be positive")
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and f.name not in ("seed",):
                _need(v >= 0, name, f"{f.name} must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)


@dataclass(frozen=True)
class PPOConfig(AlgoConfig):
    """PPO (the default): clipped surrogate, GAE, entropy bonus, value loss, minibatch epochs."""

    episodes: int = 8
    """Training episodes (windows) per update."""
    epochs: int = 4
    """Passes over the update's steps."""
    minibatch: int = 256
    """Steps per gradient step."""
    clip: float = 0.2
    """Clip range of the probability ratio."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    norm_adv: bool = True
    """Normalise the advantages over the update's steps."""
    target_kl: float | None = None
    """Stop the update's epochs early when the approximate KL exceeds this."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(self.episodes >= 1 and self.epochs >= 1 and self.minibatch >= 1, "PPOConfig",
              "episodes, epochs and minibatch must be >= 1")
        _need(0 < self.clip < 1 and 0 <= self.gae_lambda <= 1, "PPOConfig",
              "clip in (0, 1), gae_lambda in [0, 1]")


@dataclass(frozen=True)
class A2CConfig(AlgoConfig):
    """DL²: advantage actor-critic with experience replay and job-aware exploration."""

    episodes: int = 4
    """Training episodes per update (DL²'s time slots)."""
    buffer_rounds: int = 4
    """Replay buffer: the samples of the latest rounds (DL² keeps those of the latest
    time slots; older samples, from other policies, bias the on-policy gradient)."""
    batch: int = 256
    """Samples per minibatch drawn from the buffer."""
    updates: int = 8
    """Minibatches (gradient steps) per update."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (DL²'s entropy exploration)."""
    vf_coef: float = 0.5
    """Weight of the critic's loss."""
    explore_eps: float = 0.2
    """Probability of taking the specified action in a poor state
    (:func:`trainer.rl.acting.dl2_explore`)."""
    explore_ratio: float = 10.0
    """A job whose estimated run time exceeds this many times the shortest fitting
    job's is a poor choice (DL²'s "differ too much" threshold)."""
    norm_adv: bool = True
    """Normalise the advantages within each minibatch."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(self.episodes >= 1 and self.buffer_rounds >= 1 and self.batch >= 1
              and self.updates >= 1, "A2CConfig", "episodes, buffer_rounds, batch, updates >= 1")
        _need(0 <= self.explore_eps <= 1 and self.explore_ratio >= 1, "A2CConfig",
              "explore_eps must lie in [0, 1] and explore_ratio be >= 1")


@dataclass(frozen=True)
class DQNConfig(AlgoConfig):
    """SCHED²: DQN, Q from the job logits (hold included), prioritised replay, epsilon-greedy.

    A target network gives the one-step targets (double DQN by default).
    """

    lr: float = 1e-3
    """Adam learning rate."""
    episodes: int = 4
    """Training episodes per update."""
    buffer: int = 50_000
    """Replay capacity (transitions)."""
    batch: int = 128
    """Transitions per gradient step."""
    updates_per_step: float = 0.25
    """Gradient steps per collected env step."""
    learning_starts: int = 500
    """Env steps collected before the first gradient step."""
    eps_start: float = 1.0
    """Initial exploration probability."""
    eps_end: float = 0.05
    """Final exploration probability."""
    eps_decay_steps: int = 20_000
    """Env steps over which epsilon decays linearly."""
    target_every: int = 250
    """Gradient steps between copies of the online net into the target net."""
    alpha: float = 0.6
    """Priority exponent of the replay."""
    beta_start: float = 0.4
    """Initial importance-sampling exponent (annealed to 1 over ``eps_decay_steps``)."""
    double: bool = True
    """Double DQN targets (online net picks, target net values)."""
    huber: float = 1.0
    """Huber loss threshold."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(0 <= self.eps_end <= self.eps_start <= 1, "DQNConfig",
              "0 <= eps_end <= eps_start <= 1")
        _need(self.episodes >= 1 and self.buffer >= 1 and self.batch >= 1
              and self.target_every >= 1 and self.eps_decay_steps >= 1, "DQNConfig",
              "episodes, buffer, batch, target_every, eps_decay_steps >= 1")
        _need(self.updates_per_step > 0 and self.huber > 0 and 0 <= self.beta_start <= 1,
              "DQNConfig", "updates_per_step > 0, huber > 0, beta_start in [0, 1]")


@dataclass(frozen=True)
class ReinforceConfig(AlgoConfig):
    """RL-TAPS: REINFORCE with a per-timestep baseline averaged over the episodes of a window."""

    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 1.0
    """Discount per decision."""
    windows: int = 2
    """Distinct windows (job sequences) per update."""
    episodes_per_window: int = 4
    """Episodes per window; the baseline at step t is their mean return from t."""
    ent_coef: float = 0.0
    """Weight of an entropy bonus (RL-TAPS has none)."""
    norm_adv: bool = True
    """Divide the advantages by their standard deviation over the update."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(self.windows >= 1 and self.episodes_per_window >= 2, "ReinforceConfig",
              "windows >= 1 and episodes_per_window >= 2 (the baseline averages episodes)")


@dataclass(frozen=True)
class CEMConfig(AlgoConfig):
    """Chic: the cross-entropy method on trajectories, plus the uniform-policy extra sample."""

    lr: float = 1e-3
    """Adam learning rate of the maximum-likelihood fit."""
    episodes: int = 8
    """Episodes sampled from the policy per window (Chic's N)."""
    windows: int = 1
    """Windows per update; each gets ``episodes`` + 1 uniform episodes, ranked among
    themselves (returns of different windows are not comparable)."""
    elite_frac: float = 0.3
    """Share of a window's N + 1 trajectories kept as elites (the best returns)."""
    uniform_sample: bool = True
    """Add Chic's extra trajectory with uniformly random legal actions."""
    epochs: int = 4
    """Passes of the maximum-likelihood fit over the elite steps."""
    minibatch: int = 256
    """Steps per gradient step of the fit."""
    smoothing: float = 0.9
    """Chic's alpha: new weights = alpha * fitted + (1 - alpha) * previous."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _need(self.episodes >= 1 and self.windows >= 1 and self.epochs >= 1
              and self.minibatch >= 1, "CEMConfig", "episodes, windows, epochs, minibatch >= 1")
        _need(0 < self.elite_frac <= 1 and 0 < self.smoothing <= 1, "CEMConfig",
              "elite_frac and smoothing must lie in (0, 1]")


def check_schedule(train: TrainConfig, algo: AlgoConfig) -> None:
    """Refuse an annealed learning rate (``lr_final``) without an update or step budget.

    Raises:
        ValueError: If ``algo.lr_final`` is set and ``train`` has only a wall-time budget,
            over which the schedule would not repeat.
    """
    if algo.lr_final is not None and train.budget_updates is None and train.budget_steps is None:
        raise ValueError("lr_final anneals the learning rate over the update or step budget:"
                         " give one (--budget 40u or --budget 100000), not only a wall-time"
                         " budget, whose schedule would not repeat")


def parse_overrides(cls: type[_C], items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as typed values of ``cls``'s fields (JSON, else the string).

    Raises:
        ValueError: On a malformed item or an unknown key.
    """
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        if key not in known:
            raise ValueError(f"{cls.__name__} has no option {key!r}; known: {sorted(known)}")
        try:
            val: Any = json.loads(raw)
        except json.JSONDecodeError:
            val = raw
        out[key] = val
    return out
