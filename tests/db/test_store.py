"""The store on all three backends: clusters, ingest, quarantine, watermarks, audit."""

from __future__ import annotations

import dataclasses

import pytest

from db.records import BAD_TIME, END_BEFORE_START, UNKNOWN_STATE, Rejected, TresCounts
from db.store import (
    BAD_TEXT,
    FIELD_TOO_LONG,
    OTHER_CLUSTER,
    RAW_MAX,
    UnknownClusterError,
)
from slurm_plugin.cluster import ClusterSpec

from .conftest import job, pending

T0 = 1_700_000_000


# ------------------------------------------------------------------ clusters


def test_cluster_get_or_create_and_spec_snapshot(store):
    assert store.clusters() == []
    cid = store.cluster("alpha")
    assert store.cluster("alpha") == cid
    assert store.cluster_spec("alpha") is None
    spec = ClusterSpec.synthetic("alpha", 10, gpus_per_node=4, nodes_per_leaf=4)
    assert store.cluster("alpha", spec) == cid
    assert store.cluster_spec("alpha") == spec
    bigger = ClusterSpec.synthetic("alpha", 12, gpus_per_node=4, nodes_per_leaf=4)
    store.cluster("alpha", bigger)
    assert store.cluster_spec("alpha") == bigger
    store.cluster("alpha")  # no spec given: the snapshot stays
    assert store.cluster_spec("alpha") == bigger
    beta = store.cluster("Alpha")  # names are case-sensitive on every backend
    assert beta != cid
    assert store.clusters() == ["Alpha", "alpha"]
    assert store.cluster_id("alpha") == cid and store.cluster_id("gamma") is None
    assert store.cluster_name(cid) == "alpha"
    with pytest.raises(UnknownClusterError):
        store.cluster_spec("gamma")
    with pytest.raises(ValueError):
        store.cluster("")


def test_ingest_into_unknown_cluster_fails(store):
    with pytest.raises(UnknownClusterError):
        store.ingest(12345, "src", [job(1, T0)])


# ------------------------------------------------------------------ round trip


def _every_kind_of_record(cluster: str) -> list:
    return [
        job(1, T0, cluster=cluster),
        pending(2, T0 + 1, cluster=cluster),
        job(3, T0 + 2, cluster=cluster, array_job_id=3, array_task_id=0, restart_count=2,
            exit_code=-1, signal=9, state="CANCELLED", priority=None, time_limit=None,
            eligible_time=None, req=TresCounts(None, 4, None, None),
            alloc=TresCounts(1, 4, 0, None), node_list="cpu07", nodes=("cpu07",)),
        job(4, T0 + 2, cluster=cluster, name="Ünïcödé ジョブ 🚀", user="bjørn",
            account="", partition="a,b", qos="", priority=2**32 + 5, node_list="n[1-3]",
            nodes=("n1", "n2", "n3"), req=TresCounts(3, 2**40, 24, 2**45),
            alloc=TresCounts(3, 96, 24, 3 * 2**20)),
        job(2**40, 2**40, cluster=cluster, name="", end_time=None, state="RUNNING",
            exit_code=None, node_list="x" * 5000,
            nodes=tuple(f"node{i:05d}" for i in range(2000))),
        job(6, T0 + 5, cluster=cluster, user="u" * 255, start_time=None, end_time=None,
            state="PENDING", eligible_time=None, exit_code=None, alloc=TresCounts(),
            node_list="", nodes=()),
    ]


def test_round_trip_every_field(store):
    cid = store.cluster("rt")
    records = _every_kind_of_record("rt")
    summary = store.ingest(cid, "src", records)
    assert summary.quarantined == {}, store.quarantined(cid)
    assert summary.inserted == len(records)
    got = list(store.jobs(cid))
    want = sorted(records, key=lambda r: (r.submit_time, r.job_id))
    for g, w in zip(got, want, strict=True):
        for f in dataclasses.fields(w):
            assert getattr(g, f.name) == getattr(w, f.name), (w.job_id, f.name)
    assert got == want
    assert all(type(g.nodes) is tuple for g in got)


def test_records_without_cluster_come_back_with_it(store):
    cid = store.cluster("named")
    store.ingest(cid, "src", [job(1, T0)])
    (back,) = store.jobs(cid)
    assert back == dataclasses.replace(job(1, T0), cluster="named")


def test_jobs_since_until_and_order(store):
    cid = store.cluster("c")
    store.ingest(cid, "src", [job(5, T0 + 20), job(9, T0 + 10), job(3, T0 + 10), job(1, T0)])
    assert [(r.submit_time - T0, r.job_id) for r in store.jobs(cid)] == [
        (0, 1), (10, 3), (10, 9), (20, 5)]
    assert [r.job_id for r in store.jobs(cid, since=T0 + 10)] == [3, 9, 5]
    assert [r.job_id for r in store.jobs(cid, until=T0 + 10)] == [1]
    assert [r.job_id for r in store.jobs(cid, since=T0 + 10, until=T0 + 20, batch_size=1)] == [3, 9]
    other = store.cluster("other")
    assert list(store.jobs(other)) == [] and store.count_jobs(other) == 0


# ------------------------------------------------------------------ incremental, idempotent


def test_reingest_adds_nothing(store):
    cid = store.cluster("c")
    records = [job(i, T0 + i) for i in range(1, 40)] + [pending(100, T0 + 100)]
    first = store.ingest(cid, "src", records, batch_size=7)
    assert (first.read, first.inserted, first.updated, first.unchanged) == (40, 40, 0, 0)
    again = store.ingest(cid, "src", records, batch_size=7)
    assert (again.read, again.inserted, again.updated, again.unchanged) == (40, 0, 0, 40)
    assert store.count_jobs(cid) == 40
    assert again.run_id != first.run_id


def test_pending_job_is_updated_when_finished(store):
    cid = store.cluster("c")
    store.ingest(cid, "src", [pending(7, T0), job(8, T0 + 1)])
    later = store.ingest(cid, "src", [job(7, T0), job(8, T0 + 1), job(9, T0 + 2)])
    assert (later.inserted, later.updated, later.unchanged) == (1, 1, 1)
    assert store.count_jobs(cid) == 3
    (seven,) = [r for r in store.jobs(cid) if r.job_id == 7]
    assert seven == dataclasses.replace(job(7, T0), cluster="c")
    assert store.oldest_unfinished(cid) is None


def test_oldest_unfinished(store):
    cid = store.cluster("c")
    store.ingest(cid, "src", [job(1, T0), pending(2, T0 + 5),
                              job(3, T0 + 9, state="RUNNING", end_time=None)])
    assert store.oldest_unfinished(cid) == T0 + 5


def test_requeued_job_is_a_second_row(store):
    cid = store.cluster("c")
    s = store.ingest(cid, "src", [job(42, T0, state="REQUEUED"), job(42, T0 + 600)])
    assert s.inserted == 2
    assert [(r.job_id, r.submit_time, r.state) for r in store.jobs(cid)] == [
        (42, T0, "REQUEUED"), (42, T0 + 600, "COMPLETED")]


def test_same_job_twice_in_one_batch_last_wins(store):
    cid = store.cluster("c")
    s = store.ingest(cid, "src", [pending(1, T0), job(1, T0), job(1, T0)])
    assert (s.inserted, s.updated, s.unchanged) == (1, 1, 1)
    assert [r.state for r in store.jobs(cid)] == ["COMPLETED"]


def test_same_key_in_two_clusters(store):
    a, b = store.cluster("a"), store.cluster("b")
    store.ingest(a, "src", [job(1, T0)])
    assert store.ingest(b, "src", [job(1, T0)]).inserted == 1
    assert store.count_jobs(a) == store.count_jobs(b) == 1


# ------------------------------------------------------------------ quarantine


def test_quarantine_rejected_and_failing_records(store):
    cid = store.cluster("q")
    big = "é" * RAW_MAX  # 64 Ki characters, 128 KiB of UTF-8: more than a MariaDB TEXT
    items = [
        job(1, T0),
        Rejected("1|x|garbage", BAD_TIME, "field Submit: 'garbage'", line=7),
        Rejected(big, "wrong field count", "3 fields, expected 30", line=8),
        Rejected("nul\x00and \udcff byte", "bad json", "x" * 10_000),
        job(13, T0, name="name with \x00 and \udce9"),
        job(2, T0, state="BOGUS"),
        job(3, T0, start_time=T0 + 100, end_time=T0 + 50),
        job(4, T0, user="x" * 256),
        job(5, T0, account="nul\x00inside"),
        job(6, T0, user="lone \udc80 surrogate"),
        job(7, T0, cluster="elsewhere"),
        job(8, T0, priority=2**63),
        job(9, T0, exit_code=2**31),
        job(10, T0, nodes=("a", "b c"), node_list="a,b c"),
        job(11, 0),
        job(12, T0 + 1),
    ]
    s = store.ingest(cid, "sacct", items, batch_size=4)
    assert (s.read, s.inserted) == (len(items), 3)
    assert s.quarantined == {
        BAD_TIME: 2, "wrong field count": 1, "bad json": 1, UNKNOWN_STATE: 1,
        END_BEFORE_START: 1,
        FIELD_TOO_LONG: 1, BAD_TEXT: 2, OTHER_CLUSTER: 1, "bad number": 2,
        "bad hostlist": 1,
    }
    assert s.quarantined_total == 13
    assert any("quarantined" in line and BAD_TEXT in line for line in s.lines())
    rows = store.quarantined(cid)
    assert len(rows) == 13 and all(q.run_id == s.run_id and q.source == "sacct" for q in rows)
    assert (rows[0].raw, rows[0].reason, rows[0].detail, rows[0].line) == (
        "1|x|garbage", BAD_TIME, "field Submit: 'garbage'", 7)
    assert rows[1].raw == big and rows[1].line == 8
    assert rows[2].raw == "nul\\x00and \\udcff byte" and len(rows[2].detail) == 4000
    (named,) = [r for r in store.jobs(cid) if r.job_id == 13]
    assert named.name == "name with \\x00 and \\udce9"  # free text: escaped, not dropped
    bogus = next(q for q in rows if q.reason == UNKNOWN_STATE)
    assert '"state": "BOGUS"' in bogus.raw and bogus.line is None and "BOGUS" in bogus.detail
    assert store.quarantined(cid, s.run_id + 1) == []
    assert len(store.quarantined(cid, s.run_id, limit=3)) == 3
    (run,) = store.runs(cid)
    assert (run.read, run.inserted, run.quarantined, run.status) == (len(items), 3, 13, "ok")


# ------------------------------------------------------------------ watermark, runs


def test_watermark_per_source_and_continuation(store):
    cid = store.cluster("w")
    assert store.watermark(cid, "sacct") is None
    s1 = store.ingest(cid, "sacct", [job(1, T0), job(2, T0 + 50)], window=(T0 - 10, T0 + 60))
    assert s1.watermark == T0 + 50 == store.watermark(cid, "sacct")
    # a later run continues; an empty run and a run of older rows keep the watermark
    s2 = store.ingest(cid, "sacct", [job(3, T0 + 90)])
    assert s2.watermark == T0 + 90
    assert store.ingest(cid, "sacct", []).watermark == T0 + 90
    assert store.ingest(cid, "sacct", [job(1, T0)]).watermark == T0 + 90
    assert store.watermark(cid, "sacct") == T0 + 90
    # an explicit watermark is recorded as given; other sources have their own
    assert store.ingest(cid, "sacct", [], watermark=T0 + 1000).watermark == T0 + 1000
    assert store.watermark(cid, "sacct") == T0 + 1000
    assert store.watermark(cid, "swf:/x.swf") is None
    runs = store.runs(cid)
    assert [r.status for r in runs] == ["ok"] * 5
    assert (runs[0].window_start, runs[0].window_end) == (T0 - 10, T0 + 60)
    assert runs[0].finished_at is not None and runs[0].started_at <= runs[0].finished_at


def test_failed_run_is_recorded_and_keeps_earlier_batches(store):
    cid = store.cluster("f")
    store.ingest(cid, "src", [job(1, T0)])

    def items():
        yield job(2, T0 + 10)
        yield job(3, T0 + 20)
        raise OSError("source went away")

    with pytest.raises(OSError, match="went away"):
        store.ingest(cid, "src", items(), batch_size=1)
    last = store.runs(cid)[-1]
    assert last.status == "failed" and "went away" in (last.error or "")
    assert last.watermark is None and store.watermark(cid, "src") == T0
    assert store.count_jobs(cid) == 3  # the committed batches stay; a re-run is safe


def test_progress_callback_and_arguments(store):
    cid = store.cluster("p")
    seen = []
    store.ingest(cid, "src", [job(i, T0 + i) for i in range(10)], batch_size=4,
                 progress=seen.append)
    assert seen == [4, 8, 10]
    with pytest.raises(ValueError):
        store.ingest(cid, "", [])
    with pytest.raises(ValueError):
        store.ingest(cid, "x" * 513, [])
    with pytest.raises(ValueError):
        store.ingest(cid, "src", [], batch_size=0)


# ------------------------------------------------------------------ audit


def test_audit_log_round_trip(store):
    cid = store.cluster("a")
    first = store.audit(101, "site_factor", 0, 500, "ab" * 32, cluster_id=cid, at=T0)
    store.audit(102, "features", None, "leaf1|leaf2", None, mode="dry-run", at=T0 + 5)
    store.audit(103, "site_factor", "500", "0", "cd" * 32, cluster_id=cid, at=T0 + 9)
    log = store.audit_log()
    assert [e.job_id for e in log] == [101, 102, 103]
    e = log[0]
    assert (e.id, e.cluster_id, e.field, e.old_value, e.new_value, e.model_sha, e.created_at,
            e.mode) == (first, cid, "site_factor", "0", "500", "ab" * 32, T0, "enforce")
    assert (log[1].cluster_id, log[1].old_value, log[1].mode) == (None, None, "dry-run")
    assert [e.job_id for e in store.audit_log(limit=2)] == [102, 103]
    assert [e.job_id for e in store.audit_log(since=T0 + 5)] == [102, 103]
    with pytest.raises(ValueError):
        store.audit(1, "f" * 65, 0, 1, None)


def test_audit_many_is_one_transaction_and_filters_select(store):
    cid = store.cluster("a")
    n = store.audit_many([(1, "site_factor", 0, 900), (2, "req_nodes", None, "node[01-02]"),
                          (1, "site_factor", 900, 0)], "ab" * 32, cluster_id=cid,
                         mode="shadow", at=T0)
    assert n == 3
    store.audit_many([(3, "site_factor", 0, 5)], None, mode="enforce", at=T0 + 1)
    log = store.audit_log(None)
    assert [(e.job_id, e.field, e.old_value, e.new_value, e.mode) for e in log] == [
        (1, "site_factor", "0", "900", "shadow"), (2, "req_nodes", None, "node[01-02]", "shadow"),
        (1, "site_factor", "900", "0", "shadow"), (3, "site_factor", "0", "5", "enforce")]
    assert all(e.created_at == T0 for e in log[:3]) and log[0].cluster_id == cid
    assert [e.job_id for e in store.audit_log(job_id=1)] == [1, 1]
    assert [e.job_id for e in store.audit_log(field="req_nodes")] == [2]
    assert [e.job_id for e in store.audit_log(mode="enforce")] == [3]
    assert store.audit_many([], None) == 0
    # a bad entry stores nothing of its batch
    with pytest.raises(ValueError):
        store.audit_many([(4, "site_factor", 0, 1), (5, "f" * 65, 0, 1)], None)
    with pytest.raises(ValueError):
        store.audit_many([(4, "site_factor", 0, 1)], None, mode="m" * 17)
    assert len(store.audit_log(None)) == 4
