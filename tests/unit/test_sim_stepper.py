"""trainer.sim.stepper: event order, start checks, rewards, and parity with the engine."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.features import UserHistory
from trainer.sim import metrics
from trainer.sim import workload as w
from trainer.sim.engine import Simulator
from trainer.sim.policies import make_policy
from trainer.sim.slurm import SchedulerOptions
from trainer.sim.speed import SPEED_MODELS, SpeedModel
from trainer.sim.state import Cluster, build_jobs
from trainer.sim.stepper import (
    REWARDS,
    CachedUserHistory,
    Stepper,
    make_reward,
    take,
    window,
)

T0 = 1_699_999_980


def job(jid: int, submit: int, run: int, nodes: int | None = 1, *, limit: int | None = None,
        user: str = "u1", gpus: int | None = None, cpus: int | None = None,
        partition: str = "") -> JobRecord:
    t = T0 + submit
    tres = TresCounts(nodes, cpus, gpus, None)
    return JobRecord(
        job_id=jid, name="", user=user, account="", partition=partition, qos="",
        state="COMPLETED", submit_time=t, eligible_time=t, start_time=t, end_time=t + run,
        time_limit=limit if limit is not None else run, req=tres, alloc=tres, node_list="",
        nodes=(), priority=None, exit_code=0,
    )


def spec(nodes: int, *, per_leaf: int = 4, gpus: int = 0, cpus: int = 64) -> ClusterSpec:
    return ClusterSpec.synthetic("c", nodes, nodes_per_leaf=per_leaf, gpus_per_node=gpus,
                                 cpus_per_node=cpus, mem_mb_per_node=0)


def make(recs: list[JobRecord], sp: ClusterSpec, **kw) -> Stepper:
    cl = Cluster.from_spec(sp)
    return Stepper(build_jobs(recs, cl), cl, **kw)


def synthetic(kind: str, n: int, seed: int = 1):
    cfg = w.WorkloadConfig(kind=kind, num_jobs=n, seed=seed)
    sp = w.default_cluster(cfg)
    cl = Cluster.from_spec(sp)
    return build_jobs(w.replay_records(w.generate(cfg), sp), cl), cl


def fifo_blocking(s: Stepper) -> None:
    """Slurm's main scheduler without backfill: the first job of a partition that does
    not fit blocks the rest of that partition."""
    while not s.done:
        blocked: set[int] = set()
        for row in s.pending().tolist():
            p = int(s.jobs.part[row])
            if p in blocked:
                continue
            if s.fits(np.array([row]))[0]:
                s.start(row, s.best_fit(row))
                break
            blocked.add(p)
        else:
            s.advance()


# ---------------------------------------------------------------------------- events
def test_completions_free_nodes_before_arrivals_at_the_same_time():
    s = make([job(1, 0, 100, 4), job(2, 100, 10, 4)], spec(4))
    a = s.advance()
    assert (a.dt, a.now, a.finished, a.arrived) == (0, T0, (), (0,))
    s.start(0, s.best_fit(0))
    assert not s.fits(s.pending()).size  # nothing pending
    a = s.advance()
    assert (a.dt, a.now - T0, a.finished, a.arrived) == (100, 100, (0,), (1,))
    assert s.fits(s.pending()).tolist() == [True]  # job 1's nodes are free already


def test_zero_length_job_completes_in_an_advance_of_zero_seconds():
    s = make([job(1, 0, 0, 2), job(2, 5, 10, 1)], spec(4))
    s.advance()
    assert s.start(0, [0, 1]) == 0
    a = s.advance()
    assert (a.dt, a.finished, a.arrived) == (0, (0,), ())
    assert s.state.idle.all()
    a = s.advance()
    assert (a.dt, a.arrived) == (5, (1,))


def test_arrival_order_and_pending_queue():
    s = make([job(3, 0, 10), job(1, 0, 10), job(2, 1, 10)], spec(4))
    s.advance()
    assert s.jobs.job_id[s.pending()].tolist() == [1, 3]  # same time: job id order
    s.start(1, [2])
    assert s.jobs.job_id[s.pending()].tolist() == [1]
    s.advance()
    assert s.jobs.job_id[s.pending()].tolist() == [1, 2]
    assert s.visible(1).tolist() == [0]


def test_start_refuses_what_cannot_run_now():
    s = make([job(1, 0, 100, 2), job(2, 0, 100, 3)], spec(4))
    s.advance()
    with pytest.raises(ValueError, match="needs 2 distinct nodes"):
        s.start(0, [1])
    with pytest.raises(ValueError, match="needs 2 distinct nodes"):
        s.start(0, [1, 1])
    with pytest.raises(ValueError, match="node indices"):
        s.start(0, [3, 4])
    s.start(0, [0, 1])
    with pytest.raises(ValueError, match="not pending"):
        s.start(0, [2, 3])
    with pytest.raises(ValueError, match=r"cannot start on nodes \[1\]"):
        s.start(1, [1, 2, 3])
    assert not s.fits(np.array([1]))[0]
    assert s.best_fit(1) is None
    assert len(s.candidates(1)) == 0


def test_shadow_is_when_the_running_jobs_free_enough_nodes_by_their_limits():
    # 4 whole nodes: 1 runs on 2 nodes (limit 100), 2 on one (limit 50, ends at 20)
    s = make([job(1, 0, 100, 2), job(2, 0, 20, 1, limit=50), job(3, 0, 10, 4),
              job(4, 0, 10, 2), job(5, 0, 10, 1)], spec(4))
    s.advance()
    s.start(0, [0, 1])
    s.start(1, [2])
    assert s.shadow(4) == T0  # fits now (node 3)
    assert s.shadow(3) == T0 + 50  # nodes 3 now, 2 at job 2's limit (not its actual end)
    assert s.shadow(2) == T0 + 100  # all four: job 1's limit
    with pytest.raises(ValueError, match="not pending"):
        s.shadow(0)
    s.advance()  # job 2 ends at 20: its node is free now
    assert s.now == T0 + 20 and s.shadow(3) == T0 + 20 and s.shadow(2) == T0 + 100


def test_shadow_of_a_shared_node_request():
    # 2 nodes of 64 CPUs: 40 CPUs taken on each until 30 and 60 (limits)
    s = make([job(1, 0, 30, 1, cpus=40), job(2, 0, 60, 1, cpus=40),
              job(3, 0, 10, 2, cpus=60), job(4, 0, 10, 1, cpus=20)], spec(2))
    s.advance()
    s.start(0, [0])
    s.start(1, [1])
    assert s.shadow(3) == T0  # 24 CPUs free on a node now
    assert s.shadow(2) == T0 + 60  # 30 CPUs on each of both nodes: when job 2 ends
    assert s.stats["started"] == 2  # (a query changes nothing)


def test_start_checks_the_partition_and_shared_resources():
    sp = spec(4, gpus=8)
    sp = replace(sp, partitions={"a": sp.partitions["batch"][:2],
                                 "batch": sp.partitions["batch"]})
    s = make([job(1, 0, 100, 1, gpus=6, partition="a"), job(2, 0, 100, 1, gpus=4,
                                                          partition="a")], sp)
    s.advance()
    with pytest.raises(ValueError, match="outside its partition"):
        s.start(0, [3])
    s.start(0, [0])
    with pytest.raises(ValueError, match=r"cannot start on nodes \[0\]"):
        s.start(1, [0])  # 2 GPUs left there
    assert s.fits(np.array([1])).tolist() == [True]
    assert s.best_fit(1).tolist() == [1]
    cands = s.candidates(1)
    assert [c.tolist() for c in (cands.nodes(k) for k in range(len(cands)))] == [[1]]


def test_candidates_agree_with_fits():
    jobs, cl = synthetic("gpu", 80)
    s = Stepper(jobs, cl)
    rng = np.random.default_rng(0)
    while not s.done:
        p = s.pending()
        fit = s.fits(p)
        for row, f in zip(p.tolist(), fit.tolist(), strict=True):
            c = s.candidates(row)
            assert (len(c) > 0) == f
            for k in range(len(c)):
                assert s.usable(row)[c.nodes(k)].all()
        ok = p[fit]
        if ok.size and rng.random() < 0.7:
            row = int(rng.choice(ok))
            c = s.candidates(row)
            s.start(row, c.nodes(int(rng.integers(len(c)))))
        else:
            s.advance()


def test_window_slices_and_shifts():
    jobs, _ = synthetic("gpu", 50)
    sub = window(jobs, 10, 20)
    assert sub.n == 10
    assert sub.eligible[0] == 0
    assert (sub.eligible == jobs.eligible[10:20] - jobs.eligible[10]).all()
    assert (sub.job_id == jobs.job_id[10:20]).all()
    assert (sub.shape == jobs.shape[10:20]).all() and sub.shape_c is jobs.shape_c
    assert window(jobs, 0, 5, shift=False).eligible.tolist() == jobs.eligible[:5].tolist()
    with pytest.raises(ValueError, match="not a non-empty range"):
        window(jobs, 5, 5)


def test_result_needs_every_job_finished():
    s = make([job(1, 0, 10)], spec(2))
    with pytest.raises(RuntimeError, match="1 jobs have not finished"):
        s.result()
    s.advance()
    s.start(0, [0])
    s.advance()
    assert s.done and not s.can_advance
    with pytest.raises(RuntimeError, match="no event left"):
        s.advance()
    assert s.result().start.tolist() == [T0]


# ---------------------------------------------------------------------------- engine parity
@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_fifo_blocking_agent_replays_the_engine_exactly(kind):
    jobs, cl = synthetic(kind, 300)
    ref = Simulator(jobs, cl, make_policy("fifo"),
                    SchedulerOptions(backfill=False, bf_interval=0)).run()
    s = Stepper(jobs, cl)
    fifo_blocking(s)
    res = s.result()
    assert res.start.tolist() == ref.start.tolist()
    assert res.end.tolist() == ref.end.tolist()
    assert res.leaves.tolist() == ref.leaves.tolist()
    m, mr = metrics.compute(res), metrics.compute(ref)
    assert m["utilisation"] == mr["utilisation"]
    assert m["fragmentation"] == mr["fragmentation"]
    # the bsld reward adds up to minus the sum of bounded slowdowns
    bsld = metrics.job_metrics(res)["bsld"]
    assert s.total_reward == pytest.approx(-bsld.sum(), rel=1e-9)


# ---------------------------------------------------------------------------- rewards
def tiny(reward: str, backlog: float = 0.0, stranding: float = 0.0) -> Stepper:
    """FIFO with greedy filling on 4 nodes: 1 runs 0-100, 3 runs 2-12, 2 runs 100-110."""
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1)]
    cl = Cluster.from_spec(spec(4, per_leaf=2))
    jobs = build_jobs(recs, cl)
    s = Stepper(jobs, cl, reward=make_reward(reward, jobs, cl, backlog=backlog,
                                             stranding=stranding))
    s.advance()
    s.start(0, s.best_fit(0))
    s.advance()
    s.advance()
    s.start(2, s.best_fit(2))
    while not s.done:
        if s.pending().size and s.fits(s.pending())[0]:
            s.start(1, s.best_fit(1))
        else:
            s.advance()
    assert (s.result().start - T0).tolist() == [0, 100, 2]
    return s


def test_rewards_of_a_known_schedule():
    # bsld: 1, 109/10, 1
    assert tiny("bsld").total_reward == pytest.approx(-(1 + 10.9 + 1))
    mean_run = (100 + 10 + 10) / 3
    # waits 0, 99, 0; JCTs 100, 109, 10
    assert tiny("wait").total_reward == pytest.approx(-99 / mean_run)
    assert tiny("jct").total_reward == pytest.approx(-(100 + 109 + 10) / mean_run)
    # effectiveness: run / (wait + run) = 1, 10/109, 1
    assert tiny("effectiveness").total_reward == pytest.approx(2 + 10 / 109)
    # CPUs: 128 of 256 for 100 s, +64 for 10 s, all 256 for 10 s; gap = 2 s / 2 arrivals
    used = (128 * 100 + 64 * 10 + 256 * 10) / 256
    assert tiny("util").total_reward == pytest.approx(used / 1.0)


def test_backlog_reward_is_the_area_weighted_wait():
    # areas (share of the 4 nodes x run): 2/4 x 100, 4/4 x 10, 1/4 x 10; only job 2
    # waits (99 s); the weights add up to bsld's: k = mean(1 / max(run, 10)) / mean(area)
    area = np.array([0.5 * 100, 1.0 * 10, 0.25 * 10])
    k = np.mean([1 / 100, 1 / 10, 1 / 10]) / area.mean()
    s = tiny("backlog")
    assert s.total_reward == pytest.approx(-k * area[1] * 99)
    assert s.reward.weight.sum() == pytest.approx(1 / 100 + 1 / 10 + 1 / 10)


def test_backlog_weighs_the_dominant_share_and_adds_up_as_bsld():
    jobs, cl = synthetic("gpu", 200)
    r = make_reward("backlog", jobs, cl)
    assert r.weight.sum() == pytest.approx((1 / np.maximum(jobs.run, 10.0)).sum())
    share = np.maximum(jobs.total_cpus(cl) / cl.total_cpus, jobs.total_gpus(cl) / cl.total_gpus)
    ratio = r.weight / (share * jobs.run)
    ran = jobs.run > 0
    np.testing.assert_allclose(ratio[ran], ratio[ran][0])
    # on 4 nodes of 64 CPUs and 4 GPUs: a CPU-only job weighs its CPU share, a GPU job
    # the larger of its two shares
    cl = Cluster.from_spec(spec(4, gpus=4))
    recs = [job(1, 0, 100, 1, cpus=64, gpus=0), job(2, 0, 100, 1, cpus=8, gpus=1),
            job(3, 0, 100, 2, cpus=16, gpus=8)]  # (TRES counts: totals over its nodes)
    jobs = build_jobs(recs, cl)
    w = make_reward("backlog", jobs, cl).weight
    np.testing.assert_allclose(w / w[0], [1.0, (1 / 16) / (64 / 256), (8 / 16) / (64 / 256)])


def test_a_backlog_weight_adds_that_much_of_the_backlog_reward():
    mixed = tiny("bsld", backlog=0.5)
    assert mixed.reward.name == "bsld+0.5*backlog"
    assert mixed.reward.tau == 10.0
    want = tiny("bsld").total_reward + 0.5 * tiny("backlog").total_reward
    assert mixed.total_reward == pytest.approx(want)
    assert tiny("bsld", backlog=0.0).reward.name == "bsld"


@pytest.mark.parametrize("term", ["backlog", "stranding"])
def test_a_negative_term_weight_is_refused(term):
    jobs, cl = synthetic("gpu", 20)
    with pytest.raises(ValueError, match=f"{term} weight must be >= 0"):
        make_reward("bsld", jobs, cl, **{term: -1.0})


def test_stranding_reward_prices_the_nodes_idle_while_a_job_waits():
    # job 2 (4 nodes) waits from 1 to 100: 2 of 4 nodes idle for 1 s, 1 of 4 for the
    # 10 s job 3 runs, then 2 of 4 for 88 s; before it arrived nobody waited (0 s idle
    # then costs nothing); k = mean(1 / max(run, 10)) / mean(share), shares 2/4, 4/4, 1/4
    k = np.mean([1 / 100, 1 / 10, 1 / 10]) / np.mean([0.5, 1.0, 0.25])
    s = tiny("stranding")
    assert s.reward.k == pytest.approx(k)
    assert s.total_reward == pytest.approx(-k * (1 * 0.5 + 10 * 0.25 + 88 * 0.5))
    mixed = tiny("bsld", backlog=0.5, stranding=2.0)
    assert mixed.reward.name == "bsld+0.5*backlog+2*stranding"
    want = (tiny("bsld").total_reward + 0.5 * tiny("backlog").total_reward
            + 2.0 * s.total_reward)
    assert mixed.total_reward == pytest.approx(want)
    assert tiny("bsld", stranding=0.0).reward.name == "bsld"


def test_stranding_reward_reads_gpus_on_a_gpu_cluster():
    # one node of 8 GPUs: a 1-GPU job runs 0-100 on it, so the node is busy, yet 7 of
    # 8 GPUs sit idle while the 8-GPU job that arrived at 10 waits, for 90 s
    s = make([job(1, 0, 100, 1, cpus=8, gpus=1), job(2, 10, 100, 1, cpus=8, gpus=8)],
             spec(1, per_leaf=1, gpus=8), reward="stranding")
    k = np.mean([1 / 100, 1 / 100]) / np.mean([1 / 8, 8 / 8])
    assert s.reward.k == pytest.approx(k)
    s.advance()
    s.start(0, s.best_fit(0))
    s.advance()
    assert s.pop_reward() == 0.0  # nobody waited yet
    assert not s.fits(s.pending())[0]
    s.advance()
    assert s.pop_reward() == pytest.approx(-k * 90 * 7 / 8)
    s.start(1, s.best_fit(1))
    while not s.done:
        s.advance()
    assert s.total_reward == pytest.approx(-k * 90 * 7 / 8)


def test_bsld_reward_lifts_short_jobs_to_one():
    s = make([job(1, 0, 3), job(2, 0, 0)], spec(2))
    s.advance()
    s.start(0, [0])
    s.start(1, [1])
    s.advance()
    s.advance()
    assert s.done
    assert s.total_reward == pytest.approx(-2.0)
    assert s.pop_reward() == pytest.approx(-2.0) and s.pop_reward() == 0.0


def test_reward_registry():
    jobs, cl = synthetic("gpu", 20)
    assert set(REWARDS) == {"bsld", "wait", "jct", "util", "effectiveness", "backlog",
                            "stranding"}
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        make_reward("nope", jobs, cl)
    with pytest.raises(KeyError, match="unknown speed model"):
        Stepper(jobs, cl, "nope")


def test_fairness_is_jain_of_user_bsld():
    recs = [job(1, 0, 100, 2, user="a"), job(2, 1, 10, 4, user="b"),
            job(3, 2, 5, 1, user="b")]
    s = make(recs, spec(4, per_leaf=2))
    fifo_blocking(s)
    m = metrics.compute(s.result())
    assert s.fairness() == pytest.approx(m["fairness"]["jain_bsld"])
    assert s.fairness() < 1


# ---------------------------------------------------------------------------- history
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 5000), st.integers(0, 9000),
                          st.integers(1, 64), st.integers(1, 3), st.booleans()),
                max_size=30),
       st.lists(st.tuples(st.sampled_from("abcde"), st.integers(-5, 20000)), max_size=12))
def test_cached_history_estimates_equal_the_uncached_ones(finished, queries):
    plain, cached = UserHistory(), CachedUserHistory()
    t = 0
    for k, (u, run, limit, cpus, leaves, ask) in enumerate(finished):
        t += run
        for h in (plain, cached):
            h.record(u, t, run, limit, cpus, leaves)
        if ask or k == len(finished) - 1:
            users = [q for q, _ in queries]
            limits = [lim for _, lim in queries]
            a = plain.estimates(users, limits, t + 7)
            b = cached.estimates(users, limits, t + 7)
            for x, y in zip(a, b, strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15)


def test_history_is_fed_as_jobs_finish():
    recs = [job(1, 0, 100, 1, limit=400, user="a"), job(2, 0, 50, 1, limit=100, user="a")]
    s = make(recs, spec(2))
    s.advance()
    s.start(0, [0])
    s.start(1, [1])
    s.advance()
    assert s.history.to_dict()["a"]["ratios"] == [0.5]
    s.advance()
    assert s.history.to_dict()["a"]["ratios"] == [0.5, 0.25]


# ---------------------------------------------------------------------------- speed models
class SlowWhenSpread(SpeedModel):
    """Twice the recorded run time over more than one leaf; records its hook calls."""

    name = "test-spread"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def run_time(self, jobs, cluster, job, nodes, leaves):
        return int(jobs.run[job]) * (2 if leaves > 1 else 1)

    def on_start(self, job, nodes, leaves, t):
        self.calls.append(("start", job, t))

    def on_finish(self, job, t):
        self.calls.append(("finish", job, t))


def test_speed_model_by_name_with_hooks_and_exact_bsld(monkeypatch):
    monkeypatch.setitem(SPEED_MODELS, "test-spread", SlowWhenSpread)
    jobs, cl = synthetic("gpu", 120, seed=4)
    s = Stepper(jobs, cl, "test-spread")
    rng = np.random.default_rng(1)
    while not s.done:
        p = s.pending()
        ok = p[s.fits(p)]
        if ok.size and (rng.random() < 0.6 or not s.can_advance):
            row = int(rng.choice(ok))
            c = s.candidates(row)
            s.start(row, c.nodes(int(rng.integers(len(c)))))
        else:
            s.advance()
    res = s.result()
    run = res.end - res.start
    assert (run == np.where(res.leaves > 1, 2, 1) * jobs.run).all()
    assert (res.leaves > 1).any()  # some job was spread (and slowed down)
    calls = s.speed.calls
    assert sorted(j for k, j, _ in calls if k == "start") == list(range(jobs.n))
    assert all(t == res.end[j] for k, j, t in calls if k == "finish")
    bsld = metrics.job_metrics(res)["bsld"]
    assert s.total_reward == pytest.approx(-bsld.sum(), rel=1e-9)


# ---------------------------------------------------------------------------- warm start
def _warm_point(jobs, ref, want_pending: int = 2):
    """A row whose arrival finds jobs of the reference replay both waiting and running."""
    for lo in range(jobs.n // 3, jobs.n - 1):
        t0 = int(jobs.eligible[lo])
        if jobs.eligible[lo - 1] == t0:
            continue
        waiting = int(((ref.start[:lo] >= t0)).sum())
        running = int(((ref.start[:lo] < t0) & (ref.end[:lo] >= t0)).sum())
        if waiting >= want_pending and running >= 2:
            return lo
    raise AssertionError("no busy moment in the reference replay")


def test_take_keeps_rows_and_shifts():
    jobs, _ = synthetic("hpc", 40)
    t = take(jobs, np.array([3, 7, 8, 20]), 100)
    assert t.job_id.tolist() == jobs.job_id[[3, 7, 8, 20]].tolist()
    assert t.eligible.tolist() == (jobs.eligible[[3, 7, 8, 20]] - 100).tolist()
    with pytest.raises(ValueError, match="increasing"):
        take(jobs, np.array([5, 3]))
    with pytest.raises(ValueError, match="increasing"):
        take(jobs, np.array([], dtype=np.int64))


def test_warm_start_resumes_the_engine_exactly():
    """Started from the engine's state at a busy moment, the same scheduler (FIFO without
    backfill, whole nodes: the layout cannot matter) makes the engine's decisions."""
    rng = np.random.default_rng(4)
    recs = [job(i + 1, int(30 * i + rng.integers(0, 20)), int(rng.integers(50, 2000)),
                int(rng.integers(1, 9)), limit=3000) for i in range(300)]
    cl = Cluster.from_spec(spec(16))
    jobs = build_jobs(recs, cl)
    assert jobs.exclusive.all()
    ref = Simulator(jobs, cl, make_policy("fifo"),
                    SchedulerOptions(backfill=False, bf_interval=0)).run()
    lo = _warm_point(jobs, ref)
    hi = min(jobs.n, lo + 80)
    t0 = int(jobs.eligible[lo])
    prior = np.flatnonzero(ref.end[:lo] >= t0)
    rows = np.concatenate((prior, np.arange(lo, hi)))
    s = Stepper(take(jobs, rows, t0), cl)
    running = [(k, int(ref.start[r]) - t0, int(ref.end[r]) - t0)
               for k, r in enumerate(prior.tolist()) if ref.start[r] < t0]
    assert s.warm(0, running) == 0
    assert s.n_running == len(running) and s.n_pending == prior.size - len(running)
    assert s.state.busy_nodes == sum(int(jobs.nodes[prior[k]]) for k, _, _ in running)
    fifo_blocking(s)
    res = s.result()
    assert (res.start + t0).tolist() == ref.start[rows].tolist()
    assert (res.end + t0).tolist() == ref.end[rows].tolist()
    # the running jobs take no part in the reward: the rest add up to their slowdowns
    # from the warm start on (what waited before it is done)
    k = prior.size
    waiting = np.ones(rows.size, dtype=bool)
    waiting[[i for i, _, _ in running]] = False
    run = np.maximum(res.end - res.start, 10.0)
    accrued = (res.end - np.maximum(res.jobs.eligible, 0)) / run
    lifted = np.maximum(accrued, 1.0)
    lifted[:k] = accrued[:k]  # (a job that waited before the start is past 1 by then)
    assert s.total_reward == pytest.approx(-lifted[waiting].sum(), rel=1e-9)


def test_warm_start_refuses_misuse():
    jobs, cl = synthetic("hpc", 60)
    s = Stepper(jobs, cl)
    s.advance()
    with pytest.raises(RuntimeError, match="before any advance"):
        s.warm(int(jobs.eligible[5]), [])
    s = Stepper(jobs, cl)
    t = int(jobs.eligible[10])
    with pytest.raises(ValueError, match="started before"):
        s.warm(t, [(3, t, t + 100)])  # starts at the warm moment: not running yet
    with pytest.raises(ValueError, match="end at or after"):
        s.warm(t, [(3, t - 50, t - 1)])  # already over
