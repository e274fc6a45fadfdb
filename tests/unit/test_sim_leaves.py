"""The whole-node fast path (idle counts per leaf) gives the schedules of the node arrays.

:mod:`trainer.sim.leaves` and the engine's walks on it (``_main_counts``,
``_backfill_walk``, ``_backfill_deep``) replace the node arrays and the vectorised
backfill pass for whole-node replays. Each case replays the same job table twice, with
``EngineOptions(fast_path=True)`` and ``False``, and compares every output; the
placement alone is compared with :func:`~trainer.sim.placement.tree_best_fit` on random
idle patterns.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest

from db.records import TresCounts
from slurm_plugin.cluster import ClusterSpec, NodeSpec
from slurm_plugin.slurm.types import Switch, SwitchTree
from trainer.sim import NATIVE, leaves, workload
from trainer.sim.engine import EngineOptions, Simulator
from trainer.sim.placement import Request, tree_best_fit
from trainer.sim.policies import make_policy
from trainer.sim.slurm import PrioritySettings, SchedulerOptions
from trainer.sim.state import Cluster, JobTable, NodeState, build_jobs

SETTINGS = {
    "none": None,
    "slurm": PrioritySettings(weight_age=1000, weight_partition=1000, max_age=3600),
    "fs": PrioritySettings(weight_age=1000, weight_fairshare=2000, weight_job_size=500,
                           max_age=7200),
    "size": PrioritySettings(weight_age=1000, weight_job_size=5000, max_age=3600),
}


@cache
def whole_table(squeeze: int, one_partition: bool, num_jobs: int = 500,
                seed: int = 5, kind: str = "hpc") -> tuple[JobTable, Cluster]:
    """Synthetic jobs taking whole nodes, arrivals squeezed ``squeeze`` times."""
    cfg = workload.WorkloadConfig(kind=kind, num_jobs=num_jobs, seed=seed)
    spec = workload.default_cluster(cfg)
    recs = workload.replay_records(workload.generate(cfg), spec)
    t0 = min(r.submit_time for r in recs)
    out = []
    for r in recs:
        t = t0 + (r.submit_time - t0) // squeeze
        tres = TresCounts(r.req.nodes, None, None, None)
        r = dataclasses.replace(r, submit_time=t, eligible_time=t, req=tres, alloc=tres)
        if one_partition:
            r = dataclasses.replace(r, partition=next(iter(spec.partitions)))
        out.append(r)
    cl = Cluster.from_spec(spec)
    return build_jobs(out, cl), cl


def replay_pair(jobs: JobTable, cl: Cluster, policy: str, opts: SchedulerOptions,
                settings: str = "none") -> None:
    """Replay both ways and compare starts, ends, leaves, flags, series and counters."""
    out = []
    for fast in (True, False):
        sim = Simulator(jobs, cl, make_policy(policy, SETTINGS[settings]), opts,
                        EngineOptions(seed=7, fast_path=fast))
        assert sim.leafy is fast
        out.append(sim.run())
    a, b = out
    assert (a.start >= 0).all()
    for name in ("start", "end", "leaves", "backfilled", "util_t", "util_nodes",
                 "util_cpus", "util_gpus", "frag_t", "frag"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    sa = {k: v for k, v in a.stats.items() if k != "wall_s"}
    sb = {k: v for k, v in b.stats.items() if k != "wall_s"}
    assert sa == sb


@pytest.mark.parametrize(("policy", "settings", "bf_interval", "backfill"), [
    ("fifo", "none", 0, True),
    ("fifo", "none", 30, True),
    ("fifo", "none", 0, False),
    ("multifactor", "slurm", 0, True),
    ("multifactor", "slurm", 30, True),
    ("multifactor", "fs", 0, True),
    ("multifactor", "size", 0, True),
    ("sjf", "none", 0, True),
    ("sif", "none", 0, True),
    ("lrf", "none", 0, True),
    ("spf", "none", 30, True),
    ("drf", "none", 0, True),
    ("random", "none", 0, True),
])
@pytest.mark.parametrize("one_partition", [False, True])
def test_fast_path_same_schedule(policy: str, settings: str, bf_interval: int,
                                 backfill: bool, one_partition: bool) -> None:
    """Short queues (the Python walks), several partitions or one."""
    jobs, cl = whole_table(8, one_partition)
    opts = SchedulerOptions(bf_interval=bf_interval, priority_calc_period=60,
                            backfill=backfill)
    replay_pair(jobs, cl, policy, opts, settings)


@pytest.mark.parametrize(("policy", "settings", "window"), [
    ("fifo", "none", 500),
    ("fifo", "none", 100),
    ("multifactor", "slurm", 500),
    ("multifactor", "size", 200),
    ("sjf", "none", 500),
])
def test_fast_path_same_schedule_deep_queue(policy: str, settings: str, window: int) -> None:
    """A queue of hundreds (the deep walk on one partition, the vectorised pass else)."""
    jobs, cl = whole_table(60, True, num_jobs=1500)
    opts = SchedulerOptions(bf_interval=0, priority_calc_period=60, bf_max_job_test=window)
    out = Simulator(jobs, cl, make_policy(policy, SETTINGS[settings]), opts).run()
    assert out.stats["pending_max"] > 2 * 48  # deep enough for the long-window walks
    replay_pair(jobs, cl, policy, opts, settings)


@pytest.mark.skipif(NATIVE.active, reason="spies on Simulator._deep_find, which the compiled"
                    " engine calls natively: runs on the Python path (RLSCHED_SIM=python)")
@pytest.mark.parametrize(("seed", "window", "switches"), [
    (11, 60, False), (12, 150, False), (13, 500, False), (14, 90, True)])
def test_deep_walk_searches_what_the_last_pass_left(seed: int, window: int,
                                                   switches: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The deep walk's searches that skip what the previous pass found unable to start
    (``_deep_known``) give the schedule of the node arrays, and are taken: with what is
    free grown past the last pass, with jobs entering the window, with a placement rule
    holding a job that fits by count back (``--switches``, which leaves nothing known)."""
    jobs, cl = whole_table(80, True, num_jobs=2500, seed=seed)
    if switches:
        jobs = dataclasses.replace(jobs, switches=jobs.switches.copy(),
                                   switches_wait=jobs.switches_wait.copy())
        ask = np.random.default_rng(seed).random(jobs.n) < 0.2
        jobs.switches[ask] = 1
        jobs.switches_wait[ask] = 300
    seen = {"known": 0, "grown": 0, "newer": 0}
    find = Simulator._deep_find

    def spy(self: Simulator, cur: int, last: int, free: int, extra: int, thr: int,
            known: tuple[int, int, int, int] | None, newer: list[int]) -> int:
        if known is not None and cur < known[0]:
            seen["known"] += 1
            seen["grown"] += free > known[1]
            seen["newer"] += bool(newer)
        return find(self, cur, last, free, extra, thr, known, newer)

    monkeypatch.setattr(Simulator, "_deep_find", spy)
    opts = SchedulerOptions(bf_interval=0, bf_max_job_test=window)
    replay_pair(jobs, cl, "fifo", opts)
    assert min(seen.values()) > 20, seen
    replay_pair(jobs, cl, "multifactor", opts, "slurm")


def test_fast_path_same_schedule_gpu_nodes() -> None:
    """Whole GPU nodes (the fragmentation index counts GPUs)."""
    jobs, cl = whole_table(16, False, kind="gpu")
    assert cl.total_gpus > 0
    replay_pair(jobs, cl, "fifo", SchedulerOptions(bf_interval=0))
    replay_pair(jobs, cl, "multifactor", SchedulerOptions(bf_interval=30), "fs")


def test_fast_path_same_schedule_with_switches() -> None:
    """Jobs asking for few leaf switches wait for them, then take any placement."""
    jobs, cl = whole_table(8, False)
    jobs = dataclasses.replace(jobs, switches=jobs.switches.copy(),
                               switches_wait=jobs.switches_wait.copy())
    rng = np.random.default_rng(3)
    ask = rng.random(jobs.n) < 0.3
    jobs.switches[ask] = 1
    jobs.switches_wait[ask] = rng.integers(0, 600, int(ask.sum()))
    replay_pair(jobs, cl, "fifo", SchedulerOptions(bf_interval=0))
    replay_pair(jobs, cl, "multifactor", SchedulerOptions(bf_interval=30), "slurm")


def test_fast_path_only_where_it_holds() -> None:
    """Shared nodes, kept placements, a speed model, other placements or a policy that
    reads the nodes use the node arrays."""
    jobs, cl = whole_table(8, False)
    opts = SchedulerOptions()

    def leafy(policy: str = "fifo", placement: str = "tree", table: JobTable = jobs,
              **eng: object) -> bool:
        return Simulator(table, cl, make_policy(policy, None, placement), opts,
                         EngineOptions(**eng)).leafy  # type: ignore[arg-type]

    assert leafy()
    assert not leafy(fast_path=False)
    assert not leafy(keep_placements=True)
    assert not leafy(speed_model="locality")
    assert not leafy(placement="pack")
    assert not leafy("tetris")
    assert not leafy("saf")
    assert not leafy("dsif")  # (its own placement)
    shared = dataclasses.replace(jobs, exclusive=jobs.exclusive.copy())
    shared.exclusive[0] = False
    assert not leafy(table=shared)


def test_eligible_clusters() -> None:
    """Homogeneous nodes, partitions over every node, no upper switch splitting leaves."""
    spec = ClusterSpec.synthetic("c", 32, nodes_per_leaf=8)
    assert leaves.eligible(Cluster.from_spec(spec))  # (a spine over every leaf is fine)
    cfg = workload.WorkloadConfig(kind="hpc", num_jobs=10, seed=1)
    assert leaves.eligible(Cluster.from_spec(workload.default_cluster(cfg)))
    with pytest.raises(ValueError, match="homogeneous"):
        fake = dataclasses.replace(Cluster.from_spec(spec), homogeneous=False)
        leaves.LeafState(fake)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_leaves", [12, 40])
def test_place_matches_tree_best_fit(seed: int, n_leaves: int) -> None:
    """Random idle patterns on leaves of unequal sizes: the same leaves and counts.

    With 40 leaves of 3 or 4 nodes some jobs take more than 8 whole leaves of one count,
    which :meth:`~trainer.sim.leaves.LeafState.release` gives back by merging buckets
    rather than leaf by leaf: after every release each bucket holds, sorted, exactly the
    leaves with that many idle nodes.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, n_leaves) if n_leaves <= 12 else rng.integers(3, 5, n_leaves)
    cl = _uneven_cluster(sizes.tolist())
    ls = leaves.LeafState(cl)
    st = NodeState(cl)
    st.whole_only = True
    running: list[tuple[int, np.ndarray]] = []
    job = 0
    wide = 0  # releases of a job with more than 8 leaves of one count
    for _ in range(300):
        if running and (rng.random() < 0.45 or st.busy_nodes > 0.9 * cl.num_nodes):
            k = int(rng.integers(len(running)))
            j, nodes = running.pop(k)
            wide += any(len(ids) > 8 for _, ids in ls._running[j][1])
            ls.release(j)
            st.release_whole(nodes)
            cnt = ls._cnt
            for c in range(1, cl.max_leaf + 1):
                assert ls._buckets[c] == [leaf for leaf in range(n_leaves) if cnt[leaf] == c]
        n = int(rng.integers(1, (3 if n_leaves <= 12 else 20) * cl.max_leaf))
        ref = tree_best_fit(cl, st, st.idle.copy(), Request(n, 0, 0, True))
        got = ls.place(n)
        if ref is None:
            assert got is None
            continue
        assert got is not None
        alloc, nl = got
        assert nl == ref[1]
        per_leaf = np.bincount(cl.leaf_of[ref[0]], minlength=cl.num_leaves)
        mine = np.zeros(cl.num_leaves, dtype=np.int64)
        for k_, ids in alloc:
            mine[ids] += k_
        np.testing.assert_array_equal(mine, per_leaf)
        ls.allocate(job, alloc, 100)
        st.allocate_whole(ref[0], 100, 100)
        running.append((job, ref[0]))
        job += 1
        assert ls.idle_count[0] == st.idle_count[0] and ls.busy_nodes == st.busy_nodes
        assert ls.used_c == st.used_c
    assert n_leaves <= 12 or wide  # (both ways of giving nodes back were taken)


def _uneven_cluster(sizes: list[int]) -> Cluster:
    """A homogeneous cluster whose leaf switches hold ``sizes`` nodes, under a spine."""
    nodes: list[NodeSpec] = []
    leaf_sw: list[Switch] = []
    names: list[str] = []
    for k, s in enumerate(sizes):
        ln = tuple(f"n{k:02d}{i}" for i in range(s))
        names += ln
        nodes += [NodeSpec(name, 64, 0, 256_000, (f"leaf{k}",), ("all",)) for name in ln]
        leaf_sw.append(Switch(f"leaf{k}", 0, ln))
    spine = Switch("spine", 1, tuple(names), tuple(sw.name for sw in leaf_sw))
    spec = ClusterSpec("uneven", tuple(nodes), SwitchTree.from_switches([*leaf_sw, spine]),
                       {"all": tuple(names)})
    return Cluster.from_spec(spec)
