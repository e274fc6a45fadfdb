"""Where the store lives, how to connect to it, and its schema version (Alembic).

The database is named by a URL: the ``--db`` option, else ``$RLSCHED_DB``, else the
embedded default, an SQLite file at :func:`default_path`
(``$XDG_DATA_HOME/rlsched/rlsched.db``, i.e. ``~/.local/share/rlsched/rlsched.db``). A
plain file path is accepted wherever a URL is and means an SQLite file. PostgreSQL and
MariaDB/MySQL work by URL (``postgresql+psycopg://user:pw@host/db``,
``mysql+pymysql://user:pw@host/db``; drivers in the ``postgres`` and ``mysql`` extras).

The schema is created by ``rlsched db init`` (:func:`init_db`) and brought up to date by
``rlsched db upgrade`` (:func:`upgrade_db`), both running the Alembic migrations shipped
in :mod:`db.migrations`; a store opened on a database that is not at the head revision
raises a :class:`SchemaError` saying which of the two to run.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

__all__ = [
    "ENV_VAR",
    "MIGRATIONS_DIR",
    "ConnectError",
    "check_schema",
    "connect_error",
    "NotInitialisedError",
    "SchemaError",
    "StoreError",
    "current_revision",
    "default_path",
    "display_url",
    "head_revision",
    "init_db",
    "make_engine",
    "resolve_url",
    "upgrade_db",
]

#: Environment variable naming the database (URL or SQLite file path).
ENV_VAR = "RLSCHED_DB"
#: The Alembic script directory, shipped inside the package.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

#: Drivers by dialect, to say which extra to install when one is missing.
_EXTRA_OF_DIALECT = {"postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}


class StoreError(Exception):
    """Any failure of the store that a user can act on; the message says how."""


class ConnectError(StoreError):
    """The database cannot be reached or opened."""


class SchemaError(StoreError):
    """The database schema is not the one this version of rlsched expects."""


class NotInitialisedError(SchemaError):
    """The database has no rlsched schema yet (run ``rlsched db init``)."""


# ---------------------------------------------------------------------------- URLs
def default_path() -> Path:
    """The default SQLite file: ``$XDG_DATA_HOME/rlsched/rlsched.db``.

    ``$XDG_DATA_HOME`` defaults to ``~/.local/share`` when unset or empty.
    """
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "rlsched" / "rlsched.db"


def resolve_url(url: str | None = None) -> str:
    """The database URL to use: ``url`` if given, else ``$RLSCHED_DB``, else the default file.

    A value without ``://`` is an SQLite file path (``~`` is expanded, relative paths are
    made absolute). For an SQLite file, the parent directory is created if missing.

    Raises:
        StoreError: If the URL cannot be parsed.
    """
    value = url if url else os.environ.get(ENV_VAR) or None
    if value is None:
        path = default_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    if "://" not in value:
        path = Path(value).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    try:
        parsed = make_url(value)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"not a database URL: {display_url(value)} ({exc})") from None
    sqlite_file = _sqlite_file(parsed)
    if sqlite_file is not None:
        sqlite_file.parent.mkdir(parents=True, exist_ok=True)
    return value


def display_url(url: str | URL) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return str(url) if "@" not in str(url) else "<unparsable URL>"


def _sqlite_file(url: URL) -> Path | None:
    """The file of an SQLite URL, ``None`` for other backends and in-memory databases."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:"):
        return None  # an SQLite URI filename: let SQLite interpret it
    return Path(url.database).expanduser()


# ---------------------------------------------------------------------------- engines
#: Seconds an SQLite connection waits for another writer's lock by default.
SQLITE_BUSY_TIMEOUT = 30.0


def _sqlite_pragmas(dbapi_conn: Any, _record: Any, busy_ms: int = 30000) -> None:
    cur = dbapi_conn.cursor()
    try:
        # WAL: readers do not block the writer; NORMAL is durable at checkpoints in WAL.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        cur.execute("PRAGMA temp_store=MEMORY")
        cur.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache
        cur.execute("PRAGMA mmap_size=268435456")  # 256 MiB of the file mapped
    finally:
        cur.close()


def make_engine(url: str | None = None, timeout: float | None = None) -> Engine:
    """An engine for the store's database (``url`` resolved by :func:`resolve_url`).

    SQLite gets WAL journaling, foreign keys and pragmas for bulk inserts; PostgreSQL
    and MariaDB/MySQL get a pool that checks connections before use. Nothing connects
    until the engine is used.

    Args:
        url: The database.
        timeout: Seconds a connection attempt, or a wait for another writer's lock, may
            take before it fails (``None``: SQLite waits
            :data:`SQLITE_BUSY_TIMEOUT` s, servers use their own defaults). The helper
            sets it so that a locked or unreachable store fails its cycle quickly
            instead of stalling it.

    Raises:
        StoreError: If the URL is malformed or its driver is not installed (saying which
            extra to install).
    """
    resolved = resolve_url(url)
    try:
        parsed = make_url(resolved)
        backend = parsed.get_backend_name()
        if backend == "sqlite":
            engine = create_engine(parsed)
            busy = SQLITE_BUSY_TIMEOUT if timeout is None else timeout
            event.listen(engine, "connect", partial(_sqlite_pragmas, busy_ms=int(busy * 1000)))
        else:
            connect_args: dict[str, Any] = _server_timeouts(backend, timeout)
            if backend in ("mysql", "mariadb") and "charset" not in parsed.query:
                parsed = parsed.update_query_dict({"charset": "utf8mb4"})
            if backend == "postgresql":
                # psycopg prepares repeated statements; a generic plan made while the
                # jobs table was still small (a sequential scan) would then be kept for
                # the whole ingest, which goes quadratic. Plan each execution instead.
                # Options given in the URL win (they replace all of these).
                opts = ["-c plan_cache_mode=force_custom_plan", connect_args.pop("options", "")]
                if "options" not in parsed.query:
                    connect_args["options"] = " ".join(o for o in opts if o)
            engine = create_engine(
                parsed, pool_pre_ping=True, pool_recycle=3600, connect_args=connect_args
            )
    except (ModuleNotFoundError, NoSuchModuleError) as exc:
        backend = resolved.split(":", 1)[0].split("+", 1)[0]
        extra = _EXTRA_OF_DIALECT.get(backend)
        hint = f": pip install 'rlsched[{extra}]'" if extra else ""
        raise StoreError(
            f"no database driver for {display_url(resolved)} ({exc}){hint}"
        ) from None
    except ArgumentError as exc:
        raise StoreError(f"bad database URL {display_url(resolved)}: {exc}") from None
    return engine


def _server_timeouts(backend: str, timeout: float | None) -> dict[str, Any]:
    """Driver arguments bounding connection and lock waits to ``timeout`` seconds."""
    if timeout is None:
        return {}
    secs = max(1, math.ceil(timeout))  # both drivers take whole seconds
    if backend == "postgresql":
        return {"connect_timeout": max(2, secs),  # libpq treats less than 2 as 2
                "options": f"-c lock_timeout={int(timeout * 1000)}"}  # merged by the caller
    if backend in ("mysql", "mariadb"):
        return {"connect_timeout": secs,
                "init_command": f"SET SESSION innodb_lock_wait_timeout={secs}"}
    return {}


# ---------------------------------------------------------------------------- Alembic
def alembic_config(engine: Engine | None = None) -> Config:
    """An Alembic configuration built in code, pointing at the packaged migrations.

    With ``engine``, migrations run on a connection of that engine (passed to
    ``env.py`` through ``config.attributes["engine"]``), never through an ini file.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if engine is not None:
        cfg.attributes["engine"] = engine
    return cfg


@lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest schema revision this version of rlsched knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships a revision
        raise RuntimeError(f"no Alembic revision in {MIGRATIONS_DIR}")
    return head


def _known_revisions() -> set[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def connect_error(engine: Engine, exc: BaseException) -> ConnectError:
    """A :class:`ConnectError` for a driver error, naming the database and what to check."""
    msg = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = msg[0] if msg else type(exc).__name__
    return ConnectError(
        f"cannot open the database {display_url(engine.url)}: {first}"
        " (check the URL given by --db or $RLSCHED_DB, and that the server is running)"
    )


def _revision(engine: Engine) -> str | None:
    path = _sqlite_file(engine.url)
    if path is not None and not path.exists():
        return None  # do not create an empty file just to look at it
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except DBAPIError as exc:
        raise connect_error(engine, exc) from exc


def current_revision(url: str | Engine | None = None) -> str | None:
    """The schema revision the database is at, ``None`` if it has no rlsched schema.

    Raises:
        ConnectError: If the database cannot be reached.
    """
    if isinstance(url, Engine):
        return _revision(url)
    engine = make_engine(url)
    try:
        return _revision(engine)
    finally:
        engine.dispose()


def check_schema(engine: Engine) -> str:
    """Make sure the database is at the head revision; return it.

    Raises:
        NotInitialisedError: If the database has no rlsched schema (run ``rlsched db init``).
        SchemaError: If it is at an older revision (run ``rlsched db upgrade``) or at one
            this version of rlsched does not know (upgrade rlsched).
        ConnectError: If the database cannot be reached.
    """
    rev = _revision(engine)
    where = display_url(engine.url)
    if rev is None:
        raise NotInitialisedError(
            f"the database {where} has no rlsched schema: run 'rlsched db init'"
            " (with the same --db / $RLSCHED_DB)"
        )
    head = head_revision()
    if rev == head:
        return rev
    if rev in _known_revisions():
        raise SchemaError(
            f"the database {where} is at schema revision {rev}, this rlsched needs {head}:"
            " run 'rlsched db upgrade'"
        )
    raise SchemaError(
        f"the database {where} is at schema revision {rev}, unknown to this rlsched"
        f" (which knows up to {head}): it was written by a newer rlsched; upgrade rlsched"
    )


def _user_tables(engine: Engine) -> list[str]:
    try:
        return [t for t in inspect(engine).get_table_names() if t != "alembic_version"]
    except DBAPIError as exc:
        raise connect_error(engine, exc) from exc


def init_db(url: str | None = None) -> str:
    """Create the rlsched schema in an empty database; return the revision it is at.

    Idempotent: a database already at the head revision is left as it is.

    Raises:
        SchemaError: If the database is initialised at an older revision (run
            ``rlsched db upgrade``), or holds other tables but no rlsched schema.
        ConnectError: If the database cannot be reached.
    """
    engine = make_engine(url)
    try:
        rev = _revision(engine)
        if rev is None:
            tables = _user_tables(engine)
            if tables:
                raise SchemaError(
                    f"the database {display_url(engine.url)} is not empty but has no rlsched"
                    f" schema (tables: {', '.join(sorted(tables)[:5])}"
                    f"{'...' if len(tables) > 5 else ''}): give rlsched a database of its own"
                )
            command.upgrade(alembic_config(engine), "head")
            return head_revision()
        return check_schema(engine)
    finally:
        engine.dispose()


def upgrade_db(url: str | None = None) -> tuple[str, str]:
    """Upgrade an initialised database to the head revision.

    Returns:
        ``(revision before, revision after)``; equal when it was up to date.

    Raises:
        NotInitialisedError: If the database has no rlsched schema (run ``rlsched db init``).
        SchemaError: If it is at a revision this rlsched does not know.
        ConnectError: If the database cannot be reached.
    """
    engine = make_engine(url)
    try:
        before = _revision(engine)
        if before is None:
            check_schema(engine)  # raises NotInitialisedError
            raise AssertionError("unreachable")  # pragma: no cover
        if before not in _known_revisions():
            check_schema(engine)  # raises SchemaError (unknown revision)
        if before != head_revision():
            command.upgrade(alembic_config(engine), "head")
        after = _revision(engine)
        assert after is not None
        return before, after
    finally:
        engine.dispose()
