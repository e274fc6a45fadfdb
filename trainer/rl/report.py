"""The end-of-training summary: the policy against the simulator's baselines, same window.

On the validation window (the jobs the best checkpoint was picked on, never trained
on), :func:`summarize` replays

- every baseline of :data:`trainer.sim.policies.BASELINES` with
  :class:`~trainer.sim.engine.Simulator` (Slurm as configured, FIFO, SJF, the seed
  heuristics...);
- the policy through :class:`~trainer.policy.TorchPolicy` in the same engine, with
  EASY backfill (how the helper deploys it: it reorders Slurm's queue, Slurm's
  backfill stays) and without (strict order);
- the policy as it was trained and validated: greedy in :class:`~trainer.env.SchedEnv`
  (it picks which fitting job starts, or holds).

Rows carry mean bounded slowdown, mean and p99 wait, mean JCT and node utilisation;
the *best heuristic* is the seed baseline (:attr:`~trainer.sim.policies.Baseline.seed`:
not rlsched's own ``sef``) other than ``slurm`` with the lowest mean bounded slowdown.
``sef`` starts from the users' history before the window, as the policy does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from slurm_plugin.features import Normalisation, UserHistory

from ..policy import PolicyNet, TorchPolicy
from ..sim import metrics, observe
from ..sim.engine import EngineOptions, SimResult, Simulator
from ..sim.policies import BASELINES, SEED_BASELINES, Sef
from ..sim.slurm import PrioritySettings, SchedulerOptions
from ..sim.state import Cluster, JobTable
from ..sim.stepper import window
from .acting import EnvSpec, Task, run_group

__all__ = ["HEADERS", "Summary", "deployed_metrics", "history_before", "slurm_metrics",
           "summarize"]

#: Columns of :meth:`Summary.rows`.
HEADERS = ("policy", "jobs", "bsld mean", "wait mean (s)", "wait p99 (s)", "JCT mean (s)",
           "util nodes")


def history_before(jobs: JobTable, cluster: Cluster, lo: int, norm: Normalisation,
                   k: int = 256) -> UserHistory:
    """The users' history at row ``lo``'s arrival: up to ``k`` earlier jobs that had ended."""
    return observe.history_before(UserHistory(norm), jobs, cluster, lo, k)


def deployed_metrics(spec: EnvSpec, net: PolicyNet, *,
                     options: SchedulerOptions | None = None, seed: int = 0,
                     backfill: bool = True, rank_all: bool = True,
                     starvation_limit: float = 0.0, place: bool = True,
                     starvation_order: str = "age",
                     score_resolution: float = 0.0,
                     express_limit: float = 0.0, rescore: float | None = None
                     ) -> dict[str, float]:
    """The net as deployed, on the validation window: its episode metrics.

    The net orders the queue through :class:`~trainer.policy.TorchPolicy` in the batch
    engine, with EASY backfill (how the helper deploys it), on the window the env
    validates on: the ``spec.eval.warmup_jobs`` jobs before it are replayed first and
    not counted, and the user history grows with the replay's completions; ``rank_all``
    as the helper's (:class:`~trainer.policy.TorchPolicy`); ``starvation_limit`` > 0
    puts the helper's starvation guard in front (:class:`trainer.evaluate.StarvationGuard`,
    starving jobs in ``starvation_order``, with its express lane for jobs of a time limit
    up to ``express_limit`` seconds); ``score_resolution`` > 0 rounds the net's
    scores first, as the helper's setting (:class:`trainer.evaluate.Quantized`);
    ``rescore``: seconds between re-rankings of the queue (the helper's ``interval``;
    ``None``: :data:`~trainer.policy.HELPER_CYCLE`); ``place``: the net's placement
    head places the jobs, else the scheduler's placement (as for a head not trained to
    place: :func:`trainer.policy.place_head_trained`).
    Keys are the env's ``episode_metrics`` keys (``reward_sum`` excepted), so either
    can pick the best checkpoint, plus ``wait_p99`` and ``util`` (GPUs, or nodes without
    GPUs, as the quality targets read it).
    """
    opts = options or SchedulerOptions()
    jobs, lo, warm = _val_window(spec)
    r = _replay_deployed(spec, net, jobs, lo - warm, replace(opts, backfill=backfill),
                         EngineOptions(seed=seed, speed_model=spec.eval.speed_model),
                         rank_all=rank_all, place=place, starvation_limit=starvation_limit,
                         starvation_order=starvation_order,
                         score_resolution=score_resolution, express_limit=express_limit,
                         rescore=rescore)
    return _window_metrics(r, warm)


def slurm_metrics(spec: EnvSpec, *, options: SchedulerOptions | None = None,
                  priority: PrioritySettings | None = None, seed: int = 0
                  ) -> dict[str, float]:
    """The Slurm baseline on the window :func:`deployed_metrics` replays, the same keys.

    The reference of the bounded checkpoint choice (``TrainConfig.val_bounds``).
    """
    jobs, lo, warm = _val_window(spec)
    pol, o = BASELINES["slurm"].build(priority, options or SchedulerOptions())
    r = Simulator(jobs, spec.cluster, pol, o,
                  EngineOptions(seed=seed, speed_model=spec.eval.speed_model)).run()
    return _window_metrics(r, warm)


def _val_window(spec: EnvSpec) -> tuple[JobTable, int, int]:
    """The validation window with its warm-up jobs first: ``(jobs, first row, warm-up)``."""
    lo = spec.train_rows
    size = int(spec.eval.episode_jobs or (spec.jobs.n - lo))
    warm = min(lo, spec.eval.warmup_jobs)
    return window(spec.jobs, lo - warm, min(spec.jobs.n, lo + size), shift=False), lo, warm


def _window_metrics(r: SimResult, warm: int) -> dict[str, float]:
    from ..evaluate import _util, restrict

    m = metrics.compute(restrict(r, warm))
    return {"jobs": float(m["jobs"]), "bsld_mean": float(m["bsld"]["mean"]),
            "wait_mean": float(m["wait_s"]["mean"]), "jct_mean": float(m["jct_s"]["mean"]),
            "effectiveness_mean": float(m["execution_effectiveness"]),
            "jain_bsld": float(m["fairness"]["jain_bsld"]),
            "wait_p99": float(m["wait_s"]["p99"]), "util": _util(m)}


def _replay_deployed(spec: EnvSpec, net: PolicyNet, jobs: JobTable, lo: int,
                     opts: SchedulerOptions, eng: EngineOptions, *, rank_all: bool = True,
                     place: bool = True, starvation_limit: float = 0.0,
                     starvation_order: str = "age", score_resolution: float = 0.0,
                     express_limit: float = 0.0, rescore: float | None = None) -> SimResult:
    """Replay ``jobs`` (rows ``lo..`` of the spec's table) with the net ordering the queue.

    The user history starts from the jobs before row ``lo`` and grows with the replay's
    completions; the wrappers are those of :func:`deployed_metrics`.
    """
    from ..evaluate import FixedPlacement, as_deployed

    hist = history_before(spec.jobs, spec.cluster, lo, spec.norm, spec.eval.history_jobs)
    tp = TorchPolicy(net, history=hist, norm=spec.norm, placement=opts.placement,
                     rank_all=rank_all, rescore_period=rescore)
    pol = as_deployed(tp if place else FixedPlacement(tp, opts.placement),
                      score_resolution=score_resolution, starvation_limit=starvation_limit,
                      starvation_order=starvation_order, express_limit=express_limit)
    sim = Simulator(jobs, spec.cluster, pol, opts, eng)
    tp.follow(sim)
    return sim.run()


@dataclass
class Summary:
    """The comparison on the validation window.

    Attributes:
        metrics: Engine metrics (:func:`trainer.sim.metrics.compute`) per row name.
        env_metrics: The greedy policy's ``episode_metrics`` in the env.
        best_heuristic: Name of the best seed baseline other than ``slurm``.
        jobs: Jobs in the window.
    """

    metrics: dict[str, dict[str, Any]]
    env_metrics: dict[str, float]
    best_heuristic: str
    jobs: int
    extra: dict[str, Any] = field(default_factory=dict)

    def bsld(self, name: str) -> float:
        """Mean bounded slowdown of a row (``policy (env)`` for the env's run)."""
        if name == "policy (env)":
            return float(self.env_metrics.get("bsld_mean", float("nan")))
        return float(self.metrics[name]["bsld"]["mean"])

    def rows(self) -> list[tuple[str, ...]]:
        """Table rows: the policy's, ``slurm``, the best heuristic, then the others."""
        def fmt(x: Any) -> str:
            return "-" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)

        out: list[tuple[str, ...]] = []
        e = self.env_metrics
        out.append(("policy (env, greedy)", fmt(int(e.get("jobs", self.jobs))),
                    fmt(e.get("bsld_mean")), fmt(e.get("wait_mean")), "-",
                    fmt(e.get("jct_mean")), "-"))
        names = [n for n in self.metrics if n.startswith("policy")]
        names += [n for n in ("slurm", self.best_heuristic) if n in self.metrics]
        names += [n for n in self.metrics if n not in names]
        for n in dict.fromkeys(names):
            m = self.metrics[n]
            label = f"{n} (best heuristic)" if n == self.best_heuristic else n
            out.append((label, fmt(m["jobs"]), fmt(m["bsld"]["mean"]),
                        fmt(m["wait_s"]["mean"]), fmt(m["wait_s"]["p99"]),
                        fmt(m["jct_s"]["mean"]), fmt(m["utilisation"]["nodes"])))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (without the time series)."""
        ms = {n: {k: v for k, v in m.items() if k != "series"} for n, m in self.metrics.items()}
        return {"metrics": ms, "env_metrics": self.env_metrics,
                "best_heuristic": self.best_heuristic, "jobs": self.jobs,
                "bsld_mean": {n: self.bsld(n) for n in [*self.metrics, "policy (env)"]},
                **self.extra}


def summarize(spec: EnvSpec, net: PolicyNet, *, options: SchedulerOptions | None = None,
              priority: PrioritySettings | None = None, seed: int = 0,
              baselines: list[str] | None = None, threads: int | None = 1,
              place: bool = True) -> Summary:
    """Compare ``net`` with the baselines on the validation window (module docstring).

    Args:
        spec: The training data (its validation window is used).
        net: The policy.
        options: Scheduler options of the baselines (Slurm's defaults if ``None``).
        priority: Priority settings of the multifactor baseline.
        seed: Seed of the replays.
        baselines: Names in :data:`BASELINES` (default: all).
        threads: torch threads while the policy scores (``None``: leave as is). One is
            fastest for one small observation at a time, and far faster than two on
            a busy machine.
        place: The net's placement head places the jobs (else the scheduler's
            placement: a head not trained to place, see
            :func:`trainer.policy.place_head_trained`).
    """
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _summarize(spec, net, options, priority, seed, baselines, place)
    finally:
        torch.set_num_threads(old)


def _summarize(spec: EnvSpec, net: PolicyNet, options: SchedulerOptions | None,
               priority: PrioritySettings | None, seed: int, baselines: list[str] | None,
               place: bool = True) -> Summary:
    opts = options or SchedulerOptions()
    lo = spec.train_rows
    size = int(spec.eval.episode_jobs or (spec.jobs.n - lo))
    jobs = window(spec.jobs, lo, lo + size, shift=False)
    eng = EngineOptions(seed=seed, speed_model=spec.eval.speed_model)
    out: dict[str, dict[str, Any]] = {}
    for name in baselines or list(BASELINES):
        policy, o = BASELINES[name].build(priority, opts)
        if isinstance(policy, Sef):  # from the history before the window, as the net's
            policy.history = history_before(spec.jobs, spec.cluster, lo, policy.norm,
                                            spec.eval.history_jobs)
        r = Simulator(jobs, spec.cluster, policy, o, eng).run()
        r.policy = name
        out[name] = metrics.compute(r)
    for label, bf in (("policy (engine, +backfill)", True), ("policy (engine, no backfill)",
                                                            False)):
        r = _replay_deployed(spec, net, jobs, lo, replace(opts, backfill=bf), eng,
                             place=place)
        r.policy = label
        out[label] = metrics.compute(r)
    env_traj = run_group(net, spec, [Task(lo, 0, "greedy", eval=True, keep_steps=False)])[0]
    heur = [n for n in out if n in SEED_BASELINES and n != "slurm"]
    best = min(heur, key=lambda n: out[n]["bsld"]["mean"]) if heur else "slurm"
    return Summary(out, dict(env_traj.metrics), best, jobs.n)
