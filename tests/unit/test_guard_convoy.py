"""benchmarks/guard_convoy.py's paced starvation guard: its rule, and that unpaced it is
the helper's guard, replay for replay."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from trainer.evaluate import STARVING, StarvationGuard
from trainer.sim.engine import Simulator
from trainer.sim.policies import ScoreContext, make_policy
from trainer.sim.state import Cluster, NodeState, build_jobs
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

from .benchmark_module import load_benchmark


def _module():
    return load_benchmark("guard_convoy")


def _table(n, interarrival=60.0, seed=0):
    wc = WorkloadConfig(num_jobs=n, seed=seed, mean_interarrival_s=interarrival)
    spec = default_cluster(wc)
    cl = Cluster.from_spec(spec)
    return build_jobs(replay_records(generate(wc), spec), cl), cl


def _six(nodes):
    """Six jobs, eligible 0..500 s apart by 100, needing ``nodes`` nodes each."""
    jobs, cl = _table(6)
    return dataclasses.replace(jobs, eligible=np.arange(6, dtype=np.int64) * 100,
                               nodes=np.asarray(nodes, dtype=jobs.nodes.dtype)), cl


def _bound(guard, start, end):
    guard.sim = SimpleNamespace(start=np.asarray(start, dtype=np.int64),
                                end=np.asarray(end, dtype=np.int64))
    return guard


def test_gap_lets_no_starving_job_go_first_for_a_while_after_a_released_job_ended():
    gc = _module()
    jobs, cl = _six([1, 1, 1, 1, 1, 1])
    guard = gc.PacedGuard(make_policy("fifo"), 250.0, "age", gap=100.0)
    idx = np.arange(2, 6)  # pending: eligible 200..500; jobs 0 and 1 ran
    waited = (900 - jobs.eligible[idx]).astype(np.float64)  # 700, 600, 500, 400
    scores = np.zeros(4)
    # job 0 started past the limit (waited 300 s) and ended at 850: within the gap
    _bound(guard, [300, 100, -1, -1, -1, -1], [850, 200, -1, -1, -1, -1])
    assert not guard.first(jobs, idx, scores, waited, 900, 16).any()
    # ... 100 s later the gap is over: every starving job goes first again
    assert guard.first(jobs, idx, scores, waited + 100, 1000, 16).all()
    # a job that started within the limit is not released: no gap after its end
    _bound(guard, [200, 100, -1, -1, -1, -1], [850, 200, -1, -1, -1, -1])
    assert guard.first(jobs, idx, scores, waited, 900, 16).all()


def test_cap_lets_starving_jobs_first_in_the_guards_order_while_they_fit_in_the_share():
    gc = _module()
    jobs, cl = _six([8, 1, 4, 4, 8, 2])
    idx = np.arange(1, 6)  # pending; job 0 (8 nodes) released, running until 2000
    waited = (1000 - jobs.eligible[idx]).astype(np.float64)  # 900, 800, 700, 600, 500
    scores = np.array([1.0, 5.0, 4.0, 3.0, 2.0])  # the inner order: rows 1, 2, 3, 4, 0
    # job 0 (8 nodes) started past the limit (waited 500 s) and runs until 2000
    start, end = [500, -1, -1, -1, -1, -1], [2000, -1, -1, -1, -1, -1]
    pol = gc.PacedGuard(make_policy("fifo"), 450.0, "policy", cap=0.75)
    got = _bound(pol, start, end).first(jobs, idx, scores, waited, 1000, 16)
    # held 8 of 16, cap 12: the policy's first starving job (4 nodes) fits, the next
    # (4 more) does not, and nothing behind it goes first either
    assert got.tolist() == [False, True, False, False, False]
    age = gc.PacedGuard(make_policy("fifo"), 450.0, "age", cap=0.75)
    got = _bound(age, start, end).first(jobs, idx, scores, waited, 1000, 16)
    assert got.tolist() == [True, False, False, False, False]  # oldest (1 node), then 4: 13
    # a job that started within the limit holds nothing of the share
    got = _bound(pol, [400, -1, -1, -1, -1, -1], end).first(jobs, idx, scores, waited,
                                                           1000, 16)
    assert got.tolist() == [False, True, True, False, False]  # 4 + 4, then 8 more: 16
    # with no released job running the first always goes, however wide
    narrow = gc.PacedGuard(make_policy("fifo"), 450.0, "policy", cap=0.125)
    got = _bound(narrow, start, [900, -1, -1, -1, -1, -1]).first(jobs, idx, scores,
                                                                waited, 1000, 16)
    assert got.tolist() == [False, True, False, False, False]


def test_score_puts_the_jobs_let_go_first_above_every_other():
    gc = _module()
    jobs, cl = _six([1, 1, 1, 1, 1, 1])
    guard = gc.PacedGuard(make_policy("sjf"), 250.0, "policy", gap=100.0)
    idx = np.arange(6)
    ctx = ScoreContext(1000, cl, NodeState(cl), np.zeros(1), np.random.default_rng(0), None)
    inner = make_policy("sjf").score(jobs, idx, ctx)
    _bound(guard, [-1] * 6, [-1] * 6)  # nothing released: as the plain guard
    plain = StarvationGuard(make_policy("sjf"), 250.0, "policy").score(jobs, idx, ctx)
    np.testing.assert_array_equal(guard.score(jobs, idx, ctx), plain)
    assert (plain[:5] >= STARVING).all()
    _bound(guard, [600, -1, -1, -1, -1, -1], [950, -1, -1, -1, -1, -1])  # in the gap
    np.testing.assert_array_equal(guard.score(jobs, idx, ctx), inner)


def test_unpaced_it_replays_as_the_helpers_guard_and_paced_it_changes_the_replay():
    gc = _module()
    jobs, cl = _table(400, interarrival=8.0, seed=2)  # loaded: the guard acts
    limit = 1800.0
    for order in ("age", "policy"):
        runs = {}
        for name, pol in (("plain", StarvationGuard(make_policy("sjf"), limit, order)),
                          ("unpaced", gc.PacedGuard(make_policy("sjf"), limit, order)),
                          ("gap", gc.PacedGuard(make_policy("sjf"), limit, order,
                                                gap=3600.0)),
                          ("none", make_policy("sjf"))):
            runs[name] = Simulator(jobs, cl, pol).run()
        assert not np.array_equal(runs["plain"].start, runs["none"].start)  # it acts
        np.testing.assert_array_equal(runs["unpaced"].start, runs["plain"].start)
        np.testing.assert_array_equal(runs["unpaced"].end, runs["plain"].end)
        assert not np.array_equal(runs["gap"].start, runs["plain"].start)


def test_variants_parse_and_bad_ones_are_refused():
    gc = _module()
    assert gc.parse_variant("plain") == {}
    assert gc.parse_variant("gap=600") == {"gap": 600.0}
    assert gc.parse_variant("cap=1+gap=1800") == {"cap": 1.0, "gap": 1800.0}
    assert gc.parse_variant("express=900") == {"express": 900.0}
    for bad in ("gap", "wait=5", "gap=1+gap=2", "", "express=60+gap=5"):
        with pytest.raises(ValueError, match="bad variant"):
            gc.parse_variant(bad)
    with pytest.raises(ValueError, match="gap"):
        gc.PacedGuard(make_policy("fifo"), 10.0, gap=-1.0)
    with pytest.raises(ValueError, match="cap"):
        gc.PacedGuard(make_policy("fifo"), 10.0, cap=0.0)
    assert gc.main(["--trace", "/nonexistent.swf"]) == 2
