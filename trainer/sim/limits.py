"""Time limits for traces that record none: the user's request, modelled.

Backfill plans with the time limit users ask for, and users overestimate it. Some
traces do not record it (``lublin_256.swf``: standard SWF with the requested time at -1;
Philly: no such column). Two ways to fill it in, chosen by ``missing_limits`` (``rlsched
simulate|compare|evaluate|train --missing-limits``):

- ``run`` (the default, and what :func:`~trainer.sim.state.build_jobs` does by itself):
  each job's own recorded run time, a perfect estimate. Backfill and ``sjf`` then know
  every run time in advance (``sjf`` is as much an oracle as ``sif``), while a learned
  policy sees no limit at all (a live job without a limit shows none): the comparison
  favours the baselines.
- ``users``: a modelled request, the same model as the synthetic workload's
  (:mod:`trainer.sim.workload`, ``WorkloadConfig.limit_factor_*``): each user has an
  overestimation habit ``3 x exp(N(0, 0.5))``, each job a factor ``max(1, habit x
  exp(N(0, 0.7)))``; the limit is the run time times that factor rounded up to the
  round values users pick (5, 10, 15, 30 min, 1, 2, 4, 8, 12 h, 1, 2, 3, 5, 7 days),
  and 10% of jobs ask for the largest of them; a limit past 7 days is 7 days, or the
  run time rounded up to whole days for a longer job (no partition's MaxTime is known).
  5% ran into their limit (limit = run time rounded up to a minute). The
  limit is written into the record as if the trace had it: backfill, ``sjf``, ``sef``
  and a learned policy all see the same limit, as they would on a real cluster.

Every draw comes from a hash of the job's id and submit time (per job) or of its user
(the habit), not from a sequence, so a job's limit does not depend on which slice of
the trace is read (``--since``, ``--limit``) nor on the order of records.

:func:`model_limits` is pure (numpy and the standard library).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from db.records import JobRecord

from .state import record_user
from .workload import TIME_LIMIT_STEPS, WorkloadConfig

__all__ = ["MISSING_LIMITS", "LimitModel", "apply_missing_limits", "check_missing_limits",
           "model_limits"]

#: Ways to fill in limits a trace does not record (module docstring).
MISSING_LIMITS: tuple[str, ...] = ("run", "users")

_DAY = 86400


@dataclass(frozen=True)
class LimitModel:
    """Parameters of the modelled user requests (defaults: the synthetic workload's).

    Attributes:
        factor_median: Median overestimation factor of a user's habit.
        factor_sigma: Per-job spread (sigma of the log) of the factor.
        user_sigma: Spread between users (sigma of the log) of their habit.
        max_share: Share of jobs that ask for the largest step (at least their run).
        exact_share: Share of jobs that ran into their limit (limit = run, rounded up to
            a minute; the workload's ``timeout_share``).
        steps: The round limits users pick, seconds, ascending.
        seed: Mixed into every hash (another seed, other draws).
    """

    factor_median: float = WorkloadConfig.limit_factor_median
    factor_sigma: float = WorkloadConfig.limit_factor_sigma
    user_sigma: float = WorkloadConfig.user_factor_sigma
    max_share: float = WorkloadConfig.max_limit_share
    exact_share: float = WorkloadConfig.timeout_share
    steps: tuple[int, ...] = TIME_LIMIT_STEPS
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.factor_median >= 1:
            raise ValueError("LimitModel.factor_median must be >= 1")
        if self.factor_sigma < 0 or self.user_sigma < 0:
            raise ValueError("LimitModel sigmas must be >= 0")
        if not (0 <= self.max_share and 0 <= self.exact_share
                and self.max_share + self.exact_share <= 1):
            raise ValueError("LimitModel shares must be >= 0 and add up to at most 1")
        steps = self.steps
        if not steps or steps[0] <= 0 or any(steps[k + 1] <= steps[k]
                                             for k in range(len(steps) - 1)):
            raise ValueError("LimitModel.steps must be positive and ascending")


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> np.uint64(27))
        z = z * np.uint64(0x94D049BB133111EB)
        out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def _uniform(keys: np.ndarray, salt: int) -> np.ndarray:
    """A uniform in (0, 1) per uint64 key, independent for each ``salt``."""
    with np.errstate(over="ignore"):
        z = _mix(keys + np.uint64((salt * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53


def _normal(keys: np.ndarray, salt: int) -> np.ndarray:
    """A standard normal per key (Box-Muller on two hashed uniforms)."""
    u1, u2 = _uniform(keys, 2 * salt + 1), _uniform(keys, 2 * salt + 2)
    out: np.ndarray = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return out


def model_limits(job_ids: Sequence[int], submits: Sequence[int], users: Sequence[str],
                 runs: Sequence[int], model: LimitModel | None = None) -> np.ndarray:
    """Modelled time limits (s, whole minutes, at least the run) for the given jobs.

    Args:
        job_ids: Job ids.
        submits: Submit times (with the id, the job's key).
        users: Whom each job counts for (its habit).
        runs: Recorded run times, s.
        model: Parameters (default :class:`LimitModel`).
    """
    m = model or LimitModel()
    n = len(job_ids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    with np.errstate(over="ignore"):
        seed = np.uint64(m.seed & 0xFFFFFFFFFFFFFFFF)
        ids = np.asarray(job_ids, dtype=np.int64).astype(np.uint64)
        sub = np.asarray(submits, dtype=np.int64).astype(np.uint64)
        keys = _mix(_mix(ids ^ seed) ^ sub)
        ukeys = np.fromiter((zlib.crc32(u.encode()) for u in users), dtype=np.uint64,
                            count=n) ^ seed
    run = np.maximum(np.asarray(runs, dtype=np.int64), 1)
    habit = m.factor_median * np.exp(m.user_sigma * _normal(ukeys, 1))
    factor = np.maximum(1.0, habit * np.exp(m.factor_sigma * _normal(keys, 2)))
    wanted = run * factor
    steps = np.asarray(m.steps, dtype=np.int64)
    biggest = np.maximum(steps[-1], -(-run // _DAY) * _DAY)
    k = np.searchsorted(steps, wanted, side="left")
    limit = np.where(k >= steps.size, biggest, steps[np.minimum(k, steps.size - 1)])
    whole_minutes = -(-run // 60) * 60
    u = _uniform(keys, 3)
    limit = np.where(u < m.max_share, biggest, limit)
    limit = np.where((u >= m.max_share) & (u < m.max_share + m.exact_share),
                     whole_minutes, limit)
    out: np.ndarray = np.maximum(limit, whole_minutes).astype(np.int64)
    return out


def check_missing_limits(how: str) -> None:
    """Raise ValueError unless ``how`` is one of :data:`MISSING_LIMITS`."""
    if how not in MISSING_LIMITS:
        raise ValueError(f"missing limits {how!r}: one of {', '.join(MISSING_LIMITS)}")


def apply_missing_limits(records: Sequence[JobRecord], how: str = "run",
                         model: LimitModel | None = None) -> list[JobRecord]:
    """``records`` with the limits they lack filled in as ``how`` says.

    ``run`` returns them unchanged (:func:`~trainer.sim.state.build_jobs` then uses each
    job's run time); ``users`` gives every finished record without a positive limit a
    :func:`model_limits` one (records with a limit, or not finished, are kept as they
    are).

    Raises:
        ValueError: On an unknown ``how``.
    """
    check_missing_limits(how)
    recs = list(records)
    if how == "run":
        return recs
    todo = [i for i, r in enumerate(recs)
            if not (r.time_limit is not None and r.time_limit > 0)
            and r.start_time is not None and r.end_time is not None]
    if not todo:
        return recs
    sel = [recs[i] for i in todo]
    lim = model_limits([r.job_id for r in sel], [r.submit_time for r in sel],
                       [record_user(r) for r in sel],
                       [max(0, r.end_time - r.start_time) for r in sel],  # type: ignore[operator]
                       model).tolist()
    for i, v in zip(todo, lim, strict=True):
        recs[i] = dataclasses.replace(recs[i], time_limit=int(v))
    return recs
