"""Hand-built replays with known schedules: FIFO, EASY backfill, priority, placement."""

from __future__ import annotations

import numpy as np
import pytest

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from trainer.sim import metrics
from trainer.sim.engine import EngineOptions, Simulator, simulate
from trainer.sim.policies import BASELINES, POLICIES, ScoreContext, make_policy
from trainer.sim.slurm import PrioritySettings, SchedulerOptions
from trainer.sim.state import Cluster, build_jobs

T0 = 1_699_999_980  # a multiple of 60 (bf_resolution)
EXACT = SchedulerOptions(bf_interval=0, bf_resolution=1)  # backfill at every event, 1 s plan


def job(jid: int, submit: int, run: int, nodes: int | None = 1, *, limit: int | None = None,
        user: str = "u1", gpus: int | None = None, cpus: int | None = None,
        partition: str = "", started: bool = True) -> JobRecord:
    t = T0 + submit
    tres = TresCounts(nodes, cpus, gpus, None)
    return JobRecord(
        job_id=jid, name="", user=user, account="", partition=partition, qos="",
        state="COMPLETED", submit_time=t, eligible_time=t,
        start_time=t if started else None, end_time=t + run if started else None,
        time_limit=limit if limit is not None else run, req=tres, alloc=tres, node_list="",
        nodes=(), priority=None, exit_code=0,
    )


def spec(nodes: int, *, per_leaf: int = 4, gpus: int = 0, cpus: int = 64) -> ClusterSpec:
    return ClusterSpec.synthetic("c", nodes, nodes_per_leaf=per_leaf, gpus_per_node=gpus,
                                 cpus_per_node=cpus, mem_mb_per_node=0)


def run(sp: ClusterSpec, recs: list[JobRecord], policy: str = "fifo", *, backfill: bool = True,
        options: SchedulerOptions = EXACT, settings: PrioritySettings | None = None,
        site: dict[int, float] | None = None, placement: str = "tree"):
    cl = Cluster.from_spec(sp)
    jobs = build_jobs(recs, cl)
    for jid, value in (site or {}).items():
        jobs.site_factor[jobs.job_id == jid] = value
    opts = SchedulerOptions(**{**options.to_dict(), "backfill": backfill})
    return Simulator(jobs, cl, make_policy(policy, settings, placement), opts,
                     EngineOptions(keep_placements=True)).run()


def starts(result) -> dict[int, int]:
    return {int(j): int(s) - T0 for j, s in zip(result.jobs.job_id, result.start, strict=True)}


# ---------------------------------------------------------------------------- FIFO / EASY
def test_fifo_without_backfill_blocks_behind_the_head():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1)]
    r = run(spec(4), recs, backfill=False)
    assert starts(r) == {1: 0, 2: 100, 3: 110}
    assert not r.backfilled.any()


def test_easy_backfill_fills_the_hole_without_delaying_the_reservation():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1), job(4, 3, 97, 1)]
    r = run(spec(4), recs)
    # job 2 is reserved at 100 (when job 1 ends); 3 and 4 end by then: backfilled
    assert starts(r) == {1: 0, 2: 100, 3: 2, 4: 3}
    assert r.backfilled.tolist() == [False, False, True, True]


def test_backfill_candidate_that_would_delay_the_reservation_is_refused():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 200, 1)]
    r = run(spec(4), recs)
    assert starts(r) == {1: 0, 2: 100, 3: 110}


def test_long_candidate_may_use_nodes_the_reserved_job_does_not_need():
    # 7 nodes: job 2 needs 5 at t=100 when 7 will be free, so 2 may be lent past 100
    recs = [job(1, 0, 100, 4), job(2, 1, 10, 5), job(3, 2, 500, 2), job(4, 3, 500, 1)]
    r = run(spec(7), recs)
    s = starts(r)
    assert s[3] == 2  # uses the 2 nodes job 2 will not need: it does not delay it
    assert s[2] == 100
    assert s[4] == 110  # no extra node left: would have delayed job 2


def test_backfill_uses_time_limit_not_run_time():
    # job 3 would end in time (run 5) but its limit (50) reaches past the shadow time
    recs = [job(1, 0, 20, 2), job(2, 1, 10, 4), job(3, 2, 5, 2, limit=50)]
    r = run(spec(4), recs)
    assert starts(r) == {1: 0, 2: 20, 3: 30}


def test_bf_resolution_rounds_the_candidate_end_up():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 90, 1)]
    assert starts(run(spec(4), recs))[3] == 2  # ends at 92 <= 100
    coarse = SchedulerOptions(bf_interval=0, bf_resolution=60)
    assert starts(run(spec(4), recs, options=coarse))[3] == 110  # 92 -> 120 > 100


def test_bf_interval_delays_backfill_to_the_next_pass():
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 10, 1), job(4, 40, 10, 1)]
    r = run(spec(4), recs, options=SchedulerOptions(bf_interval=30, bf_resolution=1))
    s = starts(r)
    assert s[1] == 0 and s[2] == 100
    assert s[3] == 31  # the first pass ran at t=1 (job 2 queued): the next one at 31
    assert s[4] == 61


def test_never_started_and_oversized_jobs_are_skipped_and_counted():
    recs = [job(1, 0, 10, 1), job(2, 1, 10, 1, started=False), job(3, 2, 10, 9)]
    r = run(spec(4), recs)
    assert r.jobs.n == 1
    assert dict(r.jobs.skipped) == {"never started": 1, "exceeds cluster": 1}


# ---------------------------------------------------------------------------- priority
def test_sjf_orders_by_time_limit():
    recs = [job(1, 0, 100, 4), job(2, 1, 50, 4), job(3, 2, 10, 4)]
    assert starts(run(spec(4), recs, "sjf", backfill=False)) == {1: 0, 2: 110, 3: 100}


def test_multifactor_age_and_site_factor():
    age = PrioritySettings(weight_age=1000, max_age=1000)
    recs = [job(1, 0, 100, 4), job(2, 10, 10, 4), job(3, 50, 10, 4)]
    # age alone: the older job 2 goes first
    assert starts(run(spec(4), recs, "multifactor", settings=age)) == {1: 0, 2: 100, 3: 110}
    # a site factor worth more than 40 s of age puts job 3 first
    r = run(spec(4), recs, "multifactor", settings=age, site={3: 100})
    assert starts(r) == {1: 0, 2: 110, 3: 100}


def test_multifactor_max_age_caps_the_age_factor():
    age = PrioritySettings(weight_age=1000, max_age=20)
    recs = [job(1, 0, 100, 4), job(2, 10, 10, 4), job(3, 50, 10, 4)]
    # by t=100 both have waited longer than PriorityMaxAge: equal priority, arrival order
    r = run(spec(4), recs, "multifactor", settings=age, site={3: 0})
    assert starts(r) == {1: 0, 2: 100, 3: 110}
    # so a site factor of 1 is enough to reorder them
    r = run(spec(4), recs, "multifactor", settings=age, site={3: 1})
    assert starts(r) == {1: 0, 2: 110, 3: 100}


def test_fair_share_favours_the_user_who_used_less():
    fs = PrioritySettings(weight_fairshare=1000, decay_half_life=0)
    recs = [
        job(1, 0, 100, 4, user="heavy"),
        job(2, 10, 10, 4, user="heavy"),  # submitted before job 3 ...
        job(3, 20, 10, 4, user="light"),  # ... but light has used nothing
    ]
    ecfg = SchedulerOptions(bf_interval=0, bf_resolution=1, priority_calc_period=1)
    r = run(spec(4), recs, "multifactor", settings=fs, options=ecfg)
    assert starts(r) == {1: 0, 2: 110, 3: 100}
    # without fair-share weight: arrival order
    r = run(spec(4), recs, "multifactor", settings=PrioritySettings(), options=ecfg)
    assert starts(r) == {1: 0, 2: 100, 3: 110}


# ---------------------------------------------------------------------------- placement
def test_leaf_best_fit_keeps_a_four_node_job_in_one_leaf():
    recs = [job(1, 0, 100, 1), job(2, 1, 100, 4), job(3, 2, 100, 1)]
    r = run(spec(8), recs)
    assert r.nodes_of(1) == ("node01",)
    assert r.nodes_of(2) == ("node05", "node06", "node07", "node08")  # the empty leaf
    assert r.nodes_of(3) == ("node02",)  # packed with job 1, not into a third leaf
    assert r.leaves.tolist() == [1, 1, 1]
    m = metrics.compute(r)
    assert m["single_leaf_share"] == 1.0


def test_leaf_best_fit_uses_fewest_leaves_when_one_is_not_enough():
    recs = [job(1, 0, 100, 1), job(2, 0, 100, 1), job(3, 0, 100, 1), job(4, 1, 100, 6)]
    # leaves: (3 used, 1 free) (4 free) (4 free) after jobs 1-3 in leaf 1 (best fit)
    r = run(spec(12), recs)
    nodes4 = r.nodes_of(4)
    assert r.leaves[3] == 2
    assert nodes4 == ("node05", "node06", "node07", "node08", "node09", "node10")


def test_linear_placement_ignores_leaves():
    recs = [job(1, 0, 100, 1), job(2, 1, 100, 4)]
    cl = Cluster.from_spec(spec(8))
    jobs = build_jobs(recs, cl)
    r = Simulator(jobs, cl, make_policy("fifo", placement="linear"), EXACT,
                  EngineOptions(keep_placements=True)).run()
    assert r.nodes_of(2) == ("node02", "node03", "node04", "node05")
    assert r.leaves[1] == 2


def test_shared_node_gpu_packing():
    recs = [job(1, 0, 100, None, gpus=1), job(2, 1, 100, None, gpus=2),
            job(3, 2, 100, None, gpus=4), job(4, 3, 100, None, gpus=2),
            job(5, 4, 100, None, gpus=1), job(6, 5, 100, None, gpus=16)]
    r = run(spec(4, per_leaf=2, gpus=8), recs)
    s = starts(r)
    assert r.nodes_of(1) == r.nodes_of(2) == r.nodes_of(3) == ("node01",)  # 7 of 8 GPUs
    assert r.nodes_of(4) == ("node02",)  # 1 GPU left on node01: not enough
    assert r.nodes_of(5) == ("node01",)  # best fit: the node with the fewest free GPUs
    assert r.nodes_of(6) == ("node03", "node04")  # two whole nodes, one leaf
    assert all(v == k - 1 for k, v in s.items())


def test_shared_node_reservation_and_backfill():
    # node01 has 8 GPUs; job 1 holds 6 until 100; job 2 wants all 8 (waits for job 1);
    # job 3 (2 GPUs, long) would delay job 2: refused; job 4 (2 GPUs, ends by 100) may
    # use them now
    recs = [job(1, 0, 100, None, gpus=6), job(2, 1, 10, None, gpus=8),
            job(3, 2, 500, None, gpus=2), job(4, 3, 50, None, gpus=2)]
    r = run(spec(1, per_leaf=1, gpus=8), recs)
    s = starts(r)
    assert s == {1: 0, 2: 100, 3: 110, 4: 3}
    # job 2 wanting 4 leaves 4 spare at t=100: the long job 3 may take 2 of them
    recs[1] = job(2, 1, 10, None, gpus=4)
    s = starts(run(spec(1, per_leaf=1, gpus=8), recs))
    assert s == {1: 0, 2: 100, 3: 2, 4: 100}


def test_switches_wait_then_any_placement():
    recs = [job(1, 0, 1000, 1), job(2, 0, 1000, 1), job(3, 1, 10, 6)]
    cl = Cluster.from_spec(spec(8))
    jobs = build_jobs(recs, cl)
    jobs.switches[2] = 1
    jobs.switches_wait[2] = 60
    r = Simulator(jobs, cl, make_policy("fifo"), EXACT, EngineOptions(keep_placements=True)).run()
    # 6 nodes fit only across two leaves: the job waits 60 s for one leaf, then goes
    assert int(r.start[2]) - T0 == 61
    assert r.leaves[2] == 2


# ---------------------------------------------------------------------------- invariants
def _random_records(n: int, seed: int, gpus: bool) -> list[JobRecord]:
    rng = np.random.default_rng(seed)
    out = []
    t = 0
    for i in range(n):
        t += int(rng.integers(0, 40))
        runt = int(rng.integers(1, 400))
        limit = runt + int(rng.integers(0, 200))
        if gpus:
            g = int(rng.choice([1, 1, 2, 4, 8, 16]))
            out.append(job(i + 1, t, runt, None, gpus=g, limit=limit,
                           user=f"u{rng.integers(0, 5)}"))
        else:
            out.append(job(i + 1, t, runt, int(rng.choice([1, 1, 2, 3, 4, 8])), limit=limit,
                           user=f"u{rng.integers(0, 5)}"))
    return out


def _check_capacity(result, per_node: int) -> None:
    """No node is ever given more than it has (sweep over start/end events)."""
    cl = result.cluster
    jobs = result.jobs
    events = []
    for j in range(jobs.n):
        names = result.placements[j]
        amount = per_node if jobs.exclusive[j] else int(jobs.gpus[j] or jobs.cpus[j])
        events.append((int(result.end[j]), 0, names, -amount))
        events.append((int(result.start[j]), 1, names, amount))
        assert result.start[j] >= jobs.eligible[j]
        assert len(names) == jobs.nodes[j]
    used = dict.fromkeys(cl.node_names, 0)
    for _, _, names, amount in sorted(events, key=lambda e: (e[0], e[1])):
        for name in names:
            used[name] += amount
            assert 0 <= used[name] <= per_node, (name, used[name])


@pytest.mark.parametrize("gpus", [False, True])
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_random_workload_respects_capacity(name, gpus):
    recs = _random_records(300, 7, gpus)
    sp = spec(12, gpus=8 if gpus else 0)
    b = BASELINES[name]
    settings = PrioritySettings(weight_age=100, weight_fairshare=1000, max_age=3600)
    r = run(sp, recs, b.policy, backfill=b.backfill is not False, settings=settings,
            placement=b.placement or "tree")
    assert (r.start >= 0).all()
    _check_capacity(r, 8 if gpus else 1)


def test_same_trace_and_seed_replay_identically():
    recs = _random_records(400, 3, True)
    sp = spec(12, gpus=8)
    settings = PrioritySettings(weight_age=100, weight_fairshare=1000, max_age=3600)

    def once():
        r = simulate(sp, recs, make_policy("multifactor", settings), EXACT,
                     EngineOptions(seed=5))
        m = metrics.compute(r)
        m["sim"].pop("wall_s")
        return m, r.start.copy()

    (m1, s1), (m2, s2) = once(), once()
    assert m1 == m2
    assert np.array_equal(s1, s2)


def test_registries_are_dicts_by_name():
    assert set(POLICIES) >= {"fifo", "sjf", "multifactor"}
    assert set(BASELINES) >= {"slurm", "fifo", "fifo-nobf", "sjf", "sjf-nobf"}
    for b in BASELINES.values():
        assert b.policy in POLICIES
    with pytest.raises(KeyError):
        make_policy("nope")


class _Recording(Simulator):
    """Notes the first shadow time computed for each job."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.first_shadow: dict[int, int] = {}

    def _reserve(self, j, t):
        r = super()._reserve(j, t)
        if r is not None:
            self.first_shadow.setdefault(j, r.shadow)
        return r


@pytest.mark.parametrize("gpus", [False, True])
@pytest.mark.parametrize("interval", [0, 30])
def test_easy_never_delays_a_reservation(gpus, interval):
    # FIFO, limits >= run times: a reserved job starts no later than its first shadow time
    recs = _random_records(400, 11, gpus)
    cl = Cluster.from_spec(spec(4, per_leaf=2, gpus=8) if gpus else spec(12))
    jobs = build_jobs(recs, cl)
    sim = _Recording(jobs, cl, make_policy("fifo"),
                     SchedulerOptions(bf_interval=interval, bf_resolution=1))
    r = sim.run()
    assert len(sim.first_shadow) > 20
    assert r.backfilled.sum() > 20
    for j, shadow in sim.first_shadow.items():
        assert r.start[j] <= shadow, (int(jobs.job_id[j]), int(r.start[j]), shadow)


@pytest.mark.parametrize("gpus", [False, True])
@pytest.mark.parametrize("name", ["fifo", "sjf", "slurm", "fifo-nobf"])
def test_overlapping_partitions(name, gpus):
    import dataclasses

    sp = spec(12, gpus=8 if gpus else 0)
    names = [n.name for n in sp.nodes]
    sp = dataclasses.replace(sp, partitions={"a": tuple(names[:8]), "b": tuple(names[4:])})
    recs = [dataclasses.replace(r, partition="ab"[i % 2]) for i, r in
            enumerate(_random_records(300, 5, gpus))]
    recs = [r for r in recs if (r.req.nodes or 1) <= 8]
    b = BASELINES[name]
    r = run(sp, recs, b.policy, backfill=b.backfill is not False,
            settings=PrioritySettings(weight_age=100, max_age=600))
    assert r.jobs.n == len(recs)
    _check_capacity(r, 8 if gpus else 1)
    allowed = {"a": set(names[:8]), "b": set(names[4:])}
    for j in range(r.jobs.n):
        p = r.cluster.part_names[int(r.jobs.part[j])]
        assert set(r.placements[j]) <= allowed[p]


class _QueueChecked(Simulator):
    """Checks the pending queue after every scheduling pass, and every re-scoring
    against a full one (the settled jobs it skipped must keep the keys it left them; a
    deferred re-scoring is brought up to date first, as before any use of the keys)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.passes = 0
        self.partial = 0
        self.longest = 0

    def _schedule(self, t):
        super()._schedule(t)
        self._compact()
        order, keys = self.porder.tolist(), self.pkeys.tolist()
        assert sorted(order) == np.flatnonzero(self.pending).tolist()
        pairs = list(zip(keys, order, strict=True))
        assert pairs == sorted(pairs)  # by key, ties in arrival order
        assert keys == self.key_of[order].tolist()
        if self._qfifo:
            assert order == sorted(order)
        self.passes += 1
        self.longest = max(self.longest, len(order))

    def _recalc(self, t):
        sizes = self.policy.sizes = []  # (a _Counted policy records its score calls)
        try:
            super()._recalc(t)
            self._sync_keys()
        finally:
            self.policy.sizes = None
        if sizes and sizes[0] < self.porder.size:
            self.partial += 1
        ctx = ScoreContext(t, self.cluster, self.state, self.usage, self.rng)
        full = -self.policy.score(self.jobs, self.porder, ctx)
        assert full.tolist() == self.pkeys.tolist()


def _counted(pol):
    """``pol`` as a subclass instance that records the size of each score() call in
    ``sizes`` while that is a list (a compiled policy takes no instance attribute)."""

    class Counted(type(pol)):
        sizes = None

        def score(self, jobs, idx, ctx):
            if self.sizes is not None:
                self.sizes.append(idx.size)
            return super().score(jobs, idx, ctx)

    return Counted(pol.settings, pol.placement)


@pytest.mark.parametrize(("policy", "settings", "site"), [
    ("sjf", None, True),  # jobs inserted anywhere in the queue
    ("multifactor", PrioritySettings(weight_age=1000, max_age=600), False),  # arrival order
    ("multifactor", PrioritySettings(weight_age=100, weight_job_size=500, max_age=900), True),
])
def test_pending_queue_stays_sorted_and_complete(policy, settings, site):
    recs = _random_records(500, 21, False)
    cl = Cluster.from_spec(spec(12))
    jobs = build_jobs(recs, cl)
    if site:
        jobs.site_factor[:] = np.random.default_rng(3).integers(0, 4, jobs.n) * 20.0
    opts = SchedulerOptions(bf_interval=0, bf_max_job_test=20, priority_calc_period=10)
    sim = _QueueChecked(jobs, cl, _counted(make_policy(policy, settings)), opts)
    r = sim.run()
    assert (r.start >= 0).all()
    assert sim.passes > 500
    assert sim.longest > 64  # the queue's buffers grew
    if policy == "multifactor":
        assert sim.stats["recalcs"] > 50
        if not site:  # in arrival order: the jobs past max_age were not re-scored
            assert sim.partial > 20


def test_settled_age_is_declared_only_without_fair_share():
    assert make_policy("multifactor", PrioritySettings(weight_age=1, max_age=60)
                       ).settles_after == 60
    assert make_policy("multifactor", PrioritySettings(weight_age=1, max_age=0)
                       ).settles_after == 0
    assert make_policy("multifactor", PrioritySettings(weight_age=1, weight_fairshare=1)
                       ).settles_after is None
    assert make_policy("fifo").settles_after is None


def test_queue_insertions_keep_order_and_arrival_flag():
    # white-box: inserts at the tail, the head and the middle, into full buffers too
    cl = Cluster.from_spec(spec(4))
    jobs = build_jobs([job(i + 1, i, 10, 1) for i in range(300)], cl)
    sim = Simulator(jobs, cl, make_policy("fifo"), EXACT)
    ref: list[tuple[float, int]] = []

    def insert(j: int, key: float) -> None:
        pos = int(sim.pkeys.searchsorted(key, side="right"))
        sim._insert(pos, j, key)
        ref.insert(pos, (key, j))
        assert sim.porder.tolist() == [jj for _, jj in ref]
        assert sim.pkeys.tolist() == [k for k, _ in ref]
        if sim._qfifo:
            assert sim.porder.tolist() == sorted(sim.porder.tolist())

    for j in range(sim._qjob.size):  # appends fill the first buffer exactly
        insert(j, float(2 * j))
    assert sim._qfifo and sim._qhi == sim._qjob.size
    insert(64, 21.0)  # into the middle of a full buffer: no longer in arrival order
    assert not sim._qfifo
    rng = np.random.default_rng(0)
    for j in range(65, 300):
        insert(j, float(rng.integers(0, 600)))
        if j == 100:  # drop a head as the compaction does, so the head has room
            sim._qlo += 10
            del ref[:10]


def test_score_context_has_every_field():
    """The engine builds its ScoreContext with ``tuple.__new__`` (no interpreted frame):
    it must still be a whole ScoreContext, one value per field, the replay's own."""
    recs = _random_records(20, 2, True)
    sp = spec(4)
    cl = Cluster.from_spec(sp)
    sim = Simulator(build_jobs(recs, cl), cl, make_policy("fifo"))
    ctx = sim._ctx(123)
    assert type(ctx) is ScoreContext and len(ctx) == len(ScoreContext._fields)
    assert ctx == ScoreContext(123, sim.cluster, sim.state, sim.usage, sim.rng, sim.speed)
    assert ctx.now == 123 and ctx.speed is sim.speed


# ---------------------------------------------------------------------------- conservative
CONSERVATIVE = SchedulerOptions(bf_interval=0, bf_resolution=1, bf_plan="conservative")


def test_conservative_backfill_protects_every_blocked_job_not_only_the_first():
    # 4 nodes. Job 2 (2 nodes) waits for job 1 and is reserved at 100 by both plans.
    # Job 4 (1 node, 250 s) fits now and leaves job 2 what it needs at 100, so EASY
    # starts it, and job 3 (the whole machine) waits for it until 253. Conservative
    # backfill has reserved job 3 at 200 (after job 2) and starts job 4 after job 3.
    recs = [job(1, 0, 100, 3), job(2, 1, 100, 2), job(3, 2, 100, 4), job(4, 3, 250, 1)]
    easy = run(spec(4), recs)
    assert starts(easy) == {1: 0, 2: 100, 3: 253, 4: 3}
    cons = run(spec(4), recs, options=CONSERVATIVE)
    assert starts(cons) == {1: 0, 2: 100, 3: 200, 4: 300}
    assert cons.stats["reservations"] >= 3  # 2, 3 and 4 each got one at 3 s
    _check_capacity(cons, 1)


def test_plan_probes_keep_the_plan_in_effect_at_each_time():
    # the hand case above: the passes at 2 s reserve jobs 2 and 3 (100, 200), those at
    # 3 s job 4 too (300); after job 1 ends at 100, jobs 3 and 4 stay planned; at the end
    # none waits. A probe reads the plan after every pass of its second.
    recs = [job(1, 0, 100, 3), job(2, 1, 100, 2), job(3, 2, 100, 4), job(4, 3, 250, 1)]
    cl = Cluster.from_spec(spec(4))
    probes = (T0, T0 + 2, T0 + 3, T0 + 150, T0 + 1000)
    plans = []
    for opts in (CONSERVATIVE, EXACT):
        for fast in (True, False):
            sim = Simulator(build_jobs(recs, cl), cl, make_policy("fifo"), opts,
                            EngineOptions(plan_probes=probes, fast_path=fast))
            plans.append(sim.run().plans)
    rel = [(p - T0, {j: s - T0 for j, s in plan.items()}) for p, plan in plans[0]]
    assert rel == [(0, {}), (2, {2: 100, 3: 200}), (3, {2: 100, 3: 200, 4: 300}),
                   (150, {3: 200, 4: 300}), (1000, {})]
    assert plans[1] == plans[0]  # the leaf counts plan as the node arrays do
    assert plans[2] == plans[3] == [(p, {}) for p in probes]  # EASY keeps no plan
    assert run(spec(4), recs).plans is None  # none asked for
    with pytest.raises(ValueError, match="ascending"):
        Simulator(build_jobs(recs, cl), cl, make_policy("fifo"), CONSERVATIVE,
                  EngineOptions(plan_probes=(T0 + 5, T0)))


def test_conservative_backfill_still_fills_holes_that_delay_nobody():
    # job 3 (1 node, 90 s) ends before job 2's reservation at 100: started now
    recs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 90, 1), job(4, 3, 300, 2)]
    r = run(spec(4), recs, options=CONSERVATIVE)
    assert starts(r) == {1: 0, 2: 100, 3: 2, 4: 110}
    assert r.backfilled.tolist() == [False, False, True, False]


def test_conservative_backfill_plans_a_job_past_its_limit_as_ending_next():
    # job 1 runs past its 50 s limit: the plan frees its nodes from the next second on,
    # never now. Job 2 (the whole machine) is then reserved, and job 3 (1 node, 500 s)
    # may not take the idle node; counted free now, job 2 would have been planned on
    # nodes still busy, failed to start, and waited for job 3 until 561.
    recs = [job(1, 0, 100, 4, limit=50), job(2, 60, 10, 5), job(3, 61, 500, 1)]
    r = run(spec(5), recs, options=CONSERVATIVE)
    assert starts(r) == {1: 0, 2: 100, 3: 110}
    _check_capacity(r, 1)


def _conservative_reference(recs: list[JobRecord], nodes: int) -> dict[int, int]:
    """Conservative backfilling by hand: each job, in arrival order, takes the earliest
    span of its node count in a free-nodes profile holding every earlier job. With run
    times equal to limits nothing ends early, so that first plan is the schedule."""
    busy: list[tuple[int, int, int]] = []  # (start, end, nodes)

    def free_over(s: int, e: int) -> int:
        points = {s} | {b for b, _, _ in busy if s < b < e}
        return min(nodes - sum(n for b, f, n in busy if b <= p < f) for p in points)

    out = {}
    for r in recs:
        a = r.submit_time - T0
        n = r.req.nodes
        d = r.time_limit
        for s in sorted({a} | {f for _, f, _ in busy if f > a}):
            if free_over(s, s + d) >= n:
                break
        busy.append((s, s + d, n))
        out[r.job_id] = s
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_conservative_backfill_matches_a_hand_plan_with_exact_limits(seed):
    rng = np.random.default_rng(seed)
    recs, t = [], 0
    for i in range(120):
        t += int(rng.integers(0, 30))
        recs.append(job(i + 1, t, int(rng.integers(1, 300)), int(rng.choice([1, 1, 2, 3, 5, 8]))))
    want = _conservative_reference(recs, 8)
    cons = run(spec(8), recs, options=CONSERVATIVE)
    assert starts(cons) == want
    _check_capacity(cons, 1)
    assert starts(run(spec(8), recs)) != want  # EASY plans otherwise on this workload


def test_conservative_backfill_runs_on_the_leaf_counts_as_on_the_node_arrays():
    recs = _random_records(300, 5, False)
    cl = Cluster.from_spec(spec(12))
    out = []
    for fast in (True, False):
        sim = Simulator(build_jobs(recs, cl), cl, make_policy("fifo"),
                        SchedulerOptions(bf_plan="conservative"), EngineOptions(fast_path=fast))
        assert sim.leafy is fast
        out.append(sim.run())
    assert np.array_equal(out[0].start, out[1].start)
    assert out[0].stats["reservations"] == out[1].stats["reservations"] > 0


def test_conservative_backfill_refuses_what_it_does_not_model():
    with pytest.raises(ValueError, match="bf_plan must be one of easy, conservative"):
        SchedulerOptions(bf_plan="lazy")
    recs = [job(1, 0, 10, None, gpus=1), job(2, 1, 10, None, gpus=2)]
    with pytest.raises(ValueError, match="jobs sharing nodes.*use bf_plan 'easy'"):
        run(spec(2, gpus=8), recs, options=CONSERVATIVE)
