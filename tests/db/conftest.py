"""Fixtures of the store tests: the same tests on SQLite, PostgreSQL and MariaDB.

SQLite runs on a temporary file. PostgreSQL and MariaDB run on the test databases that
``contrib/testdb/up`` creates (URLs below, or ``$RLSCHED_TEST_PG_URL`` and
``$RLSCHED_TEST_MYSQL_URL``); every test gets them empty (all tables dropped) and, through
``store_url``, freshly initialised. When a server cannot be reached the test skips,
saying so, unless ``RLSCHED_REQUIRE_DB=1`` (set by contrib/run-tests), where it fails.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine

from db.records import JobRecord, TresCounts
from db.session import display_url, init_db
from db.store import Store

PG_URL = os.environ.get(
    "RLSCHED_TEST_PG_URL",
    "postgresql+psycopg://rlsched_test:rlsched_test@127.0.0.1/rlsched_test",
)
MYSQL_URL = os.environ.get(
    "RLSCHED_TEST_MYSQL_URL",
    "mysql+pymysql://rlsched_test:rlsched_test@127.0.0.1/rlsched_test",
)
SERVERS = {"postgresql": PG_URL, "mariadb": MYSQL_URL}
BACKENDS = ["sqlite", "postgresql", "mariadb"]

_why: dict[str, str | None] = {}


def _why_unreachable(name: str, url: str) -> str | None:
    if name not in _why:
        try:
            engine = create_engine(url, connect_args={"connect_timeout": 5})
            try:
                with engine.connect():
                    pass
            finally:
                engine.dispose()
            _why[name] = None
        except ModuleNotFoundError as exc:
            _why[name] = f"{name}: driver not installed ({exc}): pip install -e '.[dev]'"
        except Exception as exc:  # noqa: BLE001 - any failure to connect means "not here"
            first = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
            _why[name] = (f"{name} test server not reachable at {display_url(url)} ({first}):"
                          " run contrib/testdb/up as root")
    return _why[name]


def server_url(name: str) -> str:
    """The URL of a test server, or skip (fail under RLSCHED_REQUIRE_DB=1) if it is down."""
    url = SERVERS[name]
    why = _why_unreachable(name, url)
    if why:
        if os.environ.get("RLSCHED_REQUIRE_DB") == "1":
            pytest.fail(f"RLSCHED_REQUIRE_DB=1 but {why}")
        pytest.skip(why)
    return url


def wipe(url: str) -> None:
    """Drop every table of the database (the test databases hold nothing else)."""
    engine = create_engine(url)
    try:
        meta = MetaData()
        meta.reflect(engine)
        meta.drop_all(engine)
    finally:
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """An empty, uninitialised database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    url = server_url(request.param)
    wipe(url)
    return url


@pytest.fixture
def store_url(backend_url: str) -> str:
    """A clean database at the head schema revision, on each backend."""
    init_db(backend_url)
    return backend_url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open store on a clean database, on each backend."""
    with Store.open(store_url) as s:
        yield s


def job(job_id: int, submit_time: int, **changes: Any) -> JobRecord:
    """A finished job with every field set; ``changes`` override fields."""
    base = JobRecord(
        job_id=job_id, name=f"job{job_id}", user="alice", account="physics",
        partition="gpu", qos="normal", state="COMPLETED", submit_time=submit_time,
        eligible_time=submit_time + 1, start_time=submit_time + 60,
        end_time=submit_time + 3660, time_limit=7200,
        req=TresCounts(2, 16, 8, 65536), alloc=TresCounts(2, 16, 8, 65536),
        node_list="gpu[01-02]", nodes=("gpu01", "gpu02"), priority=4242, exit_code=0,
        signal=None, array_job_id=None, array_task_id=None, restart_count=0, cluster="",
    )
    return dataclasses.replace(base, **changes)


def pending(job_id: int, submit_time: int, **changes: Any) -> JobRecord:
    """A job still pending: no start, end, allocation or exit code."""
    return job(job_id, submit_time, state="PENDING", start_time=None, end_time=None,
               alloc=TresCounts(), node_list="", nodes=(), exit_code=None, **changes)
