"""trainer.sim.fidelity on hand-made inputs: comparisons, outages, live workloads."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from trainer.sim import fidelity
from trainer.sim.engine import EngineOptions, simulate
from trainer.sim.fidelity import LiveJob
from trainer.sim.policies import make_policy
from trainer.sim.slurm import SchedulerOptions

T0 = 1_699_999_980
EXACT = SchedulerOptions(bf_interval=0, bf_resolution=1)


def rec(jid: int, submit: int, run: int, nodes: int = 1, *, wait: int = 0,
        limit: int | None = None) -> JobRecord:
    t = T0 + submit
    tres = TresCounts(nodes, None, None, None)
    return JobRecord(
        job_id=jid, name="", user="u", account="", partition="", qos="", state="COMPLETED",
        submit_time=t, eligible_time=t, start_time=t + wait, end_time=t + wait + run,
        time_limit=limit if limit is not None else run, req=tres, alloc=tres, node_list="",
        nodes=(), priority=None, exit_code=0)


def replay(recs: list[JobRecord], nodes: int = 4):
    sp = ClusterSpec.synthetic("c", nodes, gpus_per_node=0, mem_mb_per_node=0)
    return simulate(sp, recs, make_policy("fifo"), EXACT)


# ---------------------------------------------------------------------------- inputs
def test_logged_starts_skips_unknown_and_refuses_conflicting_ids():
    a, b = rec(1, 0, 10, wait=5), rec(2, 0, 10)
    b_unknown = dataclasses.replace(b, start_time=None, end_time=None)
    assert fidelity.logged_starts([a, b_unknown]) == {1: T0 + 5}
    assert fidelity.logged_starts([a, a]) == {1: T0 + 5}  # the same row twice is fine
    with pytest.raises(ValueError, match="job id 1 appears twice"):
        fidelity.logged_starts([a, dataclasses.replace(a, start_time=T0 + 6)])


def test_align_pairs_jobs_and_counts_those_without_a_logged_start():
    r = replay([rec(1, 0, 10), rec(2, 5, 10), rec(3, 9, 10)])
    a = fidelity.align(r, {1: T0 + 1, 3: T0 + 20})
    assert a.job_id.tolist() == [1, 3]
    assert a.sim.tolist() == [T0, T0 + 9]
    assert a.real.tolist() == [T0 + 1, T0 + 20]
    assert a.eligible.tolist() == [T0, T0 + 9]
    assert a.missing == 1
    unstarted = dataclasses.replace(r, start=np.array([T0, -1, T0 + 9]))
    with pytest.raises(ValueError, match="did not start every job"):
        fidelity.align(unstarted, {})


# ---------------------------------------------------------------------------- waits
def test_wait_fidelity_by_hand():
    # four 1-node jobs on 4 nodes: the replay starts each on arrival (wait 0)
    recs = [rec(1, 0, 50), rec(2, 10, 50), rec(3, 20, 50), rec(4, 30, 50)]
    r = replay(recs)
    logged = {1: T0 + 0, 2: T0 + 10 + 300, 3: T0 + 20 + 4000, 4: T0 + 30 + 100}
    f = fidelity.wait_fidelity(r, logged)
    assert f.jobs == 4 and f.missing == 0
    assert f.mean_wait_sim == 0.0
    assert f.mean_wait_log == pytest.approx((0 + 300 + 4000 + 100) / 4)
    assert f.median_wait_log == pytest.approx(200.0)
    assert f.mean_abs_error == pytest.approx(1100.0)
    assert f.median_abs_error == pytest.approx(200.0)
    assert dict(f.within) == {600: 0.75, 3600: 0.75}
    assert math.isnan(f.correlation) and math.isnan(f.rank_correlation)  # sim waits constant
    d = f.to_dict()
    assert d["within"] == {"600": 0.75, "3600": 0.75}
    json.dumps(d)


def test_wait_fidelity_with_queueing_and_a_perfect_log():
    # 2 nodes: job 1 takes both for 100 s, job 2 (arrives at 10) waits 90 s, job 3 100 s
    recs = [rec(1, 0, 100, 2), rec(2, 10, 30, 1), rec(3, 20, 30, 2)]
    r = replay(recs, nodes=2)
    assert (r.start - T0).tolist() == [0, 100, 130]
    f = fidelity.wait_fidelity(r, {1: T0, 2: T0 + 100, 3: T0 + 130})
    assert f.mean_abs_error == 0.0 and f.p95_abs_error == 0.0
    assert f.correlation == pytest.approx(1.0) and f.rank_correlation == pytest.approx(1.0)
    assert dict(f.within) == {600: 1.0, 3600: 1.0}
    assert f.mean_wait_sim == pytest.approx((0 + 90 + 110) / 3)


def test_rank_correlation_by_hand():
    assert fidelity.rank_correlation([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert fidelity.rank_correlation([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # ties get their average rank: [1.5, 1.5, 3] against [1, 2, 3]
    assert fidelity.rank_correlation([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(0.75))
    # monotone but not linear: Spearman 1
    assert fidelity.rank_correlation([1, 2, 3, 4], [1, 8, 27, 1000]) == pytest.approx(1.0)
    assert math.isnan(fidelity.rank_correlation([5, 5], [1, 2]))
    with pytest.raises(ValueError, match="lengths differ"):
        fidelity.rank_correlation([1, 2], [1])


# ---------------------------------------------------------------------------- order
def test_order_agreement_by_hand():
    assert fidelity.order_agreement([0, 10, 20], [0, 10, 20]) == 1.0
    assert fidelity.order_agreement([0, 10, 20], [0, 20, 10]) == pytest.approx(2 / 3)
    assert fidelity.order_agreement([0, 10, 20], [0, 10, 10]) == pytest.approx(2.5 / 3)
    # pairs the real scheduler started together are left out: only (0,2) and (1,2) count
    assert fidelity.order_agreement([0, 0, 5], [3, 1, 2]) == pytest.approx(0.5)
    assert math.isnan(fidelity.order_agreement([7, 7], [1, 2]))
    with pytest.raises(ValueError, match="lengths differ"):
        fidelity.order_agreement([1, 2], [1])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=2, max_size=30))
def test_order_agreement_is_one_for_the_same_order_and_zero_for_the_reverse(xs):
    if len(set(xs)) < 2:
        return
    assert fidelity.order_agreement(xs, [2 * x + 1 for x in xs]) == 1.0
    assert fidelity.order_agreement(xs, [-x for x in xs]) == 0.0


def test_same_rank_by_hand():
    assert fidelity.same_rank([0, 10, 20], [0, 20, 10], [1, 2, 3]) == pytest.approx(1 / 3)
    # ties are ordered by job id in both runs
    assert fidelity.same_rank([5, 5, 9], [1, 1, 2], [7, 3, 4]) == 1.0
    assert math.isnan(fidelity.same_rank([], [], []))


def test_start_deviation_by_hand():
    recs = [rec(1, 0, 100, 2), rec(2, 10, 30, 1), rec(3, 20, 30, 2), rec(4, 25, 5, 1)]
    r = replay(recs, nodes=2)
    sim = dict(zip(r.jobs.job_id.tolist(), (r.start - T0).tolist(), strict=True))
    assert sim == {1: 0, 2: 100, 3: 130, 4: 100}
    real = {1: T0 + 1, 2: T0 + 101, 3: T0 + 125, 4: T0 + 140}  # deviations -1 -1 +5 -40
    d = fidelity.start_deviation(r, real)
    assert d.jobs == 4
    assert d.mean_abs == pytest.approx((1 + 1 + 5 + 40) / 4)
    assert d.median_abs == pytest.approx(3.0)
    assert d.max_abs == 40.0
    assert d.mean_signed == pytest.approx((-1 - 1 + 5 - 40) / 4)
    assert dict(d.within) == {1: 0.5, 2: 0.5, 5: 0.75, 10: 0.75}
    # real order 1 < 2 < 3 < 4; sim 1 < {2, 4} < 3: pairs (2,4) tie 0.5, (3,4) reversed
    assert d.order_pairs == pytest.approx(4.5 / 6)
    # real order by time: 1 2 3 4; sim: 1 2 4 3 (2 and 4 tie, by id)
    assert d.same_rank == pytest.approx(0.5)
    assert d.mean_wait_real == pytest.approx((1 + 91 + 105 + 115) / 4)
    assert d.jumped_sim == 1  # job 4 (arrived at 25) starts before job 3 (arrived at 20)
    assert d.jumped_real == 0


def test_plan_deviation_by_hand():
    # conservative on 4 nodes (the engine's hand case): at 3 s the replay plans jobs 2, 3
    # and 4 at 100, 200 and 300; at 150 s jobs 3 and 4 still wait
    recs = [rec(1, 0, 100, 3), rec(2, 1, 100, 2), rec(3, 2, 100, 4), rec(4, 3, 250, 1)]
    sp = ClusterSpec.synthetic("c", 4, gpus_per_node=0, mem_mb_per_node=0)
    opts = dataclasses.replace(EXACT, bf_plan="conservative")
    r = simulate(sp, recs, make_policy("fifo"), opts,
                 EngineOptions(plan_probes=(T0 + 3, T0 + 150)))
    snapshots = [
        # Slurm: job 2 as the replay, job 3 a minute later, job 4 unplanned (0); job 99
        # is not in the replay
        (T0 + 3, {2: T0 + 100, 3: T0 + 260, 4: 0, 99: T0 + 50}),
        # job 1 is still pending at Slurm, running in the replay: no pair
        (T0 + 150, {1: T0 + 160, 3: T0 + 200, 4: T0 + 290}),
    ]
    real = {1: T0, 2: T0 + 100, 3: T0 + 200, 4: T0 + 300}
    d = fidelity.plan_deviation(r, snapshots, real, tolerances=(1, 10))
    assert (d.moments, d.pairs, d.slurm_planned, d.replay_planned, d.both) == (2, 5, 4, 5, 4)
    assert d.mean_abs == pytest.approx(70 / 4) and d.max_abs == 60.0  # 0, -60, 0, +10
    assert d.mean_signed == pytest.approx(-50 / 4) and d.median_abs == pytest.approx(5.0)
    assert dict(d.within) == {1: 0.5, 10: 0.75}
    assert d.slurm_held == pytest.approx((0 + 60 + 0 + 10) / 4)  # Slurm's plans vs real
    assert d.to_dict()["within"] == {"1": 0.5, "10": 0.75}
    with pytest.raises(ValueError, match="plan_probes"):
        fidelity.plan_deviation(r, snapshots[:1], real)
    with pytest.raises(ValueError, match="plan_probes"):
        fidelity.plan_deviation(replay(recs), snapshots, real)  # kept no plans


def test_jumped_ahead_by_hand():
    # arrival order by (eligible, id): 1, 2, 3, 4; job 3 starts before job 2
    assert fidelity.jumped_ahead([0, 5, 5, 9], [0, 50, 20, 60], [1, 2, 3, 4]) == 1
    # equal eligible times: job id decides who is earlier (id 3 before id 8)
    assert fidelity.jumped_ahead([5, 5], [10, 20], [8, 3]) == 1
    assert fidelity.jumped_ahead([5, 5], [20, 10], [8, 3]) == 0
    # starting at the same second as an earlier job is not jumping ahead
    assert fidelity.jumped_ahead([0, 1, 2], [30, 30, 10], [1, 2, 3]) == 1
    assert fidelity.jumped_ahead([], [], []) == 0


# ---------------------------------------------------------------------------- outages
def test_idle_gaps_reports_gaps_with_waiting_jobs_only():
    # A runs [0,100); B eligible 50 waits until 300; C eligible 450 runs [500,600)
    eligible, start, end = [0, 50, 450], [0, 300, 500], [100, 400, 600]
    assert fidelity.idle_gaps(eligible, start, end, 100) == [(100, 300)]
    assert fidelity.idle_gaps(eligible, start, end, 250) == []
    # [400, 500) is idle but nobody waits at 400 (C arrives at 450): never reported
    assert fidelity.idle_gaps(eligible, start, end, 50) == [(100, 300)]


def test_idle_gaps_ignores_back_to_back_jobs_and_checks_input():
    # job 2 starts exactly when job 1 ends: no gap, although job 2 waited
    assert fidelity.idle_gaps([0, 0], [0, 10], [10, 20], 1) == []
    assert fidelity.idle_gaps([0], [0], [0], 1) == []  # nothing ever runs
    with pytest.raises(ValueError, match="lengths differ"):
        fidelity.idle_gaps([0, 1], [0], [1], 1)
    with pytest.raises(ValueError, match="min_gap"):
        fidelity.idle_gaps([0], [0], [1], 0)


# ---------------------------------------------------------------------------- live
def test_live_job_checks_its_fields():
    LiveJob(0, 0.0, 60, 1, 1)
    with pytest.raises(ValueError, match="exceeds its limit"):
        LiveJob(0, 0.0, 61, 1, 1)
    with pytest.raises(ValueError, match=">= 1"):
        LiveJob(0, 0.0, 0, 1, 1)
    with pytest.raises(ValueError, match=">= 0"):
        LiveJob(0, -1.0, 5, 1, 1)
    assert LiveJob(0, 0.0, 5, 2, 1).request == TresCounts(2, None, None, None)
    assert LiveJob(0, 0.0, 5, 2, 1, gpus=4, cpus=16).request == TresCounts(2, 32, 8, None)


def test_scale_jobs_by_hand():
    recs = [
        rec(10, 0, 600, 1, limit=3600),        # run 10 s, limit 60 s -> 1 min
        rec(11, 120, 30, 256, limit=0),        # run 0.5 -> raised to 2; no limit: 2 x 30 s
        rec(12, 600, 7200, 17, limit=0),       # run 120 s; limit 2 x 7200 / 60 = 240 s
        rec(13, 900, 3600, 16, limit=3600),    # run 60 s = limit: needs 65 s -> 2 min
    ]
    jobs, changed = fidelity.scale_jobs(recs, 60, cluster_nodes=16, trace_nodes=256)
    got = [(j.index, j.arrival, j.run, j.nodes, j.limit_min) for j in jobs]
    assert got == [(0, 0.0, 10, 1, 1), (1, 2.0, 2, 16, 1), (2, 10.0, 120, 2, 4),
                   (3, 15.0, 60, 1, 2)]
    assert changed == {"run_raised": 1, "run_capped": 0, "nodes_capped": 0, "gpus_capped": 0,
                       "limit_raised": 1}
    capped, changed = fidelity.scale_jobs(recs, 60, cluster_nodes=16, trace_nodes=128,
                                          max_run=30)
    assert [j.run for j in capped] == [10, 2, 30, 30]
    assert [j.nodes for j in capped] == [1, 16, 3, 2]
    assert changed["run_capped"] == 2 and changed["nodes_capped"] == 1
    for j in capped:
        assert j.limit_min * 60 >= j.run + 5
    with pytest.raises(ValueError, match="scale"):
        fidelity.scale_jobs(recs, 0, cluster_nodes=16, trace_nodes=256)
    no_run = dataclasses.replace(recs[0], end_time=None)
    with pytest.raises(ValueError, match="no run time"):
        fidelity.scale_jobs([no_run], 60, cluster_nodes=16, trace_nodes=256)
    assert fidelity.scale_jobs([], 60, cluster_nodes=16, trace_nodes=256)[0] == []


def test_sbatch_argv_is_an_argument_list_with_the_run_as_the_scripts_argument():
    whole = LiveJob(3, 1.5, 42, 4, 2)
    argv = fidelity.sbatch_argv(whole, "/j/sleep.sh", name="fid", chdir="/j")
    assert argv == ["sbatch", "--parsable", "--job-name=fid", "--chdir=/j", "--output=/dev/null",
                    "--nodes=4", "--time=2", "--exclusive", "/j/sleep.sh", "42"]
    gpu = LiveJob(0, 0.0, 7, 1, 1, gpus=2, cpus=8)
    argv = fidelity.sbatch_argv(gpu, "/j/s.sh", name="fid", chdir="/j", partition="gpu")
    assert argv[5:] == ["--nodes=1", "--time=1", "--partition=gpu", "--gres=gpu:2",
                        "--ntasks-per-node=1", "--cpus-per-task=8", "/j/s.sh", "7"]
    assert "--wrap" not in argv


def acct(jid: int, submit: int, start: int, end: int, state: str = "COMPLETED") -> JobRecord:
    alloc = TresCounts(2, 128, 16, 524288)  # what sacct says an exclusive job holds
    return JobRecord(
        job_id=jid, name="fid", user="root", account="root", partition="gpu", qos="normal",
        state=state, submit_time=submit, eligible_time=submit, start_time=start,
        end_time=end, time_limit=60, req=alloc, alloc=alloc, node_list="node[01-02]",
        nodes=("node01", "node02"), priority=1000, exit_code=0, cluster="testcluster")


def test_live_records_keep_slurms_times_and_the_submitted_request():
    job = LiveJob(0, 0.0, 10, 2, 1)
    out = fidelity.live_records([acct(7, 100, 103, 114), acct(8, 1, 2, 3)], {7: job},
                                end_latency=1)
    assert len(out) == 1
    r = out[0]
    assert (r.job_id, r.submit_time, r.eligible_time, r.start_time, r.end_time) == (
        7, 100, 100, 103, 115)
    assert r.req == r.alloc == TresCounts(2, None, None, None)
    assert r.time_limit == 60
    with pytest.raises(ValueError, match="not in sacct"):
        fidelity.live_records([], {7: job})
    with pytest.raises(ValueError, match="no start or end"):
        fidelity.live_records([dataclasses.replace(acct(7, 1, 2, 3), end_time=None)], {7: job})


def test_live_records_replay_whole_node_jobs_as_exclusive():
    jobs = {1: LiveJob(0, 0.0, 10, 2, 1), 2: LiveJob(1, 0.0, 10, 1, 1)}
    recs = fidelity.live_records([acct(1, T0, T0, T0 + 10), acct(2, T0 + 1, T0 + 10, T0 + 20)],
                                 jobs)
    sp = ClusterSpec.synthetic("c", 2, gpus_per_node=8, cpus_per_node=64)
    r = simulate(sp, recs, make_policy("fifo"), EXACT)
    assert r.jobs.exclusive.all()
    assert (r.start - T0).tolist() == [0, 10]  # job 2 waits: job 1 holds both nodes


def test_nominal_records_start_on_arrival():
    jobs = [LiveJob(0, 0.4, 10, 2, 1), LiveJob(1, 3.9, 5, 1, 1, gpus=1, cpus=4)]
    recs = fidelity.nominal_records(jobs, 1000)
    assert [(r.job_id, r.submit_time, r.start_time, r.end_time, r.time_limit) for r in recs] == [
        (1, 1000, 1000, 1010, 60), (2, 1003, 1003, 1008, 60)]
    assert recs[1].req == TresCounts(1, 4, 1, None)


def test_synthetic_jobs_are_seeded_and_fit_the_cluster():
    a = fidelity.synthetic_jobs(60, seed=3, gpu_share=0.3)
    assert a == fidelity.synthetic_jobs(60, seed=3, gpu_share=0.3)
    assert a != fidelity.synthetic_jobs(60, seed=4, gpu_share=0.3)
    assert a[0].arrival == 0.0
    assert all(x.arrival <= y.arrival for x, y in zip(a, a[1:], strict=False))
    assert all(1 <= j.nodes <= 16 and 5 <= j.run <= 40 for j in a)
    assert all(j.limit_min * 60 >= j.run + 5 for j in a)
    gpu = [j for j in a if j.gpus]
    assert gpu and all(j.nodes == 1 and j.cpus == 4 * j.gpus and j.gpus <= 8 for j in gpu)
    assert all(j.gpus == 0 for j in fidelity.synthetic_jobs(30, seed=3))
    with pytest.raises(ValueError):
        fidelity.synthetic_jobs(5, run=(10, 5))


def test_fidelity_modules_do_not_import_torch():
    code = ("import sys, json; import trainer.sim.fidelity, trainer.fidelity_live;"
            " print(json.dumps(sorted(k for k in sys.modules"
            " if k.split('.')[0] in ('torch', 'gymnasium'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
