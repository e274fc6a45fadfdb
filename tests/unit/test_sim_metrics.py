"""Metrics on known schedules: bounded slowdown, Jain's index, fragmentation, tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from trainer.sim import metrics
from trainer.sim.engine import EngineOptions, Simulator
from trainer.sim.policies import make_policy
from trainer.sim.slurm import SchedulerOptions
from trainer.sim.state import Cluster, NodeState, build_jobs

T0 = 1_699_999_980


def job(jid: int, submit: int, run: int, nodes: int, user: str) -> JobRecord:
    t = T0 + submit
    tres = TresCounts(nodes, None, None, None)
    return JobRecord(jid, "", user, "", "", "", "COMPLETED", t, t, t, t + run, run, tres,
                     tres, "", (), None, 0)


def fifo_no_backfill(recs: list[JobRecord], gpus_per_node: int):
    """FIFO without backfill on 4 nodes, 2 per leaf switch: the replay."""
    sp = ClusterSpec.synthetic("c", 4, nodes_per_leaf=2, gpus_per_node=gpus_per_node)
    cl = Cluster.from_spec(sp)
    return Simulator(build_jobs(recs, cl), cl, make_policy("fifo"),
                     SchedulerOptions(backfill=False, bf_interval=0)).run()


def test_metrics_of_a_known_schedule():
    # FIFO without backfill on 4 nodes: 1 runs 0-100, 2 runs 100-110, 3 runs 110-115
    r = fifo_no_backfill([job(1, 0, 100, 2, "a"), job(2, 1, 10, 4, "b"),
                          job(3, 2, 5, 1, "b")], gpus_per_node=0)
    assert (r.start - T0).tolist() == [0, 100, 110]
    pj = metrics.job_metrics(r)
    assert pj["wait"].tolist() == [0, 99, 108]
    assert pj["jct"].tolist() == [100, 109, 113]
    # bsld = max(1, (wait + run) / max(run, 10))
    assert pj["bsld"].tolist() == pytest.approx([1.0, 109 / 10, 113 / 10])
    assert pj["effectiveness"].tolist() == pytest.approx([1.0, 10 / 109, 5 / 113])
    m = metrics.compute(r)
    assert m["makespan_s"] == 115
    assert m["jct_floor_s"] == pytest.approx((100 + 10 + 5) / 3)  # no wait, recorded runs
    assert m["wait_s"]["mean"] == pytest.approx((0 + 99 + 108) / 3)
    assert m["wait_s"]["max"] == 108
    assert m["bsld"]["median"] == pytest.approx(10.9)
    # users: a has mean bsld 1, b has (10.9 + 11.3) / 2 = 11.1
    x = np.array([1.0, 11.1])
    assert m["fairness"]["jain_bsld"] == pytest.approx(x.sum() ** 2 / (2 * (x * x).sum()))
    assert m["fairness"]["users"] == 2
    # node utilisation: 2/4 for 100 s, 4/4 for 10 s, 1/4 for 5 s, over 115 s
    assert m["utilisation"]["nodes"] == pytest.approx((0.5 * 100 + 1 * 10 + 0.25 * 5) / 115)
    assert m["utilisation"]["gpus"] is None
    # the jobs' own node-seconds over the span: the same for a whole replay
    assert m["utilisation"]["own_work"] == {
        "nodes": pytest.approx((2 * 100 + 4 * 10 + 1 * 5) / (4 * 115)), "gpus": None}
    # up to the last arrival (t = 2): job 1 alone on 2 of the 4 nodes
    assert m["utilisation"]["to_last_arrival"] == {"nodes": pytest.approx(0.5), "gpus": None}
    # idle while a job waited: 2 of 4 nodes from t = 1 (job 2 arrives) to 100; 110-115
    # leaves 3 idle with nobody waiting, 0-1 and 100-110 leave none idle
    assert m["utilisation"]["idle_waiting"] == {"nodes": pytest.approx(0.5 * 99 / 115),
                                                "gpus": None}
    assert m["single_leaf_share"] == pytest.approx(0.5)  # job 1 in one leaf, job 2 in two
    json.dumps(m)  # JSON-able
    rows = dict(metrics.table_rows(m))
    assert rows["policy"] == "fifo"
    assert "mean" in rows["bsld"]
    assert len(metrics.compare_rows([m, m])) == 2


def test_utilisation_to_the_last_arrival_leaves_the_drain_out():
    # FIFO without backfill on 4 GPU nodes: A (4 nodes) 0-100; then B (1 node) and C (1
    # node, the last arrival at 50) 100-110. While jobs arrive, A fills the machine; the
    # two small jobs after it leave half of it idle for 10 s, which only the time mean to
    # the last end (the work over the makespan) counts.
    r = fifo_no_backfill([job(1, 0, 100, 4, "a"), job(2, 1, 10, 1, "b"),
                          job(3, 50, 10, 1, "b")], gpus_per_node=2)
    assert (r.start - T0).tolist() == [0, 100, 100]
    u = metrics.compute(r)["utilisation"]
    assert u["nodes"] == pytest.approx((4 * 100 + 2 * 10) / (4 * 110))
    assert u["to_last_arrival"]["nodes"] == pytest.approx(1.0)
    assert u["to_last_arrival"]["gpus"] == pytest.approx(1.0)


def test_waiting_at_counts_arrived_jobs_not_yet_started():
    recs = [job(1, 0, 100, 2, "a"), job(2, 1, 10, 4, "b"), job(3, 2, 5, 1, "b")]
    r = fifo_no_backfill(recs, gpus_per_node=0)  # starts 0, 100, 110
    t = T0 + np.array([0, 1, 2, 99, 100, 109, 110, 200])
    assert metrics.waiting_at(r.jobs, r.start, t).tolist() == [0, 1, 2, 2, 1, 1, 0, 0]
    never = r.start.copy()
    never[2] = -1  # a job that never started waits from its arrival on
    assert metrics.waiting_at(r.jobs, never, t).tolist() == [0, 1, 2, 2, 1, 1, 1, 1]


def test_idle_while_waiting_reads_gpus_a_waiting_job_cannot_use():
    # 4 nodes x 2 GPUs: A (1 node, 1 GPU) 0-100 leaves a GPU free on its node; B (4
    # nodes x 2 GPUs) waits for it to end. Time mean over 0-110: 7 of 8 GPUs (and 3 of 4
    # nodes) idle from t = 1 to 100 while B waits
    sp = ClusterSpec.synthetic("c", 4, nodes_per_leaf=2, gpus_per_node=2)
    cl = Cluster.from_spec(sp)

    def gjob(jid: int, submit: int, run: int, nodes: int, gpus: int) -> JobRecord:
        t = T0 + submit
        tres = TresCounts(nodes, nodes, gpus * nodes, None)
        return JobRecord(jid, "", "u", "", "", "", "COMPLETED", t, t, t, t + run, run,
                         tres, tres, "", (), None, 0)

    jobs = build_jobs([gjob(1, 0, 100, 1, 1), gjob(2, 1, 10, 4, 2)], cl)
    r = Simulator(jobs, cl, make_policy("fifo"),
                  SchedulerOptions(backfill=False, bf_interval=0)).run()
    assert (r.start - T0).tolist() == [0, 100]
    u = metrics.compute(r)["utilisation"]
    assert u["idle_waiting"]["gpus"] == pytest.approx(7 / 8 * 99 / 110)
    assert u["idle_waiting"]["nodes"] == pytest.approx(3 / 4 * 99 / 110)


def test_jain_index():
    assert metrics.jain(np.array([2.0, 2.0, 2.0])) == pytest.approx(1.0)
    assert metrics.jain(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    assert metrics.jain(np.zeros(0)) == 1.0


def test_fragmentation_gpu_servers():
    # one 4-GPU server: a 2-GPU job with 100 s left, a 1-GPU job with 50 s left, 1 free
    sp = ClusterSpec.synthetic("g", 2, gpus_per_node=4, nodes_per_leaf=2, mem_mb_per_node=0)
    cl = Cluster.from_spec(sp)
    st = NodeState(cl)
    node0 = np.array([0])
    st.allocate_shared(node0, 1, 2, 0, 1000, 100)
    st.allocate_shared(node0, 1, 1, 0, 1000, 50)
    x = np.array([100, 100, 50, 0], dtype=float)
    expected0 = 1 - x.sum() ** 2 / (4 * (x * x).sum())
    # server 2 is idle: fragmentation 0; the cluster value is the mean over servers
    assert metrics.fragmentation(cl, st, 0) == pytest.approx(expected0 / 2)
    # a whole-node job: all GPUs end together, no fragmentation on that server
    st.allocate_whole(np.array([1]), 500, 500)
    assert metrics.fragmentation(cl, st, 0) == pytest.approx(expected0 / 2)
    # later, remaining times shrink (clipped at 0 once a job is past its end)
    x = np.array([40, 40, 0, 0], dtype=float)
    assert metrics.fragmentation(cl, st, 60) == pytest.approx(
        (1 - x.sum() ** 2 / (4 * (x * x).sum())) / 2)


def test_fragmentation_without_gpus_uses_leaves():
    sp = ClusterSpec.synthetic("n", 4, gpus_per_node=0, nodes_per_leaf=2)
    cl = Cluster.from_spec(sp)
    st = NodeState(cl)
    st.allocate_whole(np.array([0]), 100, 100)
    x = np.array([100.0, 0.0])
    assert metrics.fragmentation(cl, st, 0) == pytest.approx(
        (1 - x.sum() ** 2 / (2 * (x * x).sum())) / 2)
    st.allocate_whole(np.array([1]), 100, 100)
    assert metrics.fragmentation(cl, st, 0) == pytest.approx(0.0)


def test_series_are_time_weighted_and_bounded():
    recs = [job(i, i * 10, 30, 1, f"u{i % 3}") for i in range(1, 200)]
    sp = ClusterSpec.synthetic("c", 4, nodes_per_leaf=2, gpus_per_node=0)
    cl = Cluster.from_spec(sp)
    r = Simulator(build_jobs(recs, cl), cl, make_policy("fifo"), SchedulerOptions(),
                  EngineOptions(samples=20)).run()
    m = metrics.compute(r, series_points=50)
    s = m["series"]
    assert len(s["t"]) == len(s["nodes"]) == 50
    assert all(0.0 <= v <= 1.0 for v in s["nodes"])
    assert 0 < len(s["frag"]) < 60
    assert math.isclose(np.mean(s["nodes"]), m["utilisation"]["nodes"], rel_tol=0.05)


def test_plot_without_matplotlib_returns_none(monkeypatch, tmp_path):
    import sys

    # a None entry in sys.modules makes any import of it raise ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    assert metrics.plot({}, tmp_path) is None


def test_span_means_are_time_weighted_by_hand():
    t = np.array([0, 10, 20])
    v = np.array([1.0, 0.0, 0.5])  # 1 on [0,10), 0 on [10,20), 0.5 from 20 on
    got = metrics.span_means(t, v, [0, 5, 15, 30])
    assert got == pytest.approx([1.0, 0.5, 5 / 15])
    assert metrics.span_means(t, v, [-10, 0, 0, 40]) == pytest.approx([1.0, 0.0, 0.5])
    assert metrics.span_means(t, v, [3]) == []
    assert metrics.span_means(np.array([], dtype=np.int64), np.array([]), [0, 1, 2]) == [
        0.0, 0.0]
