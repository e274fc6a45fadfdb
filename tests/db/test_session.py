"""URLs, engines, schema revisions and migrations of the store (all three backends)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from db import session
from db.models import Base
from db.session import (
    ConnectError,
    NotInitialisedError,
    SchemaError,
    StoreError,
    current_revision,
    head_revision,
    init_db,
    make_engine,
    resolve_url,
    upgrade_db,
)
from db.store import Store

# ------------------------------------------------------------------ URLs (no server)


def test_resolve_url_explicit_beats_env_beats_default(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("RLSCHED_DB", raising=False)
    default = tmp_path / "xdg" / "rlsched" / "rlsched.db"
    assert resolve_url(None) == f"sqlite:///{default}"
    assert default.parent.is_dir()  # created
    monkeypatch.setenv("RLSCHED_DB", "postgresql+psycopg://u:p@h/db")
    assert resolve_url(None) == "postgresql+psycopg://u:p@h/db"
    assert resolve_url("mysql+pymysql://u:p@h/db") == "mysql+pymysql://u:p@h/db"


def test_default_path_without_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert session.default_path() == tmp_path / ".local" / "share" / "rlsched" / "rlsched.db"


def test_plain_path_becomes_sqlite_url(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert resolve_url("sub/dir/x.db") == f"sqlite:///{tmp_path / 'sub' / 'dir' / 'x.db'}"
    assert (tmp_path / "sub" / "dir").is_dir()
    url = f"sqlite:///{tmp_path / 'other' / 'y.db'}"
    assert resolve_url(url) == url and (tmp_path / "other").is_dir()


def test_bad_url_and_missing_driver_are_store_errors():
    with pytest.raises(StoreError, match="not a database URL"):
        resolve_url("://x")
    with pytest.raises(StoreError, match="not a database URL") as err:
        resolve_url("postgresql://u:secret@h:port/db")
    assert "secret" not in str(err.value)
    with pytest.raises(StoreError, match="no database driver"):
        make_engine("nonsense://")
    with pytest.raises(StoreError, match="no database driver"):
        make_engine("postgresql+nosuchdriver://u@h/db")


def test_sqlite_engine_pragmas(tmp_path):
    engine = make_engine(str(tmp_path / "p.db"))
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_missing_sqlite_file_is_not_created(tmp_path):
    path = tmp_path / "nothing-here.db"
    with pytest.raises(NotInitialisedError, match="rlsched db init"):
        Store.open(str(path))
    assert not path.exists()
    assert current_revision(str(path)) is None


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://rlsched_test:x@127.0.0.1:1/nodb",
    "mysql+pymysql://rlsched_test:x@127.0.0.1:1/nodb",
], ids=["postgresql", "mariadb"])
def test_unreachable_server_is_a_connect_error(url):
    with pytest.raises(ConnectError, match="cannot open the database .*127.0.0.1:1.*--db"):
        Store.open(url)
    with pytest.raises(ConnectError):
        init_db(url)


# ------------------------------------------------------------------ revisions (3 backends)


def test_uninitialised_database_says_run_init(backend_url):
    assert current_revision(backend_url) is None
    with pytest.raises(NotInitialisedError, match="run 'rlsched db init'"):
        Store.open(backend_url)
    with pytest.raises(NotInitialisedError, match="rlsched db init"):
        upgrade_db(backend_url)


def test_init_then_upgrade_are_idempotent(backend_url):
    assert init_db(backend_url) == head_revision()
    assert current_revision(backend_url) == head_revision()
    assert init_db(backend_url) == head_revision()  # already there: nothing to do
    assert upgrade_db(backend_url) == (head_revision(), head_revision())
    Store.open(backend_url).close()


def test_outdated_database_says_run_upgrade(store_url, monkeypatch):
    monkeypatch.setattr(session, "head_revision", lambda: "0999")
    monkeypatch.setattr(session, "_known_revisions", lambda: {"0001", "0999"})
    with pytest.raises(SchemaError, match="run 'rlsched db upgrade'"):
        Store.open(store_url)


def test_newer_database_says_upgrade_rlsched(store_url):
    engine = create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    with pytest.raises(SchemaError, match="newer rlsched"):
        Store.open(store_url)
    with pytest.raises(SchemaError, match="newer rlsched"):
        upgrade_db(store_url)


def test_foreign_tables_are_not_taken_over(backend_url):
    engine = create_engine(backend_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE somebody_elses (x INTEGER)"))
    engine.dispose()
    with pytest.raises(SchemaError, match="not empty.*somebody_elses"):
        init_db(backend_url)


def test_migration_head_matches_models(store_url):
    engine = make_engine(store_url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == []


def test_downgrade_and_upgrade_again(store_url):
    engine = make_engine(store_url)
    command.downgrade(session.alembic_config(engine), "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    command.upgrade(session.alembic_config(engine), "head")
    assert {"clusters", "jobs", "ingest_runs", "quarantined_rows", "audit_log"} <= set(
        inspect(engine).get_table_names()
    )
    engine.dispose()


def test_migrations_are_shipped_with_the_package():
    here = Path(session.MIGRATIONS_DIR)
    assert (here / "env.py").is_file() and (here / "script.py.mako").is_file()
    assert (here / "__init__.py").is_file() and (here / "versions" / "__init__.py").is_file()
    setup_cfg = (Path(__file__).parents[2] / "setup.cfg").read_text()
    assert "migrations/*.mako" in setup_cfg


def test_timeout_bounds_lock_waits(store_url):
    """A writer blocked by another one gives up after ``timeout`` (the helper's store)."""
    import time

    from sqlalchemy.exc import DBAPIError

    update = text("UPDATE clusters SET name = name WHERE id = :i")
    with Store.open(store_url) as a, Store.open(store_url, timeout=1.0) as b:
        cid = a.cluster("locked")
        with a.engine.begin() as holder:
            holder.execute(update, {"i": cid})  # holds the row (SQLite: the database)
            t = time.monotonic()
            with pytest.raises(DBAPIError), b.engine.begin() as waiter:
                waiter.execute(update, {"i": cid})
            waited = time.monotonic() - t
        assert 0.5 < waited < 5.0, waited
        with b.engine.begin() as waiter:  # released: goes through
            waiter.execute(update, {"i": cid})
