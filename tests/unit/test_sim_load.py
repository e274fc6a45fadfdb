"""Replay input from a trace file and from the store (SQLite in a temporary folder)."""

from __future__ import annotations

import dataclasses

import pytest

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from trainer.sim import load
from trainer.sim.engine import simulate
from trainer.sim.policies import make_policy
from trainer.sim.slurm import SchedulerOptions

SWF = """\
; MaxNodes: 8
; MaxProcs: 8
1 0 5 100 4 -1 -1 4 200 -1 1 1 1 -1 0 -1 -1 -1
2 10 0 50 2 -1 -1 2 60 -1 1 2 1 -1 0 -1 -1 -1
3 20 -1 -1 2 -1 -1 2 60 -1 5 2 1 -1 0 -1 -1 -1
4 30 0 10 16 -1 -1 16 60 -1 1 2 1 -1 0 -1 -1 -1
5 40 0 10 1 -1 -1 1 60 -1 1 3 1 -1 0 -1 -1 -1
bad line
"""

PHILLY = """\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:00:00,100,1,100,vc1
2017-10-09 07:00:10,50,4,200,vc2
2017-10-09 07:00:20,20,16,320,vc1
"""


def test_from_trace_swf_counts_rejects_and_skips(tmp_path):
    path = tmp_path / "mini.swf"
    path.write_text(SWF)
    inp = load.from_trace(path)
    assert inp.spec.num_nodes == 8
    assert inp.source == "trace:mini.swf"
    assert sum(inp.rejected.values()) == 1  # "bad line"
    assert [r.job_id for r in inp.records] == [1, 2, 3, 4, 5]
    r = simulate(inp.spec, inp.records, make_policy("fifo"), SchedulerOptions(bf_interval=0))
    assert r.jobs.job_id.tolist() == [1, 2, 5]
    assert dict(r.jobs.skipped) == {"never started": 1, "exceeds cluster": 1}
    # slices
    assert [r.job_id for r in load.from_trace(path, limit=2).records] == [1, 2]
    since = inp.records[1].submit_time
    sl = load.from_trace(path, since=since, window=25).records
    assert [r.job_id for r in sl] == [2, 3, 4]
    big = load.from_trace(path, num_nodes=32, nodes_per_leaf=8)
    assert big.spec.num_nodes == 32 and len(big.spec.switches.leaves) == 4


def test_from_trace_philly_sizes_from_records(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(PHILLY)
    inp = load.from_trace(path)
    assert load.trace_kind(path) == "philly"
    assert inp.spec.total_gpus == 16  # enough for the 16-GPU job: 2 nodes of 8
    inp = load.from_trace(path, num_nodes=4, gpus_per_node=4)
    assert inp.spec.num_nodes == 4 and inp.spec.total_gpus == 16
    r = simulate(inp.spec, inp.records, make_policy("fifo"), SchedulerOptions(bf_interval=0))
    assert r.jobs.n == 3
    assert r.jobs.gpus.tolist() == [1, 4, 4]  # per node: the 16-GPU job takes 4 nodes
    assert r.jobs.nodes.tolist() == [1, 1, 4]


def _rec(job_id: int, submit: int, **changes) -> JobRecord:
    base = JobRecord(
        job_id=job_id, name="", user="alice", account="a", partition="gpu", qos="normal",
        state="COMPLETED", submit_time=submit, eligible_time=submit, start_time=submit + 5,
        end_time=submit + 605, time_limit=3600, req=TresCounts(1, 8, 2, None),
        alloc=TresCounts(1, 8, 2, None), node_list="", nodes=(), priority=None, exit_code=0,
    )
    return dataclasses.replace(base, **changes)


def test_from_store_sqlite(tmp_path):
    # the store (SQLAlchemy, Alembic) is imported here, not at collection: a module-level
    # import would put its objects in every later garbage collection of the test run
    from db.session import init_db
    from db.store import Store, UnknownClusterError

    url = f"sqlite:///{tmp_path / 'store.db'}"
    init_db(url)
    spec = ClusterSpec.synthetic("gpu1", 4, gpus_per_node=4, cpus_per_node=32,
                                 nodes_per_leaf=2, partition="gpu")
    t = 1_700_000_000
    recs = [_rec(1, t), _rec(2, t + 60, user="bob"), _rec(3, t + 120, start_time=None,
                                                         end_time=None, state="PENDING",
                                                         alloc=TresCounts()),
            _rec(4, t + 3600 * 5)]
    with Store.open(url) as store:
        cid = store.cluster("gpu1", spec)
        store.ingest(cid, "test", recs)
        store.cluster("bare")  # no spec: sized from its jobs
        store.ingest(store.cluster("bare"), "test", [_rec(9, t)])
    inp = load.from_store(url, "gpu1")
    assert inp.source == "store:gpu1" and not inp.synthetic
    assert inp.spec.num_nodes == 4
    assert [r.job_id for r in inp.records] == [1, 2, 3, 4]
    assert [r.job_id for r in load.from_store(url, "gpu1", limit=2).records] == [1, 2]
    assert [r.job_id for r in load.from_store(url, "gpu1", since=t + 30,
                                              window=3600).records] == [2, 3]
    r = simulate(inp.spec, inp.records, make_policy("fifo"), SchedulerOptions(bf_interval=0))
    assert r.jobs.n == 3 and dict(r.jobs.skipped) == {"never started": 1}
    assert r.cluster.part_names == ("gpu", "*")
    assert (r.jobs.part == 0).all()  # the stored spec knows partition "gpu"
    bare = load.from_store(url, "bare")
    assert bare.synthetic and bare.spec.total_gpus >= 2
    with pytest.raises(UnknownClusterError):
        load.from_store(url, "nope")
