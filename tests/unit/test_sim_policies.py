"""Seed heuristics and placements: hand-computed orders, properties, and replays."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from trainer.sim import metrics
from trainer.sim.engine import EngineOptions, Simulator
from trainer.sim.placement import PLACEMENTS, Request, best_leaf_span
from trainer.sim.policies import BASELINES, POLICIES, ScoreContext, make_policy
from trainer.sim.slurm import PrioritySettings, SchedulerOptions
from trainer.sim.speed import NoSpeedModel, SpeedModel
from trainer.sim.state import Cluster, NodeState, build_jobs
from trainer.sim.workload import WorkloadConfig, default_cluster, generate

T0 = 1_699_999_980
EXACT = SchedulerOptions(bf_interval=0, bf_resolution=1, priority_calc_period=1)


def job(jid: int, submit: int, run: int, nodes: int | None = 1, *, limit: int | None = None,
        user: str = "u1", gpus: int | None = None, cpus: int | None = None) -> JobRecord:
    t = T0 + submit
    tres = TresCounts(nodes, cpus, gpus, None)
    return JobRecord(
        job_id=jid, name="", user=user, account="", partition="", qos="",
        state="COMPLETED", submit_time=t, eligible_time=t, start_time=t, end_time=t + run,
        time_limit=limit if limit is not None else run, req=tres, alloc=tres, node_list="",
        nodes=(), priority=None, exit_code=0,
    )


def spec(nodes: int, *, per_leaf: int = 4, gpus: int = 0, cpus: int = 64) -> ClusterSpec:
    return ClusterSpec.synthetic("c", nodes, nodes_per_leaf=per_leaf, gpus_per_node=gpus,
                                 cpus_per_node=cpus, mem_mb_per_node=0)


def ctx(cl: Cluster, state: NodeState | None = None, *, usage=None, seed: int = 0,
        speed: SpeedModel | None = None, users: int = 1) -> ScoreContext:
    return ScoreContext(T0, cl, state or NodeState(cl),
                        np.zeros(users) if usage is None else np.asarray(usage, float),
                        np.random.default_rng(seed), speed)


def order(name: str, jobs, c: ScoreContext, placement: str = "tree") -> list[int]:
    """Job ids in the order the engine keeps them: score descending, ties by arrival."""
    idx = np.arange(jobs.n)
    s = make_policy(name, placement=placement).score(jobs, idx, c)
    return [int(jobs.job_id[k]) for k in np.lexsort((idx, -s))]


def starts(result) -> dict[int, int]:
    return {int(j): int(s) - T0 for j, s in zip(result.jobs.job_id, result.start, strict=True)}


def replay(sp, recs, policy: str, *, placement: str = "tree", seed: int = 0,
           options: SchedulerOptions = EXACT):
    cl = Cluster.from_spec(sp)
    pol = make_policy(policy, placement=placement)
    r = Simulator(build_jobs(recs, cl), cl, pol, options,
                  EngineOptions(seed=seed, keep_placements=True)).run()
    return r, pol


# ---------------------------------------------------------------------------- orders by hand
def test_sif_orders_by_recorded_run_time_not_limit():
    cl = Cluster.from_spec(spec(4))
    recs = [job(1, 0, 300, limit=10), job(2, 1, 100, limit=900), job(3, 2, 200, limit=20),
            job(4, 3, 100, limit=5)]
    jobs = build_jobs(recs, cl)
    assert order("sif", jobs, ctx(cl)) == [2, 4, 3, 1]  # 2 and 4 tie at 100: arrival
    assert order("sjf", jobs, ctx(cl)) == [4, 1, 3, 2]  # by limit: the estimate


class _SpreadIsSlow(SpeedModel):
    """Twice the recorded run time on more than one leaf switch."""

    name = "spread-is-slow"

    def run_time(self, jobs, cluster, job, nodes, leaves):
        return int(jobs.run[job]) * (2 if leaves > 1 else 1)


def test_saf_uses_the_run_time_at_the_placement_it_would_get_now():
    cl = Cluster.from_spec(spec(4, per_leaf=2))
    st_ = NodeState(cl)
    st_.allocate_whole(np.array([0, 2]), T0 + 500, T0 + 500)  # one idle node per leaf
    recs = [job(1, 0, 100, 2),  # fits now only across both leaves: 200 s
            job(2, 1, 150, 1),  # fits in one leaf: 150 s
            job(3, 2, 50, 3)]  # cannot start now: its ideal 50 s
    jobs = build_jobs(recs, cl)
    assert order("saf", jobs, ctx(cl, st_, speed=_SpreadIsSlow())) == [3, 2, 1]
    assert order("sif", jobs, ctx(cl, st_)) == [3, 1, 2]
    # recorded run times: SAF is SIF
    assert order("saf", jobs, ctx(cl, st_, speed=NoSpeedModel())) == [3, 1, 2]
    assert make_policy("saf").dynamic


def test_lrf_and_spf_count_gpus_and_whole_nodes():
    cl = Cluster.from_spec(spec(4, gpus=8))
    recs = [job(1, 0, 400, None, gpus=1), job(2, 1, 50, None, gpus=4),
            job(3, 2, 100, None, gpus=2), job(4, 3, 10, 2)]  # whole nodes: 16 GPUs
    jobs = build_jobs(recs, cl)
    assert order("lrf", jobs, ctx(cl)) == [1, 3, 2, 4]
    # products: 400, 200, 200, 160
    assert order("spf", jobs, ctx(cl)) == [4, 2, 3, 1]


def test_lrf_counts_cpus_without_gpus():
    cl = Cluster.from_spec(spec(4, cpus=8))
    recs = [job(1, 0, 10, 2, cpus=4), job(2, 1, 10, 1, cpus=8), job(3, 2, 10, 1, cpus=1)]
    jobs = build_jobs(recs, cl)  # job 2 takes a whole node (8 CPUs): exclusive
    assert order("lrf", jobs, ctx(cl)) == [3, 1, 2]  # 1, 4 (2 x 2), 8


def test_tetris_alignment_and_remaining_time_by_hand():
    cl = Cluster.from_spec(spec(2, gpus=8))  # 128 CPUs, 16 GPUs
    st_ = NodeState(cl)
    st_.allocate_shared(np.array([0]), 32, 4, 0, T0 + 100, T0 + 100)  # 3/4 of each free
    recs = [job(1, 0, 100, None, gpus=8, cpus=64),  # a whole node: d = (1/2, 1/2)
            job(2, 1, 100, None, gpus=1, cpus=8),  # d = (1/16, 1/16)
            job(3, 2, 1000, None, gpus=4, cpus=32),  # d = (1/4, 1/4)
            job(4, 3, 100, 2)]  # two whole nodes, d = (1, 1): does not fit now
    jobs = build_jobs(recs, cl)
    # a_mean = (1 + 1/8 + 1/2 + 2) / 4 = 0.90625, l_mean = 325
    # job 1: 0.75 / 1.65625 - 100 / 425 = 0.21754
    s = make_policy("tetris").score(jobs, np.arange(4), ctx(cl, st_))
    assert s[0] == pytest.approx(0.75 / 1.65625 - 100 / 425)
    assert s[1] == pytest.approx(0.09375 / 1.0 - 100 / 425)
    assert s[2] == pytest.approx(0.375 / 1.28125 - 1000 / 1325)
    assert s[3] == pytest.approx(1.5 / 2.40625 - 100 / 425 - 10)
    assert order("tetris", jobs, ctx(cl, st_)) == [1, 2, 3, 4]
    # on an idle cluster the big job fits and aligns best: first
    assert order("tetris", jobs, ctx(cl)) == [4, 1, 2, 3]
    assert make_policy("tetris").dynamic


def test_drf_orders_by_the_users_share():
    cl = Cluster.from_spec(spec(4))
    recs = [job(1, 0, 10, user="a"), job(2, 1, 10, user="b"), job(3, 2, 10, user="c"),
            job(4, 3, 10, user="a")]
    jobs = build_jobs(recs, cl)
    usage = np.zeros(3)
    usage[jobs.users.index("a")], usage[jobs.users.index("b")] = 300.0, 100.0
    assert order("drf", jobs, ctx(cl, usage=usage, users=3)) == [3, 2, 1, 4]
    assert order("drf", jobs, ctx(cl, users=3)) == [1, 2, 3, 4]  # nobody used anything
    p = make_policy("drf")
    assert p.dynamic and p.uses_usage


def test_drf_replay_favours_the_user_who_used_less():
    recs = [job(1, 0, 100, 4, user="heavy"), job(2, 10, 10, 4, user="heavy"),
            job(3, 20, 10, 4, user="light")]
    r, _ = replay(spec(4), recs, "drf")
    assert starts(r) == {1: 0, 2: 110, 3: 100}
    r, _ = replay(spec(4), recs, "fifo")
    assert starts(r) == {1: 0, 2: 100, 3: 110}


def test_dsif_delays_a_spread_job_for_its_best_locality():
    # 2 leaves x 3 nodes; jobs 2 (leaf 0) and 1 (leaf 1) leave one free node per leaf
    base = [job(1, 0, 1000, 2), job(2, 0, 100, 2), job(3, 5, 50, 2)]
    r, _ = replay(spec(6, per_leaf=3), base, "sif")
    assert starts(r)[3] == 5 and r.leaves[2] == 2  # SIF: at once, across two leaves
    r, pol = replay(spec(6, per_leaf=3), base, "dsif")
    assert starts(r)[3] == 100 and r.leaves[2] == 1  # waits for job 2 to free leaf 0
    assert pol.delays == {2: 1}  # refused once (t=5); no other decision time until 100
    # tiny jobs make decision times: refused at 5, 11 and 21, then spread at 31
    tiny = [job(10 + k, t, 1, 1) for k, t in enumerate((10, 20, 30))]
    r, pol = replay(spec(6, per_leaf=3), base + tiny, "dsif")
    assert starts(r)[3] == 31 and r.leaves[2] == 2
    assert pol.delays == {2: 3}
    assert best_leaf_span(r.cluster, 2) == 1 and best_leaf_span(r.cluster, 4) == 2


def test_switch_wait_holds_a_spread_job_for_one_leaf_then_lets_it_spread():
    from trainer.evaluate import SwitchWait, as_deployed

    def run(recs, wait):
        cl = Cluster.from_spec(spec(6, per_leaf=3))
        pol = as_deployed(make_policy("sif"), switch_wait=wait)
        r = Simulator(build_jobs(recs, cl), cl, pol, EXACT,
                      EngineOptions(keep_placements=True)).run()
        return r, pol

    # as in the dsif test: at t=5 job 3 (2 nodes) could start only across both leaves
    base = [job(1, 0, 1000, 2), job(2, 0, 100, 2), job(3, 5, 50, 2)]
    tiny = [job(10 + k, t, 1, 1) for k, t in enumerate((10, 30, 60, 80))]  # decision times
    r, pol = run(base + tiny, 200)
    assert isinstance(pol, SwitchWait) and starts(r)[3] == 100 and r.leaves[2] == 1
    assert pol.since == {2: T0 + 5}  # (row 2) refused from t=5 until job 2 freed leaf 0
    r, _ = run(base + tiny, 50)  # waited 50 s: after t=55 it spreads, at t=61 (the 1 s
    assert starts(r)[3] == 61 and r.leaves[2] == 2  # job of t=60 goes first: SIF)
    # a job that no leaf can ever hold (4 nodes > 3 per leaf) never waits
    big = [job(1, 0, 1000, 1), job(2, 0, 100, 1), job(3, 5, 50, 4)]
    r, pol = run(big, 200)
    assert starts(r)[3] == 5 and r.leaves[2] == 2 and pol.since == {}
    # nor does a one-node job, whatever it spans; and no wait: the inner policy as it is
    r, _ = run(base, 0)
    assert starts(r)[3] == 5 and r.leaves[2] == 2
    with pytest.raises(ValueError, match="switch wait"):
        SwitchWait(make_policy("sif"), 0)


def test_random_order_is_reproducible_per_seed():
    cl = Cluster.from_spec(spec(4))
    jobs = build_jobs([job(k, k, 10) for k in range(1, 41)], cl)
    a = order("random", jobs, ctx(cl, seed=1))
    assert a == order("random", jobs, ctx(cl, seed=1))
    assert a != order("random", jobs, ctx(cl, seed=2))
    assert sorted(a) == list(range(1, 41))
    # a replay: same seed, same schedule; another seed, another one
    recs = [job(k, 0, 10 + k, 4) for k in range(1, 21)]
    s1 = starts(replay(spec(4), recs, "random", seed=1)[0])
    assert s1 == starts(replay(spec(4), recs, "random", seed=1)[0])
    assert s1 != starts(replay(spec(4), recs, "random", seed=2)[0])


def test_sef_orders_by_the_users_history_estimate():
    from slurm_plugin.features import UserHistory

    cl = Cluster.from_spec(spec(4))
    recs = [job(1, 0, 200, limit=200, user="slow"), job(2, 1, 100, limit=1000, user="fast"),
            job(3, 2, 300, limit=300, user="new"), job(4, 3, 10, user="fast", limit=0)]
    jobs = build_jobs(recs, cl)
    pol = make_policy("sef")
    assert pol.dynamic and not pol.reads_state
    hist = UserHistory(pol.norm)
    for k in range(3):  # fast: run 10% of the limit; slow: all of it
        hist.record("fast", T0 - 1000 + k, 100, 1000, 64)
        hist.record("slow", T0 - 1000 + k, 500, 500, 64)
    pol.history = hist
    s = pol.score(jobs, np.arange(4), ctx(cl))
    # estimates: 200 (slow, ratio 1), 100 (fast, 0.1), 150 (new: default ratio 0.5); job 4
    # has no limit: the features' unknown limit, 86,400 s, times 0.1
    assert not jobs.limit_known[3]
    assert s.tolist() == pytest.approx([-200.0, -100.0, -150.0, -8640.0])
    idx = np.arange(4)
    assert [int(jobs.job_id[k]) for k in np.lexsort((idx, -s))][:3] == [2, 3, 1]
    assert order("sjf", jobs, ctx(cl))[:3] != [2, 3, 1]  # the limits alone order otherwise


def test_seaf_orders_by_the_estimate_times_the_amount():
    from slurm_plugin.features import UserHistory

    cl = Cluster.from_spec(spec(4))
    # same user, no history: estimate = half the limit. Job 1: 1 node x 1000 s;
    # job 2: 4 nodes x 400 s; job 3: 2 nodes x 300 s
    recs = [job(1, 0, 100, 1, limit=1000), job(2, 1, 100, 4, limit=400),
            job(3, 2, 100, 2, limit=300)]
    jobs = build_jobs(recs, cl)
    seaf, sef = make_policy("seaf"), make_policy("sef")
    assert isinstance(seaf, type(sef)) and seaf.dynamic and not seaf.reads_state
    seaf.history = sef.history = UserHistory(seaf.norm)
    idx = np.arange(3)
    est = -sef.score(jobs, idx, ctx(cl))
    amount = (jobs.nodes * np.where(jobs.exclusive, int(cl.cap_c.max()), jobs.cpus)).astype(float)
    assert seaf.score(jobs, idx, ctx(cl)).tolist() == pytest.approx((-est * amount).tolist())
    assert order("seaf", jobs, ctx(cl)) == [3, 1, 2]  # areas 300, 500, 800 (x CPUs)
    assert order("sef", jobs, ctx(cl)) == [3, 2, 1]  # the estimates alone
    assert not BASELINES["seaf"].seed and not BASELINES["seaf"].oracle


def test_sef_learns_from_the_replays_completions():
    # one node: job 1 (user fast, limit 1000, runs 100) runs first; jobs 2 (slow, limit
    # 500) and 3 (fast, limit 1000) wait. With no history, 3's estimate (0.5 x 1000) is
    # above 2's (0.5 x 500); once job 1 has ended, fast's ratio is 0.1: 3 goes first
    recs = [job(1, 0, 100, limit=1000, user="fast"), job(2, 1, 500, limit=500, user="slow"),
            job(3, 2, 100, limit=1000, user="fast")]
    r, pol = replay(spec(1), recs, "sef")
    assert starts(r) == {1: 0, 3: 100, 2: 200}
    assert pol.history.version == 2  # jobs 1 and 3: what ended by the last scoring (600)
    r, _ = replay(spec(1), recs, "sjf")
    assert starts(r) == {1: 0, 2: 100, 3: 600}
    # unbound (scored outside a replay) the history does not grow: 2 before 3
    cl = Cluster.from_spec(spec(1))
    jobs = build_jobs(recs, cl)
    s = make_policy("sef").score(jobs, np.array([1, 2]), ctx(cl))
    assert s[0] > s[1]


def test_isinstance_tells_the_policies_apart():
    # (on the compiled build classes deriving from abc.ABC shared one isinstance cache:
    # once an Sjf had been checked against Policy, it passed for an Sef too)
    from trainer.sim.policies import Policy

    pols = {n: make_policy(n) for n in POLICIES}
    for p in pols.values():
        assert isinstance(p, Policy)
    for a, pa in pols.items():
        for b, pb in pols.items():
            assert isinstance(pa, type(pb)) == (a == b or issubclass(type(pa), type(pb))), (a, b)
    assert isinstance(pols["dsif"], type(pols["sif"])) and not isinstance(pols["sjf"],
                                                                          type(pols["sef"]))
    with pytest.raises(NotImplementedError, match="score"):
        cl = Cluster.from_spec(spec(1))
        Policy().score(build_jobs([job(1, 0, 10)], cl), np.arange(1), ctx(cl))


def test_the_engine_binds_its_policy_once_before_the_replay():
    from trainer.sim.policies import Fifo

    calls = []

    class Spy(Fifo):
        def bind(self, sim):
            calls.append((sim, sim.start.copy()))

    cl = Cluster.from_spec(spec(2))
    jobs = build_jobs([job(1, 0, 10), job(2, 1, 10)], cl)
    sim = Simulator(jobs, cl, Spy(), EXACT)
    assert len(calls) == 1 and calls[0][0] is sim and (calls[0][1] == -1).all()
    sim.run()
    assert len(calls) == 1


# ---------------------------------------------------------------------------- score properties
def _busy_state(cl: Cluster, rng: np.random.Generator) -> NodeState:
    st_ = NodeState(cl)
    for k in range(cl.num_nodes):
        if rng.random() < 0.5:
            g = int(rng.integers(0, int(cl.cap_g[k]) + 1))
            st_.allocate_shared(np.array([k]), int(rng.integers(1, 9)), g, 0, T0 + 50,
                                T0 + 60)
    return st_


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_scores_are_one_finite_value_per_job_and_deterministic(name):
    cfg = WorkloadConfig(num_jobs=200, seed=3)
    sp = default_cluster(cfg)
    cl = Cluster.from_spec(sp)
    names = [n.name for n in sp.nodes]
    jobs = build_jobs([j.to_record(j.submit_time, names[:j.req_nodes]) for j in generate(cfg)],
                      cl)
    idx = np.arange(3, jobs.n, 2)
    st_ = _busy_state(cl, np.random.default_rng(0))
    usage = np.arange(len(jobs.users), dtype=float)

    def once():
        return make_policy(name).score(jobs, idx, ctx(cl, st_, usage=usage, seed=9,
                                                      speed=_SpreadIsSlow()))

    a = once()
    assert a.shape == idx.shape
    assert np.isfinite(a).all()
    assert np.array_equal(a, once())


@pytest.mark.parametrize(("name", "settings"), [
    ("fifo", None), ("sjf", None), ("sif", None),
    ("multifactor", PrioritySettings(weight_age=1000, weight_partition=1000,
                                     weight_job_size=700, max_age=5000)),
    ("multifactor", PrioritySettings(weight_age=333, max_age=0, weight_qos=10)),
    ("multifactor", PrioritySettings(weight_age=0, weight_job_size=1000, favor_small=True)),
])
def test_scalar_scores_are_bit_for_bit_the_vector_ones(name, settings):
    cfg = WorkloadConfig(num_jobs=300, seed=5)
    sp = default_cluster(cfg)
    cl = Cluster.from_spec(sp)
    names = [n.name for n in sp.nodes]
    jobs = build_jobs([j.to_record(j.submit_time, names[:j.req_nodes]) for j in generate(cfg)],
                      cl)
    jobs.site_factor[:] = np.random.default_rng(1).normal(0, 50, jobs.n).round(3)
    jobs.nice[::7] = 30
    policy = make_policy(name, settings)
    st_ = NodeState(cl)
    for now in (int(jobs.eligible[0]), int(jobs.eligible[150]) + 77, int(jobs.eligible[-1]) + 9999):
        c = ScoreContext(now, cl, st_, np.zeros(len(jobs.users)), np.random.default_rng(0))
        idx = np.arange(jobs.n)
        few = policy.score_few(jobs, idx.tolist(), c)
        assert few is not None
        assert np.array_equal(np.array(few).view(np.int64),
                              policy.score(jobs, idx, c).astype(np.float64).view(np.int64))


def test_only_policies_of_age_and_a_static_part_have_one():
    cl = Cluster.from_spec(spec(4))
    jobs = build_jobs([job(1, 0, 10)], cl)
    slurm = make_policy("multifactor", PrioritySettings(weight_age=10, weight_partition=5))
    assert slurm.static_part(jobs, cl) is not None
    fair = make_policy("multifactor", PrioritySettings(weight_age=10, weight_fairshare=5))
    assert fair.static_part(jobs, cl) is None and fair.score_few(jobs, [0], ctx(cl)) is None
    for name in ("fifo", "tetris", "drf", "random", "saf"):
        assert make_policy(name).static_part(jobs, cl) is None


# ---------------------------------------------------------------------------- placements
@st.composite
def _states(draw):
    leaves = draw(st.integers(1, 4))
    per_leaf = draw(st.integers(1, 4))
    gpus = draw(st.sampled_from([0, 4, 8]))
    cl = Cluster.from_spec(spec(leaves * per_leaf, per_leaf=per_leaf, gpus=gpus, cpus=8))
    state = NodeState(cl)
    for _ in range(draw(st.integers(0, 3 * cl.num_nodes))):
        k = draw(st.integers(0, cl.num_nodes - 1))
        if draw(st.booleans()) and state.idle[k]:
            state.allocate_whole(np.array([k]), T0 + 10, T0 + 10)
        elif not state.excl[k]:
            c = draw(st.integers(1, 8))
            g = draw(st.integers(0, gpus))
            if state.free_c[k] >= c and state.free_g[k] >= g:
                state.allocate_shared(np.array([k]), c, g, 0, T0 + 10, T0 + 20)
    excl = draw(st.booleans())
    req = Request(draw(st.integers(1, cl.num_nodes)), 0 if excl else draw(st.integers(1, 8)),
                  0 if excl else draw(st.integers(0, gpus)), excl, draw(st.integers(-1, 50)),
                  T0, draw(st.integers(0, 2**40)))
    return cl, state, req


@settings(max_examples=300, deadline=None)
@given(_states())
def test_every_placement_takes_exactly_the_nodes_asked_among_usable_ones(case):
    cl, state, req = case
    usable = state.fit_mask(len(cl.part_names) - 1, req.exclusive, req.cpus, req.gpus, 0)
    for name, place in PLACEMENTS.items():
        for counts in (None, state.leaf_idle.copy() if req.exclusive else None):
            res = place(cl, state, usable.copy(), req, counts)
            if int(usable.sum()) < req.nodes:
                assert res is None, name
                continue
            assert res is not None, name
            nodes, nl = res
            assert nodes.size == req.nodes and np.unique(nodes).size == nodes.size, name
            assert (np.diff(nodes) > 0).all(), name  # sorted
            assert usable[nodes].all(), name
            assert nl == np.unique(cl.leaf_of[nodes]).size, name
            # taking them never over-allocates
            after = copy.deepcopy(state)
            if req.exclusive:
                assert after.idle[nodes].all(), name
                after.allocate_whole(nodes, T0 + 5, T0 + 5)
            else:
                after.allocate_shared(nodes, req.cpus, req.gpus, 0, T0 + 5, T0 + 5)
            assert (after.free_c >= 0).all() and (after.free_g >= 0).all(), name


def test_random_placement_depends_on_seed_state_and_job():
    cl = Cluster.from_spec(spec(16, gpus=8))
    state = NodeState(cl)
    usable = np.ones(16, dtype=bool)
    place = PLACEMENTS["random"]
    a = place(cl, state, usable, Request(3, 1, 1, False, 7, T0, 1))[0]
    assert np.array_equal(a, place(cl, state, usable, Request(3, 1, 1, False, 7, T0, 1))[0])
    draws = {tuple(place(cl, state, usable, Request(3, 1, 1, False, 7, T0, s))[0])
             for s in range(10)}
    assert len(draws) > 5


def _gpu_state(cl: Cluster, used: dict[int, list[int]]) -> NodeState:
    """Shared 1-node jobs of the given GPU counts on each node (8 CPUs per GPU)."""
    state = NodeState(cl)
    for node, jobs in used.items():
        for g in jobs:
            state.allocate_shared(np.array([node]), 8 * g, g, 0, T0 + 100, T0 + 100)
    return state


def _place(name, cl, state, n, g):
    usable = state.fit_mask(len(cl.part_names) - 1, False, 1, g, 0)
    res = PLACEMENTS[name](cl, state, usable, Request(n, 1, g, False))
    assert res is not None
    return res[0].tolist(), res[1]


def test_gandiva_prefers_nodes_of_the_same_affinity():
    cl = Cluster.from_spec(spec(3, per_leaf=4, gpus=8))
    state = _gpu_state(cl, {0: [2], 1: [1]})  # node 0: affinity 2, node 1: affinity 1
    # a 1-GPU job joins the 1-GPU jobs; best fit would take node 0 (fewest free GPUs)
    assert _place("gandiva", cl, state, 1, 1)[0] == [1]
    assert _place("tree", cl, state, 1, 1)[0] == [0]
    assert _place("linear", cl, state, 1, 1)[0] == [0]
    # a 4-GPU job: no node of affinity 4, so an unallocated one (not node 0 with 6 free)
    assert _place("gandiva", cl, state, 1, 4)[0] == [2]
    assert _place("tree", cl, state, 1, 4)[0] == [0]
    # among same-affinity nodes, the least loaded
    state = _gpu_state(cl, {0: [1, 1, 1], 1: [1], 2: [2]})
    assert _place("gandiva", cl, state, 1, 1)[0] == [1]
    # no affinity node, no idle node: relax, least loaded (node 1: 1 of 8 GPUs in use)
    assert _place("gandiva", cl, state, 1, 4)[0] == [1]


def test_pack_strands_fewer_gpus_than_tree_and_keeps_one_leaf_unlike_linear():
    def stranded(state, nodes, g):
        free = state.free_g.copy()
        busy = ~state.idle.copy()
        free[nodes] -= g
        busy[nodes] = True
        return int(free[busy].sum())

    # leaf 0: node 0 full, nodes 1-2 idle (2 usable); leaf 1: nodes 3-5 with 2 free each
    cl = Cluster.from_spec(spec(6, per_leaf=3, gpus=8))
    state = _gpu_state(cl, {0: [8], 3: [4, 2], 4: [4, 2], 5: [4, 2]})
    tree, _ = _place("tree", cl, state, 1, 2)
    pack, _ = _place("pack", cl, state, 1, 2)
    assert tree == [1] and pack == [3] and _place("linear", cl, state, 1, 2)[0] == [3]
    assert stranded(state, pack, 2) == 4 < stranded(state, tree, 2) == 12
    # a 2-node job: linear takes the two globally tightest nodes in two leaves; pack one leaf
    cl = Cluster.from_spec(spec(4, per_leaf=2, gpus=8))
    state = _gpu_state(cl, {0: [4], 2: [2]})
    assert _place("linear", cl, state, 2, 2) == ([0, 2], 2)
    assert _place("pack", cl, state, 2, 2) == ([0, 1], 1)  # tighter leaf: 4 + 8 free
    # opening an idle node strands more than a looser fit on busy ones: leaf 0 would use
    # node 0 (1 free) and idle node 1; leaf 1 has two busy nodes with 6 free each
    state = _gpu_state(cl, {0: [4, 2, 1], 2: [2], 3: [2]})
    pack, nl = _place("pack", cl, state, 2, 1)
    tree, _ = _place("tree", cl, state, 2, 1)
    assert (pack, nl) == ([2, 3], 1) and tree == [0, 1]
    assert stranded(state, pack, 1) == 11 < stranded(state, tree, 1) == 19


def test_pack_has_lower_fragmentation_than_linear():
    # CPU cluster, 2 leaves x 4 nodes; SCHED²'s index per leaf over nodes' remaining times
    cl = Cluster.from_spec(spec(8, per_leaf=4))
    state = NodeState(cl)
    state.allocate_whole(np.array([0]), T0 + 10, T0 + 10)  # leaf 0: (10, 0, 0, 0)
    state.allocate_whole(np.array([4, 5, 6]), T0 + 100, T0 + 100)  # leaf 1: (100 x 3, 0)
    req = Request(1, 0, 0, True)

    def frag_after(name):
        res = PLACEMENTS[name](cl, state, state.idle.copy(), req)
        s = NodeState(cl)
        s.allocate_whole(np.array([0]), T0 + 10, T0 + 10)
        s.allocate_whole(np.array([4, 5, 6]), T0 + 100, T0 + 100)
        s.allocate_whole(res[0], T0 + 100, T0 + 100)
        return res[0].tolist(), metrics.fragmentation(cl, s, T0)

    lin_nodes, lin = frag_after("linear")
    pack_nodes, pk = frag_after("pack")
    assert lin_nodes == [1] and pack_nodes == [7]
    # linear: leaf 0 (10, 100, 0, 0) -> 1 - 110^2 / (4 * 10100); leaf 1 (100 x 3, 0) -> 1/4
    assert lin == pytest.approx((1 - 110**2 / (4 * 10100) + 0.25) / 2)
    # pack: leaf 0 (10, 0, 0, 0) -> 3/4; leaf 1 full with equal times -> 0
    assert pk == pytest.approx(0.375)
    assert pk < lin


# ---------------------------------------------------------------------------- end to end
def _check_no_overlap(result) -> None:
    """Per node, CPUs and GPUs in use never exceed its capacity (sweep over start/end)."""
    cl, jobs = result.cluster, result.jobs
    pos = {name: k for k, name in enumerate(cl.node_names)}
    events = []
    for j in range(jobs.n):
        nodes = [pos[n] for n in result.placements[j]]
        assert len(nodes) == jobs.nodes[j] == len(set(nodes))
        assert result.start[j] >= jobs.eligible[j]
        for k in nodes:
            c = int(cl.cap_c[k]) if jobs.exclusive[j] else int(jobs.cpus[j])
            g = int(cl.cap_g[k]) if jobs.exclusive[j] else int(jobs.gpus[j])
            events.append((int(result.end[j]), 0, k, -c, -g))
            events.append((int(result.start[j]), 1, k, c, g))
    used_c = np.zeros(cl.num_nodes, dtype=np.int64)
    used_g = np.zeros(cl.num_nodes, dtype=np.int64)
    for _, _, k, c, g in sorted(events):
        used_c[k] += c
        used_g[k] += g
        assert 0 <= used_c[k] <= cl.cap_c[k] and 0 <= used_g[k] <= cl.cap_g[k], (k, c, g)


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
@pytest.mark.parametrize("name", list(BASELINES))
def test_every_baseline_replays_a_synthetic_workload(name, kind):
    cfg = WorkloadConfig(kind=kind, num_jobs=300, seed=5)
    sp = default_cluster(cfg)
    names = [n.name for n in sp.nodes]
    recs = [j.to_record(j.submit_time, names[:j.req_nodes]) for j in generate(cfg)]
    cl = Cluster.from_spec(sp)
    jobs = build_jobs(recs, cl)
    b = BASELINES[name]
    policy = make_policy(b.policy, placement=b.placement or "tree")
    opts = SchedulerOptions(backfill=b.backfill is not False)
    r = Simulator(jobs, cl, policy, opts, EngineOptions(seed=2, keep_placements=True)).run()
    assert jobs.n == 300
    assert (r.start >= 0).all() and (r.end >= r.start).all()
    _check_no_overlap(r)


def test_baselines_name_known_policies_and_placements():
    for b in BASELINES.values():
        assert b.policy in POLICIES
        assert b.placement is None or b.placement in PLACEMENTS
    assert BASELINES["gandiva"].placement == "gandiva"
    assert BASELINES["sched2-pack"].placement == "pack"
    assert set(POLICIES) >= {"sif", "saf", "dsif", "lrf", "spf", "tetris", "drf", "random"}
    # rlsched's own heuristic is a baseline, not a seed one; every other is
    assert [n for n, b in BASELINES.items() if not b.seed] == ["sef", "seaf"]
    from trainer.sim.policies import Baseline

    with pytest.raises(ValueError, match="placement"):
        Baseline("fifo", True, "x", "nowhere")
    with pytest.raises(ValueError, match="policy"):
        Baseline("nope", True, "x")


def test_baseline_build_applies_its_backfill_and_placement():
    from dataclasses import replace as _replace

    from trainer.sim.policies import BASELINES
    from trainer.sim.slurm import SchedulerOptions

    opts = SchedulerOptions()
    pol, o = BASELINES["fifo-nobf"].build(None, opts)
    assert pol.name == "fifo" and o.backfill is False and o == _replace(opts, backfill=False)
    pol, o = BASELINES["gandiva"].build(None, opts)
    assert pol.placement == "gandiva" and o.backfill is True
    off = _replace(opts, backfill=False)
    pol, o = BASELINES["slurm"].build(None, off)  # as the Slurm configuration says
    assert pol.name == "multifactor" and o.backfill is False and pol.placement == off.placement


def test_a_baseline_describes_the_backfill_plan_it_replays_under():
    from trainer.sim.policies import BASELINES
    from trainer.sim.slurm import SchedulerOptions

    easy, cons = SchedulerOptions(), SchedulerOptions(bf_plan="conservative")
    assert BASELINES["spf"].describe(easy) == BASELINES["spf"].help
    assert BASELINES["spf"].describe(cons).endswith("first, conservative backfill")
    for b in BASELINES.values():  # none names EASY under another plan
        assert "EASY" not in b.describe(cons)
