"""Simulator fidelity: how closely a replay reproduces the start times a scheduler logged.

Two comparisons, both pure functions of a :class:`~trainer.sim.engine.SimResult` and the
start times that really happened (job id -> epoch s):

- :func:`wait_fidelity`, for a trace that logged waits (Theta's SWF wait field): mean
  and median wait simulated vs logged, the per-job absolute error of the wait (the
  same as that of the start time: both count from the same eligible time), Pearson's
  and Spearman's correlation of the two waits, and the share of jobs whose simulated
  wait is within each tolerance (default +-10 min and +-1 h) of the logged one.
- :func:`start_deviation`, for a run on a real Slurm cluster (``benchmarks/
  fidelity_live.py``): per-job start-time deviation ``sim - real`` (mean, median, p95,
  max of its absolute value, its mean sign), the share within small tolerances, and
  measures of start *order*: the share of job pairs started in a strict order by the
  real scheduler that the replay starts in the same order (:func:`order_agreement`),
  the share of jobs at the same position of the start order (:func:`same_rank`), and
  how many jobs each run started ahead of an earlier arrival (:func:`jumped_ahead`).

For live runs the workload is made here too, without touching Slurm:
:func:`scale_jobs` turns trace records into :class:`LiveJob` items (arrivals and run
times divided by a factor, sizes mapped onto the test cluster, time limits in whole
minutes as Slurm takes them), :func:`sbatch_argv` is the argument list that submits one
(no shell string is ever built from job data), and :func:`live_records` turns what
``sacct`` recorded into the records the simulator replays: the real submit, eligible,
start and end times with the request as submitted. :func:`idle_gaps` finds outages in a
logged schedule (nothing running while jobs wait), used to model maintenance windows.

Everything here is deterministic; nothing imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from db.records import JobRecord, TresCounts

if TYPE_CHECKING:
    from .engine import SimResult

__all__ = [
    "Aligned",
    "LiveJob",
    "PlanDeviation",
    "StartDeviation",
    "WaitFidelity",
    "align",
    "idle_gaps",
    "jumped_ahead",
    "live_records",
    "logged_starts",
    "map_users",
    "nominal_records",
    "order_agreement",
    "plan_deviation",
    "rank_correlation",
    "same_rank",
    "sbatch_argv",
    "scale_jobs",
    "start_deviation",
    "synthetic_jobs",
    "wait_fidelity",
]

#: Default tolerances (s) of :func:`wait_fidelity`: +-10 min and +-1 h.
WAIT_TOLERANCES = (600, 3600)

#: Default tolerances (s) of :func:`start_deviation` (a live run's scaled seconds).
START_TOLERANCES = (1, 2, 5, 10)


# ---------------------------------------------------------------------------- inputs
def logged_starts(records: Iterable[JobRecord]) -> dict[int, int]:
    """Job id -> logged start time of the records that have one.

    Raises:
        ValueError: If one job id appears twice with different start times (a trace
            whose ids repeat cannot be compared job by job).
    """
    out: dict[int, int] = {}
    for r in records:
        if r.start_time is None:
            continue
        seen = out.get(r.job_id)
        if seen is not None and seen != r.start_time:
            raise ValueError(
                f"job id {r.job_id} appears twice with starts {seen} and {r.start_time}:"
                " job ids must be unique to compare start times")
        out[r.job_id] = r.start_time
    return out


@dataclass(frozen=True)
class Aligned:
    """The jobs of a replay that have a logged start, as parallel arrays.

    Attributes:
        job_id: Job ids, in the replay's job order.
        eligible: Eligible (arrival) times.
        sim: Simulated start times.
        real: Logged start times.
        missing: Replayed jobs without a logged start (left out).
    """

    job_id: np.ndarray
    eligible: np.ndarray
    sim: np.ndarray
    real: np.ndarray
    missing: int


def align(result: SimResult, starts: Mapping[int, int]) -> Aligned:
    """Pair each replayed job with its logged start (jobs without one are counted apart).

    Raises:
        ValueError: If the replay left a job unstarted (start < 0).
    """
    jobs = result.jobs
    if (result.start < 0).any():
        raise ValueError("the replay did not start every job: run it to completion first")
    ids = jobs.job_id.tolist()
    keep = np.array([i in starts for i in ids], dtype=bool)
    real = np.array([starts[i] for i, k in zip(ids, keep, strict=True) if k], dtype=np.int64)
    return Aligned(jobs.job_id[keep].astype(np.int64), jobs.eligible[keep].astype(np.int64),
                   result.start[keep].astype(np.int64), real, int((~keep).sum()))


# ---------------------------------------------------------------------------- statistics
def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x``, ties given their average rank."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    first = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    last = np.r_[first[1:], xs.size] - 1
    avg = (first + last) / 2.0 + 1.0
    out = np.empty(x.size, dtype=np.float64)
    out[order] = np.repeat(avg, last - first + 1)
    return out


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    if a.size < 2:
        return math.nan
    a = a.astype(np.float64) - a.mean()
    b = b.astype(np.float64) - b.mean()
    den = math.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum()) / den if den > 0 else math.nan


def rank_correlation(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (ties: average ranks); NaN if either is constant.

    Raises:
        ValueError: If the lengths differ.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"lengths differ: {x.size} and {y.size}")
    return _pearson(_ranks(x), _ranks(y))


def _share_within(err: np.ndarray, tolerances: Sequence[int]) -> tuple[tuple[int, float], ...]:
    if err.size == 0:
        return tuple((int(t), math.nan) for t in tolerances)
    return tuple((int(t), float((err <= t).mean())) for t in tolerances)


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


class _Dict:
    """``to_dict`` for the frozen result dataclasses below."""

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON-able dict (``within`` as ``{"600": share}``)."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            out[f.name] = {str(k): s for k, s in v} if f.name == "within" else v
        return out


@dataclass(frozen=True)
class WaitFidelity(_Dict):
    """Simulated vs logged waits of a trace (see :func:`wait_fidelity`).

    Attributes:
        jobs: Jobs compared.
        missing: Replayed jobs without a logged start (not compared).
        mean_wait_sim: Mean simulated wait, s.
        mean_wait_log: Mean logged wait, s.
        median_wait_sim: Median simulated wait, s.
        median_wait_log: Median logged wait, s.
        mean_abs_error: Mean of ``|sim wait - logged wait|``, s.
        median_abs_error: Its median, s.
        p95_abs_error: Its 95th percentile, s.
        correlation: Pearson's correlation of the two waits (NaN if one is constant).
        rank_correlation: Spearman's (robust to the heavy tail of waits).
        within: ``(tolerance s, share of jobs with |error| <= tolerance)`` pairs.
    """

    jobs: int
    missing: int
    mean_wait_sim: float
    mean_wait_log: float
    median_wait_sim: float
    median_wait_log: float
    mean_abs_error: float
    median_abs_error: float
    p95_abs_error: float
    correlation: float
    rank_correlation: float
    within: tuple[tuple[int, float], ...]


def wait_fidelity(result: SimResult, starts: Mapping[int, int],
                  tolerances: Sequence[int] = WAIT_TOLERANCES) -> WaitFidelity:
    """Compare the replay's waits with the logged ones (job id -> logged start time).

    Waits count from each job's eligible time in the replay (the submit time for a
    trace), so a logged start before it gives a negative logged wait, compared as is.
    """
    a = align(result, starts)
    sim_w = (a.sim - a.eligible).astype(np.float64)
    log_w = (a.real - a.eligible).astype(np.float64)
    err = np.abs(sim_w - log_w)
    return WaitFidelity(
        jobs=int(a.job_id.size), missing=a.missing,
        mean_wait_sim=_mean(sim_w), mean_wait_log=_mean(log_w),
        median_wait_sim=_pct(sim_w, 50), median_wait_log=_pct(log_w, 50),
        mean_abs_error=_mean(err), median_abs_error=_pct(err, 50),
        p95_abs_error=_pct(err, 95), correlation=_pearson(sim_w, log_w),
        rank_correlation=rank_correlation(sim_w, log_w) if err.size else math.nan,
        within=_share_within(err, tolerances))


def order_agreement(real: Sequence[float] | np.ndarray, sim: Sequence[float] | np.ndarray
                    ) -> float:
    """Share of job pairs started in a strict order for real that the replay orders alike.

    Over the pairs ``(i, j)`` with ``real[i] < real[j]``: a pair counts 1 when
    ``sim[i] < sim[j]``, 0.5 when ``sim[i] == sim[j]``, 0 when reversed. Pairs the real
    scheduler started at the same time are left out. NaN when there is no such pair.
    Quadratic in the number of jobs (meant for live runs of a few hundred jobs).

    Raises:
        ValueError: If the lengths differ.
    """
    r = np.asarray(real, dtype=np.float64)
    s = np.asarray(sim, dtype=np.float64)
    if r.shape != s.shape:
        raise ValueError(f"lengths differ: {r.size} and {s.size}")
    dr = r[None, :] - r[:, None]
    ds = s[None, :] - s[:, None]
    strict = dr > 0
    total = int(strict.sum())
    if total == 0:
        return math.nan
    same = float((strict & (ds > 0)).sum()) + 0.5 * float((strict & (ds == 0)).sum())
    return same / total


def same_rank(real: Sequence[float] | np.ndarray, sim: Sequence[float] | np.ndarray,
              ids: Sequence[int] | np.ndarray) -> float:
    """Share of jobs at the same position of the start order in both runs.

    Each run's order is by start time, ties by job id (``ids``). NaN when empty.

    Raises:
        ValueError: If the lengths differ.
    """
    r, s, i = np.asarray(real), np.asarray(sim), np.asarray(ids)
    if not r.shape == s.shape == i.shape:
        raise ValueError(f"lengths differ: {r.size}, {s.size}, {i.size}")
    if r.size == 0:
        return math.nan
    return float((np.lexsort((i, r)) == np.lexsort((i, s))).mean())


def jumped_ahead(eligible: Sequence[int] | np.ndarray, start: Sequence[int] | np.ndarray,
                 ids: Sequence[int] | np.ndarray) -> int:
    """How many jobs started before some job that became eligible earlier.

    "Earlier" orders jobs by eligible time, then job id (the order of equal
    priorities); a job *jumped ahead* when an earlier one started strictly later. With
    FIFO-like priorities these are the jobs a backfill pass started out of order.

    Raises:
        ValueError: If the lengths differ.
    """
    e, s, i = np.asarray(eligible), np.asarray(start), np.asarray(ids)
    if not e.shape == s.shape == i.shape:
        raise ValueError(f"lengths differ: {e.size}, {s.size}, {i.size}")
    if s.size == 0:
        return 0
    order = np.lexsort((i, e))
    st = s[order].astype(np.float64)
    before = np.maximum.accumulate(np.r_[-np.inf, st[:-1]])
    return int((before > st).sum())


@dataclass(frozen=True)
class StartDeviation(_Dict):
    """Per-job start-time deviation of a replay from a real run (see :func:`start_deviation`).

    Attributes:
        jobs: Jobs compared.
        missing: Replayed jobs without a real start (not compared).
        mean_abs: Mean of ``|sim start - real start|``, s.
        median_abs: Its median, s.
        p95_abs: Its 95th percentile, s.
        max_abs: Its maximum, s.
        mean_signed: Mean of ``sim start - real start`` (negative: the replay starts
            jobs earlier than Slurm did), s.
        mean_wait_sim: Mean simulated wait, s.
        mean_wait_real: Mean real wait, s.
        order_pairs: :func:`order_agreement` of the start times.
        same_rank: :func:`same_rank` of the start times.
        jumped_sim: :func:`jumped_ahead` of the replay's starts (jobs it started out of
            arrival order).
        jumped_real: The same of the real starts.
        within: ``(tolerance s, share of jobs with |deviation| <= tolerance)`` pairs.
    """

    jobs: int
    missing: int
    mean_abs: float
    median_abs: float
    p95_abs: float
    max_abs: float
    mean_signed: float
    mean_wait_sim: float
    mean_wait_real: float
    order_pairs: float
    same_rank: float
    jumped_sim: int
    jumped_real: int
    within: tuple[tuple[int, float], ...]


def start_deviation(result: SimResult, starts: Mapping[int, int],
                    tolerances: Sequence[int] = START_TOLERANCES) -> StartDeviation:
    """Compare the replay's start times with real ones (job id -> real start time)."""
    a = align(result, starts)
    d = (a.sim - a.real).astype(np.float64)
    ad = np.abs(d)
    return StartDeviation(
        jobs=int(d.size), missing=a.missing, mean_abs=_mean(ad), median_abs=_pct(ad, 50),
        p95_abs=_pct(ad, 95), max_abs=float(ad.max()) if ad.size else math.nan,
        mean_signed=_mean(d), mean_wait_sim=_mean((a.sim - a.eligible).astype(np.float64)),
        mean_wait_real=_mean((a.real - a.eligible).astype(np.float64)),
        order_pairs=order_agreement(a.real, a.sim), same_rank=same_rank(a.real, a.sim, a.job_id),
        jumped_sim=jumped_ahead(a.eligible, a.sim, a.job_id),
        jumped_real=jumped_ahead(a.eligible, a.real, a.job_id),
        within=_share_within(ad, tolerances))


@dataclass(frozen=True)
class PlanDeviation(_Dict):
    """A replay's backfill plans against Slurm's, moment by moment (:func:`plan_deviation`).

    A *pair* is a moment (a snapshot of Slurm's queue) and a job pending then both in the
    real run and in the replay. Slurm *planned* it when ``squeue`` showed an expected
    start after that moment; the replay, when its plan in effect then had reserved it.

    Attributes:
        moments: Snapshots compared.
        pairs: Pairs (job pending in both at a moment).
        slurm_planned: Pairs Slurm had planned.
        replay_planned: Pairs the replay had planned.
        both: Pairs both had planned (the deviations below are over these).
        mean_abs: Mean of ``|replay's planned start - Slurm's|``, s.
        median_abs: Its median, s.
        p95_abs: Its 95th percentile, s.
        max_abs: Its maximum, s.
        mean_signed: Mean of ``replay's - Slurm's`` (negative: the replay plans earlier).
        within: ``(tolerance s, share of the pairs both planned within it)``.
        slurm_held: Mean of ``|Slurm's planned start - its real start|`` over the pairs
            Slurm planned (how far Slurm's own plan held: jobs ending before their
            limits move it), s.
    """

    moments: int
    pairs: int
    slurm_planned: int
    replay_planned: int
    both: int
    mean_abs: float
    median_abs: float
    p95_abs: float
    max_abs: float
    mean_signed: float
    within: tuple[tuple[int, float], ...]
    slurm_held: float


def plan_deviation(result: SimResult, snapshots: Sequence[tuple[int, Mapping[int, int]]],
                   starts: Mapping[int, int],
                   tolerances: Sequence[int] = START_TOLERANCES) -> PlanDeviation:
    """Compare the replay's plans (:attr:`SimResult.plans`) with Slurm's at the same moments.

    ``snapshots``: per moment (epoch s), every job of the run pending then with the start
    ``squeue`` expected for it (0 or a time not after the moment: none); the replay must
    have been run with those moments as ``EngineOptions.plan_probes``. ``starts``: the
    real start per job (:attr:`trainer.fidelity_live.LiveRun.starts`).

    Raises:
        ValueError: If the replay kept no plans, or at other moments than the snapshots.
    """
    if result.plans is None or [p for p, _ in result.plans] != [p for p, _ in snapshots]:
        raise ValueError("replay with EngineOptions(plan_probes=) at the snapshots' moments")
    jobs = result.jobs
    row = {int(j): k for k, j in enumerate(jobs.job_id.tolist())}
    elig, start = jobs.eligible, result.start
    pairs = s_planned = r_planned = 0
    dev: list[int] = []
    held: list[int] = []
    for (t, real), (_, plan) in zip(snapshots, result.plans, strict=True):
        for jid, expected in real.items():
            k = row.get(int(jid))
            if k is None or not int(elig[k]) <= t < int(start[k]):
                continue  # not in the replay, or not pending there at t
            pairs += 1
            mine = plan.get(int(jid))
            r_planned += mine is not None
            if expected > t:
                s_planned += 1
                if int(jid) in starts:
                    held.append(abs(int(starts[int(jid)]) - int(expected)))
                if mine is not None:
                    dev.append(mine - int(expected))
    d = np.asarray(dev, dtype=np.float64)
    ad = np.abs(d)
    return PlanDeviation(
        moments=len(snapshots), pairs=pairs, slurm_planned=s_planned, replay_planned=r_planned,
        both=int(d.size), mean_abs=_mean(ad), median_abs=_pct(ad, 50), p95_abs=_pct(ad, 95),
        max_abs=float(ad.max()) if ad.size else math.nan, mean_signed=_mean(d),
        within=_share_within(ad, tolerances),
        slurm_held=_mean(np.asarray(held, dtype=np.float64)))


# ---------------------------------------------------------------------------- outages
def idle_gaps(eligible: Sequence[int] | np.ndarray, start: Sequence[int] | np.ndarray,
              end: Sequence[int] | np.ndarray, min_gap: int) -> list[tuple[int, int]]:
    """Intervals of a logged schedule when no job ran although some job was waiting.

    Such a gap (a maintenance window, an outage) is invisible to a replay, which would
    start the waiting jobs at once. An interval ``[a, b)`` is reported when no job runs
    in it (each job runs ``[start, end)``), at least one job is eligible and not yet
    started at ``a`` (and so waits through it), and ``b - a >= min_gap``.

    Raises:
        ValueError: If the lengths differ or ``min_gap`` is not positive.
    """
    el = np.asarray(eligible, dtype=np.int64)
    st = np.asarray(start, dtype=np.int64)
    en = np.asarray(end, dtype=np.int64)
    if not el.shape == st.shape == en.shape:
        raise ValueError(f"lengths differ: {el.size}, {st.size}, {en.size}")
    if min_gap <= 0:
        raise ValueError("min_gap must be positive")
    run = en > st
    if not run.any():
        return []
    t = np.concatenate([st[run], en[run]])
    delta = np.concatenate([np.ones(int(run.sum()), np.int64),
                            -np.ones(int(run.sum()), np.int64)])
    order = np.lexsort((delta, t))  # at one time: ends (-1) before starts (+1)
    t, busy = t[order], np.cumsum(delta[order])
    gaps: list[tuple[int, int]] = []
    # after the last event at a time, busy == 0 until the next event time
    last = np.r_[t[1:] != t[:-1], True]
    t_last, b_last = t[last], busy[last]
    for k in np.flatnonzero(b_last[:-1] == 0):
        a, b = int(t_last[k]), int(t_last[k + 1])
        if b - a >= min_gap and bool(((el <= a) & (st > a)).any()):
            gaps.append((a, b))
    return gaps


# ---------------------------------------------------------------------------- live runs
@dataclass(frozen=True)
class LiveJob:
    """One job of a live fidelity run, in the run's (scaled) seconds.

    Attributes:
        index: Position in the workload (the job is named after it).
        arrival: Seconds after the run's start at which it is submitted.
        run: Seconds it sleeps (whole seconds, at least 1).
        nodes: Nodes it asks for.
        limit_min: Its Slurm time limit in whole minutes (at least 1).
        gpus: GPUs per node; 0 asks for whole nodes (``--exclusive``).
        cpus: CPUs per node when ``gpus`` is set (0: Slurm's default of one).
        user: Local user the job is submitted as (``""``: the submitting user).
    """

    index: int
    arrival: float
    run: int
    nodes: int
    limit_min: int
    gpus: int = 0
    cpus: int = 0
    user: str = ""

    def __post_init__(self) -> None:
        if self.run < 1 or self.nodes < 1 or self.limit_min < 1:
            raise ValueError(f"job {self.index}: run, nodes and limit_min must be >= 1")
        if self.arrival < 0 or self.gpus < 0 or self.cpus < 0:
            raise ValueError(f"job {self.index}: arrival, gpus and cpus must be >= 0")
        if self.limit_min * 60 < self.run:
            raise ValueError(f"job {self.index}: run {self.run} s exceeds its limit"
                             f" {self.limit_min} min (it would be killed)")

    @property
    def request(self) -> TresCounts:
        """The request as the simulator reads it: whole nodes, or GPUs and CPUs."""
        if not self.gpus:
            return TresCounts(self.nodes, None, None, None)
        return TresCounts(self.nodes, (self.cpus or 1) * self.nodes, self.gpus * self.nodes,
                          None)


def map_users(records: Iterable[JobRecord], pool: Sequence[str]) -> dict[str, str]:
    """Trace user -> one of ``pool``, round-robin in order of first appearance.

    Deterministic for the same records (in submit order); an empty pool maps nobody.
    """
    out: dict[str, str] = {}
    if not pool:
        return out
    for r in sorted(records, key=lambda r: (r.submit_time, r.job_id)):
        if r.user not in out:
            out[r.user] = pool[len(out) % len(pool)]
    return out


def scale_jobs(
    records: Sequence[JobRecord],
    scale: float,
    *,
    cluster_nodes: int,
    trace_nodes: int,
    min_run: int = 2,
    max_run: int | None = None,
    limit_factor: float = 2.0,
    limit_margin: int = 5,
    gpus_per_node: int = 0,
    cpus_per_gpu: int = 4,
    users: Mapping[str, str] | None = None,
) -> tuple[list[LiveJob], dict[str, int]]:
    """A live workload from trace records: times divided by ``scale``, sizes mapped.

    - ``arrival`` = (submit - first submit) / ``scale``;
    - ``run`` = the recorded run time / ``scale``, rounded, clipped to
      ``[min_run, max_run]`` (a run shorter than Slurm's reaction time, about 1 s,
      would measure latency, not scheduling);
    - ``nodes`` = ceil(nodes x ``cluster_nodes`` / ``trace_nodes``): a trace machine of
      ``trace_nodes`` nodes (or processors, for a processor-based SWF) becomes the
      cluster's, every job taking whole nodes;
    - except a record that asks for GPUs when ``gpus_per_node`` is set (a Philly-style
      trace): its GPU request is kept as it is (not scaled to the machine), on
      ``max(nodes, ceil(gpus / gpus_per_node))`` nodes with an even share of the GPUs
      on each (capped at ``gpus_per_node``; nodes capped at ``cluster_nodes``) and
      ``cpus_per_gpu`` CPUs per GPU, sharing nodes with other jobs;
    - ``user``: ``users[record.user]`` when ``users`` is given (see :func:`map_users`);
    - the time limit: the record's, else ``limit_factor`` x the recorded run (a user's
      estimate; of the run before clipping), divided by ``scale``; at least ``run +
      limit_margin`` so no job is killed; then rounded **up** to whole minutes, at
      least 1, because Slurm's limits are minutes. With a large ``scale`` most limits
      become exactly 1 minute: the replay is given the same minute limits, so it plans
      with what Slurm planned with.

    Returns:
        The jobs in submit order, and counts of what the mapping changed:
        ``run_raised`` (to ``min_run``), ``run_capped`` (to ``max_run``),
        ``nodes_capped`` (to ``cluster_nodes``), ``gpus_capped`` (to
        ``gpus_per_node`` per node), ``limit_raised`` (the limit needed more than the
        scaled estimate: at least ``run + limit_margin`` or one minute).

    Raises:
        ValueError: On a non-positive scale or size, ``min_run < 1``, ``max_run <
            min_run``, ``limit_factor < 1``, or a record without a run time.
    """
    if scale <= 0 or cluster_nodes < 1 or trace_nodes < 1:
        raise ValueError("scale, cluster_nodes and trace_nodes must be positive")
    if gpus_per_node < 0 or cpus_per_gpu < 1:
        raise ValueError("gpus_per_node must be >= 0 and cpus_per_gpu >= 1")
    if min_run < 1 or (max_run is not None and max_run < min_run):
        raise ValueError("need 1 <= min_run <= max_run")
    if limit_factor < 1:
        raise ValueError("limit_factor must be >= 1")
    recs = sorted(records, key=lambda r: (r.submit_time, r.job_id))
    counts = {"run_raised": 0, "run_capped": 0, "nodes_capped": 0, "gpus_capped": 0,
              "limit_raised": 0}
    if not recs:
        return [], counts
    t0 = recs[0].submit_time
    out: list[LiveJob] = []
    for k, r in enumerate(recs):
        if r.start_time is None or r.end_time is None:
            raise ValueError(f"record {r.job_id} has no run time (start and end)")
        raw = r.end_time - r.start_time
        run = round(raw / scale)
        if run < min_run:
            run = min_run
            counts["run_raised"] += 1
        if max_run is not None and run > max_run:
            run = max_run
            counts["run_capped"] += 1
        gpus = r.req.gpus or 0
        per_gpu = 0
        if gpus_per_node and gpus > 0:
            nodes = max(r.req.nodes or 1, math.ceil(gpus / gpus_per_node))
            per_gpu = math.ceil(gpus / nodes)
            if per_gpu > gpus_per_node:
                per_gpu = gpus_per_node
                counts["gpus_capped"] += 1
        else:
            size = r.req.nodes or r.alloc.nodes or 1
            nodes = math.ceil(size * cluster_nodes / trace_nodes)
        if nodes > cluster_nodes:
            nodes = cluster_nodes
            counts["nodes_capped"] += 1
        known = r.time_limit if r.time_limit is not None and r.time_limit > 0 else None
        est = (known if known is not None else limit_factor * raw) / scale
        need = max(est, run + limit_margin)
        limit_min = max(1, math.ceil(need / 60))
        if limit_min > max(1, math.ceil(est / 60)):
            counts["limit_raised"] += 1
        user = users.get(r.user, "") if users is not None else ""
        out.append(LiveJob(k, (r.submit_time - t0) / scale, run, nodes, limit_min,
                           per_gpu, cpus_per_gpu * per_gpu, user))
    return out, counts


def synthetic_jobs(
    n: int,
    *,
    seed: int = 0,
    cluster_nodes: int = 16,
    gpus_per_node: int = 8,
    mean_gap: float = 3.0,
    run: tuple[int, int] = (5, 40),
    gpu_share: float = 0.0,
) -> list[LiveJob]:
    """A seeded live workload that fits a small cluster (the 16-node test cluster).

    - arrivals: exponential gaps of mean ``mean_gap`` s, the first at 0;
    - sizes: whole-node jobs of 1, 2, 4, 8 or the whole cluster's nodes (weights 35,
      25, 20, 15, 5 %); with probability ``gpu_share`` instead a one-node job of 1, 2,
      4 or ``gpus_per_node`` GPUs with 4 CPUs per GPU;
    - run: uniform whole seconds in ``run``; time limit ``run`` x U(1, 3) + 5 s,
      rounded up to whole minutes.

    Raises:
        ValueError: On ``n < 0``, a bad run range, or a share outside [0, 1].
    """
    if n < 0 or run[0] < 1 or run[1] < run[0] or not 0.0 <= gpu_share <= 1.0:
        raise ValueError("need n >= 0, 1 <= run[0] <= run[1], 0 <= gpu_share <= 1")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(mean_gap, n)
    gaps[:1] = 0.0
    arrival = np.round(np.cumsum(gaps), 2)
    sizes = np.minimum(np.array([1, 2, 4, 8, cluster_nodes]), cluster_nodes)
    node = rng.choice(sizes, n, p=[0.35, 0.25, 0.20, 0.15, 0.05])
    gpu = rng.random(n) < gpu_share
    gpus = rng.choice(np.array([1, 2, 4, max(1, gpus_per_node)]), n)
    runs = rng.integers(run[0], run[1] + 1, n)
    factor = rng.uniform(1.0, 3.0, n)
    out = []
    for k in range(n):
        limit = max(1, math.ceil((runs[k] * factor[k] + 5) / 60))
        if gpu[k] and gpus_per_node:
            g = int(min(gpus[k], gpus_per_node))
            out.append(LiveJob(k, float(arrival[k]), int(runs[k]), 1, limit, g, 4 * g))
        else:
            out.append(LiveJob(k, float(arrival[k]), int(runs[k]), int(node[k]), limit))
    return out


def sbatch_argv(job: LiveJob, script: str, *, name: str, chdir: str,
                partition: str | None = None) -> list[str]:
    """The ``sbatch`` argument list that submits ``job`` (sleeping ``job.run`` seconds).

    ``script`` is a batch script that sleeps for its first argument (``exec sleep
    "$1"``); the run time is passed to it as an argument, never built into a shell
    string.
    """
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--chdir={chdir}",
            "--output=/dev/null", f"--nodes={job.nodes}", f"--time={job.limit_min}"]
    if partition:
        argv.append(f"--partition={partition}")
    if job.gpus:
        argv += [f"--gres=gpu:{job.gpus}", "--ntasks-per-node=1",
                 f"--cpus-per-task={job.cpus or 1}"]
    else:
        argv.append("--exclusive")
    return [*argv, script, str(job.run)]


def nominal_records(jobs: Sequence[LiveJob], t0: int, *, cluster: str = "") -> list[JobRecord]:
    """Records of ``jobs`` as if each started on arrival (for a replay that predicts a run).

    Job ids are ``index + 1``; submit times ``t0 + arrival`` (rounded down); users the
    jobs' own (``fidelity`` when they have none).
    """
    out = []
    for j in jobs:
        sub = t0 + int(j.arrival)
        out.append(_record(j.index + 1, j, sub, sub, sub, sub + j.run, "COMPLETED", cluster))
    return out


def _record(job_id: int, j: LiveJob, submit: int, eligible: int, start: int, end: int,
            state: str, cluster: str) -> JobRecord:
    req = j.request
    return JobRecord(
        job_id=job_id, name=f"job{j.index}", user=j.user or "fidelity", account="",
        partition="",
        qos="", state=state, submit_time=submit, eligible_time=eligible, start_time=start,
        end_time=end, time_limit=j.limit_min * 60, req=req, alloc=req, node_list="",
        nodes=(), priority=None, exit_code=0, cluster=cluster)


def live_records(accounted: Iterable[JobRecord], submitted: Mapping[int, LiveJob], *,
                 end_latency: int = 0) -> list[JobRecord]:
    """The records a replay of a live run gets: Slurm's times, the request as submitted.

    Submit, eligible, start and end times and the user come from ``sacct`` (so the
    replay sees the arrivals and run times that really happened); the request (nodes,
    GPUs, CPUs) and time limit are those of the submitted :class:`LiveJob` (``sacct``
    reports what was *allocated*, e.g. every CPU of an exclusive node).
    ``end_latency`` seconds are added to each run: the time Slurm takes to free a
    finished job's nodes, which the replay otherwise frees at once.

    Raises:
        ValueError: If a submitted job is missing from ``accounted``, or has no start
            or end time (it did not finish).
    """
    by_id = {r.job_id: r for r in accounted}
    out = []
    for jid, j in sorted(submitted.items()):
        r = by_id.get(jid)
        if r is None:
            raise ValueError(f"job {jid} (workload job {j.index}) is not in sacct's records")
        if r.start_time is None or r.end_time is None:
            raise ValueError(f"job {jid} has no start or end in sacct (state {r.state})")
        eligible = r.eligible_time if r.eligible_time is not None else r.submit_time
        out.append(replace(_record(jid, j, r.submit_time, eligible, r.start_time,
                                   r.end_time + end_latency, r.state, r.cluster),
                           name=r.name, user=r.user))
    return out
