"""Modelled time limits for traces that record none (trainer.sim.limits)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from db.records import JobRecord, TresCounts
from trainer.sim import load
from trainer.sim.limits import (
    MISSING_LIMITS,
    LimitModel,
    apply_missing_limits,
    model_limits,
)
from trainer.sim.state import Cluster, build_jobs
from trainer.sim.workload import TIME_LIMIT_STEPS

#: Standard SWF without requested times (column 9 is -1), users 1 and 2.
SWF = """\
; MaxNodes: 8
; MaxProcs: 8
1 0 -1 100 4 -1 -1 4 -1 -1 1 1 1 -1 0 -1 -1 -1
2 10 -1 50 2 -1 -1 2 -1 -1 1 2 1 -1 0 -1 -1 -1
3 20 -1 7000 2 -1 -1 2 -1 -1 1 2 1 -1 0 -1 -1 -1
4 40 -1 10 1 -1 -1 1 900 -1 1 1 1 -1 0 -1 -1 -1
"""


def _rec(job_id: int, submit: int, run: int, user: str = "alice",
         limit: int | None = None) -> JobRecord:
    return JobRecord(
        job_id=job_id, name="", user=user, account="a", partition="p", qos="normal",
        state="COMPLETED", submit_time=submit, eligible_time=submit, start_time=submit,
        end_time=submit + run, time_limit=limit, req=TresCounts(1, 1, None, None),
        alloc=TresCounts(1, 1, None, None), node_list="", nodes=(), priority=None,
        exit_code=0)


def _sample(n: int = 20_000, users: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = np.arange(1, n + 1)
    submits = np.cumsum(rng.integers(0, 300, n))
    names = [f"u{k}" for k in rng.integers(0, users, n)]
    runs = np.ceil(np.exp(rng.normal(7.0, 1.8, n))).astype(np.int64)
    return ids, submits, names, runs


def test_limits_are_round_requests_at_least_the_run():
    ids, submits, names, runs = _sample()
    lim = model_limits(ids, submits, names, runs)
    assert lim.dtype == np.int64 and lim.shape == runs.shape
    assert (lim >= runs).all() and (lim % 60 == 0).all()
    steps = set(TIME_LIMIT_STEPS)
    longest = TIME_LIMIT_STEPS[-1]
    exact = lim == -(-runs // 60) * 60
    biggest = lim == np.maximum(longest, -(-runs // 86400) * 86400)
    # every limit is a round step, the run rounded up to a minute (ran into its limit),
    # or, for a job longer than the largest step, its run rounded up to whole days
    assert all(v in steps or e or b for v, e, b in zip(lim.tolist(), exact, biggest,
                                                       strict=True))
    # the shares of the model, within sampling error (some overlap the others)
    assert 0.09 < float(np.mean(lim == longest)) < 0.16
    assert 0.04 < float(np.mean(exact)) < 0.08
    # users overestimate: median limit/run of the others well above 1
    rest = ~exact & ~biggest
    assert 2.0 < float(np.median(lim[rest] / runs[rest])) < 10.0


def test_limits_depend_on_the_job_and_its_user_not_on_the_slice_or_order():
    ids, submits, names, runs = _sample(2_000)
    full = model_limits(ids, submits, names, runs)
    part = model_limits(ids[500:900], submits[500:900], names[500:900], runs[500:900])
    assert np.array_equal(full[500:900], part)
    perm = np.random.default_rng(1).permutation(ids.size)
    shuffled = model_limits(ids[perm], submits[perm], [names[i] for i in perm], runs[perm])
    assert np.array_equal(shuffled, full[perm])
    # another seed, other draws; the same seed, the same
    assert not np.array_equal(model_limits(ids, submits, names, runs, LimitModel(seed=1)),
                              full)
    assert np.array_equal(model_limits(ids, submits, names, runs, LimitModel()), full)


def test_each_user_has_a_habit():
    n = 4_000
    ids = np.arange(n)
    runs = np.full(n, 1000)
    names = ["a" if k % 2 else "b" for k in range(n)]
    m = LimitModel(factor_sigma=0.0, max_share=0.0, exact_share=0.0, user_sigma=1.0)
    lim = model_limits(ids, ids * 10, names, runs, m)
    a = set(lim[1::2].tolist())
    b = set(lim[0::2].tolist())
    assert len(a) == 1 and len(b) == 1 and a != b  # one factor per user, no per-job noise


def test_model_validation():
    with pytest.raises(ValueError, match="factor_median"):
        LimitModel(factor_median=0.5)
    with pytest.raises(ValueError, match="shares"):
        LimitModel(max_share=0.7, exact_share=0.5)
    with pytest.raises(ValueError, match="steps"):
        LimitModel(steps=(600, 300))
    assert model_limits([], [], [], []).size == 0


def test_apply_fills_only_what_is_missing():
    recs = [_rec(1, 0, 100), _rec(2, 5, 100, limit=3600), _rec(3, 9, 40, limit=0),
            dataclasses.replace(_rec(4, 9, 40), start_time=None, end_time=None)]
    assert apply_missing_limits(recs, "run") == recs
    out = apply_missing_limits(recs, "users")
    assert out[1] == recs[1] and out[3] == recs[3]  # has a limit; never ran
    assert out[0].time_limit is not None and out[0].time_limit >= 100
    assert out[2].time_limit is not None and out[2].time_limit >= 60
    assert recs[0].time_limit is None  # the input is not changed
    with pytest.raises(ValueError, match="one of run, users"):
        apply_missing_limits(recs, "oracle")
    assert MISSING_LIMITS == ("run", "users")


def test_from_trace_users_limits_are_seen_by_the_replay(tmp_path):
    path = tmp_path / "nolimits.swf"
    path.write_text(SWF)
    run_in = load.from_trace(path)
    users_in = load.from_trace(path, missing_limits="users")
    assert [r.time_limit for r in run_in.records] == [None, None, None, 900]
    got = [r.time_limit for r in users_in.records]
    assert got[3] == 900 and all(v is not None and v >= 60 for v in got)
    cl = Cluster.from_spec(run_in.spec)
    plain = build_jobs(run_in.records, cl)
    modelled = build_jobs(users_in.records, cl)
    # run: the limit is the run time, not known to the policy; users: a known limit
    assert plain.limit.tolist()[:3] == plain.run.tolist()[:3]
    assert plain.limit_known.tolist() == [False, False, False, True]
    assert modelled.limit_known.all()
    assert (modelled.limit >= modelled.run).all()
    with pytest.raises(ValueError, match="missing limits"):
        load.from_trace(path, missing_limits="nope")
