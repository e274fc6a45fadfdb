"""Evaluate a learned policy against every baseline on the test period of a history.

Time split (:func:`time_split`)
    The jobs, in arrival order (the rows of the :class:`~trainer.sim.state.JobTable`:
    by eligible time, which is the submit time for traces and the synthetic workload),
    are cut as training does (:func:`trainer.rl.make_spec`, the same ``int(share * n)``
    rounding): the first ``train`` share trains, the next ``val`` share validates, the
    rest is the *test period*, which training never sees.

Test replay (:func:`evaluate`)
    Every policy replays the same table on the same cluster, with the same scheduler
    options (Slurm as configured: priority calculation, backfill parameters), the same
    speed model and the same seed. A learned policy (a checkpoint through
    :class:`~trainer.policy.TorchPolicy`, or an exported ONNX model through
    :class:`~exporter.policy.OnnxPolicy`) replaces the priority order and, with
    ``policy_placement="policy"``, the node selection; Slurm's main scheduler and EASY
    backfill stay in charge of when jobs start, as with the helper in production (it
    moves ``SiteFactor`` and steers node lists, nothing more). Each baseline of
    :data:`trainer.sim.policies.BASELINES` runs with its own policy, backfill setting and
    placement. So that the test period does not start on an empty cluster, the
    ``warmup`` share of jobs just before it (by default the validation period) is
    replayed first under the same policy (or, with ``warmup_under="slurm"``, under the
    ``slurm`` baseline in every replay, each policy taking over at the test period's
    first arrival as the helper does when it is switched on: :class:`TakeOver`);
    metrics count the test jobs only, and the
    utilisation and fragmentation series start at the first test arrival
    (:func:`restrict`). A learned policy's user history (run-time, usage and locality
    estimates) is built from the jobs that ended before the replay starts, and grows
    with the replay's completions (:class:`~trainer.sim.observe.CompletionFeed`), as in
    training and in production.

Quality targets (:func:`check_targets`, issue 5), for the first model:

- mean bounded slowdown at least ``bsld_reduction`` (30%) below the Slurm baseline's,
  and below the best heuristic's (the best mean bsld among the other seed baselines:
  FIFO, SJF, the seed heuristics and placements; that includes SIF, which orders by the
  recorded run time, an oracle; not rlsched's own ``sef``, which the table shows and
  which ``train --imitate-from sef`` may have taught the policy). The check also
  reports, without checking it, the best of those that do not read the recorded run
  time (:attr:`~trainer.sim.policies.Baseline.oracle`) when that is another one;
- p99 wait at most ``p99_slack`` (10%) above the Slurm baseline's;
- utilisation (GPUs, or nodes on a cluster without GPUs) not lower than the Slurm
  baseline's (the time mean from the first test arrival; the check also reports, without
  checking it, the test jobs' own work over their span, ``own_work`` of
  :func:`trainer.sim.metrics.compute`, which warm-up jobs do not count in, and the busy
  share up to the last test arrival, ``to_last_arrival``: the time mean runs to each
  run's own last end, so on a finite period it is the work over the makespan, and a run
  that ends sooner scores higher however idle it left the machine while jobs waited;
  and the share of the machine idle while some job waited, ``idle_waiting``: capacity
  stranded while work queued, warm-up jobs' waiting included);
- with a placement-dependent speed model (``locality_targets``, by default when the
  speed model is not ``none``; the Philly target): mean JCT at least ``jct_factor``
  (1.5x) lower than the best heuristic's (the best mean JCT among the other seed
  baselines; the best of those that do not read the recorded run time is reported, as
  for the bsld; so is the largest factor any schedule could reach, the best heuristic's
  mean JCT over ``jct_floor_s``, the mean recorded run time: no job runs faster than
  recorded, none waits less than 0), and a larger share of multi-node jobs within one
  leaf switch than both the Slurm baseline and that heuristic (the simulator measures
  multi-node jobs: a multi-GPU job within one 8-GPU server is within one leaf by
  construction).

The learned policies replay behind the helper's starvation guard as deployed
(``starvation_limit``, ``starvation_order``); the baselines replay as defined, or, with
``guard_heuristics``, behind the same guard (all but ``slurm``, whose age factor is its
own), so that "below the best heuristic" compares orders deployed alike. The targets
record which (``setup``).

Each check reports pass/fail with its numbers (value, threshold, the baseline it is
measured against). The ratio checks also say how sure they are (:func:`annotate`,
:mod:`trainer.confidence`): the ratio's block-bootstrap interval over the test jobs
(``clear``, ``clear miss`` or ``within the noise`` of one period) and in how many of
``windows`` consecutive windows of the test period the ratio is met; the utilisation
check says in how many windows it is not lower than Slurm's in the same window
(:func:`annotate_utilisation`); pass/fail stays the point value on the whole period,
as the issue defines it.

``rlsched evaluate`` prints the table (every policy, every headline metric of
:func:`trainer.sim.metrics.compute`), the per-window table, and with ``--out`` writes
``eval.json`` (the full metrics of every run, the split, the targets, the resolved
configuration), ``config.json`` and the plots of :func:`trainer.sim.metrics.plot`
(wait CDF, utilisation and fragmentation over time) for the models, the Slurm baseline
and the best ``plot_heuristics`` heuristics.

The split, restriction and target logic need numpy only; loading a model needs torch
(the ``train`` extra) and, for ONNX, onnxruntime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from slurm_plugin.helper.decide import (
    STARVATION_ORDERS,
    SiteFactorRule,
    check_express_limit,
    check_score_resolution,
    check_starvation_order,
    in_lane,
    quantize,
)
from slurm_plugin.model import place_head_trained

from . import confidence, numerics
from .bounds import p99_within, util_not_lower
from .cli import _input_options, _items, _prepare, replay_baseline, resolve
from .sim import metrics
from .sim.engine import EngineOptions, SimResult, Simulator
from .sim.observe import history_before
from .sim.placement import PLACEMENTS, Request
from .sim.policies import BASELINES, SEED_BASELINES, Policy, ScoreContext, Sef
from .sim.slurm import PrioritySettings, SchedulerOptions
from .sim.state import Cluster, JobTable, NodeState
from .sim.stepper import window

__all__ = [
    "TABLE_HEADERS",
    "EvalConfig",
    "EvalResult",
    "Quantized",
    "Split",
    "StarvationGuard",
    "Wrapped",
    "annotate",
    "annotate_utilisation",
    "as_deployed",
    "check_targets",
    "evaluate",
    "evaluate_command",
    "load_policy",
    "model_pairs",
    "p99_within",
    "pick_teacher",
    "restrict",
    "table_rows",
    "teacher_candidates",
    "time_split",
    "torch_threads",
    "user_history",
    "util_not_lower",
    "window_utilisation",
]

#: Name of the Slurm baseline the targets are measured against.
SLURM = "slurm"

#: ``EvalConfig.policy_placement``: the learned policies' jobs are placed as the
#: scheduler places every job (``SchedulerOptions.placement``), as when the helper does
#: not steer (``steering = "none"``).
SCHEDULER_PLACEMENT = "scheduler"

#: ``EvalConfig.warmup_under``: each replay's own policy schedules the warm-up jobs, or
#: the ``slurm`` baseline does in every replay (:class:`TakeOver`).
WARMUP_UNDER = ("own", SLURM)

# ---------------------------------------------------------------------------- config
@dataclass(frozen=True)
class EvalConfig:
    """Settings of :func:`evaluate` (the single source of their defaults)."""

    train: float = 0.7
    """Share of the jobs, first by arrival, that train (never replayed here)."""
    val: float = 0.1
    """Share of the jobs after them that validate; the rest is the test period."""
    warmup: float = 0.1
    """Share of the jobs right before the test period replayed first, so that the test
    period starts on a loaded cluster (0: it starts empty); not counted in the metrics."""
    warmup_under: str = "own"
    """Who schedules the warm-up jobs: ``own`` (each replay its own policy, the default)
    or ``slurm`` (:data:`WARMUP_UNDER`): every replay runs the ``slurm`` baseline until
    the test period's first arrival and its own policy from then on (:class:`TakeOver`),
    so every policy meets the queue and running jobs the incumbent left, as the helper
    does on the day it is switched on. With ``own`` the test period starts from a
    backlog each policy built itself over the warm-up, which on an overloaded history
    moves the verdict with the warm-up's length; ``--warmup 0.8`` with ``slurm`` warms
    up on the whole history before the test period, the incumbent's own state then."""
    baselines: tuple[str, ...] = tuple(BASELINES)
    """Baselines of :data:`trainer.sim.policies.BASELINES` to compare with (``slurm``
    must be among them: the targets are measured against it)."""
    policy_placement: str = "policy"
    """Node selection of the learned policies: ``policy`` (the net's placement head,
    as the helper steers), ``scheduler`` (:data:`SCHEDULER_PLACEMENT`: the scheduler's
    own, as with a helper that does not steer) or a name of
    :data:`trainer.sim.placement.PLACEMENTS`."""
    history_jobs: int = 256
    """Finished jobs before the replay that a learned policy's user history starts
    from (the most recent ones)."""
    rank_all: bool = True
    """How a learned policy orders the queue, as the helper's ``rank_all``: every job by
    its raw score, or (``False``) the jobs that fit now first, the others in Slurm's
    multifactor order (:class:`~trainer.policy.TorchPolicy`)."""
    starvation_limit: float = SiteFactorRule.starvation_limit
    """The helper's starvation guard on the learned policies, as it deploys them
    (:class:`StarvationGuard`): a job that has waited longer than this many seconds goes
    ahead of every job that has not, in ``starvation_order`` (default: the helper's
    default, 2 days); 0: no guard (the net's order alone)."""
    starvation_order: str = SiteFactorRule.starvation_order
    """How the guard orders the starving jobs among themselves, as the helper's
    ``starvation_order``: ``age`` (oldest first, the default) or ``policy`` (the
    policy's order) (:data:`slurm_plugin.helper.decide.STARVATION_ORDERS`)."""
    express_limit: float = 0.0
    """The helper's express lane on the learned policies (its ``express_limit``;
    :class:`StarvationGuard`): a job whose time limit is at most this many seconds goes
    above every other, starving ones included; 0 (default): no lane. Needs the guard
    (``starvation_limit`` > 0), in either ``starvation_order``."""
    score_resolution: float = 0.0
    """The learned policies' scores are rounded to multiples of this, as the helper's
    ``score_resolution`` rounds them (:class:`Quantized`): jobs scored that close tie
    and the older goes first; 0 (default): exact scores."""
    switch_wait: float = 0.0
    """The helper's leaf-switch wait on the learned policies (its ``switch_wait`` with
    ``steering = "switches"``; :class:`SwitchWait`): a multi-node job that one leaf
    switch could hold, but that could start now only across several, waits up to this
    many seconds for one leaf (Slurm's ``--switches=1@wait``); 0 (default): no wait.
    The helper steers either by node lists or by switch counts, so with a wait the models
    place their jobs as Slurm does (``tree``) unless ``policy_placement`` names another."""
    rescore: float = 15.0
    """Seconds between a learned policy's re-rankings of the whole queue, as the
    helper re-ranks it every cycle (its ``interval``; default 15 s, the helper's default,
    :data:`trainer.policy.HELPER_CYCLE`). The scheduler itself re-computes its
    priorities every ``priority_calc_period`` (5 minutes by default): a policy re-ranked
    that seldom replays worse than the helper deploys it."""
    guard_heuristics: bool = False
    """Replay every baseline but ``slurm`` behind the same starvation guard as the
    learned policies (``starvation_limit``, ``starvation_order``, ``express_limit``;
    and with the same ``switch_wait``), so that "below the
    best heuristic" compares orders deployed alike: whatever order the helper runs, it
    runs behind its guard. ``slurm`` stays as configured (its age factor is its own
    guard). Default off: the heuristics replay as they are defined."""
    bsld_reduction: float = 0.30
    """Target: mean bounded slowdown at least this share below the Slurm baseline's."""
    p99_slack: float = 0.10
    """Target: p99 wait at most this share above the Slurm baseline's."""
    jct_factor: float = 1.5
    """Target with ``locality_targets``: mean JCT this many times lower than the best
    heuristic's."""
    locality_targets: bool | None = None
    """Check the JCT and leaf-locality targets; ``None``: when the speed model depends
    on placement (not ``none``)."""
    plot_heuristics: int = 2
    """Heuristics (best mean bsld first, duplicates left out) drawn in the plots beside
    the models and the Slurm baseline (all runs are in ``eval.json``)."""
    windows: int = 4
    """Consecutive windows of equal job count the test period is also read in: mean
    bsld per window for every run, and in how many windows each target ratio is met
    (:mod:`trainer.confidence`); 1: the whole period only."""
    resamples: int = 2000
    """Block-bootstrap resamples for the confidence interval of each target ratio
    (:func:`trainer.confidence.ratio_ci`); 0: no intervals."""
    blocks: int = 20
    """Blocks of consecutive test jobs the bootstrap draws from."""
    confidence: float = 0.95
    """Coverage of the intervals."""
    threads: int | None = 1
    """torch CPU threads while a learned policy replays (it scores one observation at a
    time, where more threads only add overhead); ``None``: leave torch's setting."""
    draws: int = 1
    """Replays of the test period (:mod:`trainer.draws`): the first as recorded, each
    other with every arrival moved by up to ``jitter`` seconds (the order kept); the
    figures of every run over the draws, in how many draws each model keeps each line,
    and the lines read on the mean figures are reported beside the targets, which stay
    read on the recorded replay. 1 (default): the recorded replay only."""
    jitter: float = 60.0
    """Seconds each arrival moves by at most in the draws after the first (uniform,
    seeded by the replay's seed). On Lublin, 60 s moved the Slurm baseline's mean bsld
    by under 0.2% and ``lrf``'s behind the helper's 2-day guard between 124.7 and 180.7
    (150.2 as recorded); 300 s moved Slurm's too (575 to 676): another history rather
    than another timing of the same one."""

    def __post_init__(self) -> None:
        time_split(10, self.train, self.val)  # validates the shares
        if not 0 <= self.warmup <= self.train + self.val + 1e-9:  # (0.7 + 0.1 < 0.8)
            raise ValueError(f"EvalConfig.warmup must lie in [0, train + val], not {self.warmup}")
        if not self.rescore >= 1:
            raise ValueError(f"EvalConfig.rescore must be at least 1 s, not {self.rescore}")
        unknown = [b for b in self.baselines if b not in BASELINES]
        if unknown:
            raise ValueError(f"unknown baselines {unknown}: {sorted(BASELINES)}")
        if SLURM not in self.baselines:
            raise ValueError("EvalConfig.baselines must include 'slurm' (the targets' reference)")
        if self.warmup_under not in WARMUP_UNDER:
            raise ValueError(f"EvalConfig.warmup_under must be one of {list(WARMUP_UNDER)},"
                             f" not {self.warmup_under!r}")
        check_score_resolution(self.score_resolution)
        if not (math.isfinite(self.switch_wait) and self.switch_wait >= 0):
            raise ValueError(f"EvalConfig.switch_wait must be >= 0 seconds, not {self.switch_wait}")
        if (self.policy_placement not in ("policy", SCHEDULER_PLACEMENT)
                and self.policy_placement not in PLACEMENTS):
            raise ValueError(f"policy_placement must be 'policy', '{SCHEDULER_PLACEMENT}' or"
                             f" one of {sorted(PLACEMENTS)}, not {self.policy_placement!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError("EvalConfig.threads must be >= 1 (or None)")
        check_starvation_order(self.starvation_order)
        check_express_limit(self.express_limit, self.starvation_order, self.starvation_limit)
        if self.draws < 1 or not (math.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"EvalConfig: draws >= 1 and jitter >= 0 seconds, not"
                             f" {self.draws} and {self.jitter}")
        if self.draws > 1 and self.jitter < 1:
            raise ValueError(f"EvalConfig: {self.draws} draws need a jitter of at least 1 s"
                             f" (not {self.jitter:g}): every draw would replay the recorded"
                             " arrivals")
        if self.windows < 1 or self.resamples < 0 or self.blocks < 1:
            raise ValueError("EvalConfig: windows >= 1, resamples >= 0, blocks >= 1")
        if not 0 < self.confidence < 1:
            raise ValueError(f"EvalConfig.confidence must lie in (0, 1), not {self.confidence}")
        if self.history_jobs < 0 or self.plot_heuristics < 0:
            raise ValueError("history_jobs and plot_heuristics must be >= 0")
        if not (0 <= self.bsld_reduction < 1 and self.p99_slack >= 0 and self.jct_factor > 0):
            raise ValueError("bsld_reduction in [0, 1), p99_slack >= 0, jct_factor > 0")

    def warmup_count(self, n: int) -> int:
        """Warm-up jobs :func:`evaluate` replays before the test period of ``n`` jobs.

        ``tune-guard`` warms every validation window up with as many.
        """
        return int(self.warmup * n)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["baselines"] = list(self.baselines)
        return d


# ---------------------------------------------------------------------------- split
@dataclass(frozen=True)
class Split:
    """Row ranges of the training, validation and test periods (arrival order).

    Attributes:
        n: Jobs in all.
        val_start: First row of the validation period (= jobs in the training period).
        test_start: First row of the test period.
    """

    n: int
    val_start: int
    test_start: int

    @property
    def train(self) -> tuple[int, int]:
        """``(lo, hi)`` rows of the training period."""
        return 0, self.val_start

    @property
    def val(self) -> tuple[int, int]:
        """``(lo, hi)`` rows of the validation period."""
        return self.val_start, self.test_start

    @property
    def test(self) -> tuple[int, int]:
        """``(lo, hi)`` rows of the test period."""
        return self.test_start, self.n

    def to_dict(self, jobs: JobTable | None = None) -> dict[str, Any]:
        """The ranges (and, given the table, their first and last arrival times)."""
        out: dict[str, Any] = {}
        for name in ("train", "val", "test"):
            lo, hi = getattr(self, name)
            part: dict[str, Any] = {"rows": [lo, hi], "jobs": hi - lo}
            if jobs is not None and hi > lo:
                part["first_arrival"] = int(jobs.eligible[lo])
                part["last_arrival"] = int(jobs.eligible[hi - 1])
            out[name] = part
        return out


def time_split(n: int, train: float = 0.7, val: float = 0.1) -> Split:
    """Cut ``n`` jobs (arrival order) into training, validation and test periods.

    Row ``int(train * n)`` starts the validation period, ``int(train * n) + int(val *
    n)`` the test period (as :func:`trainer.rl.make_spec` cuts).

    Raises:
        ValueError: If the shares are not ``0 < train``, ``0 <= val``, ``train + val <
            1``, or a period that must hold jobs would be empty.
    """
    if not (0 < train < 1 and 0 <= val < 1 and train + val < 1):
        raise ValueError(f"split shares must satisfy 0 < train, 0 <= val, train + val < 1;"
                         f" got train={train}, val={val}")
    a = int(train * n)
    b = a + int(val * n)
    if n and (a < 1 or b >= n):
        raise ValueError(f"{n} jobs leave {a} for training and {n - b} for testing: more"
                         " jobs (or other shares) are needed")
    return Split(n, a, b)


# ---------------------------------------------------------------------------- restriction
def restrict(result: SimResult, lo: int) -> SimResult:
    """The replay seen from row ``lo`` on: jobs ``lo..``, series from their first arrival.

    The utilisation series keeps the value holding at the first arrival ``t0`` (its
    first point moved to ``t0``) and stops at the last end of those jobs, with the jobs
    waiting at each point, warm-up jobs included (``util_waiting``); the fragmentation
    samples are those in ``[t0, last end]``. Placements and counters are kept
    (``stats["warmup_jobs"] = lo``).

    Raises:
        ValueError: If ``lo`` leaves no job.
    """
    n = result.jobs.n
    if not 0 <= lo < n:
        raise ValueError(f"row {lo} leaves no job of {n}")
    if lo == 0:
        return result
    jobs = window(result.jobs, lo, n, shift=False)
    t0 = int(jobs.eligible[0])
    t_end = int(result.end[lo:].max())
    ut = result.util_t
    i0 = max(0, int(np.searchsorted(ut, t0, side="right")) - 1)
    i1 = int(np.searchsorted(ut, t_end, side="right"))
    util_t = ut[i0:i1].copy()
    if util_t.size:
        util_t[0] = max(int(util_t[0]), t0)
    # the jobs waiting at those times, the warm-up's included (the restricted table
    # drops them, yet a backlog they leave is work the period's idle capacity could run)
    waiting = metrics.waiting_at(result.jobs, result.start, util_t)
    keep = (result.frag_t >= t0) & (result.frag_t <= t_end)
    placements = None
    if result.placements is not None:
        placements = {i - lo: v for i, v in result.placements.items() if i >= lo}
    return replace(
        result, jobs=jobs, start=result.start[lo:].copy(), end=result.end[lo:].copy(),
        leaves=result.leaves[lo:].copy(), backfilled=result.backfilled[lo:].copy(),
        util_t=util_t, util_nodes=result.util_nodes[i0:i1].copy(),
        util_cpus=result.util_cpus[i0:i1].copy(), util_gpus=result.util_gpus[i0:i1].copy(),
        frag_t=result.frag_t[keep].copy(), frag=result.frag[keep].copy(),
        stats={**result.stats, "warmup_jobs": lo}, placements=placements,
        util_waiting=waiting)


# ---------------------------------------------------------------------------- policies
def user_history(jobs: JobTable, cluster: Cluster, lo: int, norm: Any = None,
                 history_jobs: int = 256) -> Any:
    """The users' history before row ``lo``: the last jobs that ended by its arrival.

    Returns a :class:`slurm_plugin.features.UserHistory`
    (:func:`trainer.sim.observe.history_before`).
    """
    from slurm_plugin.features import UserHistory

    return history_before(UserHistory(norm), jobs, cluster, lo, history_jobs)


#: Score of a starving job (plus its wait): above any policy's (see :data:`FITS_FIRST`).
STARVING = 1e15


def follower(pol: Policy) -> Callable[[Any], None] | None:
    """The ``follow`` method of ``pol`` or of the policy it wraps (``inner``), if any."""
    cur: Any = pol
    while cur is not None:
        f = getattr(cur, "follow", None)
        if f is not None:
            out: Callable[[Any], None] = f
            return out
        cur = getattr(cur, "inner", None)
    return None


class Wrapped(Policy):
    """A policy in front of another (``inner``): its scores, placement and binding.

    Subclasses change one of them (the order, the placement) and keep the rest.

    Args:
        inner: The wrapped policy.
        placement: The fallback placement name (default: the inner policy's).
    """

    def __init__(self, inner: Policy, placement: str | None = None) -> None:
        super().__init__(inner.settings, placement or inner.placement)
        self.inner = inner
        self.dynamic = inner.dynamic
        self.rescore_period = inner.rescore_period
        self.uses_usage = inner.uses_usage

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The inner policy's scores."""
        return self.inner.score(jobs, idx, ctx)

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The inner policy's placement."""
        return self.inner.place(cluster, state, usable, req, leaf_counts)

    def bind(self, sim: Any) -> None:
        """Bind the inner policy (:meth:`Policy.bind`)."""
        self.inner.bind(sim)


class Quantized(Wrapped):
    """A policy's scores rounded as the helper rounds them (its ``score_resolution``).

    Jobs scored closer than ``resolution`` may tie, and the engine breaks ties by
    arrival, as Slurm's age factor breaks the helper's
    (:func:`slurm_plugin.helper.decide.quantize`).

    Args:
        inner: The policy whose scores are rounded.
        resolution: The rounding step (> 0).
    """

    def __init__(self, inner: Policy, resolution: float) -> None:
        check_score_resolution(resolution)
        super().__init__(inner)
        self.resolution = float(resolution)

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The inner scores, rounded."""
        return quantize(self.inner.score(jobs, idx, ctx), self.resolution)


class TakeOver(Wrapped):
    """The incumbent's order and placement until ``at``, then ``inner``'s.

    The helper switched on at ``at``: the jobs it meets waiting or running are those the
    site's scheduler (``incumbent``, the ``slurm`` baseline) left, and from then on it
    orders every pending job, those included (``EvalConfig.warmup_under``). Re-scored
    at the inner policy's cadence throughout (its ``rescore_period``; 0: the scheduler's
    calc period, as the plain ``slurm`` replay re-scores), so that the first re-scoring
    at or after ``at`` moves every waiting job to the inner order; a learned policy
    re-ranked every helper cycle re-scores the incumbent that often before ``at`` too,
    where the plain ``slurm`` replay does every calc period.

    Args:
        inner: The policy that takes over.
        incumbent: The policy before ``at`` (a fresh one: it keeps its own state).
        at: The time it takes over (epoch s): the test period's first arrival.
    """

    def __init__(self, inner: Policy, incumbent: Policy, at: int) -> None:
        super().__init__(inner)
        self.incumbent = incumbent
        self.at = int(at)
        self.dynamic = True  # (re-scored once at least after ``at``)
        self.uses_usage = bool(inner.uses_usage or incumbent.uses_usage)

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The incumbent's scores before ``at``, the inner policy's from then on."""
        pol = self.incumbent if ctx.now < self.at else self.inner
        return pol.score(jobs, idx, ctx)

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The incumbent's placement before ``at``, the inner policy's from then on."""
        pol = self.incumbent if req.now < self.at else self.inner
        return pol.place(cluster, state, usable, req, leaf_counts)

    def bind(self, sim: Any) -> None:
        """Bind both policies."""
        self.incumbent.bind(sim)
        self.inner.bind(sim)


def as_deployed(pol: Policy, *, score_resolution: float = 0.0, starvation_limit: float = 0.0,
                starvation_order: str = "age", switch_wait: float = 0.0,
                express_limit: float = 0.0) -> Policy:
    """``pol`` as the helper deploys it: scores rounded, leaf-switch wait, starvation guard.

    ``score_resolution`` 0: exact scores; ``switch_wait`` 0: no wait (:class:`SwitchWait`);
    ``starvation_limit`` 0: no guard; ``express_limit`` 0: no express lane in it.
    """
    check_express_limit(express_limit, starvation_order, starvation_limit)
    out = Quantized(pol, score_resolution) if score_resolution > 0 else pol
    if switch_wait > 0:
        out = SwitchWait(out, switch_wait)
    if starvation_limit > 0:
        out = StarvationGuard(out, starvation_limit, starvation_order, express_limit)
    return out


class StarvationGuard(Wrapped):
    """A policy's order with the helper's starvation guard in front.

    The helper puts a job that has waited (since eligible) longer than
    ``starvation_limit`` above every job that has not, whatever the policy says; with
    ``starvation_order`` ``age`` Slurm's age factor orders such jobs oldest first, with
    ``policy`` they keep the policy's order (:mod:`slurm_plugin.helper.decide`). Here
    such a job scores above every other (:data:`STARVING` plus its wait with ``age``,
    plus its rank among the starving jobs by inner score with ``policy``, ties sharing
    one); the rest keep the inner policy's scores. Re-scored every calc period, as the
    helper re-ranks every cycle (the offset keeps starving jobs above the jobs that
    arrive in between, which the engine scores alone).

    With ``express`` > 0 (the helper's ``express_limit``), a job whose time limit is at
    most that many seconds scores above even the starving ones (:data:`STARVING` twice
    plus its rank among them by the guarded score, so starving express jobs first: in
    the inner order with ``policy``, the oldest first with ``age``), as
    :func:`slurm_plugin.helper.decide.targets` lifts them (with ``age``, in the lane's
    part of the band, the starving ones at its top where Slurm's age factor orders them).

    Args:
        inner: The policy whose order is guarded.
        limit: Seconds of waiting after which a job goes first.
        order: ``age`` or ``policy``
            (:data:`slurm_plugin.helper.decide.STARVATION_ORDERS`).
        express: Seconds of time limit up to which a job goes above every other; 0: no
            express lane.
    """

    def __init__(self, inner: Policy, limit: float, order: str = "age",
                 express: float = 0.0) -> None:
        check_starvation_order(order)
        check_express_limit(express, order, limit)
        super().__init__(inner)
        self.limit = float(limit)
        self.order = order
        self.express = float(express)
        self.dynamic = True

    def starving(self, jobs: JobTable, idx: np.ndarray, scores: np.ndarray,
                 waited: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Which of the pending rows ``idx`` go first as starving (a mask over ``idx``).

        Those that waited past the limit; ``scores`` are the inner scores.
        """
        out: np.ndarray = waited > self.limit
        return out

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The inner scores, starving jobs first (oldest first, or in the inner order).

        The express lane's jobs go above them.
        """
        out = np.asarray(self.inner.score(jobs, idx, ctx), dtype=np.float64)
        waited = (ctx.now - jobs.eligible[idx]).astype(np.float64)
        starving = self.starving(jobs, idx, out, waited, ctx)
        if starving.any():
            out = (_lifted(out, starving, STARVING) if self.order == "policy"
                   else np.where(starving, STARVING + waited, out))
        if self.express > 0:
            short = in_lane(jobs.limit[idx], self.express)
            if short.any():
                out = _lifted(out, short, 2 * STARVING)
        return out


def _lifted(scores: np.ndarray, rows: np.ndarray, base: float) -> np.ndarray:
    """``scores`` with those of ``rows`` lifted above every other, their order kept.

    Each becomes ``base`` plus its rank among them (lowest 0; ties share one).
    """
    out = scores.copy()
    lift = scores[rows]
    out[rows] = base + np.searchsorted(np.sort(lift), lift, side="left")
    return out


class SwitchWait(Wrapped):
    """A policy whose multi-node jobs wait a while for one leaf switch.

    This is the helper's ``steering = "switches"``. The helper looks at the first jobs of
    the policy's order that can start now; one that asks for several nodes, that one leaf
    switch could hold (no more nodes than the largest leaf has), but that no leaf can hold
    now, gets ``Switches=1@wait``, and Slurm's topology/tree selection then keeps it pending
    until one leaf can, for at most ``wait`` seconds from its next scheduling attempt
    (``wait4switch_start``), after which it takes any nodes. Here: the first time the
    placement would spread such a job over several leaves (to start it, or to reserve nodes
    for it), it is refused, and again until ``wait`` seconds have passed since; then it
    takes the placement it is given. A refused job holds no reservation, so the jobs behind
    it may start (as :class:`~trainer.sim.policies.Dsif`'s delay; Slurm's backfill may
    instead reserve one leaf for it, which this does not model).

    Measured on Philly's test period (64 x 8 GPUs in leaves of 4 nodes, ``locality`` speed
    model, the ``sjf`` imitation net behind 2 days ``age``): a 30-minute wait raises the
    share of multi-node jobs within one leaf from 0.667 to 0.717 (Slurm 0.659, ``spf``
    0.696), the mean JCT 0.7% lower. Over four other stretches of the trace it rose in three
    (0.33 / 0.14 / 0.60 to 0.62 / 0.32 / 0.68, with 21 to 63 multi-node jobs each), fell in
    one (0.675 to 0.635 of 126), the mean JCT within -3% to +2%.

    Args:
        inner: The policy whose placements wait.
        wait: Seconds a job waits for one leaf, at most (> 0).
    """

    def __init__(self, inner: Policy, wait: float) -> None:
        if not (math.isfinite(wait) and wait > 0):
            raise ValueError(f"switch wait must be > 0 seconds, not {wait}")
        super().__init__(inner)
        self.wait = float(wait)
        self.since: dict[int, int] = {}
        """Per job row, when its spread placement was first refused."""

    def bind(self, sim: Any) -> None:
        """A new replay: no job has waited yet (then bind the inner policy)."""
        self.since = {}
        self.inner.bind(sim)

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The inner placement, or ``None`` while the job waits for one leaf."""
        res = self.inner.place(cluster, state, usable, req, leaf_counts)
        if (res is None or req.job < 0 or res[1] <= 1 or req.nodes < 2
                or req.nodes > cluster.max_leaf):
            return res
        first = self.since.setdefault(req.job, req.now)
        return None if req.now < first + self.wait else res


class FixedPlacement(Wrapped):
    """A policy's job order with a named placement instead of its own.

    Args:
        inner: The policy whose scores are used.
        placement: Name in :data:`trainer.sim.placement.PLACEMENTS`.
    """

    def __init__(self, inner: Policy, placement: str) -> None:
        super().__init__(inner, placement)

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The named placement."""
        return Policy.place(self, cluster, state, usable, req, leaf_counts)


def load_policy(path: str | os.PathLike[str], *, history: Any = None,
                placement: str = "policy", rank_all: bool = True,
                settings: PrioritySettings | None = None,
                starvation_limit: float = 0.0, starvation_order: str = "age",
                score_resolution: float = 0.0, switch_wait: float = 0.0,
                express_limit: float = 0.0, rescore: float | None = None) -> Policy:
    """A learned policy from a checkpoint (``.pt``) or an exported model (``.onnx``).

    Args:
        path: The file. An ONNX model is checked as the helper checks it first.
        history: A :class:`~slurm_plugin.features.UserHistory`, or a callable taking
            the policy's normalisation and returning one.
        placement: ``policy`` (the net's placement head, if it was trained to place:
            :func:`trainer.policy.place_head_trained`, else ``tree``) or a placement
            name.
        rank_all: Rank every job by its raw score, or those that fit now first.
        settings: Priority settings (the order of the jobs that do not fit now,
            without ``rank_all``).
        starvation_limit: Seconds of waiting after which a job goes first
            (:class:`StarvationGuard`); 0: no guard.
        starvation_order: How the guard orders the starving jobs (``age``, ``policy``).
        express_limit: The guard's express lane (:class:`StarvationGuard`); 0: none.
        score_resolution: The scores are rounded to multiples of this first
            (:class:`Quantized`, the helper's ``score_resolution``); 0: exact.
        switch_wait: Seconds a multi-node job waits for one leaf switch
            (:class:`SwitchWait`, the helper's ``switch_wait``); 0: no wait. With a wait,
            ``placement="policy"`` is Slurm's (``tree``), as the helper then steers by
            switch counts, not node lists.
        rescore: Seconds between the policy's re-rankings of the whole queue (the
            helper's ``interval``; ``None``: its default,
            :data:`trainer.policy.HELPER_CYCLE`).

    Raises:
        ValueError: If the file is not a checkpoint nor a valid model (with the reason).
    """
    p = Path(path)
    if p.suffix == ".onnx":
        from exporter.policy import OnnxPolicy
        from slurm_plugin.model import ModelError, load_model

        try:
            model = load_model(p)
        except ModelError as exc:
            raise ValueError(f"{p}: {exc.reason} ({exc.action})") from None
        pol: Any = OnnxPolicy(model.session, norm=model.norm, settings=settings,
                              rank_all=rank_all, rescore_period=rescore)
        meta = model.card
    else:
        from trainer.policy import TorchPolicy, load_checkpoint

        ck = load_checkpoint(p)
        pol = TorchPolicy(ck.net, norm=ck.norm, settings=settings, rank_all=rank_all,
                          rescore_period=rescore)
        meta = ck.extra
    if history is not None:
        pol.history = history(pol.norm) if callable(history) else history
    if placement == "policy" and (switch_wait > 0 or not place_head_trained(meta)):
        placement = "tree"  # (the head was not trained to place, or the helper steers by
        # switch counts instead of node lists: Slurm's placement)
    out: Policy = pol if placement == "policy" else FixedPlacement(pol, placement)
    return as_deployed(out, score_resolution=score_resolution,
                       starvation_limit=starvation_limit, starvation_order=starvation_order,
                       switch_wait=switch_wait, express_limit=express_limit)


# ---------------------------------------------------------------------------- targets
def _gpus_else_nodes(u: Mapping[str, Any]) -> float:
    return float(u["gpus"] if u.get("gpus") is not None else u["nodes"])


def _util(m: Mapping[str, Any]) -> float:
    return _gpus_else_nodes(m["utilisation"])


#: The utilisation readings the utilisation line reports beside the checked time mean
#: (:func:`trainer.sim.metrics.compute`), with their words: the test jobs' own work over
#: their span (warm-up jobs still running in the test period do not count in it); the
#: busy share up to the last arrival, a span every run of the test jobs shares (the time
#: mean runs to each run's own last end); the share of the machine idle while some job
#: waited (stranded capacity: holes a waiting job cannot use, drains for a reservation).
_UTIL_READINGS = (("own_work", "own work"), ("to_last_arrival", "to the last arrival"),
                  ("idle_waiting", "idle while jobs waited"))


def _util_reading(m: Mapping[str, Any], key: str) -> float | None:
    """Another reading of the utilisation (a key of :data:`_UTIL_READINGS`), if any."""
    u = m["utilisation"].get(key)
    return None if u is None else _gpus_else_nodes(u)


def _check(name: str, ok: bool | None, value: float | None, threshold: float | None,
           against: str, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "value": value, "threshold": threshold,
            "against": against, "detail": detail}


def check_targets(ms: Mapping[str, Mapping[str, Any]], policy: str, config: EvalConfig,
                  *, locality: bool, heuristics: Sequence[str] | None = None
                  ) -> dict[str, Any]:
    """The issue-5 quality targets of ``policy`` against the baselines (module docstring).

    Args:
        ms: Metrics (:func:`trainer.sim.metrics.compute`) by name, including ``policy``
            and ``slurm``.
        policy: The learned policy's name.
        config: The thresholds.
        locality: Also check the JCT and leaf-locality targets.
        heuristics: Names the "best heuristic" is taken among (default: the seed
            baselines, :attr:`~trainer.sim.policies.Baseline.seed`, but ``slurm``).

    Returns:
        ``{"policy", "best_heuristic": {"bsld", "jct"}, "checks": [...], "passed"}``
        (the heuristic checks are not applicable when no heuristic was replayed);
        each check has ``name``, ``ok`` (``None``: not applicable), ``value``,
        ``threshold``, ``against`` and a one-line ``detail``.

    Raises:
        KeyError: If ``policy`` or ``slurm`` has no metrics.
    """
    if policy not in ms or SLURM not in ms:
        raise KeyError(f"check_targets needs metrics of {policy!r} and {SLURM!r}; have {list(ms)}")
    names = [h for h in (heuristics if heuristics is not None else SEED_BASELINES)
             if h in ms and h not in (policy, SLURM)]
    # seed heuristics not replayed (``evaluate --baselines``): the best is read without them
    left_out = ([h for h in SEED_BASELINES if h not in ms and h not in (policy, SLURM)]
                if heuristics is None else [])
    among = (f"; among the {len(names)} seed heuristics replayed ({len(left_out)} not"
             " replayed)" if left_out else "")
    p, s = ms[policy], ms[SLURM]

    def lowest(among: Sequence[str], metric: str) -> str | None:
        return min(among, key=lambda h: (float(ms[h][metric]["mean"]), h)) if among else None

    best_b, best_j = lowest(names, "bsld"), lowest(names, "jct_s")
    deployable_names = [h for h in names if not (h in BASELINES and BASELINES[h].oracle)]
    na = "no heuristic was replayed: not applicable"
    checks: list[dict[str, Any]] = []

    pb, sb = float(p["bsld"]["mean"]), float(s["bsld"]["mean"])
    thr = (1 - config.bsld_reduction) * sb
    rel = pb / sb - 1 if sb > 0 else 0.0
    checks.append(_check("bsld_vs_slurm", pb <= thr, pb, thr, SLURM,
                         f"mean bsld {pb:.3f} vs slurm {sb:.3f}: {rel:+.1%}"
                         f" (target <= {-config.bsld_reduction:+.0%})"))
    if best_b is None:
        checks.append(_check("bsld_vs_best_heuristic", None, pb, None, "", na))
    else:
        hb = float(ms[best_b]["bsld"]["mean"])
        detail = f"mean bsld {pb:.3f} vs {best_b} {hb:.3f} (target: lower)"
        # reported, not checked: the best of those that do not read the recorded run time
        best_d = lowest(deployable_names, "bsld")
        deployable = None
        if best_d is not None and best_d != best_b:
            hd = float(ms[best_d]["bsld"]["mean"])
            deployable = {"against": best_d, "value": hd, "ok": pb < hd}
            detail += (f"; best not reading the recorded run time: {best_d} {hd:.3f}"
                       f" ({'lower' if pb < hd else 'not lower'})")
        checks.append(_check("bsld_vs_best_heuristic", pb < hb, pb, hb, best_b,
                             detail + among))
        checks[-1]["deployable"] = deployable
    pw, sw = float(p["wait_s"]["p99"]), float(s["wait_s"]["p99"])
    thr = (1 + config.p99_slack) * sw
    rel = pw / sw - 1 if sw > 0 else (0.0 if pw == 0 else float("inf"))
    checks.append(_check("p99_wait", p99_within(pw, sw, config.p99_slack), pw, thr, SLURM,
                         f"p99 wait {pw:,.0f} s vs slurm {sw:,.0f} s: {rel:+.1%}"
                         f" (target <= +{config.p99_slack:.0%})"))
    pm, sm = p["wait_s"].get("max"), s["wait_s"].get("max")
    if pm is not None and sm is not None:
        # reported, not checked: what the p99 leaves out (behind a guard in policy order
        # the widest jobs can wait far longer than under Slurm; admin guide)
        checks[-1]["detail"] += f"; longest wait {float(pm):,.0f} s vs {float(sm):,.0f} s"
    checks[-1]["longest_wait"] = {"value": pm, "slurm": sm}
    pu, su = _util(p), _util(s)
    digits = 3
    while digits < 6 and f"{pu:.{digits}f}" == f"{su:.{digits}f}" and pu != su:
        digits += 1  # (enough digits to show which is lower)
    detail = f"utilisation {pu:.{digits}f} vs slurm {su:.{digits}f} (target: not lower)"
    readings = {}
    for key, label in _UTIL_READINGS:  # reported, not checked
        pr, sr = _util_reading(p, key), _util_reading(s, key)
        if pr is not None and sr is not None:
            detail += f"; {label} {pr:.{digits}f} vs {sr:.{digits}f}"
        readings[key] = {"value": pr, "slurm": sr}
    checks.append(_check("utilisation", util_not_lower(pu, su), pu, su, SLURM, detail))
    checks[-1].update(readings)
    if locality:
        pj = float(p["jct_s"]["mean"])
        if best_j is None:
            checks.append(_check("jct_vs_best_heuristic", None, pj, None, "", na))
        else:
            hj = float(ms[best_j]["jct_s"]["mean"])
            factor = hj / pj if pj > 0 else float("inf")
            detail = (f"mean JCT {pj:,.0f} s vs {best_j} {hj:,.0f} s: {factor:.2f}x lower"
                      f" (target >= {config.jct_factor}x)")
            best_dj = lowest(deployable_names, "jct_s")  # reported, as for the bsld
            deployable = None
            if best_dj is not None and best_dj != best_j:
                hd = float(ms[best_dj]["jct_s"]["mean"])
                fd = hd / pj if pj > 0 else float("inf")
                deployable = {"against": best_dj, "value": hd, "ok": fd >= config.jct_factor}
                detail += (f"; best not reading the recorded run time: {best_dj} {hd:,.0f} s"
                           f" ({fd:.2f}x lower)")
            floor = p.get("jct_floor_s")
            reach = hj / floor if floor else None
            if reach is not None:
                # no schedule of these jobs has a mean JCT below the mean recorded run
                detail += (f"; no schedule goes below {floor:,.0f} s (no wait, recorded"
                           f" speed): at most {reach:.2f}x lower")
                if reach < config.jct_factor:
                    detail += ", so the target is out of reach on these jobs"
            checks.append(_check("jct_vs_best_heuristic", factor >= config.jct_factor, pj,
                                 hj / config.jct_factor, best_j, detail + among))
            checks[-1]["deployable"] = deployable
            checks[-1]["reachable_factor"] = reach
        ps = p.get("single_leaf_share")
        raw = {n: ms[n].get("single_leaf_share")
               for n in dict.fromkeys(x for x in (SLURM, best_j) if x is not None)}
        refs = {n: float(v) for n, v in raw.items() if v is not None}
        if ps is None or len(refs) < len(raw):
            checks.append(_check("single_leaf_share", None, ps, None, ", ".join(raw),
                                 "no multi-node job or no switch tree: not applicable"))
        else:
            top = max(refs.values())
            shown = ", ".join(f"{n} {v:.3f}" for n, v in refs.items())
            multi = p.get("multi_node_jobs")
            of = f" of {int(multi)}" if multi else ""
            checks.append(_check("single_leaf_share", float(ps) > top, float(ps), top,
                                 ", ".join(refs),
                                 f"multi-node jobs within one leaf {float(ps):.3f}{of} vs"
                                 f" {shown} (target: larger)"))
    passed = all(c["ok"] is not False for c in checks)
    return {"policy": policy, "best_heuristic": {"bsld": best_b, "jct": best_j},
            "heuristics_left_out": left_out, "checks": checks, "passed": passed}


#: The checks :func:`annotate` reads as ratios: name -> (per-job metric, threshold of
#: ``policy / reference`` from the config, quantile compared or ``None`` for the mean).
RATIO_CHECKS: dict[str, tuple[str, Callable[[EvalConfig], float], float | None]] = {
    "bsld_vs_slurm": ("bsld", lambda c: 1 - c.bsld_reduction, None),
    "bsld_vs_best_heuristic": ("bsld", lambda c: 1.0, None),
    "p99_wait": ("wait", lambda c: 1 + c.p99_slack, 0.99),
    "jct_vs_best_heuristic": ("jct", lambda c: 1 / c.jct_factor, None),
}


#: Per-job arrays of each run by name (:func:`trainer.sim.metrics.job_metrics`), computed
#: once per evaluation for :func:`annotate`, :func:`model_pairs` and :func:`window_table`.
PerJob = Mapping[str, Mapping[str, np.ndarray]]


def annotate(targets: dict[str, Any], per_job: PerJob, config: EvalConfig,
             *, seed: int = 0) -> dict[str, Any]:
    """Add to each ratio check how sure it is (:mod:`trainer.confidence`).

    For every check of :data:`RATIO_CHECKS` with a reference run, ``ci`` (the ratio of
    the policy's mean, or p99 wait, to the reference's, its ``config.confidence``
    block-bootstrap interval, the threshold and the verdict: ``clear``, ``clear miss``
    or ``within the noise``) and, with ``config.windows`` > 1, ``windows`` (``met``: in
    how many of the ``of`` consecutive windows the ratio meets the threshold) are
    added, and the detail line says both; the same for the best heuristic that does
    not read the recorded run time (the check's ``deployable``), when there is one.
    The pass/fail stays the issue's: the point value on the whole test period.

    Returns:
        ``targets``, changed in place.
    """
    x = per_job.get(targets["policy"])
    for c in targets["checks"]:
        spec = RATIO_CHECKS.get(c["name"])
        ref = c["against"]
        if spec is None or x is None or c["ok"] is None or ref not in per_job:
            continue
        metric, thr, q = spec[0], spec[1](config), spec[2]
        text = _sureness(c, x[metric], per_job[ref][metric], thr, q, config, seed)
        c["detail"] += text
        dep = c.get("deployable")
        if dep is not None and dep["against"] in per_job:  # the same against that one
            text = _sureness(dep, x[metric], per_job[dep["against"]][metric], thr, q,
                             config, seed)
            c["detail"] += f"; against {dep['against']}{text}"
    return targets


def window_utilisation(result: SimResult, windows: int) -> list[float]:
    """The utilisation of a test-period replay in consecutive windows of its jobs.

    Windows of :func:`trainer.confidence.window_bounds` by job count; window ``i`` spans
    the time from its first job's arrival to the next window's first arrival, the last
    one to the run's own last end, so the time-weighted mean over the windows is the
    headline utilisation (GPUs, or nodes on a cluster without GPUs). Every run of the
    same jobs shares the spans but the last.
    """
    jobs, cl = result.jobs, result.cluster
    if jobs.n == 0 or result.util_t.size == 0:
        return []
    bounds = confidence.window_bounds(jobs.n, windows)
    edges = [float(jobs.eligible[lo]) for lo, _ in bounds]
    edges.append(float(max(result.end.max(), edges[-1])))
    busy = (result.util_gpus / cl.total_gpus if cl.total_gpus
            else result.util_nodes / cl.num_nodes)
    return metrics.span_means(result.util_t, busy, edges)


def annotate_utilisation(targets: dict[str, Any], results: Mapping[str, SimResult],
                         config: EvalConfig) -> dict[str, Any]:
    """Add to the utilisation check in how many windows it holds (``windows``).

    With ``config.windows`` > 1 the check gets ``windows``: ``met`` (windows whose
    utilisation is not lower than Slurm's in the same window, read as the target reads
    it), ``of``, and both runs' per-window figures, and its detail says it, as the
    ratio checks say theirs (:func:`annotate`). The pass/fail stays the whole period's.

    Returns:
        ``targets``, changed in place.
    """
    if config.windows <= 1:
        return targets
    ref = results.get(SLURM)
    run = results.get(targets["policy"])
    for c in targets["checks"]:
        if c["name"] != "utilisation" or c["ok"] is None or ref is None or run is None:
            continue
        mine = window_utilisation(run, config.windows)
        theirs = window_utilisation(ref, config.windows)
        if not mine or len(mine) != len(theirs):
            continue
        met = sum(1 for a, b in zip(mine, theirs, strict=True) if util_not_lower(a, b))
        c["windows"] = {"met": met, "of": len(mine), "value": mine, "slurm": theirs}
        c["detail"] += f"; not lower in {met} of {len(mine)} windows"
    return targets


def _sureness(c: dict[str, Any], xs: np.ndarray, ys: np.ndarray, thr: float,
              q: float | None, config: EvalConfig, seed: int) -> str:
    """Put ``ci`` and ``windows`` into ``c`` (:func:`annotate`); the words for its detail."""
    if not (ys.sum() if q is None else np.quantile(ys, q)) > 0:
        return ""  # (no ratio to a zero)
    ci = confidence.ratio_ci(xs, ys, blocks=config.blocks, resamples=config.resamples,
                             level=config.confidence, seed=seed, quantile=q)
    word = confidence.verdict(ci, thr)
    c["ci"] = {**ci.to_dict(), "threshold": thr, "verdict": word}
    text = f"; ratio {ci.ratio:.3f}"
    if ci.resamples:
        text += (f", {ci.level:.0%} interval {ci.lo:.3f}-{ci.hi:.3f}"
                 f" (target <= {thr:.3f}: {word})")
    if config.windows > 1:
        wx = confidence.window_means(xs, config.windows, q)
        wy = confidence.window_means(ys, config.windows, q)
        met = sum(1 for a, b in zip(wx, wy, strict=True) if b > 0 and a / b <= thr)
        c["windows"] = {"met": met, "of": len(wx)}
        text += f"; met in {met} of {len(wx)} windows"
    return text


def model_pairs(per_job: PerJob, models: Sequence[str], config: EvalConfig,
                *, seed: int = 0) -> list[dict[str, Any]]:
    """Each model after the first against the first, on mean bsld, with how sure it is.

    E.g. an RL checkpoint against the imitation net it started from: is it lower on the
    unseen jobs by more than one period's noise? Each entry has ``model``, ``against``,
    ``value``/``reference`` (the two mean bsld), ``ci`` (ratio, interval, verdict
    against 1), ``windows`` (in how many it is lower) and a one-line ``detail``
    (:func:`annotate`'s reading).
    """
    out: list[dict[str, Any]] = []
    names = [m for m in models if m in per_job]
    if len(names) < 2:
        return out
    ref = per_job[names[0]]["bsld"]
    for m in names[1:]:
        x = per_job[m]["bsld"]
        e: dict[str, Any] = {"model": m, "against": names[0], "value": float(x.mean()),
                             "reference": float(ref.mean())}
        text = _sureness(e, x, ref, 1.0, None, config, seed)
        e["detail"] = (f"{m} vs {names[0]}: mean bsld {x.mean():.3f} vs {ref.mean():.3f}"
                       f"{text}")
        out.append(e)
    return out


def window_table(per_job: PerJob, jobs: JobTable | None, windows: int) -> dict[str, Any]:
    """Mean bsld of every run in consecutive windows of the test period.

    Args:
        per_job: The runs' per-job arrays.
        jobs: The test period's jobs (``None``: no run).
        windows: Windows.

    Returns:
        ``{"rows": [[lo, hi], ...], "first_arrival": [...], "bsld": {name: [...]}}``
        (rows of the test period; first arrival of each window, in the trace's seconds).
    """
    if jobs is None or not per_job:
        return {"rows": [], "first_arrival": [], "bsld": {}}
    bounds = confidence.window_bounds(jobs.n, windows)
    return {"rows": [list(b) for b in bounds],
            "first_arrival": [int(jobs.eligible[lo]) for lo, _ in bounds],
            "bsld": {n: confidence.window_means(pj["bsld"], windows)
                     for n, pj in per_job.items()}}


# ---------------------------------------------------------------------------- table
#: Columns of :func:`table_rows`.
TABLE_HEADERS = ("policy", "jobs", "wait mean", "wait p95", "wait p99", "wait max",
                 "bsld mean", "bsld p99", "JCT mean", "makespan", "util", "frag", "exec eff",
                 "1-leaf", "jain")


def table_rows(ms: Mapping[str, Mapping[str, Any]], names: Sequence[str] | None = None
               ) -> list[tuple[str, ...]]:
    """Headline metrics, one row per run (:data:`TABLE_HEADERS`; ``util``: GPUs, else nodes)."""
    f = metrics._fmt
    out: list[tuple[str, ...]] = []
    for name in names if names is not None else list(ms):
        m = ms[name]
        out.append((
            name, f(m["jobs"]), f(m["wait_s"]["mean"]), f(m["wait_s"]["p95"]),
            f(m["wait_s"]["p99"]), f(m["wait_s"].get("max")), f(m["bsld"]["mean"]),
            f(m["bsld"]["p99"]), f(m["jct_s"]["mean"]), f(m["makespan_s"]), f(_util(m)),
            f(m["fragmentation"]["mean"]), f(m["execution_effectiveness"]),
            f(m["single_leaf_share"]), f(m["fairness"]["jain_bsld"]),
        ))
    return out


# ---------------------------------------------------------------------------- evaluate
@dataclass
class EvalResult:
    """What :func:`evaluate` measured.

    Attributes:
        config: The settings.
        split: The periods.
        models: Names of the learned policies, in the order given.
        metrics: Metrics of every run on the test period, models first, then the
            baselines (``slurm`` first).
        results: The restricted replays, by name.
        targets: The targets of the first model (``None``: no model).
        speed_model: The replays' speed model.
        files: Files written, by role.
        windows: Mean bsld of every run per window of the test period
            (:func:`window_table`).
        pairs: Each model after the first against the first (:func:`model_pairs`).
        warmup_jobs: Jobs replayed before the test period, not counted.
        draws: The test period under jittered arrivals (:func:`trainer.draws.summarize`;
            ``None``: one replay, ``config.draws`` 1).
    """

    config: EvalConfig
    split: Split
    models: list[str]
    metrics: dict[str, dict[str, Any]]
    results: dict[str, SimResult]
    targets: dict[str, Any] | None
    speed_model: str
    files: dict[str, str] = field(default_factory=dict)
    windows: dict[str, Any] = field(default_factory=dict)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    warmup_jobs: int = 0
    draws: dict[str, Any] | None = None

    @property
    def names(self) -> list[str]:
        """Every run, in table order."""
        return list(self.metrics)

    def table(self) -> list[tuple[str, ...]]:
        """The table rows (:data:`TABLE_HEADERS`)."""
        return table_rows(self.metrics)

    def window_names(self) -> list[str]:
        """Runs shown per window.

        The plotted ones (:meth:`plotted`), then the best heuristics not reading the
        recorded run time that the targets name.
        """
        names = [n for n in self.plotted() if n in self.windows.get("bsld", {})]
        for c in (self.targets or {}).get("checks", []):
            dep = c.get("deployable")
            shown = dep and dep["against"] in self.windows.get("bsld", {})
            if shown and dep["against"] not in names:
                names.append(dep["against"])
        return names

    def window_rows(self) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
        """Headers and rows of the per-window table.

        Columns: window, jobs, its first day (from the test period's first arrival),
        then the mean bsld of each run of :meth:`window_names`.
        """
        w = self.windows
        if not w.get("rows"):
            return (), []
        names = self.window_names()
        t0 = w["first_arrival"][0]
        rows = [(str(i + 1), str(hi - lo), f"{(fa - t0) / 86400:.1f}",
                 *(f"{w['bsld'][n][i]:.3f}" for n in names))
                for i, ((lo, hi), fa) in enumerate(zip(w["rows"], w["first_arrival"],
                                                       strict=True))]
        return ("window", "jobs", "day", *names), rows

    def plotted(self) -> list[str]:
        """Runs drawn in the plots: the models, slurm and the best heuristics.

        Heuristics that replayed exactly like one already drawn (e.g. ``saf`` and
        ``sif`` without a speed model) are left out.
        """
        def key(n: str) -> tuple[float, float, float]:
            m = self.metrics[n]
            return (float(m["bsld"]["mean"]), float(m["wait_s"]["mean"]),
                    float(m["jct_s"]["mean"]))

        out = [*self.models, SLURM]
        seen = {key(n) for n in out}
        heur = [n for n in self.metrics if n not in out]
        heur.sort(key=lambda n: (key(n)[0], n))
        for n in heur:
            if len(out) >= len(self.models) + 1 + self.config.plot_heuristics:
                break
            if key(n) not in seen:
                out.append(n)
                seen.add(key(n))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (``eval.json``)."""
        jobs = next(iter(self.results.values())).jobs if self.results else None
        return {
            "config": self.config.to_dict(),
            "speed_model": self.speed_model,
            "split": self.split.to_dict(),
            "warmup_jobs": self.warmup_jobs,
            "test_jobs": None if jobs is None else jobs.n,
            "models": self.models,
            "names": self.names,
            "plotted": self.plotted(),
            "table": {"headers": list(TABLE_HEADERS), "rows": [list(r) for r in self.table()]},
            "targets": self.targets,
            "windows": {**self.windows, "shown": self.window_names()},
            "model_pairs": self.pairs,
            "draws": self.draws,
            "metrics": self.metrics,
            "files": self.files,
        }


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run torch on ``n`` CPU threads inside the block (nothing when torch is not loaded)."""
    torch: Any = sys.modules.get("torch")
    if n is None or torch is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _progress(names: Sequence[str], show: bool, label: str = "evaluating") -> Any:
    if not show:
        return contextlib.nullcontext(names)
    return click.progressbar(names, label=label, file=sys.stderr,
                             item_show_func=lambda n: n or "")


def evaluate(jobs: JobTable, cluster: Cluster,
             models: Mapping[str, str | os.PathLike[str] | Policy],
             config: EvalConfig | None = None, *,
             options: SchedulerOptions | None = None,
             priority: PrioritySettings | None = None,
             speed_model: str = "none", seed: int = 0,
             out: str | os.PathLike[str] | None = None,
             progress: bool = False,
             extra: Mapping[str, Any] | None = None,
             split: Split | None = None,
             warmup_jobs: int | None = None,
             label: str = "evaluating",
             workers: int = 1) -> EvalResult:
    """Replay the test period under the models and every baseline (module docstring).

    Args:
        jobs: The whole history (all periods), as :func:`~trainer.sim.state.build_jobs`
            makes it.
        cluster: The cluster.
        models: Learned policies by name: checkpoint or ONNX paths, or policies (a
            given policy keeps its own user history).
        config: Split, targets, plots.
        options: Scheduler options (Slurm as configured; default: Slurm's defaults).
        priority: Priority settings of the ``slurm`` baseline.
        speed_model: Speed model name.
        seed: Seed of the replays.
        out: Directory for ``eval.json`` and the plots (``None``: no files).
        progress: Show a progress bar.
        extra: More JSON-able entries for ``eval.json`` (input, cluster...).
        split: The periods, instead of cutting ``config.train``/``config.val`` shares
            (e.g. to replay the validation period as the "test": ``Split(n, v, v)`` on
            the table cut at the test period).
        warmup_jobs: Jobs replayed before the test period, in place of
            ``config.warmup``'s share of ``jobs`` (a caller that cuts the history short
            warms up as many jobs as on the whole history: the share would shrink with
            the cut); at most as many as there are before the test period.
        label: The progress bar's label.
        workers: Local processes replaying the draws after the first side by side
            (``config.draws`` > 1; the same figures as one).

    With ``config.draws`` > 1 the test period is then replayed under jittered arrivals
    (:mod:`trainer.draws`; the result's ``draws``); a model given as a policy object
    replays a copy of itself as given in each draw.

    Raises:
        ValueError: On a bad split, a negative ``warmup_jobs``, a model that cannot be
            loaded, or a name used twice.
    """
    cfg = config or EvalConfig()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    opts = options or SchedulerOptions()
    prio = priority or PrioritySettings()
    if split is None:
        split = time_split(jobs.n, cfg.train, cfg.val)
    elif split.n != jobs.n or not 0 < split.test_start < split.n:
        raise ValueError(f"split {split} does not cut the {jobs.n} jobs into a non-empty"
                         " test period")
    if warmup_jobs is None:
        warmup_jobs = cfg.warmup_count(jobs.n)
    elif warmup_jobs < 0:
        raise ValueError(f"warmup_jobs must be >= 0, not {warmup_jobs}")
    lo = max(0, split.test_start - warmup_jobs)
    table = window(jobs, lo, jobs.n, shift=False)
    k = split.test_start - lo
    clash = [m for m in models if m in cfg.baselines]
    if clash:
        raise ValueError(f"model names {clash} are baseline names: pick others")
    eng = EngineOptions(seed=seed, speed_model=speed_model)
    fresh = None
    if cfg.draws > 1:
        from .draws import pristine

        fresh = pristine(models)  # (before a replay changes them)

    def history(norm: Any) -> Any:
        return user_history(jobs, cluster, lo, norm, cfg.history_jobs)

    runs: list[tuple[str, Callable[[], tuple[Policy, SchedulerOptions]]]] = []
    for name, m in models.items():
        def learned(m: Any = m) -> tuple[Policy, SchedulerOptions]:
            if isinstance(m, Policy):
                return m, opts
            place = (opts.placement if cfg.policy_placement == SCHEDULER_PLACEMENT
                     else cfg.policy_placement)
            return load_policy(m, history=history, placement=place,
                               rank_all=cfg.rank_all, settings=prio,
                               starvation_limit=cfg.starvation_limit,
                               starvation_order=cfg.starvation_order,
                               score_resolution=cfg.score_resolution,
                               switch_wait=cfg.switch_wait,
                               express_limit=cfg.express_limit, rescore=cfg.rescore), opts
        runs.append((name, learned))
    for name in [SLURM, *[b for b in cfg.baselines if b != SLURM]]:
        def baseline(name: str = name) -> tuple[Policy, SchedulerOptions]:
            pol, o = BASELINES[name].build(prio, opts)
            if isinstance(pol, Sef):  # the users' history before the test period, as a
                pol.history = history(pol.norm)  # learned policy's (then its completions)
            if cfg.guard_heuristics and name != SLURM:
                pol = as_deployed(pol, starvation_limit=cfg.starvation_limit,
                                  starvation_order=cfg.starvation_order,
                                  switch_wait=cfg.switch_wait,
                                  express_limit=cfg.express_limit)
            return pol, o
        runs.append((name, baseline))

    results: dict[str, SimResult] = {}
    ms: dict[str, dict[str, Any]] = {}
    guard: dict[str, tuple[float, str, float]] = {}  # each model's guard as it ran (limit 0:
    # none), with its express lane
    make = dict(runs)
    take_over = cfg.warmup_under == SLURM and k > 0
    with _progress([n for n, _ in runs], progress, label) as bar:
        for name in bar:
            pol, o = make[name]()
            guard[name] = ((pol.limit, pol.order, pol.express)
                           if isinstance(pol, StarvationGuard) else (0.0, "", 0.0))
            if take_over and name != SLURM:  # (slurm: its own warm-up is the incumbent's)
                pol = TakeOver(pol, BASELINES[SLURM].build(prio, opts)[0],
                               int(table.eligible[k]))
            sim = Simulator(table, cluster, pol, o, eng)
            follow = follower(pol)
            if follow is not None and name in models and not isinstance(models[name],
                                                                         Policy):
                follow(sim)  # the user history grows as jobs end, as in training
            with torch_threads(cfg.threads if name in models else None):
                r = restrict(sim.run(), k)
            r.policy = name
            results[name] = r
            ms[name] = metrics.compute(r)
    per_job = {n: metrics.job_metrics(r) for n, r in results.items()}  # (once, for all)
    table_jobs = next(iter(results.values())).jobs if results else None
    locality = _locality(cfg, speed_model)
    first = next(iter(models), None)
    targets = (check_targets(ms, first, cfg, locality=locality)  # (the seed baselines run)
               if first is not None else None)
    if targets is not None and first is not None:  # how the checked model ran
        (targets["starvation_limit"], targets["starvation_order"],
         targets["express_limit"]) = guard[first]
        targets["heuristics_guarded"] = any(guard[n][0] > 0 for n in ms if n not in models)
        targets["score_resolution"] = cfg.score_resolution
        targets["switch_wait"] = cfg.switch_wait
        targets["warmup_under"] = cfg.warmup_under if take_over else "own"
        targets["warmup_jobs"] = k
        targets["setup"] = guard_setup(targets)
        annotate(targets, per_job, cfg, seed=seed)
        annotate_utilisation(targets, results, cfg)
    res = EvalResult(cfg, split, list(models), ms, results, targets, speed_model,
                     windows=window_table(per_job, table_jobs, cfg.windows),
                     pairs=model_pairs(per_job, list(models), cfg, seed=seed),
                     warmup_jobs=k)
    if fresh is not None:
        from .draws import replay_draws

        res.draws = replay_draws(jobs, cluster, fresh, cfg, ms, progress=progress,
                                 workers=workers, options=opts, priority=prio,
                                 speed_model=speed_model, seed=seed, split=split,
                                 warmup_jobs=warmup_jobs)
    if out is not None:
        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        paths = metrics.plot({n: results[n] for n in res.plotted()}, d,
                             emphasis=res.models, reference=SLURM)
        for p in paths or []:
            res.files[p.stem] = str(p)
        data = res.to_dict()
        data["split"] = split.to_dict(jobs)
        data.update(dict(extra or {}))
        data["options"] = opts.to_dict()
        data["priority"] = prio.to_dict()
        res.files["eval"] = str(d / "eval.json")
        data["files"] = res.files
        metrics.write_json(data, d / "eval.json")
    return res


def _locality(cfg: EvalConfig, speed_model: str) -> bool:
    """Whether the JCT and leaf-locality targets are checked (``locality_targets``)."""
    return cfg.locality_targets if cfg.locality_targets is not None else speed_model != "none"


def teacher_candidates() -> list[str]:
    """Baselines ``train --imitate-from best`` chooses among.

    Every one that reads no recorded run time
    (:attr:`~trainer.sim.policies.Baseline.oracle`), but ``random`` (no order to learn).
    """
    return [n for n, b in BASELINES.items() if not b.oracle and b.policy != "random"]


def pick_teacher(jobs: JobTable, cluster: Cluster, *,
                 options: SchedulerOptions | None = None,
                 priority: PrioritySettings | None = None, speed_model: str = "none",
                 seed: int = 0, train: float = 0.7, val: float = 0.1,
                 candidates: Sequence[str] | None = None, starvation_limit: float = 0.0,
                 starvation_order: str = "age", express_limit: float = 0.0
                 ) -> tuple[str, dict[str, float]]:
    """The baseline with the lowest mean bsld before the test period: what to imitate.

    Every candidate replays all the jobs before the test period (the training and
    validation periods, cut as :func:`time_split` cuts), never the test period. The
    teacher is one choice among a dozen fixed orders, none with anything learned, so
    the whole stretch can decide it: on the validation period alone one busy week
    does (on the Lublin model it picked ``lrf``, 33.7 against ``seaf``'s 41.5 there,
    where the 80% before the test period put ``seaf`` first, 39.7 against 54.6, as the
    test period does, 28.8 against 35.9).

    With ``starvation_limit`` each candidate replays behind the helper's starvation
    guard (:func:`as_deployed`, with ``starvation_order`` and ``express_limit``), as the
    policy will be deployed and as ``evaluate --guard-heuristics`` reads the baselines:
    the guard changes which order wins.

    Args:
        jobs: The whole history (all periods).
        cluster: The cluster.
        options: Scheduler options (Slurm as configured).
        priority: Priority settings of the ``slurm`` baseline.
        speed_model: Speed model of the replays (the one RL trains with).
        seed: Seed of the replays.
        train: Share of the training period.
        val: Share of the validation period.
        candidates: Baseline names (default :func:`teacher_candidates`).
        starvation_limit: The deployed guard's limit (seconds; 0: the candidates
            replay unguarded).
        starvation_order: The guard's order (``age`` or ``policy``).
        express_limit: The guard's express lane (seconds; 0: none).

    Returns:
        The chosen name (ties: the first in name order) and every candidate's mean bsld.

    Raises:
        ValueError: On bad shares, an unknown name or a guard the helper refuses.
    """
    names = list(candidates) if candidates is not None else teacher_candidates()
    unknown = [n for n in names if n not in BASELINES]
    if unknown or not names:
        raise ValueError(f"unknown or no teacher candidates {unknown}: {sorted(BASELINES)}")
    check_express_limit(express_limit, starvation_order, starvation_limit)
    sp = time_split(jobs.n, train, val)
    part = window(jobs, 0, sp.test_start, shift=False)
    eng = EngineOptions(seed=seed, speed_model=speed_model)

    def guarded(pol: Policy) -> Policy:  # (limit 0: ``pol`` itself)
        return as_deployed(pol, starvation_limit=starvation_limit,
                           starvation_order=starvation_order, express_limit=express_limit)

    scores = {n: float(metrics.job_metrics(replay_baseline(
        n, part, cluster, priority or PrioritySettings(), options or SchedulerOptions(),
        eng, wrap=guarded))["bsld"].mean())
        for n in names}
    return min(names, key=lambda n: (scores[n], n)), scores


def guard_setup(targets: Mapping[str, Any]) -> str:
    """How the checked model and the baselines ran, as one phrase ("" when not recorded).

    E.g. "best behind the helper's starvation guard at 2 days, starving jobs in age
    order, baselines unguarded" (:func:`evaluate` stores it as the targets' ``setup``),
    and when every run took over from Slurm's queue (``warmup_under``), how many
    warm-up jobs Slurm scheduled.
    """
    phrase = _guard_phrase(targets)
    if phrase and targets.get("warmup_under") == SLURM:
        phrase += (f"; every run took over from the slurm baseline's queue at the test"
                   f" period's first arrival ({targets.get('warmup_jobs')} warm-up jobs)")
    return phrase


def _guard_phrase(targets: Mapping[str, Any]) -> str:
    """:func:`guard_setup` without the warm-up."""
    limit = targets.get("starvation_limit")
    if limit is None:
        return ""
    res = targets.get("score_resolution") or 0.0
    rounded = f" (scores rounded to {res:g})" if res else ""
    wait = targets.get("switch_wait") or 0.0
    if wait:
        rounded += f" (multi-node jobs wait up to {wait / 60:g} min for one leaf switch)"
    if not limit:
        return f"{targets['policy']}{rounded} without a starvation guard"
    order = targets.get("starvation_order") or "age"
    days = f"{limit / 86400:g} day{'' if limit == 86400 else 's'}"
    express = targets.get("express_limit") or 0.0
    lane = (f", jobs of at most {express / 60:g} min above them (express lane)" if express
            else "")
    others = ("the other baselines behind the same guard, slurm as configured"
              if targets.get("heuristics_guarded") else "baselines unguarded")
    return (f"{targets['policy']}{rounded} behind the helper's starvation guard at {days},"
            f" starving jobs in {order} order{lane}, {others}")


def print_targets(targets: Mapping[str, Any] | None) -> None:
    """Print the targets, one line per check."""
    if not targets:
        return
    setup = guard_setup(targets)
    click.echo(f"quality targets of {targets['policy']} on the test period:"
               f" {'PASSED' if targets['passed'] else 'NOT MET'}"
               f"{f' ({setup})' if setup else ''}")
    print_checks(targets["checks"])


def print_checks(checks: Sequence[Mapping[str, Any]]) -> None:
    """Print target checks, one line each: pass, FAIL or n/a, the name, the detail."""
    for c in checks:
        mark = {True: "pass", False: "FAIL", None: "n/a "}[c["ok"]]
        click.echo(f"  [{mark}] {c['name']:<24} {c['detail']}")


def print_pairs(pairs: Sequence[Mapping[str, Any]]) -> None:
    """Print :func:`model_pairs`, one line per model."""
    if pairs:
        click.echo(f"models against {pairs[0]['against']} on the test period:")
        for e in pairs:
            click.echo(f"  {e['detail']}")


# ---------------------------------------------------------------------------- command
def _model_args(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).stem, item
        if not name or not path:
            raise click.BadParameter(f"{item!r}: give PATH or NAME=PATH", param_hint="MODEL")
        if not Path(path).is_file():
            raise click.BadParameter(f"{path}: no such file", param_hint="MODEL")
        if name in out:
            raise click.BadParameter(f"name {name!r} given twice: use NAME=PATH",
                                     param_hint="MODEL")
        out[name] = path
    return out


def helper_settings(path: str) -> dict[str, Any]:
    """The :class:`EvalConfig` settings a helper configuration file deploys models with.

    Read from the helper's own TOML file (``/etc/rlsched/helper.toml``; checked as the
    helper checks it, :func:`slurm_plugin.helper.config.load_config`): its ``interval``
    (``rescore``), ``rank_all``, starvation guard (``starvation_limit``,
    ``starvation_order``, ``express_limit``), ``score_resolution``, and its steering:
    ``reqnodes`` places with the policy's head, ``switches`` waits ``switch_wait`` for one
    leaf switch under Slurm's placement, ``none`` leaves placement to the scheduler
    (``policy_placement`` :data:`SCHEDULER_PLACEMENT`).
    Not replayed: the per-cycle bounds (``max_changes``, ``steer_jobs``,
    ``steer_min_nodes``) and the site-factor band.

    Raises:
        ValueError: The file is missing, unreadable, world-writable or invalid (the
            helper's message).
    """
    from slurm_plugin.helper.config import ConfigError, load_config

    try:
        hc, _ = load_config(path)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    steer = {"reqnodes": "policy", "switches": "tree", "none": SCHEDULER_PLACEMENT}
    return {"rescore": float(hc.interval), "rank_all": hc.rank_all,
            "starvation_limit": hc.starvation_limit, "starvation_order": hc.starvation_order,
            "express_limit": hc.express_limit, "score_resolution": hc.score_resolution,
            "switch_wait": hc.switch_wait if hc.steering == "switches" else 0.0,
            "policy_placement": steer[hc.steering]}


def config_from_options(over: Mapping[str, Any], helper_config: str | None = None,
                        **fixed: Any) -> EvalConfig:
    """An :class:`EvalConfig` from command-line values over a helper file's settings.

    ``over`` (``None``: not given) wins over the settings of ``helper_config``
    (:func:`helper_settings`), which win over the defaults; ``fixed`` over all.

    Raises:
        click.UsageError: A bad value or helper file, with what to do.
    """
    try:
        base = helper_settings(helper_config) if helper_config else {}
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--helper-config'") from None
    try:
        return EvalConfig(**{**base, **{k: v for k, v in over.items() if v is not None},
                             **fixed})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _baseline_names(text: str | None) -> tuple[str, ...] | None:
    """``--baselines``: the names given, ``slurm`` first (added when missing).

    Raises:
        click.BadParameter: On an empty list or an unknown name (the known ones listed).
    """
    if text is None:
        return None
    names = _items(text, "slurm,spf,lrf", "'--baselines'")
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(map(repr, unknown))}; known:"
                                 f" {', '.join(BASELINES)}", param_hint="'--baselines'")
    return tuple(dict.fromkeys([SLURM, *names]))


def _eval_options(fn: Any) -> Any:
    opts = [
        click.option("--train", "train_share", type=click.FloatRange(0, 1, min_open=True,
                                                                     max_open=True),
                     help="Share of the jobs (first by arrival) that trained (default 0.7)."),
        click.option("--val", "val_share", type=click.FloatRange(0, 1, max_open=True),
                     help="Share after them that validated (default 0.1); the rest is"
                          " the test period."),
        click.option("--warmup", type=click.FloatRange(0, 1),
                     help="Share of jobs before the test period replayed first, not counted"
                          " (default 0.1: the validation period; 0: start empty)."),
        click.option("--warmup-under", type=click.Choice(list(WARMUP_UNDER)),
                     help="Who schedules the warm-up jobs: own (each replay its own policy,"
                          " default) or slurm (every replay runs the slurm baseline until"
                          " the test period's first arrival, then its own policy: the"
                          " queue the helper meets the day it is switched on; with"
                          " --warmup 0.8, the whole history before the test period)."),
        click.option("--policy-placement",
                     type=click.Choice(["policy", SCHEDULER_PLACEMENT, *PLACEMENTS]),
                     help="Node selection of the models: their placement head (policy,"
                          " default), the scheduler's (scheduler: the helper does not"
                          " steer) or a named placement."),
        click.option("--rank-all/--no-rank-all", default=None,
                     help="How the models order the queue, as the helper's rank_all: every"
                          " job by its raw score (default), or the jobs that fit now first,"
                          " the others in Slurm's order."),
        click.option("--starvation-limit", type=click.FloatRange(0),
                     help="The helper's starvation guard on the models, in seconds: a job"
                          " waiting longer goes first (default 172800, the"
                          " helper's default; 0: the models' order alone)."),
        click.option("--starvation-order", type=click.Choice(sorted(STARVATION_ORDERS)),
                     help="How the guard orders the starving jobs among themselves, as the"
                          " helper's starvation_order: age (oldest first, default) or"
                          " policy (the model's order)."),
        click.option("--express-limit", type=click.FloatRange(0),
                     help="The guard's express lane, as the helper's express_limit, in"
                          " seconds: a job whose time limit is at most this goes above"
                          " every other, starving ones included (default 0: none; needs"
                          " the guard, --starvation-limit above 0, in either"
                          " --starvation-order; --guard-heuristics gives the baselines the"
                          " same lane)."),
        click.option("--rescore", type=click.FloatRange(1),
                     help="Seconds between the models' re-rankings of the whole queue, as"
                          " the helper's interval: it ranks every pending job each cycle"
                          " (default 15, the helper's default; 300 re-ranks only as often"
                          " as Slurm's priority_calc_period re-computes priorities)."),
        click.option("--helper-config", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Replay the models as this helper.toml deploys them: its"
                          " interval, rank_all, starvation guard, score_resolution and"
                          " steering (reqnodes: the model places; switches: switch_wait;"
                          " none: the scheduler places). Options given here override it."),
        click.option("--score-resolution", type=click.FloatRange(0),
                     help="Round the models' scores to multiples of this, as the helper's"
                          " score_resolution: jobs scored that close tie and the older"
                          " goes first (default 0: exact scores)."),
        click.option("--switch-wait", type=click.FloatRange(0),
                     help="The helper's leaf-switch wait on the models, in seconds (its"
                          " switch_wait with steering = \"switches\"): a multi-node job"
                          " that one leaf switch could hold but that could start now only"
                          " across several waits up to this long for one leaf (default 0:"
                          " no wait)."),
        click.option("--guard-heuristics/--no-guard-heuristics", default=None,
                     help="Replay the baselines (but slurm) behind the same starvation"
                          " guard as the models, so that 'below the best heuristic'"
                          " compares orders deployed alike (default: off, the baselines"
                          " as defined)."),
        click.option("--baselines", "baselines", metavar="NAMES",
                     help="Replay only these baselines, comma-separated (default: every"
                          " one; slurm, the targets' reference, always): a shorter table"
                          " and fewer replays. The best-heuristic targets are then read"
                          " among those replayed,"
                          " and say how many were not. Names: 'rlsched simulate --help'"
                          " lists them."),
        click.option("--windows", type=click.IntRange(1),
                     help="Also read the test period in this many consecutive windows:"
                          " mean bsld per window, and in how many each target ratio is"
                          " met (default 4; 1: the whole period only)."),
        click.option("--resamples", type=click.IntRange(0),
                     help="Block-bootstrap resamples for the 95% interval of each target"
                          " ratio (default 2000; 0: no intervals)."),
        click.option("--draws", type=click.IntRange(1),
                     help="Replay the test period this many times: the first as recorded,"
                          " each other with every arrival moved by up to --jitter seconds"
                          " (order kept), and report each run's figures over the draws, in"
                          " how many each model keeps each line and the lines on the mean"
                          " figures; the targets stay read on the recorded replay (default"
                          " 1; each draw costs one more replay of every run)."),
        click.option("--jitter", type=click.FloatRange(1),
                     help="Seconds each arrival moves by at most in the draws after the"
                          " first (default 60)."),
        click.option("--workers", type=click.IntRange(1), default=1, show_default=True,
                     help="Local processes replaying the --draws after the first side by"
                          " side (the same figures as one)."),
        click.option("--locality-targets/--no-locality-targets", default=None,
                     help="Check the JCT and leaf-locality targets (default: when the speed"
                          " model is not none)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@click.command("evaluate")
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@_eval_options
@_input_options
def evaluate_command(models: tuple[str, ...], json_: bool | None,
                     train_share: float | None, val_share: float | None,
                     warmup: float | None, policy_placement: str | None,
                     locality_targets: bool | None, rank_all: bool | None,
                     starvation_limit: float | None, starvation_order: str | None,
                     guard_heuristics: bool | None, score_resolution: float | None,
                     switch_wait: float | None, windows: int | None, resamples: int | None,
                     baselines: str | None, express_limit: float | None = None,
                     rescore: float | None = None, helper_config: str | None = None,
                     warmup_under: str | None = None, draws: int | None = None,
                     jitter: float | None = None, workers: int = 1,
                     **kwargs: Any) -> None:
    """Compare learned policies with every baseline on the test period of a history.

    MODEL is a checkpoint (.pt) or an exported model (.onnx), as PATH or NAME=PATH;
    the first one is checked against the quality targets. The jobs (--trace FILE or
    --db URL --cluster NAME) are split by arrival: the first 70% trained, the next
    10% validated, the last 20% are the test period. Every model and every baseline
    (slurm, fifo, sjf, the seed heuristics...; --baselines: only those named) replays
    the test period with the same jobs, cluster, scheduler options and speed model;
    the table shows every
    headline metric, then the mean bsld in --windows consecutive windows of the test
    period. Each target ratio is also given with a 95% block-bootstrap interval and
    the number of windows it is met in: a verdict inside the noise of one period says
    so. --draws K replays the test period K times with arrivals moved by up to
    --jitter seconds: whether a verdict is the model's or the timing's.
    With --out, writes eval.json, config.json and plots.
    """
    paths = _model_args(models)
    sim = resolve(json=json_, **kwargs)
    over: dict[str, Any] = {"train": train_share, "val": val_share, "warmup": warmup,
                            "warmup_under": warmup_under,
                            "policy_placement": policy_placement,
                            "locality_targets": locality_targets, "rank_all": rank_all,
                            "starvation_limit": starvation_limit,
                            "starvation_order": starvation_order,
                            "express_limit": express_limit,
                            "guard_heuristics": guard_heuristics,
                            "score_resolution": score_resolution,
                            "switch_wait": switch_wait, "windows": windows,
                            "resamples": resamples, "rescore": rescore,
                            "draws": draws, "jitter": jitter,
                            "baselines": _baseline_names(baselines)}
    cfg = config_from_options(over, helper_config)
    prep = _prepare(sim)
    try:
        res = evaluate(prep.jobs, prep.cluster, paths, cfg, options=prep.options,
                       priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed,
                       out=sim.out, progress=True, workers=workers,
                       extra={"input": {"source": prep.source, "jobs": prep.jobs.n,
                                        "rejected": prep.rejected},
                              "model_files": paths})
    except (ValueError, KeyError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    if sim.out:
        metrics.write_json({"input": dataclasses.asdict(sim), "evaluate": cfg.to_dict(),
                            "models": paths, "numerics": numerics.describe()},
                           Path(sim.out) / "config.json")
        click.echo(f"wrote {Path(sim.out) / 'eval.json'}, config.json and"
                   f" {len(res.files) - 1} plots", err=True)
    if sim.json:
        from slurm_plugin.output import emit_json

        data = res.to_dict()
        for m in data["metrics"].values():
            m.pop("series", None)
        emit_json(data)
        return
    from slurm_plugin.output import table

    lo, hi = res.split.test
    click.echo(f"test period: jobs {lo}..{hi - 1} of {res.split.n} ({hi - lo} jobs),"
               f" speed model {sim.speed_model}")
    table(TABLE_HEADERS, res.table())
    heads, rows = res.window_rows()
    if len(rows) > 1:
        click.echo(f"mean bsld in {len(rows)} consecutive windows of the test period:")
        table(heads, rows)
    print_targets(res.targets)
    print_pairs(res.pairs)
    if res.draws:
        from .draws import print_draws

        print_draws(res.draws)
