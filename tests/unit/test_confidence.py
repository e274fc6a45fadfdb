"""trainer.confidence: paired block-bootstrap ratio intervals and window means."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.confidence import RatioCI, ratio_ci, verdict, window_bounds, window_means


def test_ratio_is_the_ratio_of_means_and_the_interval_holds_it():
    rng = np.random.default_rng(1)
    y = rng.exponential(10.0, 500) + 1
    x = y * rng.uniform(0.6, 1.0, 500)
    ci = ratio_ci(x, y, resamples=500)
    assert ci.ratio == pytest.approx(x.mean() / y.mean())
    assert ci.lo < ci.ratio < ci.hi
    assert 0.6 < ci.lo and ci.hi < 1.0
    assert ci.block == 25 and ci.resamples == 500 and ci.level == 0.95


def test_seeded_and_exact_when_the_runs_differ_by_a_constant_factor():
    rng = np.random.default_rng(2)
    y = rng.exponential(5.0, 300) + 1
    assert ratio_ci(2 * y, y, seed=3) == ratio_ci(2 * y, y, seed=3)
    ci = ratio_ci(0.5 * y, y)
    assert ci.lo == pytest.approx(0.5) and ci.hi == pytest.approx(0.5)
    a, b = ratio_ci(y[::-1], y, seed=0), ratio_ci(y[::-1], y, seed=1)
    assert a.ratio == b.ratio and (a.lo, a.hi) != (b.lo, b.hi)  # the seed draws


def test_quantile_ratio():
    rng = np.random.default_rng(6)
    y = rng.exponential(100.0, 1000)
    x = 1.2 * y[rng.permutation(1000)]  # same distribution, scaled: p99 ratio near 1.2
    ci = ratio_ci(x, y, quantile=0.99, resamples=300)
    assert ci.ratio == pytest.approx(np.quantile(x, 0.99) / np.quantile(y, 0.99))
    assert ci.lo < 1.2 < ci.hi and ci.lo < ci.ratio < ci.hi
    exact = ratio_ci(3 * y, y, quantile=0.99, resamples=50)
    assert exact.lo == pytest.approx(3) and exact.hi == pytest.approx(3)
    assert window_means(np.arange(11.0), 1, quantile=0.5) == [5.0]
    with pytest.raises(ValueError, match="quantile"):
        ratio_ci(x, y, quantile=1.5)
    with pytest.raises(ValueError, match="zero"):
        ratio_ci(x, np.zeros(1000), quantile=0.99)


def test_no_resamples_gives_the_point():
    ci = ratio_ci(np.array([1.0, 3.0]), np.array([2.0, 2.0]), resamples=0)
    assert (ci.ratio, ci.lo, ci.hi, ci.resamples) == (1.0, 1.0, 1.0, 0)
    assert RatioCI(**ci.to_dict()) == ci


def test_blocks_widen_the_interval_when_neighbours_move_together():
    # busy stretches: the policy wins big in some stretches and loses in others, so
    # neighbouring jobs' ratios are correlated; single-job resampling would pretend
    # 2,000 independent draws
    rng = np.random.default_rng(4)
    n = 2000
    stretch = np.repeat(rng.choice([0.5, 1.5], size=20), n // 20)
    y = rng.exponential(10.0, n) + 1
    x = y * stretch * rng.uniform(0.9, 1.1, n)
    blocked = ratio_ci(x, y, blocks=20)
    single = ratio_ci(x, y, blocks=n)
    assert single.block == 1 and blocked.block == 100
    assert (blocked.hi - blocked.lo) > 3 * (single.hi - single.lo)


def test_coverage_on_independent_jobs():
    # the true ratio of the means is 0.8; about 95% of the intervals should hold it
    rng = np.random.default_rng(5)
    held = 0
    for seed in range(60):
        y = rng.exponential(10.0, 400) + 1
        x = 0.8 * (rng.exponential(10.0, 400) + 1)
        ci = ratio_ci(x, y, resamples=400, seed=seed)
        held += ci.lo <= 0.8 <= ci.hi
    assert held >= 50


@pytest.mark.parametrize("x,y,kw,match", [
    (np.ones(3), np.ones(4), {}, "one non-zero length"),
    (np.ones(0), np.ones(0), {}, "one non-zero length"),
    (np.ones(3), np.zeros(3), {}, "sum to zero"),
    (np.ones(3), np.ones(3), {"blocks": 0}, "blocks"),
    (np.ones(3), np.ones(3), {"level": 1.0}, "level"),
    (np.ones(3), np.ones(3), {"resamples": -1}, "resamples"),
])
def test_bad_input(x, y, kw, match):
    with pytest.raises(ValueError, match=match):
        ratio_ci(x, y, **kw)


def test_verdict():
    assert verdict(RatioCI(0.5, 0.4, 0.6, 0.95, 10, 1), 0.7) == "clear"
    assert verdict(RatioCI(0.8, 0.75, 0.9, 0.95, 10, 1), 0.7) == "clear miss"
    assert verdict(RatioCI(0.99, 0.95, 1.03, 0.95, 10, 1), 1.0) == "within the noise"


def test_windows():
    assert window_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert window_bounds(3, 4) == [(0, 1), (1, 2), (2, 3)]
    assert window_bounds(0, 4) == [(0, 0)]
    assert window_means(np.arange(8.0), 2) == [1.5, 5.5]
    with pytest.raises(ValueError):
        window_bounds(5, 0)
