"""slurm_plugin.features and slurm_plugin.placement: the shared feature schema."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin import features as F
from slurm_plugin.placement import candidates, usable_nodes
from slurm_plugin.slurm.types import SlurmJob, SlurmNode, Switch, SwitchTree


def nodes4(**over):
    cols = dict(cap_c=[8] * 4, cap_g=[4] * 4, cap_m=[0] * 4, free_c=[8, 4, 8, 0],
                free_g=[4, 2, 4, 0], free_m=[0] * 4, idle=[1, 0, 1, 0], up=[1, 1, 1, 1],
                remaining=[0, 100, 0, 50], leaf=[0, 0, 1, 1])
    cols.update(over)
    return F.NodesRaw.build(**cols)


def jobs3(**over):
    cols = dict(job_id=[1, 2, 3], eligible=[0, 10, 5], limit=[3600, 0, 7200],
                nodes=[1, 2, 20], cpus=[4, 0, 1], gpus=[1, 0, 1], mem=[0, 0, 0],
                exclusive=[False, True, False], user=[0, 1, 0], est_run=[100, 200, 300],
                usage_share=[0.5, 0.5, 0.5], locality=[0, 0, 1])
    cols.update(over)
    return F.JobsRaw.build(**cols)


def test_schema_hash_is_stable_and_changes_with_normalisation():
    assert F.schema_hash() == F.schema_hash(F.Normalisation())
    assert F.schema_hash() != F.schema_hash(F.Normalisation(time_scale=60.0))
    s = F.schema()
    assert s["version"] == F.SCHEMA_VERSION
    assert s["job_features"] == list(F.JOB_FEATURES)


def test_fits_now_by_hand():
    # job 1: 1 node 4c/1g -> nodes 0,1,2 fit; job 2: 2 whole nodes -> idle 0,2; job 3: 20 nodes
    assert F.fits_now(jobs3(), nodes4()).tolist() == [True, True, False]
    # nodes down: only node 1 up -> whole-node job no longer fits
    down = nodes4(up=[0, 1, 0, 0])
    assert F.fits_now(jobs3(), down).tolist() == [True, False, False]


def _bf_nodes(free_c, free_g, idle, remaining, up=(1, 1, 1, 1)):
    """Four 8-CPU/4-GPU nodes on two leaves."""
    return F.NodesRaw.build(cap_c=[8] * 4, cap_g=[4] * 4, cap_m=[0] * 4, free_c=free_c,
                            free_g=free_g, free_m=[0] * 4, idle=idle, up=list(up),
                            remaining=remaining, leaf=[0, 0, 1, 1])


def _bf_jobs(reqs):
    """Jobs in arrival order from ``(nodes, cpus, gpus, limit)``."""
    n = len(reqs)
    return F.JobsRaw.build(
        job_id=list(range(1, n + 1)), eligible=list(range(n)),
        limit=[r[3] for r in reqs], nodes=[r[0] for r in reqs], cpus=[r[1] for r in reqs],
        gpus=[r[2] for r in reqs], mem=[0] * n, exclusive=[False] * n, user=[0] * n,
        est_run=[0] * n, usage_share=[0] * n, locality=[0] * n)


def test_backfill_ok_by_hand():
    # node 0 idle; 1 and 2 full until 100 and 300 s; node 3 half free until 50 s
    nodes = _bf_nodes([8, 0, 0, 4], [4, 0, 0, 2], [1, 0, 0, 0], [0, 100, 300, 50])
    jobs = _bf_jobs([
        (1, 4, 1, 1000),     # older than the blocked job: the main scheduler starts it
        (3, 8, 4, 3600),     # blocked: only node 0 is whole now; reservation on 0, 3, 1
        (1, 4, 1, 100),      # ends by the reservation's start (100 s)
        (1, 4, 1, 101),      # one second too long, and every node it fits is reserved
        (1, 4, 1, 0),        # unknown limit: not known to end in time
        (2, 4, 1, 50),       # two nodes, ends in time
        (1, 8, 4, 10 ** 6),  # only node 0 holds it, and node 0 is reserved
        (2, 8, 4, 10),       # does not fit now
    ])
    assert F.fits_now(jobs, nodes).tolist() == [True, False, True, True, True, True, True,
                                                 False]
    assert F.backfill_ok(jobs, nodes).tolist() == [True, False, True, False, False, True,
                                                   False, False]


def test_backfill_ok_outside_the_reservation_and_without_one():
    # the blocked job needs 2 whole nodes: node 0 now, node 1 at 100 s (reserved);
    # node 3 (half free until 500 s) and node 2 (until 300 s) are not needed by then
    nodes = _bf_nodes([8, 0, 0, 4], [4, 0, 0, 2], [1, 0, 0, 0], [0, 100, 300, 500])
    jobs = _bf_jobs([(2, 8, 4, 3600), (1, 4, 1, 10 ** 6), (1, 8, 4, 10 ** 6)])
    assert F.backfill_ok(jobs, nodes).tolist() == [False, True, False]
    # node 1 down: the blocked job's reservation moves to node 2 (300 s), so a job
    # that ends within 300 s may use node 0
    down = _bf_nodes([8, 0, 0, 4], [4, 0, 0, 2], [1, 0, 0, 0], [0, 100, 300, 500],
                     up=(1, 0, 1, 1))
    jobs = _bf_jobs([(2, 8, 4, 3600), (1, 8, 4, 300), (1, 8, 4, 301)])
    assert F.backfill_ok(jobs, down).tolist() == [False, True, False]
    # a blocked job that can never start here (5 nodes of 4) reserves nothing
    jobs = _bf_jobs([(5, 1, 0, 60), (1, 8, 4, 10 ** 6)])
    assert F.backfill_ok(jobs, nodes).tolist() == [False, True]
    # nothing blocked: every job that fits
    jobs = _bf_jobs([(1, 4, 1, 10 ** 6), (1, 2, 1, 0)])
    assert F.backfill_ok(jobs, nodes).tolist() == [True, True]
    assert F.backfill_ok(F.JobsRaw.empty(), nodes).tolist() == []


def test_featurize_values_by_hand():
    obs = F.featurize(100, jobs3(), nodes4())
    assert obs.jobs.shape == (3, len(F.JOB_FEATURES))
    assert obs.nodes.shape == (4, len(F.NODE_FEATURES))
    assert obs.globals.shape == (len(F.GLOBAL_FEATURES),)
    assert obs.jobs.dtype == np.float32
    col = {n: i for i, n in enumerate(F.JOB_FEATURES)}
    assert obs.jobs[0, col["log_nodes"]] == pytest.approx(np.log1p(1))
    # whole-node job: GPUs counted as the node's GPUs (4 per node x 2 nodes)
    assert obs.jobs[1, col["log_gpus"]] == pytest.approx(np.log1p(8))
    # unknown limit -> unknown_limit (1 day) -> log1p(24)
    assert obs.jobs[1, col["log_limit"]] == pytest.approx(np.log1p(24), rel=1e-6)
    assert obs.jobs[0, col["log_age"]] == pytest.approx(np.log1p(100 / 3600), rel=1e-5)
    # arrival ranks: eligible 0, 10, 5 -> ranks 0, 2/3, 1/3
    assert obs.jobs[:, col["arrival_rank"]].tolist() == pytest.approx([0, 2 / 3, 1 / 3])
    assert obs.job_mask.tolist() == [True, True, False]
    g = dict(zip(F.GLOBAL_FEATURES, obs.globals.tolist(), strict=True))
    assert g["busy_nodes"] == pytest.approx(0.5)
    assert g["used_gpus"] == pytest.approx(6 / 16)
    assert g["stranded_gpus"] == pytest.approx(2 / 16)  # node 1: partly used, 2 GPUs free
    ncol = {n: i for i, n in enumerate(F.NODE_FEATURES)}
    assert obs.nodes[1, ncol["free_gpu_frac"]] == pytest.approx(0.5)
    assert obs.nodes[0, ncol["log_remaining"]] == 0.0


def test_empty_queue_and_bad_columns():
    obs = F.featurize(0, F.JobsRaw.empty(), nodes4())
    assert obs.jobs.shape == (0, len(F.JOB_FEATURES)) and obs.job_mask.shape == (0,)
    assert np.isfinite(obs.globals).all()
    with pytest.raises(ValueError, match="expected 3"):
        jobs3(nodes=[1, 2])
    with pytest.raises(ValueError, match="at least one node"):
        jobs3(nodes=[1, 0, 2])
    with pytest.raises(ValueError, match="needs column"):
        F.NodesRaw.build(cap_c=[1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 8), st.integers(0, 4),
                          st.booleans()), min_size=0, max_size=30),
       st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4), st.booleans()),
                min_size=1, max_size=12))
def test_featurize_finite_and_fits_matches_brute_force(reqs, nodes):
    nr = F.NodesRaw.build(
        cap_c=[8] * len(nodes), cap_g=[4] * len(nodes), cap_m=[0] * len(nodes),
        free_c=[c for c, _, _ in nodes], free_g=[g for _, g, _ in nodes],
        free_m=[0] * len(nodes), idle=[c == 8 and g == 4 for c, g, _ in nodes],
        up=[u for _, _, u in nodes], remaining=[0] * len(nodes),
        leaf=[i % 3 for i in range(len(nodes))], n_leaves=3)
    jr = F.JobsRaw.build(
        job_id=list(range(len(reqs))), eligible=[0] * len(reqs), limit=[60] * len(reqs),
        nodes=[r[0] for r in reqs], cpus=[0 if r[3] else r[1] for r in reqs],
        gpus=[0 if r[3] else r[2] for r in reqs], mem=[0] * len(reqs),
        exclusive=[r[3] for r in reqs], user=[0] * len(reqs), est_run=[30] * len(reqs),
        usage_share=[0] * len(reqs), locality=[0] * len(reqs))
    obs = F.featurize(10, jr, nr)
    assert np.isfinite(obs.jobs).all() and np.isfinite(obs.nodes).all()
    assert not (F.backfill_ok(jr, nr) & ~obs.job_mask).any()  # only jobs that fit now
    for k in range(jr.n):
        ok = usable_nodes(nr, int(jr.cpus[k]), int(jr.gpus[k]), 0, bool(jr.exclusive[k]))
        assert obs.job_mask[k] == (ok.sum() >= jr.nodes[k])
        cand = candidates(nr, int(jr.nodes[k]), int(jr.cpus[k]), int(jr.gpus[k]), 0,
                          bool(jr.exclusive[k]))
        assert (len(cand) > 0) == bool(obs.job_mask[k])
        for s in range(len(cand)):
            idx = cand.nodes(s)
            assert idx.size == jr.nodes[k] and ok[idx].all()
        assert len({cand.sets[s].tobytes() for s in range(len(cand))}) == len(cand)


def test_candidates_prefer_one_leaf_best_fit():
    nr = F.NodesRaw.build(
        cap_c=[8] * 6, cap_g=[4] * 6, cap_m=[0] * 6, free_c=[8, 8, 8, 8, 8, 2],
        free_g=[4, 4, 4, 4, 4, 1], free_m=[0] * 6, idle=[1, 1, 1, 1, 1, 0],
        up=[1] * 6, remaining=[0] * 6, leaf=[0, 0, 0, 1, 1, 1])
    cand = candidates(nr, 2, cpus=1, gpus=1)
    # leaf 1 has 3 usable nodes, leaf 0 has 3: tie -> lowest index first; best fit picks
    # the partly used node 5 inside leaf 1
    assert cand.kinds[0] == "leaf:0" and cand.nodes(0).tolist() == [0, 1]
    assert cand.kinds[1] == "leaf:1" and cand.nodes(1).tolist() == [3, 5]
    assert (cand.leaves[:2] == 1).all()
    big = candidates(nr, 5, cpus=1, gpus=1)
    assert big.kinds[0] == "fewest-switches" and big.leaves[0] == 2
    assert len(candidates(nr, 7, cpus=1)) == 0


def test_raw_from_slurm_maps_live_objects():
    tree = SwitchTree.from_switches([
        Switch("s0", 0, ("n2", "n3")), Switch("s1", 0, ("n1",)),
        Switch("top", 1, ("n1", "n2", "n3"), ("s0", "s1"))])
    nodes = [SlurmNode("n1", "IDLE", (), 8, 0, 4, 0, 1000, 0),
             SlurmNode("n2", "MIXED", (), 8, 4, 4, 2, 1000, 500),
             SlurmNode("n3", "IDLE", ("DRAIN",), 8, 0, 4, 0, 1000, 0)]
    base = dict(name="x", user="alice", account="a", partition="p", qos="normal",
                state="PENDING", state_reason="Priority", submit_time=50,
                eligible_time=60, start_time=None, time_limit=600, num_nodes=2,
                num_cpus=4, num_gpus=2, mem_mb=None, priority=1, site_factor=0, nice=0)
    pend = [SlurmJob(job_id=7, **base)]
    run = [SlurmJob(job_id=5, **{**base, "state": "RUNNING", "start_time": 80,
                                 "time_limit": 120, "nodes": ("n2",)})]
    jr, nr, names = F.raw_from_slurm(100, pend, run, nodes, tree)
    assert names == ["n2", "n3", "n1"]  # leaf order
    assert nr.leaf.tolist() == [0, 0, 1] and nr.n_leaves == 2
    assert nr.up.tolist() == [True, False, True]
    assert nr.remaining.tolist() == [100, 0, 0]
    assert nr.free_g.tolist() == [2, 4, 4]
    assert jr.cpus.tolist() == [2] and jr.gpus.tolist() == [1] and jr.nodes.tolist() == [2]
    assert jr.eligible.tolist() == [60]
    assert jr.est_run.tolist() == [300.0]  # default ratio 0.5 x 600 s


def test_user_history_estimates():
    h = F.UserHistory(F.Normalisation(history=3))
    for run in (10, 20, 30, 90):
        h.record("u", end=1000, run=run, limit=100, cpus=1)
    est, share, loc = h.estimates(["u", "v"], [100, 100], now=1000)
    # the mean of the last 3 ratios (.2, .3, .9) x 100 (their median would say 30)
    assert est.tolist() == pytest.approx([140.0 / 3, 50.0])
    assert share.tolist() == [1.0, 0.0]
    h.record("w", end=1000, run=50, limit=100, cpus=1, leaves=1)
    h.record("w", end=1000, run=75, limit=100, cpus=1, leaves=2)
    _, _, loc = h.estimates(["w"], [100], now=1000)
    assert loc[0] == pytest.approx(0.5)


def test_observe_from_simulator_state_matches_live_semantics():
    from trainer.sim import workload as w
    from trainer.sim.observe import observe
    from trainer.sim.state import Cluster, NodeState, build_jobs

    cfg = w.WorkloadConfig(num_jobs=40, seed=3)
    spec = w.default_cluster(cfg)
    cl = Cluster.from_spec(spec)
    jt = build_jobs(w.replay_records(w.generate(cfg), spec), cl)
    state = NodeState(cl)
    idx = np.arange(jt.n)
    now = int(jt.eligible.max())
    obs = observe(jt, idx, cl, state, now)
    assert obs.n_jobs == jt.n and obs.n_nodes == cl.num_nodes
    assert obs.n_leaves == cl.num_leaves
    # an empty cluster: every job that fits the cluster at all fits now
    assert obs.job_mask.all()
    ncol = {n: i for i, n in enumerate(F.NODE_FEATURES)}
    assert (obs.nodes[:, ncol["idle"]] == 1).all()
    # take every GPU of node 0: its free GPU fraction drops to 0, used_gpus rises
    state.allocate_shared(np.array([0]), 1, int(cl.cap_g[0]), 0, now + 3600, now + 60)
    obs2 = observe(jt, idx, cl, state, now)
    assert obs2.nodes[0, ncol["free_gpu_frac"]] == 0
    assert obs2.nodes[0, ncol["log_remaining"]] == pytest.approx(np.log1p(1.0))
    gcol = {n: i for i, n in enumerate(F.GLOBAL_FEATURES)}
    assert obs2.globals[gcol["used_gpus"]] == pytest.approx(cl.cap_g[0] / cl.total_gpus)

def test_a_node_table_from_the_simulator_is_a_snapshot():
    """A NodesRaw kept past the moment it was read does not change as the replay goes on."""
    from trainer.sim import workload as w
    from trainer.sim.observe import nodes_raw
    from trainer.sim.state import Cluster, NodeState

    cl = Cluster.from_spec(w.default_cluster(w.WorkloadConfig(num_jobs=4, seed=3)))
    state = NodeState(cl)
    before = nodes_raw(cl, state, 0)
    state.allocate_shared(np.array([0, 1]), 2, 1, 1000, 3600, 60)
    after = nodes_raw(cl, state, 0)
    assert after.free_c[0] == cl.cap_c[0] - 2 and after.free_g[1] == cl.cap_g[1] - 1
    assert not after.idle[0]
    assert before.free_c.tolist() == cl.cap_c.tolist()
    assert before.free_g.tolist() == cl.cap_g.tolist() and before.idle.all()
    assert before.remaining.tolist() == [0] * cl.num_nodes
