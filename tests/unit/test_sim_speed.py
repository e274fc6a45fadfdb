"""Speed models: hand-computed spread factors, bandwidth sharing, replays on synthetic jobs."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from db.records import JobRecord, TresCounts
from slurm_plugin import cli
from slurm_plugin.cluster import ClusterSpec, NodeSpec
from slurm_plugin.slurm.types import Switch, SwitchTree
from trainer.sim import metrics
from trainer.sim.engine import EngineOptions, Simulator
from trainer.sim.policies import make_policy
from trainer.sim.slurm import SchedulerOptions
from trainer.sim.speed import (
    SPEED_MODELS,
    BandwidthParams,
    BandwidthSpeedModel,
    LocalityParams,
    LocalitySpeedModel,
    NoSpeedModel,
    comm_volume,
    make_speed_model,
    spread_factor,
)
from trainer.sim.state import Cluster, build_jobs, record_locality
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

T0 = 1_699_999_980


def rec(jid: int, run: int, nodes: int, *, gpus: int | None = None, cpus: int | None = None,
        limit: int | None = None, name: str = "", user: str = "u1") -> JobRecord:
    t = T0 + jid
    tres = TresCounts(nodes, cpus, gpus, None)
    return JobRecord(
        job_id=jid, name=name, user=user, account="", partition="", qos="",
        state="COMPLETED", submit_time=t, eligible_time=t, start_time=t, end_time=t + run,
        time_limit=limit, req=tres, alloc=tres, node_list="", nodes=(), priority=None,
        exit_code=0,
    )


def cluster8() -> Cluster:
    """8 nodes x 8 GPUs in two leaves of 4 (nodes 0-3 and 4-7)."""
    return Cluster.from_spec(ClusterSpec.synthetic("c", 8, nodes_per_leaf=4, gpus_per_node=8,
                                                   cpus_per_node=64, mem_mb_per_node=0))


def table(records: list[JobRecord], s: float = 0.5):
    cl = cluster8()
    jobs = build_jobs(records, cl, locality={r.job_id: s for r in records})
    return jobs, cl


def idx(jobs, jid: int) -> int:
    return int(np.flatnonzero(jobs.job_id == jid)[0])


def nodes(*ks: int) -> np.ndarray:
    return np.array(ks, dtype=np.int64)


def leaves_of(cl: Cluster, ns: np.ndarray) -> int:
    return int(np.unique(cl.leaf_of[ns]).size)


# ---------------------------------------------------------------------------- locality
def test_locality_hand_computed_factors():
    # s = 0.5: excess slowdown E = s / (1 - s) = 1 (twice as slow on two servers)
    recs = [
        rec(1, 1000, 1, gpus=4, cpus=8),        # one node
        rec(2, 1000, 2, gpus=8, cpus=8),        # 2 nodes x 4 GPUs: fits one node (n_min 1)
        rec(3, 1000, 4),                        # 4 whole nodes: n_min 4, L_min 1
        rec(4, 1000, 2, gpus=8, cpus=8, limit=1500),
    ]
    jobs, cl = table(recs)
    m = LocalitySpeedModel()

    def rt(jid, ns):
        return m.run_time(jobs, cl, idx(jobs, jid), ns, leaves_of(cl, ns))

    assert rt(1, nodes(5)) == 1000
    # spread over 2 servers in one leaf: 1 + E * R(2) = 2
    assert rt(2, nodes(0, 1)) == 2000
    # and over 2 leaves: 1 + E * R(2) * (1 + 0.2) = 2.2
    assert rt(2, nodes(3, 4)) == 2200
    # a whole-node job packed in one leaf runs as recorded
    assert rt(3, nodes(0, 1, 2, 3)) == 1000
    # over 2 leaves: (1 + E * R(4) * 1.2) / (1 + E * R(4)) = (1 + 1.8) / 2.5 = 1.12
    assert rt(3, nodes(2, 3, 4, 5)) == 1120
    # a slowed run ends at the job's time limit (TIMEOUT)
    assert rt(4, nodes(3, 4)) == 1500


def test_zero_sensitivity_is_never_slowed():
    jobs, cl = table([rec(1, 1000, 4)], s=0.0)
    m = LocalitySpeedModel()
    assert m.run_time(jobs, cl, 0, nodes(2, 3, 4, 5), 2) == 1000


def test_pure_formula_matches_the_papers_definition():
    # SCHED2 Fig. 1: VGG16 5.9x slower on two servers -> s = 1 - 1/5.9
    s = 1 - 1 / 5.9
    assert spread_factor(s, 2, 1, 1, 1, 0.2) == pytest.approx(5.9)
    assert spread_factor(s, 1, 1, 1, 1, 0.2) == 1.0
    assert comm_volume(1, 3, 0.2) == 0.0
    assert comm_volume(4, 3, 0.2) == pytest.approx(1.5 * 1.4)  # RL-TAPS: 3 racks 1.4
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        spread_factor(1.0, 2, 1, 1, 1, 0.2)


placement = st.tuples(st.integers(1, 64), st.integers(0, 32), st.integers(1, 16),
                      st.integers(0, 8))


@given(s=st.floats(0, 0.95), s2=st.floats(0, 0.95), p=placement,
       pen=st.floats(0, 2), more_n=st.integers(0, 8), more_l=st.integers(0, 4))
def test_spread_factor_monotonic_in_sensitivity_and_spread(s, s2, p, pen, more_n, more_l):
    n_min, extra_n, l_min, extra_l = p
    n, leaves = n_min + extra_n, l_min + extra_l
    f = spread_factor(s, n, leaves, n_min, l_min, pen)
    assert f >= 1.0 - 1e-12
    lo, hi = sorted((s, s2))
    assert spread_factor(lo, n, leaves, n_min, l_min, pen) <= (
        spread_factor(hi, n, leaves, n_min, l_min, pen) + 1e-9)
    assert f <= spread_factor(s, n + more_n, leaves + more_l, n_min, l_min, pen) + 1e-9
    assert spread_factor(s, 1, leaves, 1, l_min, pen) == 1.0  # one node: no network
    assert spread_factor(s, n_min, l_min, n_min, l_min, pen) == 1.0  # best placement


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="leaf_penalty"):
        LocalityParams(leaf_penalty=-1)
    with pytest.raises(ValueError, match="max_sensitivity"):
        LocalityParams(max_sensitivity=1.0)
    with pytest.raises(ValueError, match="oversubscription"):
        BandwidthParams(oversubscription=0)
    with pytest.raises(KeyError, match="unknown speed model 'fast'"):
        make_speed_model("fast")
    assert set(SPEED_MODELS) == {"none", "locality", "bandwidth"}
    assert make_speed_model("bandwidth").to_dict() == {
        "name": "bandwidth", "leaf_penalty": 0.2, "max_sensitivity": 0.95,
        "cap_at_limit": True, "node_gbs": 12.5, "oversubscription": 8.0, "uplink_gbs": None}


# ---------------------------------------------------------------------------- job table
def test_locality_column_from_mapping_name_or_hash():
    cl = cluster8()
    recs = [rec(1, 10, 2, gpus=8, name="vgg16"), rec(2, 10, 2, gpus=8, name="x", user="a"),
            rec(3, 10, 2, gpus=8, name="x", user="a"), rec(4, 10, 2, name="x", user="a")]
    jobs = build_jobs(recs, cl, locality={2: 0.7})
    loc = dict(zip(jobs.job_id.tolist(), jobs.locality.tolist(), strict=True))
    assert loc[1] == 0.83  # the workload's VGG16 (SCHED2 Fig. 1: 5.9x)
    assert loc[2] == 0.7  # given
    assert loc[3] == record_locality(recs[2])  # same user and name: the same value
    gpu_values = {0.83, 0.75, 0.32, 0.29, 0.63, 0.55, 0.5, 0.4, 0.375, 0.25}
    mpi_values = {0.4, 0.35, 0.45, 0.3, 0.25}
    assert loc[3] in gpu_values and loc[4] in mpi_values
    many = {record_locality(rec(9, 10, 2, gpus=8, name="run", user=f"user{i}"))
            for i in range(200)}
    assert len(many) > 5 and many <= gpu_values
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        build_jobs(recs, cl, locality={1: 1.5})


def test_records_without_users_count_as_their_accounts():
    """A trace naming no users (Philly: its virtual clusters are the accounts): history,
    fair-share and locality follow the accounts, not one nameless user for every job."""
    import dataclasses

    cl = cluster8()
    recs = [dataclasses.replace(rec(k, 10, 1, gpus=1, name="", user=""),
                                account=f"vc{k % 20}") for k in range(1, 201)]
    jobs = build_jobs(recs, cl)
    assert len(jobs.users) == 20 and set(jobs.users) == {f"vc{i}" for i in range(20)}
    by_vc: dict[str, set[float]] = {}
    for u, s in zip(jobs.user.tolist(), jobs.locality.tolist(), strict=True):
        by_vc.setdefault(jobs.users[u], set()).add(s)
    assert all(len(v) == 1 for v in by_vc.values())  # one value per account
    assert len({next(iter(v)) for v in by_vc.values()}) > 2  # and not one for all
    named = build_jobs([dataclasses.replace(recs[0], user="alice")], cl)
    assert named.users == ("alice",)  # a user, when there is one, comes first


# ---------------------------------------------------------------------------- bandwidth
def test_two_jobs_sharing_an_uplink_run_slower_than_one():
    # whole-node 2-node jobs: n_min 2, packed in one leaf they run as recorded
    jobs, cl = table([rec(k, 1000, 2) for k in (1, 2, 3, 4)])
    m = BandwidthSpeedModel()
    a, b, c, d = (idx(jobs, k) for k in (1, 2, 3, 4))
    # alone over 2 leaves: (1 + E * R(2) * 1.2) / (1 + E * R(2)) = 2.2 / 2 = 1.1
    assert m.run_time(jobs, cl, a, nodes(3, 4), 2) == 1100
    m.on_start(a, nodes(3, 4), 2, 0)
    # uplinks are 4 x 12.5 / 8 = 6.25 GB/s; sharing one halves it: scale 2
    assert m.run_time(jobs, cl, b, nodes(2, 5), 2) == 1700  # (1 + 1.2 * 2) / 2
    m.on_start(b, nodes(2, 5), 2, 0)
    # a job inside one leaf uses no uplink: unaffected
    assert m.run_time(jobs, cl, c, nodes(0, 1), 1) == 1000
    m.on_start(c, nodes(0, 1), 1, 0)
    assert m.load[cl.num_nodes:].tolist() == [2, 2]
    m.on_finish(a, 10)
    m.on_finish(b, 10)
    # once they are gone the uplinks are free again
    assert m.run_time(jobs, cl, d, nodes(6, 3), 2) == 1100
    m.on_start(d, nodes(3, 6), 2, 10)
    m.on_finish(d, 20)
    m.on_finish(c, 20)
    assert not m.load.any()


def test_jobs_sharing_node_links_contend_and_a_fixed_uplink_applies():
    # 2 nodes x 4 GPUs each, on the same two nodes: their NICs are shared
    jobs, cl = table([rec(1, 1000, 2, gpus=8, cpus=8), rec(2, 1000, 2, gpus=8, cpus=8)])
    m = BandwidthSpeedModel()
    assert m.run_time(jobs, cl, 0, nodes(0, 1), 1) == 2000  # 1 + E * R(2)
    m.on_start(0, nodes(0, 1), 1, 0)
    assert m.run_time(jobs, cl, 1, nodes(0, 1), 1) == 3000  # 1 + E * R(2) * 2
    fixed = BandwidthSpeedModel(BandwidthParams(uplink_gbs=50.0))
    fixed.run_time(jobs, cl, 0, nodes(3, 4), 2)
    fixed.on_start(0, nodes(3, 4), 2, 0)
    # 50 GB/s uplinks shared by two still give each more than its 12.5 GB/s NIC
    assert fixed.run_time(jobs, cl, 1, nodes(2, 5), 2) == 2200


def test_upper_switch_uplinks_are_used_only_below_the_common_switch():
    # 8 nodes, leaves of 2, two pods of 2 leaves under a spine
    names = [f"n{i}" for i in range(8)]
    leaves = [Switch(f"l{k}", 0, tuple(names[2 * k:2 * k + 2])) for k in range(4)]
    pods = [Switch("p0", 1, tuple(names[:4]), ("l0", "l1")),
            Switch("p1", 1, tuple(names[4:]), ("l2", "l3"))]
    spine = Switch("spine", 2, tuple(names), ("p0", "p1"))
    spec = ClusterSpec("t", tuple(NodeSpec(n, 8, 0, 0, (), ("b",)) for n in names),
                       SwitchTree.from_switches([*leaves, *pods, spine]), {"b": tuple(names)})
    cl = Cluster.from_spec(spec)
    jobs = build_jobs([rec(1, 100, 2)], cl, locality={1: 0.5})
    m = BandwidthSpeedModel()
    m.run_time(jobs, cl, 0, nodes(0, 1), 1)
    n, nl = cl.num_nodes, cl.num_leaves
    assert m.links(nodes(0, 1)).tolist() == [0, 1]
    assert m.links(nodes(1, 2)).tolist() == [1, 2, n + 0, n + 1]  # within pod p0
    assert m.links(nodes(1, 4)).tolist() == [1, 4, n + 0, n + 2, n + nl, n + nl + 1]
    assert m.links(nodes(3)).tolist() == []


# ---------------------------------------------------------------------------- replays
@cache
def synthetic(seed: int = 3, **kw):
    """A multi-node-heavy GPU workload (4 GPUs per node, about half the jobs multi-node)."""
    cfg = WorkloadConfig(num_jobs=1500, seed=seed, gpus_per_node=4, mean_interarrival_s=1100,
                         sizes=((1, 0.3), (4, 0.2), (8, 0.2), (16, 0.2), (32, 0.1)), **kw)
    sj = generate(cfg)
    spec = default_cluster(cfg)
    cl = Cluster.from_spec(spec)
    jobs = build_jobs(replay_records(sj, spec), cl,
                      locality={j.job_id: j.locality_sensitivity for j in sj})
    return jobs, cl


def replay(model: str, placement: str = "tree", seed: int = 3):
    jobs, cl = synthetic(seed)
    sim = Simulator(jobs, cl, make_policy("fifo", placement=placement),
                    SchedulerOptions(placement=placement), EngineOptions(speed_model=model))
    return sim, sim.run()


def test_none_reproduces_recorded_run_times_exactly():
    for placement in ("tree", "linear"):
        sim, r = replay("none", placement)
        assert isinstance(sim.speed, NoSpeedModel)
        assert ((r.end - r.start) == r.jobs.run).all()


def test_placement_matters_under_locality():
    _, tree = replay("locality", "tree")
    _, lin = replay("locality", "linear")
    assert (tree.start >= 0).all() and (lin.start >= 0).all()
    for r in (tree, lin):
        run = r.end - r.start
        assert (run >= r.jobs.run).all()  # never faster than packed
        assert (run[r.jobs.nodes == 1] == r.jobs.run[r.jobs.nodes == 1]).all()
        multi_leaf = r.leaves > 1
        assert (run[~multi_leaf & (r.jobs.nodes > 1)] == r.jobs.run[
            ~multi_leaf & (r.jobs.nodes > 1)]).all()  # n = n_min here: only leaves count

    def inflation(r):
        return float(((r.end - r.start) / np.maximum(r.jobs.run, 1)).mean())

    def jct(r):
        return float((r.end - r.jobs.eligible).mean())

    assert inflation(tree) < inflation(lin)
    assert jct(tree) < jct(lin)
    # execution effectiveness compares with the recorded (packed) run time
    pj = metrics.job_metrics(lin)
    ok = pj["jct"] > 0
    assert np.allclose(pj["effectiveness"][ok], lin.jobs.run[ok] / pj["jct"][ok])
    assert (pj["effectiveness"] <= 1).all()


def test_bandwidth_replay_balances_its_hooks_and_slows_shared_links():
    sim, r = replay("bandwidth", "linear")
    assert isinstance(sim.speed, BandwidthSpeedModel)
    assert sim.speed.load.size == r.cluster.num_nodes + r.cluster.num_leaves
    assert not sim.speed.load.any() and not sim.speed._job_links
    _, loc = replay("locality", "linear")
    # same placement rule, extra slowdown from shared links on top of locality
    assert ((r.end - r.start) / np.maximum(r.jobs.run, 1)).mean() > (
        (loc.end - loc.start) / np.maximum(loc.jobs.run, 1)).mean()


@pytest.mark.parametrize("model", ["locality", "bandwidth"])
def test_replays_are_deterministic(model):
    a = replay(model, "linear")[1]
    b = replay(model, "linear")[1]
    assert (a.start == b.start).all() and (a.end == b.end).all()
    assert (a.leaves == b.leaves).all()


# ---------------------------------------------------------------------------- CLI
ROOT = Path(__file__).resolve().parents[2]
LUBLIN = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces")) / (
    "lublin_256.swf")


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found")
def test_cli_speed_model_option(tmp_path):
    out = tmp_path / "o"
    res = CliRunner().invoke(cli.main, ["simulate", "--trace", str(LUBLIN), "--limit", "300",
                                        "--policy", "fifo", "--speed-model", "locality",
                                        "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"]["speed_model"] == "locality"
    assert cfg["speed_model"]["name"] == "locality"
    bad = CliRunner().invoke(cli.main, ["simulate", "--trace", str(LUBLIN),
                                        "--speed-model", "warp"])
    assert bad.exit_code != 0 and "warp" in bad.output
