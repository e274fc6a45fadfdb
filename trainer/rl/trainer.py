"""The training loop shared by every algorithm: rollouts, validation, checkpoints, resume.

Data (:func:`make_spec`)
    The job table is split in arrival order: the first ``train_share`` of the jobs are
    the training period (episodes are windows of ``episode_jobs`` consecutive jobs
    drawn from it), the next ``val_share`` the validation period (one fixed window: its
    first ``val_jobs`` jobs, whose user history starts from the training period's
    jobs); the rest, the test period, is not even handed to the environments.

One round (an *update*)
    The algorithm names its episodes (:meth:`~trainer.rl.algorithms.Algorithm.plan`,
    windows and seeds drawn from the loop's generator); they are cut into groups of
    ``group`` tasks and rolled out by the pool (:mod:`trainer.rl.workers`) with the
    current weights; the algorithm learns from the trajectories. Every ``eval_every``
    updates (and at the start and the end) the greedy policy runs on the validation
    window: the best ``val_metric`` so far is saved as ``best.pt`` (Chic's validation
    picks the checkpoint). With ``val_deployed`` the net is validated as deployed
    instead (ordering the batch engine's queue, EASY backfill:
    :func:`~trainer.rl.report.deployed_metrics`), and with ``val_bounds`` a checkpoint
    that keeps more of Slurm's bounds there beats one that keeps fewer, in the order
    ``tune-guard`` keeps them (:func:`trainer.bounds.slurm_bounds`: p99 wait, mean
    bounded slowdown, utilisation less ``val_util_slack``). Every ``checkpoint_every``
    updates (and at the end) the whole training state goes to ``state.pt``.

A validation window that cannot pick
    The reference agents (``references``) run once on the validation window first. When
    their ``val_metric`` values lie within :data:`FLAT_VALIDATION_SPREAD` of each other
    (:func:`flat_validation`: e.g. a lightly loaded window where no job waits, so every
    order scores a bounded slowdown of 1), checkpoints score alike too, and ties keep
    the earliest: the best checkpoint says nothing about the training. A
    :class:`FlatValidationWarning` says so when the run starts, and the message is kept
    in the curves (``warnings``).

Determinism and resume
    Initial weights come from ``torch.manual_seed(seed)`` (or the given net), windows,
    seeds and minibatch orders from one ``numpy`` generator seeded with ``seed``, action
    draws from each task's seed; torch runs with deterministic algorithms and a fixed
    thread count. The same data, configs and seed give identical weights, whatever
    the number of workers. ``state.pt`` holds the weights, the optimizer, the
    algorithm's buffers and target net, the generator's state, the counters, the
    curves and the best checkpoint so far: ``resume=True`` continues from it exactly
    as if the run had not stopped (budgets, workers and the progress bar may change;
    anything else must match, or the resume is refused; a setting added to
    :class:`TrainConfig` after the state was saved takes the value given now). With
    ``val_bounds`` the best checkpoint's bounds are read again on resume, from its
    validation figures in the curves, under the rules of this version (a state saved
    before the mean-bsld bound and the utilisation slack is so carried over; the
    checkpoints it ranked below that best are not re-ranked). ``state.pt`` is a pickle:
    load only your own.

Outputs (``out``): ``state.pt``, ``best.pt`` and ``last.pt`` (policy checkpoints,
:func:`trainer.policy.save_checkpoint`), ``curves.json`` and ``curves.png``; with
``keep_checkpoints`` or ``ensemble``, ``checkpoints/update-NNNNN.pt`` for every
validation; with ``ensemble``, ``ensemble.pt``: the mean of the nets of the
``ensemble`` validations after the start that rank first (:func:`ensemble_members`), a
:class:`~trainer.policy.PolicyEnsemble` that evaluates and exports like ``best.pt``.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm  # type: ignore[import-untyped]

from slurm_plugin.features import Normalisation

from ..bounds import SLURM_BOUNDS, slurm_bounds
from ..env import incumbent_times
from ..policy import (
    PLACE_TRAINED,
    PolicyConfig,
    PolicyEnsemble,
    PolicyNet,
    deterministic_torch,
    load_checkpoint,
    place_head_trained,
    save_checkpoint,
)
from ..sim.policies import BASELINES
from ..sim.slurm import PrioritySettings, SchedulerOptions
from ..sim.state import Cluster, JobTable
from ..sim.stepper import window
from .acting import EnvSpec, Task, Trajectory, discounted, finite_mean
from .algorithms import ALGORITHMS, Algorithm, TaskMaker
from .config import VAL_METRICS, AlgoConfig, TrainConfig, check_schedule
from .curves import plot_curves, write_curves
from .report import deployed_metrics, slurm_metrics
from .workers import RolloutPool, make_pool

__all__ = ["FLAT_VALIDATION_SPREAD", "FlatValidationWarning", "NoEffectWarning", "TrainResult",
           "Trainer", "ensemble_members", "flat_validation", "make_spec", "train"]

#: The bounds ``val_bounds`` reads, most important first (:data:`trainer.bounds.SLURM_BOUNDS`).
BOUND_KEYS: tuple[str, ...] = tuple(k for k, _ in SLURM_BOUNDS)

#: Fields of :class:`TrainConfig` a resume may change.
RESUMABLE_CHANGES = frozenset({"budget_steps", "budget_updates", "max_seconds", "workers",
                               "ray_address", "progress", "keep_checkpoints", "ensemble"})
CHECKPOINTS_DIR = "checkpoints"

STATE_FILE = "state.pt"
BEST_FILE = "best.pt"
LAST_FILE = "last.pt"
ENSEMBLE_FILE = "ensemble.pt"

#: Relative spread of the reference agents' validation metric at or under which the
#: validation window is taken to separate no policies (:func:`flat_validation`).
FLAT_VALIDATION_SPREAD = 0.01


class FlatValidationWarning(UserWarning):
    """The validation window does not separate the reference agents (:func:`flat_validation`)."""


class NoEffectWarning(UserWarning):
    """A training setting that cannot change anything on these jobs (:func:`make_spec`)."""


def flat_validation(references: Mapping[str, Mapping[str, float]], metric: str,
                    spread: float = FLAT_VALIDATION_SPREAD) -> str | None:
    """Why the validation window cannot pick a checkpoint, or ``None`` when it can.

    Args:
        references: Episode metrics of the reference agents on the validation window,
            by agent (``curves["references"]``).
        metric: The metric that picks the best checkpoint (``val_metric``).
        spread: Largest ``max - min`` of the agents' values, relative to the largest
            magnitude among them, that still counts as flat.

    Returns:
        A one-line message naming the agents and their values when two or more agents
        have a finite ``metric`` and they lie within ``spread``; else ``None``.
    """
    vals = {a: float(m[metric]) for a, m in sorted(references.items())
            if metric in m and math.isfinite(float(m[metric]))}
    if len(vals) < 2:
        return None
    lo, hi = min(vals.values()), max(vals.values())
    if hi - lo > spread * max(abs(lo), abs(hi)):
        return None
    shown = ", ".join(f"{a} {v:.4g}" for a, v in vals.items())
    return (f"the validation window does not separate the reference agents ({metric}:"
            f" {shown}; within {spread:.0%}): checkpoints will score alike and the"
            " earliest is kept as best. Validate on more or busier jobs (--val-jobs,"
            " --since/--window)")


def make_spec(jobs: JobTable, cluster: Cluster, config: TrainConfig,
              norm: Normalisation | None = None, *,
              options: SchedulerOptions | None = None,
              priority: PrioritySettings | None = None) -> EnvSpec:
    """The environments' data: training and validation periods (module docstring).

    ``episode_jobs`` is cut to the training period and ``val_jobs`` to the validation
    period when they are longer. The episodes reserve as ``options.bf_plan`` plans
    (:attr:`trainer.env.EnvConfig.bf_plan`; in ``queue`` order only). With
    ``config.warm_start``, the Slurm baseline
    (``priority``, ``options``: Slurm's defaults when ``None``) replays the two periods
    once, and training episodes start from its state (:func:`trainer.env.incumbent_times`).

    Warns:
        NoEffectWarning: When ``config.fairness`` is set but the training jobs have one
            user (a trace without user ids): Jain's index of the users' bounded
            slowdowns is then always 1, and the term always 0.

    Raises:
        ValueError: If either period would be empty.
    """
    n = jobs.n
    n_train = int(config.train_share * n)
    n_val = int(config.val_share * n)
    if n_train < 1 or n_val < 1:
        raise ValueError(f"{n} jobs leave {n_train} for training and {n_val} for "
                         "validation: more jobs (or larger shares) are needed")
    if config.fairness and np.unique(jobs.user[:n_train]).size < 2:
        warnings.warn(f"fairness {config.fairness:g} has no effect: the {n_train} training"
                      " jobs have one user (the history records no user ids?), so Jain's"
                      " index of the users' bounded slowdowns is always 1",
                      NoEffectWarning, stacklevel=2)
    table = window(jobs, 0, n_train + n_val, shift=False)
    train_cfg, eval_cfg = config.env_configs(n)
    # fragmentation samples only feed the episode's result: one per training episode
    train_cfg = replace(train_cfg, episode_jobs=min(config.episode_jobs, n_train),
                        frag_samples=1)
    eval_cfg = replace(eval_cfg, episode_jobs=min(config.val_jobs or n_val, n_val))
    # the episodes plan backfill as every replay of this training does (queue order)
    plan = (options or SchedulerOptions()).bf_plan
    train_cfg, eval_cfg = replace(train_cfg, bf_plan=plan), replace(eval_cfg, bf_plan=plan)
    incumbent = None
    if config.warm_start:
        pol, opts = BASELINES["slurm"].build(priority, options or SchedulerOptions())
        incumbent = incumbent_times(table, cluster, pol, opts, config.speed_model,
                                    config.seed)
    return EnvSpec(table, cluster, train_cfg, eval_cfg, norm or Normalisation(), n_train,
                   incumbent)


@dataclass
class TrainResult:
    """What :meth:`Trainer.run` returns.

    Attributes:
        net: The net with the last weights.
        best_net: The net with the best validation weights.
        best: ``{"update", "steps", <val_metric>}`` of the best validation.
        curves: ``{"train": [...], "val": [...], "references": {...}}``.
        updates: Updates done (in all runs of this training).
        steps: Training env steps done.
        wall_s: Wall time of this run, s.
        out: The output directory, if any.
    """

    net: PolicyNet
    best_net: PolicyNet
    best: dict[str, float]
    curves: dict[str, Any]
    updates: int
    steps: int
    wall_s: float
    out: Path | None = None
    files: dict[str, str] = field(default_factory=dict)
    ensemble: PolicyEnsemble | None = None
    """With ``ensemble``: the mean of the nets of :attr:`members` (``None``: none)."""
    members: list[int] = field(default_factory=list)
    """The updates in :attr:`ensemble`, best validated first."""


class Trainer:
    """Runs one training (module docstring).

    Args:
        spec: The environments' data (:func:`make_spec`).
        config: Loop settings.
        algo_config: The algorithm's settings (default: its config's defaults).
        init: Initial weights: a net, a checkpoint path, or ``None`` (random, seeded).
        out: Output directory (``None``: no files; then no resume).
        meta: JSON-able metadata saved in the checkpoints.
        options: Scheduler options of the deployed validation (``val_deployed``;
            Slurm's defaults if ``None``).
        priority: Priority settings of the Slurm baseline the bounded choice reads
            (``val_bounds``; Slurm's defaults if ``None``).

    Raises:
        KeyError: If the algorithm is unknown.
        TypeError: If ``algo_config`` is not the algorithm's config class.
    """

    def __init__(self, spec: EnvSpec, config: TrainConfig, algo_config: AlgoConfig | None = None,
                 init: PolicyNet | str | os.PathLike[str] | None = None,
                 out: str | os.PathLike[str] | None = None,
                 meta: dict[str, Any] | None = None,
                 options: SchedulerOptions | None = None,
                 priority: PrioritySettings | None = None) -> None:
        try:
            self.algo_cls = ALGORITHMS[config.algo]
        except KeyError:
            raise KeyError(f"unknown algorithm {config.algo!r}: {sorted(ALGORITHMS)}") from None
        self.spec = spec
        self.cfg = config
        self.algo_cfg = algo_config or self.algo_cls.config_cls()
        if not isinstance(self.algo_cfg, self.algo_cls.config_cls):
            raise TypeError(f"{config.algo} needs a {self.algo_cls.config_cls.__name__}")
        check_schedule(config, self.algo_cfg)
        self.init = init
        self.out = Path(out) if out is not None else None
        self.meta = dict(meta or {})
        # the placement head is trained if this run places jobs, or the head it starts
        # from was: as ``meta`` says (an init net, a resume), else as the init file says
        if PLACE_TRAINED in self.meta:
            started = bool(self.meta[PLACE_TRAINED])
        else:
            started = (isinstance(init, (str, os.PathLike))
                       and place_head_trained(load_checkpoint(init).extra))
        self.meta[PLACE_TRAINED] = bool(self.cfg.place or started)
        self.options = options
        self.priority = priority
        self._slurm_val: dict[str, float] | None = None
        self._kept_nets: dict[int, dict[str, torch.Tensor]] = {}

    # ------------------------------------------------------------------ helpers
    def _config_dict(self) -> dict[str, Any]:
        return {"train": self.cfg.to_dict(), "algo": self.algo_cfg.to_dict()}

    def _initial_net(self) -> PolicyNet:
        init = self.init
        if init is None:
            torch.manual_seed(self.cfg.seed)
            return PolicyNet(PolicyConfig(hidden=self.cfg.hidden))
        if isinstance(init, PolicyNet):
            net = PolicyNet(init.config)
            net.load_state_dict(init.state_dict())
            return net
        loaded = load_checkpoint(init).net
        if not isinstance(loaded, PolicyNet):
            raise ValueError(f"{os.fspath(init)}: an ensemble of {len(loaded)} nets, which"
                             " does not train: start from one net")
        return loaded

    def _lower_better(self) -> bool:
        return VAL_METRICS[self.cfg.val_metric]

    def _metric(self, t: Trajectory) -> float:
        v = t.metrics.get(self.cfg.val_metric) if t.terminated else None
        if v is None:
            return math.inf if self._lower_better() else -math.inf
        return float(v)

    def _better(self, a: float, b: float) -> bool:
        return a < b if self._lower_better() else a > b

    def _val_task(self, mode: str = "greedy", agent: str | None = None) -> Task:
        return Task(self.spec.train_rows, 0, mode, agent=agent, eval=True, keep_steps=False)

    def _groups(self, tasks: Sequence[Task]) -> list[list[Task]]:
        g = self.cfg.group
        return [list(tasks[i:i + g]) for i in range(0, len(tasks), g)]

    def _set_scale(self, trajs: Sequence[Trajectory]) -> float:
        if self.cfg.reward_scale is not None:
            return float(self.cfg.reward_scale)
        g = np.concatenate([discounted(t.rewards(), self.algo_cfg.gamma) for t in trajs
                            if t.steps] or [np.zeros(1)])
        sd = float(g.std())
        return 1.0 / sd if sd > 1e-8 else 1.0

    # ------------------------------------------------------------------ run
    def run(self, resume: bool = False) -> TrainResult:
        """Train until a budget is spent (module docstring).

        Raises:
            ValueError: On ``resume`` without an output directory, or with a state
                saved under other settings.
            FileNotFoundError: On ``resume`` when no state was saved.
        """
        with deterministic_torch(self.cfg.threads):
            return self._run(resume)

    def _run(self, resume: bool) -> TrainResult:
        cfg = self.cfg
        wall0 = time.perf_counter()
        state: dict[str, Any] | None = None
        if resume:
            state = self._load_state()
        if self.out is not None:  # (best.pt is saved from the first validation on)
            self.out.mkdir(parents=True, exist_ok=True)
        net = self._initial_net() if state is None else PolicyNet(
            PolicyConfig.from_dict(state["net_config"]))
        rng = np.random.default_rng(cfg.seed)
        algo: Algorithm = self.algo_cls(net, self.algo_cfg, rng)
        curves: dict[str, Any] = {"train": [], "val": [], "references": {}}
        best: dict[str, float] = {}
        best_state = {k: v.clone() for k, v in net.state_dict().items()}
        updates = steps = episodes = 0
        scale: float | None = None
        if state is not None:
            net.load_state_dict(state["net"])
            algo.load_state_dict(state["algo"])
            rng.bit_generator.state = state["rng"]
            torch.set_rng_state(state["torch_rng"])
            curves, best, best_state = state["curves"], state["best"], state["best_state"]
            updates, steps, episodes = state["updates"], state["steps"], state["episodes"]
            scale = state["reward_scale"]
            best = self._reread_best(best, curves)
        tm = TaskMaker(rng, self.spec.train_rows, int(self.spec.train.episode_jobs or 1))
        show = sys.stderr.isatty() if cfg.progress is None else cfg.progress
        last_eval = -1
        files: dict[str, str] = {}
        with make_pool(self.spec, net.config, cfg.workers, cfg.ray_address) as pool:
            if state is None:
                refs = [self._val_task("agent", a) for a in cfg.references]
                if refs:
                    res = [t for g in pool.run(None, self._groups(refs)) for t in g]
                    curves["references"] = {t.task.agent: dict(t.metrics) for t in res}
                    flat = flat_validation(curves["references"], cfg.val_metric)
                    if flat is not None:
                        curves["warnings"] = [flat]
                        warnings.warn(flat, FlatValidationWarning, stacklevel=3)
                best, best_state = self._evaluate(pool, net, curves, best, best_state,
                                                  updates, steps, wall0)
                last_eval = updates
            if cfg.budget_steps is not None:
                bar = tqdm(total=cfg.budget_steps, initial=min(steps, cfg.budget_steps),
                           unit="step", desc=f"rl:{cfg.algo}", disable=not show)
            else:
                bar = tqdm(total=cfg.budget_updates, initial=updates, unit="update",
                           desc=f"rl:{cfg.algo}", disable=not show)
            while not self._spent(updates, steps, wall0):
                tasks = algo.plan(tm)
                trajs = [t for g in pool.run(net, self._groups(tasks)) for t in g]
                if scale is None:
                    scale = self._set_scale(trajs)
                algo.reward_scale = scale
                lr = algo.set_progress(self._progress(updates, steps))
                net.train()
                stats = algo.learn(trajs)
                net.eval()
                n = sum(t.length for t in trajs)
                updates += 1
                steps += n
                episodes += len(trajs)
                point = {"update": updates, "steps": steps, "episodes": episodes,
                         "return_mean": finite_mean([t.ret for t in trajs]),
                         "wall_s": time.perf_counter() - wall0, "lr": lr, **stats}
                # (and the figure that picks the checkpoint, for the curves' left panel)
                for key in dict.fromkeys(("bsld_mean", "wait_mean", "jct_mean",
                                          cfg.val_metric)):
                    point[key] = finite_mean([t.metrics.get(key, math.nan) for t in trajs
                                              if t.task.mode != "uniform"])
                curves["train"].append(point)
                bar.update(n if cfg.budget_steps is not None else 1)
                if updates % cfg.eval_every == 0:
                    best, best_state = self._evaluate(pool, net, curves, best, best_state,
                                                      updates, steps, wall0)
                    last_eval = updates
                    bar.set_postfix({cfg.val_metric: f"{curves['val'][-1][cfg.val_metric]:.3g}",
                                     "best": f"{best.get(cfg.val_metric, math.nan):.3g}"})
                if updates % cfg.checkpoint_every == 0:
                    self._save_state(net, algo, rng, curves, best, best_state, updates, steps,
                                     episodes, scale)
            if last_eval != updates:
                best, best_state = self._evaluate(pool, net, curves, best, best_state,
                                                  updates, steps, wall0)
            bar.close()
        self._save_state(net, algo, rng, curves, best, best_state, updates, steps, episodes,
                         scale)
        best_net = PolicyNet(net.config)
        best_net.load_state_dict(best_state)
        best_net.eval()
        net.eval()
        ens, members = self._ensemble(net.config, curves)
        if ens is not None and self.out is not None:
            save_checkpoint(self.out / ENSEMBLE_FILE, ens, norm=self.spec.norm, extra={
                **self.meta, "config": self._config_dict(), "ensemble": {
                    "members": members, "val_metric": cfg.val_metric,
                    "validation": [p for p in curves["val"] if p["update"] in members]}})
            files["ensemble"] = str(self.out / ENSEMBLE_FILE)
        if self.out is not None:
            meta = {**self.meta, "config": self._config_dict(), "updates": updates,
                    "steps": steps}
            save_checkpoint(self.out / LAST_FILE, net, extra=meta, norm=self.spec.norm)
            files["last"] = str(self.out / LAST_FILE)
            files["best"] = str(self.out / BEST_FILE)
            files["state"] = str(self.out / STATE_FILE)
            files["curves_json"] = str(write_curves({**curves, "best": best},
                                                    self.out / "curves.json"))
            png = plot_curves({**curves, "best": best}, self.out / "curves.png",
                              cfg.val_metric, f"{cfg.algo}: {cfg.val_metric}",
                              val_label=("policy (as deployed)" if cfg.val_deployed
                                         else "policy (greedy)"))
            if png is not None:
                files["curves_png"] = str(png)
        return TrainResult(net, best_net, best, curves, updates, steps,
                           time.perf_counter() - wall0, self.out, files, ens, members)

    def _ensemble(self, config: PolicyConfig, curves: Mapping[str, Any]
                  ) -> tuple[PolicyEnsemble | None, list[int]]:
        """The ensemble of ``ensemble`` (``None`` and no members: none asked, or no net).

        A member's weights are its kept checkpoint (``out``), else those kept in memory
        (no ``out``); validations with neither (before a resume that turned ``ensemble``
        on) are not candidates.
        """
        k = self.cfg.ensemble
        if not k:
            return None, []
        ckdir = None if self.out is None else self.out / CHECKPOINTS_DIR

        def have(u: int) -> bool:
            return u in self._kept_nets or (
                ckdir is not None and (ckdir / f"update-{u:05d}.pt").is_file())

        members = ensemble_members([p for p in curves["val"] if have(int(p["update"]))], k,
                                   self.cfg.val_metric, self._lower_better())
        nets = []
        for u in members:
            if u in self._kept_nets:
                n = PolicyNet(config)
                n.load_state_dict(self._kept_nets[u])
            else:
                assert ckdir is not None
                loaded = load_checkpoint(ckdir / f"update-{u:05d}.pt").net
                assert isinstance(loaded, PolicyNet)
                n = loaded
            nets.append(n.eval())
        return (PolicyEnsemble(nets).eval(), members) if nets else (None, [])

    def _progress(self, updates: int, steps: int) -> float:
        """How far through its update or step budget (the further) a run is, 0 to 1."""
        c = self.cfg
        done = [updates / c.budget_updates if c.budget_updates is not None else 0.0,
                steps / c.budget_steps if c.budget_steps is not None else 0.0]
        return min(1.0, max(done))

    def _spent(self, updates: int, steps: int, wall0: float) -> bool:
        c = self.cfg
        return ((c.budget_steps is not None and steps >= c.budget_steps)
                or (c.budget_updates is not None and updates >= c.budget_updates)
                or (c.max_seconds is not None and time.perf_counter() - wall0 >= c.max_seconds))

    def _evaluate(self, pool: RolloutPool, net: PolicyNet, curves: dict[str, Any],
                  best: dict[str, float], best_state: dict[str, torch.Tensor], updates: int,
                  steps: int, wall0: float) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        net.eval()
        if self.cfg.val_deployed:
            m = deployed_metrics(self.spec, net, options=self.options, seed=self.cfg.seed,
                                 rank_all=self.cfg.rank_all,
                                 starvation_limit=self.cfg.starvation_limit,
                                 starvation_order=self.cfg.starvation_order,
                                 express_limit=self.cfg.express_limit,
                                 score_resolution=self.cfg.score_resolution,
                                 rescore=self.cfg.rescore,
                                 place=self.meta[PLACE_TRAINED])
            v = float(m[self.cfg.val_metric])
            if self.cfg.val_bounds:
                m.update(self._bounds_kept(m))
                curves["slurm_val"] = dict(self._slurm_val or {})
        else:
            t = pool.run(net, [[self._val_task()]])[0][0]
            m, v = dict(t.metrics), self._metric(t)
        curves["val"].append({"update": updates, "steps": steps, **m,
                              self.cfg.val_metric: v, "wall_s": time.perf_counter() - wall0})
        key = self.cfg.val_metric
        kept = _kept(m)
        if self.cfg.ensemble and updates > 0 and self.out is None:  # (else kept on disk)
            self._kept_nets[updates] = {k: x.detach().clone()
                                        for k, x in net.state_dict().items()}
        if (self.cfg.keep_checkpoints or self.cfg.ensemble) and self.out is not None:
            (self.out / CHECKPOINTS_DIR).mkdir(parents=True, exist_ok=True)
            save_checkpoint(self.out / CHECKPOINTS_DIR / f"update-{updates:05d}.pt", net,
                            norm=self.spec.norm, extra={
                                **self.meta, "config": self._config_dict(),
                                "update": updates, "steps": steps,
                                "validation": {k: float(x) for k, x in m.items()
                                               if isinstance(x, (int, float))}})
        if not best or self._beats(v, kept, best):
            best = {"update": updates, "steps": steps, key: v}
            if kept is not None:
                best.update(zip(BOUND_KEYS, kept, strict=True))
            best_state = {k: x.detach().clone() for k, x in net.state_dict().items()}
            if self.out is not None:
                save_checkpoint(self.out / BEST_FILE, net, norm=self.spec.norm, extra={
                    **self.meta, "config": self._config_dict(), **best})
        return best, best_state

    def _beats(self, v: float, kept: tuple[float, ...] | None,
               best: Mapping[str, float]) -> bool:
        """A validation of ``v`` beats ``best``.

        ``kept``: which of the Slurm baseline's bounds it kept (1.0 or 0.0 per key of
        :data:`BOUND_KEYS`: p99 wait, mean bsld, utilisation; ``None``: not read). With
        ``val_bounds`` the kept bounds compare in that order, the first that differs
        deciding (the order ``rlsched tune-guard`` keeps them in): a checkpoint that
        keeps the p99 bound beats one that does not, then one that keeps the bsld bound
        too, then utilisation; among checkpoints alike, the better ``val_metric`` wins.
        Unlike ``tune-guard``, when no checkpoint keeps the p99 bound the choice still
        reads the other bounds and the metric, not the lowest p99 wait.
        """
        held = _kept(best)
        if kept is not None and held is not None and kept != held:
            return kept > held
        return self._better(v, best[self.cfg.val_metric])

    def _bounds_kept(self, m: Mapping[str, float]) -> dict[str, float]:
        """Which of the Slurm baseline's bounds the deployed metrics ``m`` keep (1.0: kept).

        Slurm replays the same window once (:func:`~trainer.rl.report.slurm_metrics`);
        the rules are :func:`trainer.bounds.slurm_bounds` with ``val_p99_slack`` and
        ``val_util_slack``.
        """
        if self._slurm_val is None:
            self._slurm_val = slurm_metrics(self.spec, options=self.options,
                                            priority=self.priority, seed=self.cfg.seed)
        kept = slurm_bounds(m, self._slurm_val, self.cfg.val_p99_slack,
                            self.cfg.val_util_slack)
        return {k: float(ok) for k, ok in kept.items()}

    def _reread_best(self, best: dict[str, float], curves: Mapping[str, Any]
                     ) -> dict[str, float]:
        """``best`` with its bounds read again under this run's rules (on resume).

        Its validation figures are the curves' point of its update; without
        ``val_bounds`` (or a best that never had bounds read), ``best`` as it is.
        """
        if not self.cfg.val_bounds or "p99_ok" not in best:
            return best
        point = next((p for p in reversed(curves["val"]) if p["update"] == best["update"]),
                     None)
        if point is None:  # (cannot happen: every best is a validation point)
            return best
        return {**{k: x for k, x in best.items() if k not in BOUND_KEYS},
                **self._bounds_kept(point)}

    # ------------------------------------------------------------------ state
    def _save_state(self, net: PolicyNet, algo: Algorithm, rng: np.random.Generator,
                    curves: dict[str, Any], best: dict[str, float],
                    best_state: dict[str, torch.Tensor], updates: int, steps: int,
                    episodes: int, scale: float | None) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        payload = {
            "config": self._config_dict(), "net_config": net.config.to_dict(),
            "net": {k: v.detach().clone() for k, v in net.state_dict().items()},
            "algo": algo.state_dict(), "rng": rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(), "curves": curves, "best": best,
            "best_state": best_state, "updates": updates, "steps": steps,
            "episodes": episodes, "reward_scale": scale,
        }
        tmp = self.out / (STATE_FILE + ".tmp")
        torch.save(payload, tmp)
        os.replace(tmp, self.out / STATE_FILE)

    def _load_state(self) -> dict[str, Any]:
        if self.out is None:
            raise ValueError("resume needs the output directory of the run to continue")
        path = self.out / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no training state to resume from")
        state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
        saved, now = state["config"], self._config_dict()
        # (a setting the saved state predates is not in it: it takes the value given now)
        diff = sorted(k for k in saved["train"]
                      if k not in RESUMABLE_CHANGES
                      and saved["train"].get(k) != now["train"].get(k))
        diff += sorted(f"algo.{k}" for k in set(saved["algo"]) | set(now["algo"])
                       if saved["algo"].get(k) != now["algo"].get(k))
        if diff:
            raise ValueError(f"{path} was saved with other settings ({', '.join(diff)}); "
                             "resume with the same settings, or start a new --out")
        return state


def train(spec: EnvSpec, config: TrainConfig | None = None,
          algo_config: AlgoConfig | None = None,
          init: PolicyNet | str | os.PathLike[str] | None = None,
          out: str | os.PathLike[str] | None = None, resume: bool = False,
          meta: dict[str, Any] | None = None) -> TrainResult:
    """Train a policy (see :class:`Trainer`)."""
    return Trainer(spec, config or TrainConfig(), algo_config, init, out, meta).run(resume)


def ensemble_members(points: Sequence[Mapping[str, Any]], k: int, metric: str,
                     lower_better: bool = True) -> list[int]:
    """The updates of the ``k`` validations after the start that rank first, best first.

    ``points``: validation points (``curves.json``'s ``val``). They rank as
    :meth:`Trainer._beats` picks ``best.pt``: more of Slurm's bounds kept first (when
    they were read, ``val_bounds``), then the better ``metric`` (a missing or NaN one
    last), then the earlier update. Update 0, the weights training started from (the
    ``--init`` net or random ones), is not a candidate: the ensemble is of what
    training learned.
    """
    return [u for _, u in pooled_members([points], k, metric, lower_better)]


def pooled_members(runs: Sequence[Sequence[Mapping[str, Any]]], k: int, metric: str,
                   lower_better: bool = True, per_run: int | None = None
                   ) -> list[tuple[int, int]]:
    """:func:`ensemble_members` over several runs validated alike: ``(run, update)`` pairs.

    ``runs``: each run's validation points (their figures must be comparable: one
    history, validation period and guard). Every validation after its run's start is
    ranked in one list as :func:`ensemble_members` ranks one run's (ties on every figure
    go to the earlier update, then the earlier run); they are taken in that order, at
    most ``per_run`` from any one run (``None``: no cap), until there are ``k``.
    """
    key = _rank_key(metric, lower_better)
    pool = [(key(p), i, int(p["update"]))
            for i, pts in enumerate(runs)
            for p in {int(q["update"]): q for q in pts if int(q["update"]) > 0}.values()]
    taken: list[tuple[int, int]] = []
    per: dict[int, int] = {}
    for _, i, u in sorted(pool):
        if len(taken) >= k:
            break
        if per_run is not None and per.get(i, 0) >= per_run:
            continue
        per[i] = per.get(i, 0) + 1
        taken.append((i, u))
    return taken


def _rank_key(metric: str, lower_better: bool
              ) -> Callable[[Mapping[str, Any]], tuple[tuple[float, ...], float, int]]:
    """The order :meth:`Trainer._beats` picks ``best.pt`` by, as a sort key of a point."""
    def key(p: Mapping[str, Any]) -> tuple[tuple[float, ...], float, int]:
        kept = _kept(p)
        v = float(p.get(metric, math.nan))
        v = math.inf if math.isnan(v) else (v if lower_better else -v)
        return tuple(-x for x in kept) if kept is not None else (), v, int(p["update"])

    return key


def _kept(m: Mapping[str, float]) -> tuple[float, ...] | None:
    """The bounds (:data:`BOUND_KEYS`) a validation or best checkpoint kept, in order.

    ``None``: not read.
    """
    if "p99_ok" not in m:
        return None
    return tuple(float(m[k]) for k in BOUND_KEYS)
