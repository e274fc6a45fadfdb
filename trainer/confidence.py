"""How sure a comparison of two replays of the same jobs is.

A test period is one stretch of history. Its busiest weeks dominate the mean bounded
slowdown, so two policies a few percent apart on it can swap places on the next
stretch (on Theta, a learned policy's verdict against Tetris flipped with the warm-up
length alone). :mod:`trainer.evaluate` therefore reads every target ratio twice more,
from the same replays (no extra simulation):

- :func:`ratio_ci`: the ratio of the two runs' means (or of one quantile, e.g. the
  p99 wait) with a confidence interval from a paired moving-block bootstrap (Künsch,
  1989). A resample draws blocks of consecutive jobs, with replacement, and takes the
  ratio of the two runs' sums over the same jobs: pairs stay together (both runs
  replayed the same jobs), and blocks keep the congestion episodes that make
  neighbouring jobs' waits move together (resampling single jobs would pretend they
  are independent and give intervals far too narrow).
- :func:`window_means`: the test period cut into consecutive windows of equal job
  count, one mean (or quantile) per window, and in how many of them one run is lower.

numpy only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["RatioCI", "ratio_ci", "verdict", "window_bounds", "window_means"]


@dataclass(frozen=True)
class RatioCI:
    """``mean(x) / mean(y)`` and its bootstrap interval.

    Attributes:
        ratio: The ratio on the jobs as replayed.
        lo: Lower end of the interval (``ratio`` when there are no resamples).
        hi: Upper end.
        level: Coverage of the interval (e.g. 0.95).
        resamples: Bootstrap resamples drawn (0: none, the interval is the point).
        block: Jobs per block.
    """

    ratio: float
    lo: float
    hi: float
    level: float
    resamples: int
    block: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)


def ratio_ci(x: np.ndarray, y: np.ndarray, *, blocks: int = 20, resamples: int = 2000,
             level: float = 0.95, seed: int = 0, quantile: float | None = None) -> RatioCI:
    """``mean(x) / mean(y)`` (or a quantile's) with a paired moving-block bootstrap interval.

    The ``n`` jobs are read in blocks of ``b = max(1, n // blocks)`` consecutive jobs;
    a resample draws ``n // b`` block starts uniformly among the ``n - b + 1``
    possible ones and takes ``sum(x) / sum(y)`` over the drawn blocks (with
    ``quantile``: the ratio of the two runs' quantiles over the drawn jobs). The
    interval is the percentile interval of those ratios. Seeded: the same inputs give
    the same interval.

    Args:
        x: Per-job values of the run in the numerator (e.g. a learned policy's bsld).
        y: The same jobs' values in the other run, same order.
        blocks: Blocks the jobs are cut into (their length sets how far the
            correlation between neighbours is kept).
        resamples: Bootstrap resamples (0: no interval, ``lo = hi = ratio``).
        level: Coverage, in (0, 1).
        seed: Seed of the draws.
        quantile: Compare this quantile (in [0, 1], e.g. 0.99 for the p99 wait) of the
            two runs instead of their means.

    Raises:
        ValueError: On arrays of different lengths, no jobs, a non-positive ``sum(y)``
            (or quantile of ``y``), or bad ``blocks``/``resamples``/``level``/
            ``quantile``.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"ratio_ci needs two 1-d arrays of one non-zero length, got"
                         f" {x.shape} and {y.shape}")
    if blocks < 1 or resamples < 0 or not 0 < level < 1:
        raise ValueError("ratio_ci: blocks >= 1, resamples >= 0 and 0 < level < 1")
    if quantile is not None and not 0 <= quantile <= 1:
        raise ValueError(f"ratio_ci: quantile must lie in [0, 1], not {quantile}")
    sy = float(y.sum()) if quantile is None else float(np.quantile(y, quantile))
    if not sy > 0:
        what = "values sum to" if quantile is None else f"{quantile} quantile is"
        raise ValueError(f"ratio_ci: the reference run's {what} zero or less")
    ratio = (float(x.sum()) if quantile is None else float(np.quantile(x, quantile))) / sy
    n = x.size
    b = max(1, n // blocks)
    if resamples == 0:
        return RatioCI(ratio, ratio, ratio, level, 0, b)
    starts = np.random.default_rng(seed).integers(0, n - b + 1, size=(resamples, n // b))
    if quantile is None:
        cx = np.concatenate(([0.0], np.cumsum(x)))
        cy = np.concatenate(([0.0], np.cumsum(y)))
        bx, by = cx[b:] - cx[:-b], cy[b:] - cy[:-b]  # the sum of every block, by its start
        num, den = bx[starts].sum(axis=1), by[starts].sum(axis=1)
    else:
        num, den = np.empty(resamples), np.empty(resamples)
        step = max(1, 4_000_000 // n)  # resamples per chunk: ~32 MB of indices
        for i in range(0, resamples, step):
            rows = (starts[i:i + step, :, None] + np.arange(b)).reshape(-1, starts.shape[1] * b)
            num[i:i + step] = np.quantile(x[rows], quantile, axis=1)
            den[i:i + step] = np.quantile(y[rows], quantile, axis=1)
    ok = den > 0
    r = num[ok] / den[ok]
    if r.size == 0:
        return RatioCI(ratio, ratio, ratio, level, 0, b)
    a = (1 - level) / 2
    lo, hi = np.quantile(r, [a, 1 - a])
    return RatioCI(ratio, float(lo), float(hi), level, int(r.size), b)


def verdict(ci: RatioCI, threshold: float) -> str:
    """Where the interval lies against a target ``ratio <= threshold``.

    Returns:
        ``"clear"`` (the whole interval meets it), ``"clear miss"`` (none of it does) or
        ``"within the noise"``.
    """
    if ci.hi <= threshold:
        return "clear"
    if ci.lo > threshold:
        return "clear miss"
    return "within the noise"


def window_bounds(n: int, windows: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` rows of ``windows`` consecutive windows of ``n`` jobs.

    Sizes differ by at most one; fewer windows when there are fewer jobs (one empty
    window for no job).
    """
    if windows < 1:
        raise ValueError("windows must be >= 1")
    k = max(1, min(windows, n))
    edges = [i * n // k for i in range(k + 1)]
    return [(edges[i], edges[i + 1]) for i in range(k)]


def window_means(x: np.ndarray, windows: int, quantile: float | None = None) -> list[float]:
    """The mean (or ``quantile``) of ``x`` in each of :func:`window_bounds`' windows."""
    x = np.asarray(x, dtype=np.float64)
    return [0.0 if hi <= lo else float(x[lo:hi].mean()) if quantile is None
            else float(np.quantile(x[lo:hi], quantile))
            for lo, hi in window_bounds(x.size, windows)]
