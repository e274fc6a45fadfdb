"""``Store.stats`` on a small history with known answers, on all three backends."""

from __future__ import annotations

import random

import pytest

from db import stats as stats_mod
from db.records import TresCounts
from db.session import init_db
from db.stats import collect_generic, collect_sqlite, percentile, summarize
from db.store import Store

from .conftest import job, pending

T0 = 1_700_000_000

# (user, wait s, requested GPUs, requested nodes, time limit, run s, state)
ROWS = [
    ("alice", 0, 0, 1, 600, 100, "COMPLETED"),
    ("alice", 10, 1, 1, 600, 3600, "COMPLETED"),
    ("alice", 20, 1, 1, 3600, 7200, "FAILED"),
    ("alice", 30, 2, 1, 3600, 3600, "COMPLETED"),
    ("alice", 40, 4, 1, None, 1800, "TIMEOUT"),
    ("alice", 50, 8, 1, None, 3600, "COMPLETED"),
    ("bob", 60, 8, 2, 7200, 3600, "COMPLETED"),
    ("bob", 70, 16, 2, 7200, 900, "CANCELLED"),
    ("bob", 80, 32, 4, 86400, 36000, "COMPLETED"),
]


def _history():
    out = []
    for i, (user, wait, gpus, nodes, limit, run, state) in enumerate(ROWS):
        submit = T0 + 100 * i
        out.append(job(i + 1, submit, user=user, start_time=submit + wait,
                       end_time=submit + wait + run, eligible_time=submit, time_limit=limit,
                       state=state, req=TresCounts(nodes, 8, gpus, 1024),
                       alloc=TresCounts(nodes, 8, gpus, 1024)))
    out.append(pending(100, T0 + 5000, user="carol", req=TresCounts(None, 1, 0, 100),
                       time_limit=600))
    return out


def test_stats_known_answers(store):
    cid = store.cluster("k")
    store.ingest(cid, "src", _history())
    st = store.stats(cid)
    assert st["cluster"] == "k"
    assert st["jobs"] == 10 and st["started"] == 9 and st["users"] == 3
    assert (st["first_submit"], st["last_submit"]) == (T0, T0 + 5000)
    assert st["span_s"] == 5000
    assert st["last_end"] == T0 + 800 + 80 + 36000
    assert st["states"] == {"COMPLETED": 6, "CANCELLED": 1, "FAILED": 1, "PENDING": 1,
                            "TIMEOUT": 1}
    # waits 0..80 step 10: nearest rank p50 = 5th = 40, p90 = p99 = 9th = 80
    assert {k: st["wait_s"][k] for k in ("count", "p50", "p90", "p99", "mean", "max")} == {
        "count": 9, "p50": 40, "p90": 80, "p99": 80, "mean": 40.0, "max": 80}
    # requested GPUs 0 0 1 1 2 4 8 8 16 32 (the pending job asks for 0)
    g = st["req_gpus"]
    assert (g["count"], g["p50"], g["p90"], g["p99"], g["max"]) == (10, 2, 16, 32, 32)
    assert g["hist"] == [[0, 2], [1, 2], [2, 1], [4, 1], [8, 2], [16, 1], [32, 1]]
    n = st["req_nodes"]  # 1 x6, 2 x2, 4 x1, unknown x1
    assert (n["count"], n["p50"], n["p90"], n["max"], n["unknown"]) == (9, 1, 4, 4, 1)
    assert n["hist"] == [[1, 6], [2, 2], [4, 1]]
    tl = st["time_limit_s"]  # 600 x3, 3600 x2, 7200 x2, 86400, two unlimited
    assert (tl["count"], tl["unlimited"], tl["p50"], tl["p90"], tl["max"]) == (
        8, 2, 3600, 86400, 86400)
    # GPU-hours: alice 1*1 + 1*2 + 2*1 + 4*0.5 + 8*1 = 15; bob 8*1 + 16*0.25 + 32*10 = 332
    assert st["gpu_hours"] == 347.0
    assert st["top_users"] == [
        {"user": "alice", "jobs": 6, "gpu_hours": 15.0},
        {"user": "bob", "jobs": 3, "gpu_hours": 332.0},
        {"user": "carol", "jobs": 1, "gpu_hours": 0.0},
    ]
    assert [u["user"] for u in st["top_users_by_gpu_hours"]] == ["bob", "alice"]
    assert [u["user"] for u in store.stats(cid, top=1)["top_users"]] == ["alice"]


def test_stats_of_an_empty_cluster(store):
    st = store.stats(store.cluster("empty"))
    assert st["jobs"] == 0 and st["span_s"] is None and st["states"] == {}
    assert st["wait_s"]["p50"] is None and st["req_gpus"]["hist"] == []
    assert st["top_users"] == [] and st["gpu_hours"] == 0


def test_percentile_nearest_rank():
    assert percentile({}, 50) is None
    assert percentile({5: 1}, 99) == 5
    hist = {v: 1 for v in range(1, 101)}
    assert [percentile(hist, q) for q in (1, 50, 90, 99, 100)] == [1, 50, 90, 99, 100]


def _random_history(n, seed=1):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        submit = T0 + i * 7
        if rng.random() < 0.1:
            out.append(pending(i, submit, user=rng.choice("abc")))
            continue
        start = submit + rng.randrange(0, 5000)
        out.append(job(i, submit, user=rng.choice(["ann", "ben", "cy", "dé"]),
                       start_time=start, end_time=start + rng.randrange(0, 9000),
                       time_limit=rng.choice([None, 600, 3600]),
                       req=TresCounts(rng.choice([None, 1, 2]), 4, rng.choice([None, 0, 4]), 9),
                       alloc=TresCounts(1, 4, rng.choice([None, 0, 1, 8]), 9),
                       state=rng.choice(["COMPLETED", "FAILED"])))
    return out


@pytest.fixture
def sqlite_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'fast.db'}"
    init_db(url)
    with Store.open(url) as s:
        yield s


def test_sqlite_fast_path_matches_generic_sql(sqlite_store, monkeypatch):
    store = sqlite_store
    a, b = store.cluster("a"), store.cluster("b")
    store.ingest(a, "src", _random_history(500))
    store.ingest(b, "src", _random_history(300, seed=2))
    store.ingest(a, "src", _random_history(50, seed=3)[::2])  # later rows, interleaved ids
    monkeypatch.setattr(stats_mod, "SQLITE_CHUNK", 37)  # many chunks, pipelined
    for cid in (a, b):
        fast = collect_sqlite(store.engine, cid)
        assert fast is not None
        assert summarize(fast, "x") == summarize(collect_generic(store.engine, cid), "x")


def test_sqlite_fast_path_falls_back_on_odd_user_names(sqlite_store):
    store = sqlite_store
    cid = store.cluster("odd")
    store.ingest(cid, "src", [job(1, T0, user="we\x1fird"), job(2, T0 + 1, user="ok")])
    assert collect_sqlite(store.engine, cid) is None
    st = store.stats(cid)
    assert {u["user"] for u in st["top_users"]} == {"we\x1fird", "ok"}
