"""trainer.evaluate: time split, restriction to the test period, targets, table, a tiny run."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin import cli
from trainer.evaluate import (
    TABLE_HEADERS,
    EvalConfig,
    Split,
    TakeOver,
    annotate,
    check_targets,
    config_from_options,
    evaluate,
    helper_settings,
    load_policy,
    restrict,
    table_rows,
    time_split,
)
from trainer.sim import metrics
from trainer.sim.engine import EngineOptions, Simulator
from trainer.sim.placement import Request
from trainer.sim.policies import (
    BASELINES,
    SEED_BASELINES,
    Policy,
    ScoreContext,
    make_policy,
)
from trainer.sim.slurm import SchedulerOptions
from trainer.sim.state import Cluster, NodeState, build_jobs
from trainer.sim.stepper import window
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
LUBLIN = TRACES / "lublin_256.swf"


# ---------------------------------------------------------------------------- split
def test_time_split_by_hand():
    s = time_split(1000)
    assert (s.train, s.val, s.test) == ((0, 700), (700, 800), (800, 1000))
    s = time_split(10, 0.5, 0.25)
    assert (s.train, s.val, s.test) == ((0, 5), (5, 7), (7, 10))
    s = time_split(7)  # int(4.9) = 4, int(0.7) = 0: no validation job, 3 test jobs
    assert (s.train, s.val, s.test) == ((0, 4), (4, 4), (4, 7))


@pytest.mark.parametrize("train,val", [(0.0, 0.1), (0.7, 0.3), (0.9, 0.2), (1.0, 0.0),
                                       (0.5, -0.1)])
def test_time_split_rejects_bad_shares(train, val):
    with pytest.raises(ValueError, match="shares"):
        time_split(100, train, val)


def test_time_split_rejects_too_few_jobs():
    with pytest.raises(ValueError, match="more jobs"):
        time_split(1)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(3, 100_000), train=st.floats(0.05, 0.9), val=st.floats(0.0, 0.5))
def test_time_split_partitions_rows_as_training_does(n, train, val):
    if train + val >= 0.98 or int(train * n) < 1 or int(train * n) + int(val * n) >= n:
        return
    s = time_split(n, train, val)
    # the same cut as trainer.rl.make_spec: int(train * n) training, int(val * n) validation
    assert s.val_start == int(train * n)
    assert s.test_start - s.val_start == int(val * n)
    parts = [range(*s.train), range(*s.val), range(*s.test)]
    assert sum(len(p) for p in parts) == n
    assert [i for p in parts for i in p] == list(range(n))


def test_split_to_dict_has_arrival_times():
    jobs, _ = _table(60)
    d = time_split(jobs.n).to_dict(jobs)
    assert d["test"]["rows"] == [48, 60] and d["test"]["jobs"] == 12
    assert d["test"]["first_arrival"] == int(jobs.eligible[48])
    assert d["train"]["last_arrival"] <= d["val"]["first_arrival"]


# ---------------------------------------------------------------------------- restrict
def _table(n: int, seed: int = 0, interarrival: float = 60.0):
    wc = WorkloadConfig(num_jobs=n, seed=seed, mean_interarrival_s=interarrival)
    spec = default_cluster(wc)
    cl = Cluster.from_spec(spec)
    return build_jobs(replay_records(generate(wc), spec), cl), cl


def _replay(jobs, cl, name="fifo", speed="none"):
    b = BASELINES[name]
    opts = SchedulerOptions()
    return Simulator(jobs, cl, make_policy(b.policy, None, b.placement or "tree"),
                     opts if b.backfill is None else
                     SchedulerOptions(backfill=b.backfill),
                     EngineOptions(speed_model=speed)).run()


def _integral(t, v, a, b):
    """Integral of the step function (t, v) over [a, b] (value v[i] on [t[i], t[i+1]))."""
    total = 0.0
    for i in range(len(t)):
        lo = max(t[i], a)
        hi = min(t[i + 1] if i + 1 < len(t) else b, b)
        if hi > lo:
            total += v[i] * (hi - lo)
    return total


def test_restrict_keeps_the_test_jobs_and_their_time_span():
    jobs, cl = _table(300)
    r = _replay(jobs, cl)
    lo = 200
    sub = restrict(r, lo)
    assert sub.jobs.n == 100
    assert np.array_equal(sub.jobs.job_id, jobs.job_id[lo:])
    assert np.array_equal(sub.start, r.start[lo:]) and np.array_equal(sub.end, r.end[lo:])
    assert sub.stats["warmup_jobs"] == lo
    t0, t_end = int(jobs.eligible[lo]), int(r.end[lo:].max())
    assert sub.util_t[0] == t0 and sub.util_t[-1] <= t_end
    assert np.all((sub.frag_t >= t0) & (sub.frag_t <= t_end))
    m = metrics.compute(sub)
    # per-job metrics are those of the test jobs in the full replay
    full = metrics.job_metrics(r)
    assert m["jobs"] == 100
    assert m["wait_s"]["mean"] == pytest.approx(full["wait"][lo:].mean())
    assert m["bsld"]["mean"] == pytest.approx(full["bsld"][lo:].mean())
    # utilisation: the full series' time mean over [t0, t_end], computed independently
    want = _integral(r.util_t.tolist(), (r.util_nodes / cl.num_nodes).tolist(), t0, t_end)
    assert m["utilisation"]["nodes"] == pytest.approx(want / (t_end - t0))
    assert m["makespan_s"] == t_end - t0


def test_own_work_utilisation_counts_the_test_jobs_only():
    jobs, cl = _table(300, interarrival=20.0)
    r = _replay(jobs, cl)
    whole = metrics.compute(r)["utilisation"]
    assert whole["own_work"]["gpus"] == pytest.approx(whole["gpus"])  # GPUs: no sharing
    lo = 200
    sub = restrict(r, lo)
    u = metrics.compute(sub)["utilisation"]
    t0, t_end = int(jobs.eligible[lo]), int(r.end[lo:].max())
    secs = (r.end[lo:] - r.start[lo:]) * jobs.nodes[lo:] * jobs.gpus[lo:]
    assert u["own_work"]["gpus"] == pytest.approx(secs.sum() / (cl.total_gpus * (t_end - t0)))
    # warm-up jobs still running at the first test arrival count in the time mean only
    assert (r.end[:lo] > t0).any()
    assert u["own_work"]["gpus"] < u["gpus"]


def test_utilisation_check_reports_own_work_without_checking_it():
    ms = {"net": _m(6.0, util=0.80), "slurm": _m(10.0, util=0.81), "sjf": _m(8.0)}
    ms["net"]["utilisation"]["own_work"] = {"nodes": 0.4, "gpus": 0.79}
    ms["slurm"]["utilisation"]["own_work"] = {"nodes": 0.4, "gpus": 0.78}
    ms["net"]["utilisation"]["to_last_arrival"] = {"nodes": 0.4, "gpus": 0.83}
    ms["slurm"]["utilisation"]["to_last_arrival"] = {"nodes": 0.4, "gpus": 0.82}
    ms["net"]["utilisation"]["idle_waiting"] = {"nodes": 0.1, "gpus": 0.15}
    ms["slurm"]["utilisation"]["idle_waiting"] = {"nodes": 0.1, "gpus": 0.01}
    c = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))["utilisation"]
    assert c["ok"] is False  # decided by the time mean
    assert "own work 0.790 vs 0.780" in c["detail"]
    assert "to the last arrival 0.830 vs 0.820" in c["detail"]
    assert "idle while jobs waited 0.150 vs 0.010" in c["detail"]
    assert c["own_work"] == {"value": 0.79, "slurm": 0.78}
    assert c["to_last_arrival"] == {"value": 0.83, "slurm": 0.82}
    assert c["idle_waiting"] == {"value": 0.15, "slurm": 0.01}


def test_restrict_counts_the_warm_up_jobs_waiting():
    jobs, cl = _table(300, interarrival=5.0)  # a queue builds up: warm-up jobs wait on
    r = _replay(jobs, cl)
    lo = 200
    sub = restrict(r, lo)
    assert sub.util_waiting is not None and sub.util_waiting.size == sub.util_t.size
    # every job of the whole table arrived and not started after the events at each point
    brute = [int(np.count_nonzero((jobs.eligible <= t) & (r.start > t)))
             for t in sub.util_t.tolist()]
    assert sub.util_waiting.tolist() == brute
    own = metrics.waiting_at(sub.jobs, sub.start, sub.util_t)
    assert (sub.util_waiting > own).any()  # warm-up jobs still waited in the test period
    assert np.all(sub.util_waiting >= own)
    u = metrics.compute(sub)["utilisation"]
    idle = 1.0 - sub.util_gpus / cl.total_gpus
    want = _integral(sub.util_t.tolist(), np.where(sub.util_waiting > 0, idle, 0.0).tolist(),
                     int(sub.util_t[0]), int(sub.end.max()))
    assert u["idle_waiting"]["gpus"] == pytest.approx(want / (int(sub.end.max())
                                                              - int(sub.util_t[0])))
    assert 0.0 <= u["idle_waiting"]["gpus"] <= 1.0 - u["gpus"] + 1e-12


def test_restrict_at_zero_is_the_replay_and_rejects_out_of_range():
    jobs, cl = _table(40)
    r = _replay(jobs, cl)
    assert restrict(r, 0) is r
    with pytest.raises(ValueError, match="leaves no job"):
        restrict(r, 40)


# ---------------------------------------------------------------------------- targets
def _m(bsld, p99=100.0, util=0.5, jct=1000.0, leaf=None, gpus=True, longest=None):
    wait = {"mean": 0.0, "p95": 0.0, "p99": p99, "max": p99 if longest is None else longest}
    return {"bsld": {"mean": bsld, "p99": bsld}, "wait_s": wait,
            "jct_s": {"mean": jct}, "single_leaf_share": leaf, "jobs": 10, "makespan_s": 5,
            "utilisation": {"nodes": util / 2, "cpus": util / 2,
                            "gpus": util if gpus else None},
            "fragmentation": {"mean": 0.1}, "execution_effectiveness": 0.9,
            "fairness": {"jain_bsld": 0.8}}


def _by_name(res):
    return {c["name"]: c for c in res["checks"]}


def test_targets_pass_by_hand():
    ms = {"net": _m(6.0, p99=109.0, util=0.5), "slurm": _m(10.0), "fifo": _m(9.0),
          "sjf": _m(8.0)}
    res = check_targets(ms, "net", EvalConfig(), locality=False)
    c = _by_name(res)
    assert res["passed"] and res["best_heuristic"]["bsld"] == "sjf"
    assert c["bsld_vs_slurm"]["threshold"] == pytest.approx(7.0)  # 30% below 10
    assert c["bsld_vs_best_heuristic"]["threshold"] == 8.0
    assert c["p99_wait"]["threshold"] == pytest.approx(110.0)
    assert c["utilisation"]["ok"] and "jct_vs_best_heuristic" not in c


@pytest.mark.parametrize("net,failing", [
    (_m(7.5), {"bsld_vs_slurm"}),                         # only 25% below slurm
    (_m(6.0, p99=111.0), {"p99_wait"}),                   # 11% above slurm's p99
    (_m(6.0, util=0.49), {"utilisation"}),                # lower utilisation
    (_m(8.5), {"bsld_vs_slurm", "bsld_vs_best_heuristic"}),
])
def test_targets_fail_by_hand(net, failing):
    ms = {"net": net, "slurm": _m(10.0), "sjf": _m(8.0)}
    res = check_targets(ms, "net", EvalConfig(), locality=False)
    assert not res["passed"]
    assert {c["name"] for c in res["checks"] if c["ok"] is False} == failing


def test_best_heuristic_is_a_seed_one_not_rlscheds_own():
    ms = {"net": _m(6.0), "slurm": _m(10.0), "sjf": _m(8.0), "sef": _m(5.0)}
    res = check_targets(ms, "net", EvalConfig(), locality=False)  # default: seed baselines
    assert res["best_heuristic"]["bsld"] == "sjf" and res["passed"]
    # the seed heuristics not replayed are named, and the line says how many
    left = [b for b in SEED_BASELINES if b not in ("slurm", "sjf")]
    assert res["heuristics_left_out"] == left and "sef" not in left
    assert (f"among the 1 seed heuristics replayed ({len(left)} not replayed)"
            in _by_name(res)["bsld_vs_best_heuristic"]["detail"])
    res = check_targets(ms, "net", EvalConfig(), locality=False, heuristics=["sjf", "sef"])
    assert res["best_heuristic"]["bsld"] == "sef" and not res["passed"]
    assert res["heuristics_left_out"] == []  # (the caller named the heuristics)
    every = {**{b: _m(9.0) for b in SEED_BASELINES}, "net": _m(6.0), "slurm": _m(10.0)}
    res = check_targets(every, "net", EvalConfig(), locality=False)
    assert res["heuristics_left_out"] == []
    assert "not replayed" not in _by_name(res)["bsld_vs_best_heuristic"]["detail"]


def test_best_heuristic_reports_the_best_that_reads_no_recorded_run_time():
    ms = {"net": _m(5.0), "slurm": _m(10.0), "spf": _m(3.0), "sif": _m(3.5),
          "tetris": _m(6.0), "sjf": _m(7.0)}
    c = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))
    b = c["bsld_vs_best_heuristic"]
    assert b["ok"] is False and b["against"] == "spf"  # checked against the oracle
    assert b["deployable"] == {"against": "tetris", "value": 6.0, "ok": True}
    assert "best not reading the recorded run time: tetris 6.000 (lower)" in b["detail"]
    ms["net"] = _m(2.0)  # below the oracle too: nothing more to say
    b = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))["bsld_vs_best_heuristic"]
    assert b["ok"] and b["deployable"]["ok"]
    ms = {"net": _m(5.0), "slurm": _m(10.0), "tetris": _m(6.0), "sjf": _m(7.0)}
    b = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))["bsld_vs_best_heuristic"]
    assert b["deployable"] is None and "recorded" not in b["detail"]  # the same one
    assert {n for n, x in BASELINES.items() if x.oracle} == {"sif", "saf", "dsif", "spf"}


def test_evaluate_warm_starts_sef_and_leaves_it_out_of_the_targets(replayed_policies,
                                                                    returns_of):
    import trainer.evaluate as ev

    jobs, cl = _table(200)
    made = returns_of(ev, "user_history")
    seen = replayed_policies
    cfg = EvalConfig(baselines=("slurm", "sjf", "sef"))
    res = evaluate(jobs, cl, {"mine": make_policy("fifo")}, cfg)
    calls = [(a[2], out) for a, out in made]
    # one history, for sef: the jobs before the replayed rows (warm-up 20, test at 160)
    assert [lo for lo, _ in calls] == [140]
    sef = [p for p in seen if p.name == "sef"]
    assert len(sef) == 1 and sef[0].history is calls[0][1]
    assert calls[0][1].version > 0
    assert res.targets["best_heuristic"]["bsld"] == "sjf"
    assert "sef" in res.metrics


def test_utilisation_check_shows_enough_digits_to_tell_which_is_lower():
    ms = {"net": _m(6.0, util=0.84612), "slurm": _m(10.0, util=0.84637), "sjf": _m(8.0)}
    c = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))["utilisation"]
    assert c["ok"] is False and "0.8461 vs slurm 0.8464" in c["detail"]
    ms["net"] = _m(6.0, util=0.70)
    c = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))["utilisation"]
    assert "0.700 vs slurm 0.846" in c["detail"]  # (three digits when they differ there)


def test_locality_targets_by_hand():
    base = {"slurm": _m(10.0, jct=4000.0, leaf=0.5), "fifo": _m(9.0, jct=3500.0, leaf=0.4),
            "sjf": _m(8.0, jct=3000.0, leaf=0.6)}
    good = dict(base, net=_m(6.0, jct=1900.0, leaf=0.7))   # 3000 / 1900 = 1.58x
    c = _by_name(check_targets(good, "net", EvalConfig(), locality=True))
    assert c["jct_vs_best_heuristic"]["ok"] and c["jct_vs_best_heuristic"]["against"] == "sjf"
    assert c["jct_vs_best_heuristic"]["threshold"] == pytest.approx(2000.0)
    assert c["single_leaf_share"]["ok"] and c["single_leaf_share"]["threshold"] == 0.6
    bad = dict(base, net=_m(6.0, jct=2100.0, leaf=0.55))   # 1.43x; 0.55 < sjf's 0.6
    c = _by_name(check_targets(bad, "net", EvalConfig(), locality=True))
    assert c["jct_vs_best_heuristic"]["ok"] is False and c["single_leaf_share"]["ok"] is False
    assert c["jct_vs_best_heuristic"]["deployable"] is None  # (no oracle replayed)
    oracle = dict(base, sif=_m(7.0, jct=1500.0), net=_m(6.0, jct=1900.0))
    j = _by_name(check_targets(oracle, "net", EvalConfig(), locality=True))[
        "jct_vs_best_heuristic"]
    assert j["against"] == "sif" and j["ok"] is False  # 1500 / 1900: 0.79x
    assert j["deployable"] == {"against": "sjf", "value": 3000.0, "ok": True}  # 1.58x
    assert "best not reading the recorded run time: sjf 3,000 s (1.58x lower)" in j["detail"]
    assert j["reachable_factor"] is None  # (the metrics carry no floor)
    none = dict(base, net=_m(6.0, jct=1000.0, leaf=None))  # no multi-node job: n/a
    res = check_targets(none, "net", EvalConfig(), locality=True)
    assert _by_name(res)["single_leaf_share"]["ok"] is None and res["passed"]


def test_jct_check_reports_the_factor_any_schedule_could_reach():
    ms = {"slurm": _m(10.0, jct=4000.0), "sjf": _m(8.0, jct=3000.0),
          "net": _m(6.0, jct=2900.0)}
    ms["net"]["jct_floor_s"] = 2500.0  # the test jobs' mean recorded run time
    j = _by_name(check_targets(ms, "net", EvalConfig(), locality=True))["jct_vs_best_heuristic"]
    assert j["ok"] is False and j["reachable_factor"] == pytest.approx(1.2)
    assert ("no schedule goes below 2,500 s (no wait, recorded speed): at most 1.20x lower,"
            " so the target is out of reach on these jobs") in j["detail"]
    ms["net"]["jct_floor_s"] = 1000.0  # 3x is within reach: no such verdict
    j = _by_name(check_targets(ms, "net", EvalConfig(), locality=True))["jct_vs_best_heuristic"]
    assert j["reachable_factor"] == pytest.approx(3.0) and "out of reach" not in j["detail"]


def test_targets_use_nodes_without_gpus_and_need_slurm():
    ms = {"net": _m(6.0, util=0.4, gpus=False), "slurm": _m(10.0, util=0.5, gpus=False),
          "sjf": _m(8.0, gpus=False)}
    c = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))
    assert c["utilisation"]["value"] == pytest.approx(0.2)  # nodes: util / 2 in _m
    with pytest.raises(KeyError, match="slurm"):
        check_targets({"net": _m(1.0), "sjf": _m(2.0)}, "net", EvalConfig(), locality=False)


def test_table_rows_columns():
    ms = {"net": _m(6.0), "slurm": _m(10.0)}
    rows = table_rows(ms)
    assert [r[0] for r in rows] == ["net", "slurm"]
    assert all(len(r) == len(TABLE_HEADERS) for r in rows)
    assert rows[0][TABLE_HEADERS.index("bsld mean")] == "6.000"
    assert rows[1][TABLE_HEADERS.index("util")] == "0.500"
    assert rows[0][TABLE_HEADERS.index("wait max")] == "100.0"
    del ms["slurm"]["wait_s"]["max"]  # metrics from before the column: a dash
    assert table_rows(ms)[1][TABLE_HEADERS.index("wait max")] == "-"


def test_p99_line_reports_the_longest_wait_without_checking_it():
    ms = {"net": _m(6.0, p99=100.0, longest=900_000.0), "slurm": _m(10.0, longest=400_000.0),
          "sjf": _m(8.0)}
    c = _by_name(check_targets(ms, "net", EvalConfig(), locality=False))["p99_wait"]
    assert c["ok"] and c["detail"].endswith("; longest wait 900,000 s vs 400,000 s")
    assert c["longest_wait"] == {"value": 900_000.0, "slurm": 400_000.0}


def test_plotted_runs_skip_duplicates():
    from trainer.evaluate import EvalResult

    ms = {"net": _m(3.0), "slurm": _m(5.0), "fifo": _m(5.0), "sif": _m(2.0), "saf": _m(2.0),
          "spf": _m(2.5), "drf": _m(4.0)}
    res = EvalResult(EvalConfig(plot_heuristics=2), time_split(100), ["net"], ms, {}, None,
                     "none")
    # fifo replays like slurm and sif like saf (ties: by name): the best two distinct
    assert res.plotted() == ["net", "slurm", "saf", "spf"]
    res.config = EvalConfig(plot_heuristics=0)
    assert res.plotted() == ["net", "slurm"]


def test_config_validation():
    with pytest.raises(ValueError, match="slurm"):
        EvalConfig(baselines=("fifo",))
    with pytest.raises(ValueError, match="unknown baselines"):
        EvalConfig(baselines=("slurm", "nope"))
    with pytest.raises(ValueError, match="policy_placement"):
        EvalConfig(policy_placement="nowhere")
    with pytest.raises(ValueError, match="warmup"):
        EvalConfig(warmup=0.9)
    assert EvalConfig(warmup=0.8).warmup_count(3000) == 2400  # (0.7 + 0.1 < 0.8 in floats)
    with pytest.raises(ValueError, match="warmup_under"):
        EvalConfig(warmup_under="fifo")
    for bad in ({"windows": 0}, {"resamples": -1}, {"blocks": 0}, {"confidence": 1.0}):
        with pytest.raises(ValueError):
            EvalConfig(**bad)


# ---------------------------------------------------------------------------- evaluate
def test_a_policy_given_as_model_replays_like_its_baseline():
    jobs, cl = _table(160)
    cfg = EvalConfig(baselines=("slurm", "fifo", "sjf"))
    res = evaluate(jobs, cl, {"mine": make_policy("sjf")}, cfg)
    assert res.names == ["mine", "slurm", "fifo", "sjf"]
    strip = {"policy", "sim"}
    a = {k: v for k, v in res.metrics["mine"].items() if k not in strip}
    b = {k: v for k, v in res.metrics["sjf"].items() if k not in strip}
    assert a == b
    lo, hi = res.split.test
    assert all(m["jobs"] == hi - lo for m in res.metrics.values())


def test_test_period_is_replayed_after_the_warmup_jobs():
    jobs, cl = _table(200)
    cfg = EvalConfig(baselines=("slurm", "fifo"))
    res = evaluate(jobs, cl, {}, cfg, speed_model="locality")
    # by hand: replay rows 140.. (warmup 20 jobs before the test period at 160)
    part = window(jobs, 140, 200, shift=False)
    want = metrics.compute(restrict(_replay(part, cl, "slurm", "locality"), 20))
    assert res.metrics["slurm"]["bsld"] == want["bsld"]
    assert res.metrics["slurm"]["jobs"] == 40 and res.targets is None
    cold = evaluate(jobs, cl, {}, EvalConfig(baselines=("slurm",), warmup=0.0))
    want = metrics.compute(_replay(window(jobs, 160, 200, shift=False), cl, "slurm"))
    assert cold.metrics["slurm"]["wait_s"] == want["wait_s"]


def test_warmup_jobs_replace_the_share_on_a_table_cut_short():
    jobs, cl = _table(200)
    cfg = EvalConfig(baselines=("slurm",))  # warm-up: 10% of the table
    cut = window(jobs, 0, 60, shift=False)  # a period cut short: rows 30..59 its "test"
    res = evaluate(cut, cl, {}, cfg, split=Split(60, 30, 30), warmup_jobs=20)
    # by hand: rows 10.. replayed, the first 20 not counted (the share would give 6)
    want = metrics.compute(restrict(_replay(window(jobs, 10, 60, shift=False), cl,
                                            "slurm"), 20))
    assert res.metrics["slurm"]["wait_s"] == want["wait_s"]
    assert res.warmup_jobs == 20 and res.to_dict()["warmup_jobs"] == 20
    # more than there are before the test period: all of them
    assert evaluate(cut, cl, {}, cfg, split=Split(60, 30, 30), warmup_jobs=50).warmup_jobs == 30
    assert evaluate(cut, cl, {}, cfg, split=Split(60, 30, 30)).warmup_jobs == 6
    with pytest.raises(ValueError, match="warmup_jobs"):
        evaluate(cut, cl, {}, cfg, split=Split(60, 30, 30), warmup_jobs=-1)


def _starts_before(res, at):
    return {int(j): int(res.start[j]) for j in np.flatnonzero(res.start < at)}


def test_take_over_replays_the_incumbent_until_its_time_then_the_inner_order():
    jobs, cl = _table(300, interarrival=20.0)  # overloaded: a queue when sjf takes over
    at = int(jobs.eligible[200])
    slurm, _ = BASELINES["slurm"].build(None, SchedulerOptions())
    plain = Simulator(jobs, cl, slurm, SchedulerOptions()).run()
    took = Simulator(jobs, cl, TakeOver(make_policy("sjf"), make_policy("multifactor"), at),
                     SchedulerOptions()).run()
    sjf = Simulator(jobs, cl, make_policy("sjf"), SchedulerOptions()).run()
    # until ``at``, every start is the incumbent's, to the second
    assert _starts_before(took, at) == _starts_before(plain, at)
    assert _starts_before(took, at) != _starts_before(sjf, at)
    assert int((plain.start >= at).sum()) > 50
    # from then on the queue it left is ordered by sjf: the jobs waiting at ``at`` too
    assert not np.array_equal(took.start, plain.start)
    waiting = np.flatnonzero((jobs.eligible < at) & (took.start >= at))
    assert waiting.size > 5
    pol = TakeOver(make_policy("sjf"), make_policy("multifactor"), at)
    st = NodeState(cl)
    for now, want in ((at - 1, make_policy("multifactor")), (at, make_policy("sjf"))):
        ctx = ScoreContext(now, cl, st, np.zeros(len(jobs.users)), np.random.default_rng(0))
        assert np.array_equal(pol.score(jobs, waiting, ctx), want.score(jobs, waiting, ctx))


def test_take_over_places_as_the_incumbent_until_its_time():
    jobs, cl = _table(40)
    st = NodeState(cl)
    inner, inc = make_policy("sjf", placement="random"), make_policy("multifactor")
    pol = TakeOver(inner, inc, at=1000)
    usable = np.ones(cl.num_nodes, dtype=bool)
    req = Request(3, 0, 0, True, 0, 0, 0)
    assert not np.array_equal(inner.place(cl, st, usable, req)[0],
                              inc.place(cl, st, usable, req)[0])  # (the test can tell)
    for now, want in ((999, inc), (1000, inner)):
        req = Request(3, 0, 0, True, 0, now, 0)
        assert np.array_equal(pol.place(cl, st, usable, req)[0],
                              want.place(cl, st, usable, req)[0])
    assert pol.dynamic and not inner.dynamic  # (re-scored once at least after ``at``)
    assert not pol.uses_usage and TakeOver(inner, make_policy("drf"), 1000).uses_usage


def test_warmup_under_slurm_starts_every_policy_from_the_incumbents_queue():
    jobs, cl = _table(400, interarrival=20.0)
    own = EvalConfig(baselines=("slurm", "sjf"), warmup=0.3)
    under = dataclasses.replace(own, warmup_under="slurm")
    slurm_pol = BASELINES["slurm"].build(None, SchedulerOptions())[0]
    a = evaluate(jobs, cl, {"again": slurm_pol}, under)
    # the incumbent taking over from itself is the incumbent: the same figures, and the
    # slurm baseline's are those of the usual warm-up (it schedules its own anyway)
    strip = {"policy", "sim"}
    assert ({k: v for k, v in a.metrics["again"].items() if k not in strip}
            == {k: v for k, v in a.metrics["slurm"].items() if k not in strip})
    b = evaluate(jobs, cl, {}, own)
    assert a.metrics["slurm"]["bsld"] == b.metrics["slurm"]["bsld"]
    # sjf meets Slurm's queue, not its own: its test figures differ from its own warm-up's
    assert a.metrics["sjf"]["wait_s"] != b.metrics["sjf"]["wait_s"]
    # by hand: sjf taking over at the first test arrival of rows 200..
    lo, k = 400 - 80 - 120, 120
    part = window(jobs, lo, 400, shift=False)
    pol = TakeOver(make_policy("sjf"), make_policy("multifactor"), int(part.eligible[k]))
    want = metrics.compute(restrict(Simulator(part, cl, pol, SchedulerOptions()).run(), k))
    assert a.metrics["sjf"]["wait_s"] == want["wait_s"]


def test_explicit_split_and_bad_names():
    jobs, cl = _table(100)
    res = evaluate(jobs, cl, {}, EvalConfig(baselines=("slurm",)), split=Split(100, 50, 50))
    assert res.metrics["slurm"]["jobs"] == 50
    with pytest.raises(ValueError, match="baseline names"):
        evaluate(jobs, cl, {"fifo": make_policy("fifo")}, EvalConfig())
    with pytest.raises(ValueError, match="non-empty"):
        evaluate(jobs, cl, {}, EvalConfig(), split=Split(100, 50, 100))


def test_tiny_net_against_baselines_writes_outputs(tmp_path, tiny_checkpoint):
    jobs, cl = _table(150)
    cfg = EvalConfig(baselines=("slurm", "fifo", "sjf"), plot_heuristics=1)
    out = tmp_path / "eval"
    res = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg, speed_model="locality", out=out)
    assert res.names == ["net", "slurm", "fifo", "sjf"]
    assert res.plotted()[:2] == ["net", "slurm"] and len(res.plotted()) <= 3
    data = json.loads((out / "eval.json").read_text())
    assert data["models"] == ["net"] and data["targets"]["policy"] == "net"
    assert {c["name"] for c in data["targets"]["checks"]} >= {
        "bsld_vs_slurm", "p99_wait", "utilisation", "jct_vs_best_heuristic"}
    assert data["split"]["test"]["jobs"] == 30
    assert len(data["table"]["rows"]) == 4
    pytest.importorskip("matplotlib")
    for name in ("wait_cdf", "utilisation", "fragmentation"):
        assert (out / f"{name}.png").stat().st_size > 1000
    again = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg, speed_model="locality")
    for n in res.names:  # deterministic: identical apart from wall times
        a, b = dict(res.metrics[n]), dict(again.metrics[n])
        a.pop("sim"), b.pop("sim")
        assert a == b


def test_ratio_checks_say_how_sure_they_are(tiny_checkpoint):
    from trainer.confidence import window_means

    jobs, cl = _table(200, interarrival=2.0)
    cfg = EvalConfig(baselines=("slurm", "fifo", "sjf"), windows=3, resamples=300)
    res = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    c = _by_name(res.targets)
    net, slurm = (metrics.job_metrics(res.results[n])["bsld"] for n in ("net", "slurm"))
    b = c["bsld_vs_slurm"]
    assert b["ci"]["ratio"] == pytest.approx(net.mean() / slurm.mean())
    assert b["ci"]["lo"] <= b["ci"]["ratio"] <= b["ci"]["hi"]
    assert b["ci"]["threshold"] == pytest.approx(0.7) and b["ci"]["resamples"] == 300
    assert b["ci"]["verdict"] in ("clear", "clear miss", "within the noise")
    wn, ws = window_means(net, 3), window_means(slurm, 3)
    met = sum(a / s <= 0.7 for a, s in zip(wn, ws, strict=True))
    assert b["windows"] == {"met": met, "of": 3}
    assert "interval" in b["detail"] and f"met in {met} of 3 windows" in b["detail"]
    h = c["bsld_vs_best_heuristic"]
    assert h["ci"]["threshold"] == 1.0 and h["against"] in ("fifo", "sjf")
    p = c["p99_wait"]  # the p99 wait's ratio, its interval and windows too
    w_net, w_slurm = (metrics.job_metrics(res.results[n])["wait"] for n in ("net", "slurm"))
    assert np.quantile(w_slurm, 0.99) > 0  # (a loaded workload: jobs wait)
    assert p["ci"]["ratio"] == pytest.approx(np.quantile(w_net, 0.99)
                                             / np.quantile(w_slurm, 0.99))
    assert p["ci"]["threshold"] == pytest.approx(1.1) and p["windows"]["of"] == 3
    assert "ci" not in c["utilisation"]
    u = c["utilisation"]["windows"]  # the utilisation in the same windows, by time
    assert u["of"] == 3 and len(u["value"]) == len(u["slurm"]) == 3
    assert u["met"] == sum(a >= b for a, b in zip(u["value"], u["slurm"], strict=True))
    assert f"; not lower in {u['met']} of 3 windows" in c["utilisation"]["detail"]
    for name, per in (("net", u["value"]), ("slurm", u["slurm"])):
        r = res.results[name]
        edges = [*(float(r.jobs.eligible[lo]) for lo, _ in res.windows["rows"]),
                 float(r.end.max())]
        # the windows' time-weighted mean is the headline utilisation
        assert np.dot(per, np.diff(edges)) / (edges[-1] - edges[0]) == pytest.approx(
            res.metrics[name]["utilisation"]["gpus" if cl.total_gpus else "nodes"])
    assert res.windows["bsld"]["net"] == wn and res.windows["rows"] == [[0, 13], [13, 26],
                                                                        [26, 40]]
    heads, rows = res.window_rows()
    assert heads[:3] == ("window", "jobs", "day") and len(rows) == 3
    assert rows[0][2] == "0.0"
    assert res.to_dict()["windows"] == {**res.windows, "shown": list(heads[3:])}
    # the best heuristic that does not read the recorded run time gets its own reading
    t = {"policy": "net", "checks": [{
        "name": "bsld_vs_best_heuristic", "ok": False, "against": "fifo", "detail": "x",
        "deployable": {"against": "sjf", "value": 1.0, "ok": False}}]}
    annotate(t, {n: metrics.job_metrics(r) for n, r in res.results.items()}, cfg)
    dep = t["checks"][0]["deployable"]
    sjf = metrics.job_metrics(res.results["sjf"])["bsld"]
    assert dep["ci"]["ratio"] == pytest.approx(net.mean() / sjf.mean())
    assert dep["windows"]["of"] == 3 and "; against sjf; ratio" in t["checks"][0]["detail"]
    res.targets = t
    assert "sjf" in res.window_rows()[0]
    plain = evaluate(jobs, cl, {"net": tiny_checkpoint},
                     dataclasses.replace(cfg, windows=1, resamples=0))
    b = _by_name(plain.targets)["bsld_vs_slurm"]
    assert b["ci"]["lo"] == b["ci"]["hi"] == b["ci"]["ratio"] and "windows" not in b
    assert "interval" not in b["detail"] and len(plain.window_rows()[1]) == 1
    assert "windows" not in _by_name(plain.targets)["utilisation"]


def test_later_models_are_read_against_the_first():
    from trainer.confidence import ratio_ci

    jobs, cl = _table(200, interarrival=2.0)
    cfg = EvalConfig(baselines=("slurm",), resamples=200)
    res = evaluate(jobs, cl, {"a": make_policy("fifo"), "b": make_policy("sjf"),
                              "c": make_policy("fifo")}, cfg)
    a, b = (metrics.job_metrics(res.results[n])["bsld"] for n in ("a", "b"))
    assert [e["model"] for e in res.pairs] == ["b", "c"]
    e = res.pairs[0]
    assert e["against"] == "a" and e["value"] == pytest.approx(b.mean())
    assert e["reference"] == pytest.approx(a.mean())
    want = ratio_ci(b, a, resamples=200)
    assert (e["ci"]["lo"], e["ci"]["hi"]) == pytest.approx((want.lo, want.hi))
    assert e["ci"]["threshold"] == 1.0 and e["windows"]["of"] == 4
    assert e["detail"].startswith(f"b vs a: mean bsld {b.mean():.3f} vs {a.mean():.3f}")
    assert res.pairs[1]["ci"]["ratio"] == pytest.approx(1.0)  # the same order: ratio 1
    assert res.to_dict()["model_pairs"] == res.pairs
    one = evaluate(jobs, cl, {"a": make_policy("fifo")}, cfg)
    assert one.pairs == []


def test_pick_teacher_replays_the_jobs_before_the_test_period():
    from trainer.evaluate import pick_teacher, teacher_candidates

    jobs, cl = _table(200, interarrival=5.0)
    names = ["slurm", "fifo-nobf", "sjf", "lrf"]
    best, scores = pick_teacher(jobs, cl, candidates=names)
    assert set(scores) == set(names) and best == min(names, key=lambda n: (scores[n], n))
    # by hand: rows 0..159 (the test period, 160.., cut off), from an empty cluster
    for name in ("sjf", "fifo-nobf"):
        want = metrics.compute(_replay(window(jobs, 0, 160, shift=False), cl, name))
        assert scores[name] == pytest.approx(want["bsld"]["mean"])
    assert scores["fifo-nobf"] != scores["sjf"]  # (a loaded workload: the order matters)
    cands = teacher_candidates()
    assert {"slurm", "sef", "seaf", "tetris", "lrf"} <= set(cands)
    assert not {"sif", "saf", "dsif", "spf", "random"} & set(cands)
    with pytest.raises(ValueError, match="unknown"):
        pick_teacher(jobs, cl, candidates=["slurm", "nope"])


def test_pick_teacher_behind_the_guard_replays_each_candidate_as_deployed():
    from trainer.evaluate import as_deployed, pick_teacher

    jobs, cl = _table(200, interarrival=5.0)
    names = ["sjf", "lrf", "fifo-nobf"]
    _, plain = pick_teacher(jobs, cl, candidates=names)
    best, scores = pick_teacher(jobs, cl, candidates=names, starvation_limit=600.0,
                                starvation_order="age", express_limit=120.0)
    assert best == min(names, key=lambda n: (scores[n], n))
    # by hand: each candidate behind the helper's guard (10 min, age, 2 min lane) on
    # rows 0..159, the jobs before the test period
    part = window(jobs, 0, 160, shift=False)
    for name in names:
        b = BASELINES[name]
        pol = as_deployed(make_policy(b.policy, None, b.placement or "tree"),
                          starvation_limit=600.0, starvation_order="age",
                          express_limit=120.0)
        opts = SchedulerOptions() if b.backfill is None else SchedulerOptions(
            backfill=b.backfill)
        want = metrics.compute(Simulator(part, cl, pol, opts, EngineOptions()).run())
        assert scores[name] == pytest.approx(want["bsld"]["mean"])
    assert scores != plain  # (jobs starve here: the guard changes the replays)
    with pytest.raises(ValueError, match="guard"):  # a lane needs a guard
        pick_teacher(jobs, cl, candidates=names, express_limit=120.0)


def test_fixed_placement_wraps_the_net(tiny_checkpoint):
    jobs, cl = _table(120)
    cfg = EvalConfig(baselines=("slurm",), policy_placement="pack")
    res = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    assert res.metrics["net"]["jobs"] == 24
    checks = {c["name"]: c for c in res.targets["checks"]}  # no heuristic: n/a
    assert checks["bsld_vs_best_heuristic"]["ok"] is None
    assert res.targets["best_heuristic"] == {"bsld": None, "jct": None}


def _helper_file(path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


HELPER_TOML = """interval = 60
rank_all = false
starvation_limit = 86400
starvation_order = "policy"
express_limit = 900
score_resolution = 0.2
steering = "switches"
switch_wait = "10m"
"""


def test_a_helper_file_sets_how_the_models_replay(tmp_path):
    f = _helper_file(tmp_path / "helper.toml", HELPER_TOML)
    assert helper_settings(f) == {
        "rescore": 60.0, "rank_all": False, "starvation_limit": 86400.0,
        "starvation_order": "policy", "express_limit": 900.0, "score_resolution": 0.2,
        "switch_wait": 600.0, "policy_placement": "tree"}
    # the helper's defaults are evaluate's: an empty file changes nothing
    assert EvalConfig(**helper_settings(_helper_file(tmp_path / "empty.toml", ""))) == (
        EvalConfig())
    quiet = helper_settings(_helper_file(tmp_path / "none.toml", 'steering = "none"\n'))
    assert quiet["policy_placement"] == "scheduler" and quiet["switch_wait"] == 0.0
    # options given win over the file, the file over the defaults
    cfg = config_from_options({"rescore": 30.0, "rank_all": None}, f, p99_slack=0.2)
    assert (cfg.rescore, cfg.rank_all, cfg.starvation_order, cfg.p99_slack) == (
        30.0, False, "policy", 0.2)
    assert config_from_options({}).rescore == 15.0
    bad = tmp_path / "open.toml"
    _helper_file(bad, "interval = 60\n")
    bad.chmod(0o666)
    with pytest.raises(click.BadParameter, match="world-writable"):
        config_from_options({}, str(bad))
    with pytest.raises(click.BadParameter, match="unknown key 'intervall'"):
        config_from_options({}, _helper_file(tmp_path / "typo.toml", "intervall = 60\n"))
    with pytest.raises(click.BadParameter, match="not found"):
        config_from_options({}, str(tmp_path / "missing.toml"))
    with pytest.raises(click.UsageError, match="rescore must be at least 1 s"):
        config_from_options({"rescore": 0.5})


def test_the_models_re_rank_as_often_as_the_helper_is_set_to(monkeypatch, tiny_checkpoint):
    import trainer.evaluate as ev

    assert load_policy(tiny_checkpoint).rescore_period == 15  # the helper's default
    guarded = load_policy(tiny_checkpoint, rescore=300, starvation_limit=3600.0)
    assert guarded.rescore_period == 300  # (through the guard's wrapper)
    seen: list[tuple[int, str]] = []

    def spy(path, **kw):
        pol = load_policy(path, **kw)
        seen.append((pol.rescore_period, pol.placement))
        return pol

    monkeypatch.setattr(ev, "load_policy", spy)
    jobs, cl = _table(120)
    opts = SchedulerOptions(placement="linear")
    cfg = EvalConfig(baselines=("slurm",), rescore=120.0, policy_placement="scheduler",
                     resamples=0)
    res = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg, options=opts)
    assert seen == [(120, "linear")] and res.metrics["net"]["jobs"] == 24
    with pytest.raises(ValueError, match="'policy', 'scheduler' or one of"):
        EvalConfig(policy_placement="nowhere")


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found (set $RLSCHED_TRACES)")
def test_evaluate_command(tmp_path, tiny_checkpoint):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "test period: jobs 240..299 of 300 (60 jobs)" in result.output
    assert "quality targets of tiny" in result.output
    assert "mean bsld in 4 consecutive windows of the test period:" in result.output
    assert ("(tiny behind the helper's starvation guard at 2 days, starving jobs in age"
            " order, baselines unguarded)") in result.output
    lines = [ln.split()[0] for ln in result.output.splitlines() if ln.strip()]
    for name in ["tiny", *BASELINES]:
        assert name in lines
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["input"]["limit"] == 300 and cfg["evaluate"]["train"] == 0.7
    assert cfg["numerics"]["cpu_capability"]  # what the model's scores were computed with
    assert json.loads((out / "eval.json").read_text())["input"]["jobs"] == 300
    guarded = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--starvation-limit", "3600", "--guard-heuristics", "--resamples", "0"])
    assert guarded.exit_code == 0, guarded.output + repr(guarded.exception)
    assert ("(tiny behind the helper's starvation guard at 0.0416667 days, starving jobs in"
            " age order, the other baselines behind the same guard, slurm as configured)"
            ) in guarded.output
    lane = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--starvation-limit", "3600", "--starvation-order", "policy", "--express-limit",
        "900", "--guard-heuristics", "--baselines", "lrf", "--resamples", "0"])
    assert lane.exit_code == 0, lane.output + repr(lane.exception)
    assert "policy order, jobs of at most 15 min above them (express lane), the other" in (
        lane.output)
    aged = CliRunner().invoke(cli.main, [  # the lane in age order (the default)
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--starvation-limit", "3600", "--express-limit", "900", "--guard-heuristics",
        "--baselines", "lrf", "--resamples", "0"])
    assert aged.exit_code == 0, aged.output + repr(aged.exception)
    assert "age order, jobs of at most 15 min above them (express lane), the other" in (
        aged.output)
    unguarded = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--starvation-limit", "0", "--express-limit", "900"])
    assert unguarded.exit_code == 2 and "needs the starvation guard" in unguarded.output
    deployed = tmp_path / "deployed"  # as a helper.toml deploys it; an option wins over it
    site = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--helper-config", _helper_file(tmp_path / "helper.toml", HELPER_TOML),
        "--score-resolution", "0", "--baselines", "lrf", "--resamples", "0",
        "--out", str(deployed)])
    assert site.exit_code == 0, site.output + repr(site.exception)
    assert "policy order, jobs of at most 15 min above them (express lane)" in site.output
    used = json.loads((deployed / "config.json").read_text())["evaluate"]
    assert (used["rescore"], used["rank_all"], used["switch_wait"], used["score_resolution"],
            used["policy_placement"]) == (60.0, False, 600.0, 0.0, "tree")
    unsafe = tmp_path / "unsafe.toml"
    _helper_file(unsafe, "interval = 60\n")
    unsafe.chmod(0o666)
    refused = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--helper-config",
        str(unsafe)])
    assert refused.exit_code == 2 and "chmod o-w" in refused.output
    bad = CliRunner().invoke(cli.main, ["evaluate", str(tmp_path / "missing.pt"),
                                        "--trace", str(LUBLIN)])
    assert bad.exit_code != 0 and "no such file" in bad.output
    some = tmp_path / "some"  # --baselines: those named, slurm always
    few = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--baselines", "lrf, spf", "--resamples", "0", "--out", str(some)])
    assert few.exit_code == 0, few.output + repr(few.exception)
    rows = {ln.split()[0] for ln in few.output.splitlines() if ln.strip()}
    assert {"tiny", "slurm", "lrf", "spf"} <= rows and not {"fifo", "sjf", "tetris"} & rows
    n_left = len([b for b in SEED_BASELINES if b not in ("slurm", "lrf", "spf")])
    assert f"among the 2 seed heuristics replayed ({n_left} not replayed)" in few.output
    assert json.loads((some / "config.json").read_text())["evaluate"]["baselines"] == [
        "slurm", "lrf", "spf"]
    left = json.loads((some / "eval.json").read_text())["targets"]["heuristics_left_out"]
    assert set(left) == set(SEED_BASELINES) - {"slurm", "lrf", "spf"}
    for arg, msg in (("nope,lrf", "unknown 'nope'"), (" , ", "give at least one")):
        bad = CliRunner().invoke(cli.main, ["evaluate", f"tiny={tiny_checkpoint}", "--trace",
                                            str(LUBLIN), "--limit", "300", "--baselines", arg])
        assert bad.exit_code == 2 and msg in bad.output
    under = tmp_path / "under"  # the whole history before the test period under slurm
    took = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--baselines", "lrf", "--resamples", "0", "--warmup", "0.8", "--warmup-under",
        "slurm", "--out", str(under)])
    assert took.exit_code == 0, took.output + repr(took.exception)
    assert ("every run took over from the slurm baseline's queue at the test period's first"
            " arrival (240 warm-up jobs)") in took.output
    data = json.loads((under / "eval.json").read_text())
    assert data["targets"]["warmup_under"] == "slurm" and data["warmup_jobs"] == 240
    bad = CliRunner().invoke(cli.main, ["evaluate", f"tiny={tiny_checkpoint}", "--trace",
                                        str(LUBLIN), "--warmup-under", "fifo"])
    assert bad.exit_code == 2 and "'fifo' is not one of 'own', 'slurm'" in bad.output


# ---------------------------------------------------------------------------- user history
def test_completion_feed_records_what_ended_in_end_order():
    from slurm_plugin.features import UserHistory
    from trainer.sim.observe import CompletionFeed

    jobs, cl = _table(120)
    r = _replay(jobs, cl, "sjf")
    feed_hist = UserHistory()
    feed = CompletionFeed(feed_hist, jobs, cl, r.start, r.end, r.leaves)
    mid = int(np.median(r.end))
    n_mid = int((r.end <= mid).sum())
    assert 0 < n_mid < jobs.n
    assert feed.advance(mid) == n_mid and feed.advance(mid) == 0
    assert feed.advance(int(r.end.max())) == jobs.n - n_mid
    # by hand: every job recorded in end order (stable by row)
    want = UserHistory()
    cap = int(cl.cap_c.max())
    for j in np.argsort(r.end, kind="stable").tolist():
        cpus = (cap if jobs.exclusive[j] else int(jobs.cpus[j])) * int(jobs.nodes[j])
        lim = int(jobs.limit[j]) if jobs.limit_known[j] else 0
        want.record(jobs.users[int(jobs.user[j])], int(r.end[j]),
                    int(r.end[j] - r.start[j]), lim, cpus, int(r.leaves[j]))
    assert feed_hist.to_dict() == want.to_dict() and feed_hist.version == jobs.n
    got = feed_hist.estimates(list(jobs.users), [3600] * len(jobs.users), mid)
    exp = want.estimates(list(jobs.users), [3600] * len(jobs.users), mid)
    for a, b in zip(got, exp, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_loaded_model_follows_the_replay_completions(tiny_checkpoint, monkeypatch):
    from trainer.policy import TorchPolicy

    jobs, cl = _table(150)
    seen: list[int] = []
    real = TorchPolicy.score

    def spy(self, jobs_, idx, ctx):
        out = real(self, jobs_, idx, ctx)
        seen.append(self.history.version)
        return out

    monkeypatch.setattr(TorchPolicy, "score", spy)
    evaluate(jobs, cl, {"net": tiny_checkpoint}, EvalConfig(baselines=("slurm",)))
    # the history grows while the replay runs (jobs before the replay seed it)
    assert seen and seen[-1] > seen[0]


def test_rank_all_reaches_the_loaded_model(tiny_checkpoint):
    from trainer.evaluate import load_policy
    from trainer.sim.slurm import PrioritySettings

    prio = PrioritySettings(weight_age=5000)
    pol = load_policy(tiny_checkpoint, rank_all=False, settings=prio)
    assert pol.rank_all is False and pol._slurm.settings == prio
    assert load_policy(tiny_checkpoint).rank_all is True
    jobs, cl = _table(150, interarrival=5.0)  # a queue builds up
    cfg = EvalConfig(baselines=("slurm",))
    a = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    b = evaluate(jobs, cl, {"net": tiny_checkpoint}, dataclasses.replace(cfg, rank_all=False))
    assert a.metrics["net"]["wait_s"] != b.metrics["net"]["wait_s"]
    assert a.metrics["slurm"]["wait_s"] == b.metrics["slurm"]["wait_s"]


def test_starvation_guard_puts_long_waiters_first_oldest_first():
    from trainer.evaluate import STARVING, StarvationGuard
    from trainer.sim.policies import ScoreContext, make_policy

    jobs, cl = _table(6)
    inner = make_policy("sjf")  # scores -limit: short jobs first
    guard = StarvationGuard(inner, 100.0)
    assert guard.dynamic and guard.placement == inner.placement
    idx = np.arange(6)
    now = int(jobs.eligible[0]) + 150
    ctx = ScoreContext(now, cl, NodeState(cl), np.zeros(1), np.random.default_rng(0), None)
    got = guard.score(jobs, idx, ctx)
    want = inner.score(jobs, idx, ctx)
    waited = now - jobs.eligible
    starving = waited > 100
    assert starving.any() and not starving.all()
    np.testing.assert_array_equal(got[~starving], want[~starving])  # the policy's order
    assert (got[starving] >= STARVING).all() and got[starving].min() > got[~starving].max()
    order = np.argsort(-got[starving], kind="stable")
    assert (np.diff(waited[starving][order]) <= 0).all()  # oldest first


def test_starvation_guard_in_policy_order_keeps_the_inner_order_among_starving_jobs():
    from trainer.evaluate import StarvationGuard
    from trainer.sim.policies import ScoreContext, make_policy

    jobs, cl = _table(6)
    inner = make_policy("sjf")
    guard = StarvationGuard(inner, 100.0, "policy")
    idx = np.arange(6)
    now = int(jobs.eligible[0]) + 150
    ctx = ScoreContext(now, cl, NodeState(cl), np.zeros(1), np.random.default_rng(0), None)
    got = guard.score(jobs, idx, ctx)
    want = inner.score(jobs, idx, ctx)
    starving = (now - jobs.eligible) > 100
    assert starving.sum() >= 2 and not starving.all()
    np.testing.assert_array_equal(got[~starving], want[~starving])
    assert got[starving].min() > got[~starving].max()  # still above every other job
    # among the starving jobs: the inner order (sjf), not the oldest first
    assert (np.argsort(-got[starving], kind="stable")
            == np.argsort(-want[starving], kind="stable")).all()
    with pytest.raises(ValueError, match="starvation order"):
        StarvationGuard(inner, 100.0, "oldest")


def test_starvation_limit_reaches_the_models(tiny_checkpoint):
    from trainer.evaluate import StarvationGuard, load_policy

    assert isinstance(load_policy(tiny_checkpoint, starvation_limit=60.0), StarvationGuard)
    assert not isinstance(load_policy(tiny_checkpoint), StarvationGuard)
    assert EvalConfig().starvation_limit == 2 * 86400.0  # the helper's default
    jobs, cl = _table(150, interarrival=5.0)  # a queue builds up
    cfg = EvalConfig(baselines=("slurm",), starvation_limit=0.0)
    a = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    b = evaluate(jobs, cl, {"net": tiny_checkpoint},
                 dataclasses.replace(cfg, starvation_limit=60.0))
    assert b.metrics["net"]["wait_s"] != a.metrics["net"]["wait_s"]  # the guard acted
    assert a.metrics["slurm"]["wait_s"] == b.metrics["slurm"]["wait_s"]  # baselines: not
    # the targets say how the checked model ran
    assert a.targets is not None and b.targets is not None
    assert a.targets["starvation_limit"] == 0.0 and b.targets["starvation_limit"] == 60.0
    assert b.targets["starvation_order"] == "age"
    c = evaluate(jobs, cl, {"net": tiny_checkpoint},
                 dataclasses.replace(cfg, starvation_limit=60.0, starvation_order="policy"))
    assert c.targets is not None and c.targets["starvation_order"] == "policy"
    assert load_policy(tiny_checkpoint, starvation_limit=60.0,
                       starvation_order="policy").order == "policy"
    with pytest.raises(ValueError, match="starvation_order"):
        EvalConfig(starvation_order="oldest")


def test_score_resolution_rounds_the_models_scores_as_the_helper_does(tiny_checkpoint):
    from trainer.evaluate import Quantized, StarvationGuard, guard_setup, load_policy
    from trainer.sim.policies import ScoreContext

    jobs, cl = _table(6)
    inner = make_policy("sjf")  # scores -limit
    q = Quantized(inner, 1000.0)
    idx = np.arange(6)
    ctx = ScoreContext(int(jobs.eligible[0]), cl, NodeState(cl), np.zeros(1),
                       np.random.default_rng(0), None)
    want = inner.score(jobs, idx, ctx)
    np.testing.assert_array_equal(q.score(jobs, idx, ctx), np.round(want / 1000.0) * 1000.0)
    assert q.placement == inner.placement and q.dynamic == inner.dynamic
    with pytest.raises(ValueError, match="score_resolution"):
        Quantized(inner, -1.0)
    with pytest.raises(ValueError, match="score_resolution"):
        EvalConfig(score_resolution=-1.0)
    # the rounding sits inside the guard, as in the helper; 0 adds nothing
    pol = load_policy(tiny_checkpoint, starvation_limit=60.0, score_resolution=0.5)
    assert isinstance(pol, StarvationGuard) and isinstance(pol.inner, Quantized)
    assert not isinstance(load_policy(tiny_checkpoint), Quantized)
    # a resolution coarser than every score difference ties all jobs: the net's order
    # is then arrival order, and its replay is FIFO with EASY backfill, exactly
    jobs, cl = _table(150, interarrival=5.0)  # a queue builds up
    cfg = EvalConfig(baselines=("slurm", "fifo"), starvation_limit=0.0, resamples=0,
                     policy_placement="tree")
    exact = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    tied = evaluate(jobs, cl, {"net": tiny_checkpoint},
                    dataclasses.replace(cfg, score_resolution=1e6))
    assert tied.metrics["net"]["wait_s"] == tied.metrics["fifo"]["wait_s"]
    assert tied.metrics["net"]["bsld"] == tied.metrics["fifo"]["bsld"]
    assert exact.metrics["net"]["wait_s"] != exact.metrics["fifo"]["wait_s"]
    assert tied.targets is not None and tied.targets["score_resolution"] == 1e6
    assert "scores rounded to 1e+06" in guard_setup(tied.targets)
    assert exact.targets is not None and "rounded" not in guard_setup(exact.targets)


def test_switch_wait_sits_inside_the_guard_and_is_recorded(tiny_checkpoint):
    from trainer.evaluate import (
        FixedPlacement,
        StarvationGuard,
        SwitchWait,
        guard_setup,
        load_policy,
    )
    from trainer.policy import TorchPolicy

    pol = load_policy(tiny_checkpoint, starvation_limit=60.0, switch_wait=1800.0)
    assert isinstance(pol, StarvationGuard) and isinstance(pol.inner, SwitchWait)
    assert pol.inner.wait == 1800.0
    # the helper steers by switch counts or by node lists: with a wait, Slurm places
    assert isinstance(pol.inner.inner, FixedPlacement) and pol.inner.placement == "tree"
    assert isinstance(load_policy(tiny_checkpoint), TorchPolicy)  # (its head places)
    assert not isinstance(load_policy(tiny_checkpoint), SwitchWait)  # 0: nothing added
    with pytest.raises(ValueError, match="switch_wait"):
        EvalConfig(switch_wait=-1.0)
    jobs, cl = _table(40)
    cfg = EvalConfig(baselines=("slurm", "sjf"), starvation_limit=60.0, resamples=0,
                     policy_placement="tree", switch_wait=1800.0, guard_heuristics=True)
    res = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    assert res.targets is not None and res.targets["switch_wait"] == 1800.0
    assert "multi-node jobs wait up to 30 min for one leaf switch" in guard_setup(res.targets)
    plain = evaluate(jobs, cl, {"net": tiny_checkpoint},
                     dataclasses.replace(cfg, switch_wait=0.0))
    assert plain.targets is not None and "leaf switch" not in guard_setup(plain.targets)


def test_guard_heuristics_replays_the_baselines_behind_the_models_guard():
    from trainer.evaluate import StarvationGuard, guard_setup, print_targets

    jobs, cl = _table(300, interarrival=2.0)  # a queue builds up: the guard acts on lrf
    cfg = EvalConfig(baselines=("slurm", "sjf", "lrf"), starvation_limit=1000.0,
                     starvation_order="policy", resamples=0)
    guarded = dataclasses.replace(cfg, guard_heuristics=True)
    mine = {"mine": StarvationGuard(make_policy("sjf"), 1000.0, "policy")}
    a, b = evaluate(jobs, cl, mine, cfg), evaluate(jobs, cl, mine, guarded)
    strip = {"policy", "sim"}

    def same(x, y):
        return ({k: v for k, v in x.items() if k not in strip}
                == {k: v for k, v in y.items() if k not in strip})

    assert same(a.metrics["slurm"], b.metrics["slurm"])  # slurm as configured, both times
    assert b.metrics["lrf"]["wait_s"] != a.metrics["lrf"]["wait_s"]  # the guard acted
    for name in ("sjf", "lrf"):  # each baseline as a guarded policy replays it
        alone = evaluate(jobs, cl, {"x": StarvationGuard(make_policy(name), 1000.0, "policy")},
                         dataclasses.replace(cfg, baselines=("slurm",)))
        assert same(b.metrics[name], alone.metrics["x"])
    # the same guarded order as the model: the heuristic target compares like with like
    assert b.metrics["sjf"]["bsld"] == b.metrics["mine"]["bsld"]
    assert a.targets is not None and b.targets is not None
    assert not a.targets["heuristics_guarded"] and b.targets["heuristics_guarded"]
    assert b.targets["setup"] == guard_setup(b.targets) == (
        "mine behind the helper's starvation guard at 0.0115741 days, starving jobs in"
        " policy order, the other baselines behind the same guard, slurm as configured")
    assert a.targets["setup"].endswith("policy order, baselines unguarded")
    # without a guard on the models there is nothing to put the baselines behind
    c = evaluate(jobs, cl, {"mine": make_policy("sjf")},
                 dataclasses.replace(guarded, starvation_limit=0.0))
    assert same(c.metrics["sjf"], a.metrics["sjf"])
    assert c.targets is not None and not c.targets["heuristics_guarded"]
    print_targets(b.targets)  # prints without error (the text is checked above)


class _Fixed(Policy):
    """Scores given per job row (the guard's inner policy in the order tests)."""

    def __init__(self, scores):
        super().__init__("fixed")
        self.scores = np.asarray(scores, dtype=np.float64)

    def score(self, jobs, idx, ctx):
        return self.scores[idx]


@pytest.mark.parametrize("order", ["policy", "age"])
def test_express_lane_in_the_guard_orders_the_queue_as_the_helper_does(order):
    from slurm_plugin.helper.decide import SiteFactorRule, targets
    from trainer.evaluate import STARVING, StarvationGuard
    from trainer.sim.policies import ScoreContext

    jobs, cl = _table(40)
    rng = np.random.default_rng(5)
    # with age, Slurm adds its age factor (PriorityWeightAge 1000, PriorityMaxAge 7 d)
    # to the site factors, and the helper keeps the lane that far above the starving
    age_weight = 1000 if order == "age" else 0
    rule = SiteFactorRule(lo=0, hi=10**9, starvation_order=order, express_limit=900.0,
                          starvation_limit=3000.0, age_weight=age_weight)
    for _ in range(20):
        scores = rng.permutation(40).astype(np.float64) - 20.0  # distinct
        limit = rng.choice([60, 300, 900, 901, 3600, 86400], size=40)
        table = dataclasses.replace(jobs, limit=limit.astype(jobs.limit.dtype))
        now = int(jobs.eligible.max()) + int(rng.integers(0, 6000))
        guard = StarvationGuard(_Fixed(scores), 3000.0, order, express=900.0)
        idx = np.arange(40)
        ctx = ScoreContext(now, cl, NodeState(cl), np.zeros(1), np.random.default_rng(0),
                           None)
        sim = guard.score(table, idx, ctx)
        waited = (now - table.eligible).astype(np.float64)
        values, lifted = targets(scores, waited, rule, limit)
        slurm = values + age_weight * np.minimum(waited / (7 * 86400), 1.0)
        assert np.argsort(-sim, kind="stable").tolist() == np.argsort(
            -slurm, kind="stable").tolist()
        short = limit <= 900
        assert (sim[short] >= 2 * STARVING).all() and (sim[~short] < 2 * STARVING).all()
        assert lifted.tolist() == (short | (waited > 3000)).tolist()
    with pytest.raises(ValueError, match="needs the starvation guard"):
        StarvationGuard(_Fixed([0.0]), 0.0, "age", express=900.0)


def test_evaluate_puts_the_models_and_baselines_behind_the_express_lane(tiny_checkpoint):
    from trainer.evaluate import StarvationGuard, guard_setup

    jobs, cl = _table(300, interarrival=2.0)  # a queue builds up: the guard acts
    cfg = EvalConfig(baselines=("slurm", "lrf"), starvation_limit=1000.0,
                     starvation_order="policy", resamples=0, guard_heuristics=True)
    lane = dataclasses.replace(cfg, express_limit=float(np.median(jobs.limit)))
    a = evaluate(jobs, cl, {"net": tiny_checkpoint}, cfg)
    b = evaluate(jobs, cl, {"net": tiny_checkpoint}, lane)
    assert b.metrics["lrf"]["wait_s"] != a.metrics["lrf"]["wait_s"]  # the lane acted
    assert b.metrics["net"]["wait_s"] != a.metrics["net"]["wait_s"]
    alone = evaluate(jobs, cl, {"x": StarvationGuard(make_policy("lrf"), 1000.0, "policy",
                                                     lane.express_limit)},
                     dataclasses.replace(lane, baselines=("slurm",)))
    assert alone.metrics["x"]["wait_s"] == b.metrics["lrf"]["wait_s"]
    assert b.targets is not None and b.targets["express_limit"] == lane.express_limit
    assert f"jobs of at most {lane.express_limit / 60:g} min above them (express lane)" in (
        guard_setup(b.targets))
    assert a.targets is not None and "express" not in guard_setup(a.targets)
    with pytest.raises(ValueError, match="needs the starvation guard"):
        dataclasses.replace(lane, starvation_limit=0.0)


def test_an_untrained_placement_head_leaves_placement_to_slurm(tiny_checkpoint, tmp_path):
    from slurm_plugin.model import PLACE_TRAINED, place_head_trained
    from trainer.evaluate import load_policy
    from trainer.policy import TorchPolicy, load_checkpoint, save_checkpoint

    assert place_head_trained({}) and place_head_trained({PLACE_TRAINED: True})
    assert not place_head_trained({PLACE_TRAINED: False})
    assert isinstance(load_policy(tiny_checkpoint), TorchPolicy)  # (not recorded: the head)
    imitated = tmp_path / "imitated.pt"
    save_checkpoint(imitated, load_checkpoint(tiny_checkpoint).net, extra={PLACE_TRAINED: False})
    from trainer.evaluate import FixedPlacement

    pol = load_policy(imitated)
    assert isinstance(pol, FixedPlacement) and pol.placement == "tree"
    assert isinstance(load_policy(imitated, placement="pack"), FixedPlacement)
