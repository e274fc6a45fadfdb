"""Ingest straight from slurmdbd's MySQL/MariaDB database, read-only.

:func:`read_slurmdbd` reads ``<cluster>_job_table`` (one row per job record) with
``<cluster>_assoc_table`` (user and account), ``tres_table`` (TRES names by id) and
``qos_table`` (QOS names by id), and yields one :data:`~db.records.Parsed` item per row:
a :class:`~db.records.JobRecord`, or a :class:`~db.records.Rejected` with the row as
``key=value`` text and a reason code. A bad row never raises; a connection or schema
problem raises :class:`SlurmdbdError` saying what to do.

Access:
    The URL is any SQLAlchemy URL, e.g.
    ``mysql+pymysql://reader:pw@dbhost/slurm_acct_db`` or, as root over the local unix
    socket, ``mysql+pymysql://root@localhost/slurm_acct_db?unix_socket=/run/mysqld/mysqld.sock``.
    Only ``SELECT`` is needed (``GRANT SELECT ON slurm_acct_db.* TO 'reader'@'%'``).
    The session is made read-only (``SET SESSION TRANSACTION READ ONLY``; a write then
    fails with MySQL error 1792), and every statement is a :func:`sqlalchemy.text`
    query with bound parameters. The cluster name goes into table names, so it must
    match ``[a-z0-9_]+`` (Slurm keeps cluster names in lower case) and is quoted as an
    identifier as well.

Window (activity, like ``sacct -S/-E``):
    A row is read when the job was submitted before ``until`` and had not ended before
    ``since``: ``time_submit < until AND (time_end >= since OR time_end = 0)``. Jobs
    still pending or running (``time_end = 0``) are therefore read by every run, so a
    later run updates them. This is a superset of sacct's default window, which also
    needs ``time_eligible != 0 AND time_eligible < until``: jobs that never became
    eligible (held, then cancelled) are read here and are missing from sacct.
    Records are unique by ``(job_id, submit_time)`` (the table's unique key is
    ``(id_job, time_submit)``): a requeued or resized job has several.

Streaming:
    Keyset pagination on ``(time_submit, id_job, job_db_inx)``, ``batch_size`` rows per
    query, each batch in its own short read-only transaction (no long transaction is
    held open on slurmdbd's live database). With ``since``, the scan starts at the
    smallest ``time_submit`` of the rows in the window (one indexed ``MIN()`` query).
    Rows with ``deleted != 0`` are skipped.

Columns by Slurm version (``<cluster>_job_table``):
    Read by name after listing the table's columns (``information_schema.COLUMNS`` on
    MySQL/MariaDB, SQLAlchemy's inspector elsewhere), so a column another version adds
    or drops does not matter unless it is one of these:

    * Required: ``job_db_inx id_job id_assoc id_user id_qos id_array_job
      id_array_task account job_name partition state exit_code timelimit priority
      time_submit time_eligible time_start time_end nodelist nodes_alloc cpus_req
      mem_req``. Missing one raises :class:`SlurmdbdError`.
    * ``tres_req`` / ``tres_alloc``: TRES by id, ``1=4,2=8192,4=2,1001=2``. When
      ``tres_req`` is empty, CPUs and per-CPU memory come from ``cpus_req``/``mem_req``.
    * ``gres_req`` / ``gres_alloc`` (in the 17.x table, gone from 21.08's): used for
      the GPU count only when the TRES string has no ``gres/gpu`` entry.
    * ``restart_cnt`` (not in 22.05; in later tables): the restart count, else 0, as
      22.05's sacct (no ``Restarts`` field) has it.
    * ``deleted``: rows with ``deleted != 0`` are skipped.
    * Not read: ``pack_job_id``/``het_job_id`` (renamed in 19.05), ``track_steps`` (in
      21.08's table, not in 22.05's), ``batch_script``/``env_vars`` (moved out to the
      ``job_script``/``job_env`` tables by the 22.05 conversion of 21.08 databases),
      ``cpus_alloc`` (before TRES), and whatever later versions add.

    Checked: the live 22.05.8 table (``SHOW COLUMNS`` kept in
    ``tests/golden/22.05/slurmdbd/rows.json``); in SchedMD's sources, the 17.x
    ``job_table_fields`` (``accounting_storage_mysql.c``), the 21.08 job table and the
    conversions of ``as_mysql_convert.c`` up to convert version 14 (23.11), none of
    which renames or drops a required column. The 23.02 to 25.11 table definitions
    were not in the sources at hand; the columns they add (from memory, not verified:
    ``extra``, ``failed_node``, ``licenses``, ``std_out``/``std_err``/``std_in``,
    ``restart_cnt``, ...) do not matter here: the reader needs the required columns
    to stay, and reads ``restart_cnt`` when it is there.

Encodings (Slurm's ``slurm.h`` and ``sacct``, see the notes at each function):
    * ``state``: ``job_states`` enum in the low byte (``JOB_STATE_BASE = 0xff``):
      0 PENDING, 1 RUNNING, 2 SUSPENDED, 3 COMPLETE (printed COMPLETED), 4 CANCELLED,
      5 FAILED, 6 TIMEOUT, 7 NODE_FAIL, 8 PREEMPTED, 9 BOOT_FAIL, 10 DEADLINE, 11 OOM
      (printed OUT_OF_MEMORY); flag bits above it (``JOB_REQUEUE = 1<<10``,
      ``JOB_RESIZING = 1<<13``, ...) take precedence, as in ``job_state_string()``.
    * ``exit_code``: a ``wait()`` status, ``(return code << 8) | signal``. Decoded as
      sacct does: signalled -> ``(0, signal)``; exited -> ``(WEXITSTATUS, None)`` with
      128 subtracted from a code >= 128; ``NO_VAL`` -> ``(None, None)``.
    * ``timelimit``: minutes; ``INFINITE`` (4294967295) -> ``None`` (unlimited),
      ``NO_VAL`` (4294967294, partition limit) -> ``None``.
    * times: epoch seconds (UTC by definition); 0 -> ``None`` (unknown), as are
      ``INFINITE``/``NO_VAL`` (an array task held by its task limit has
      ``time_eligible = INFINITE``).
    * ``id_array_task``: ``NO_VAL`` (4294967294, the column default) for a plain job and
      for the pending remainder of an array; ``id_array_job`` 0 for a plain job.
    * ``mem_req``: MB, per CPU when the ``MEM_PER_CPU`` bit (``1 << 63``) is set, else per
      node; used only when ``tres_req`` is empty (see :func:`decode_mem_req`).
    * TRES ids: names from ``tres_table`` (``type`` or ``type/name``); the GPU id is the
      row with ``type='gres' AND name='gpu'`` (1001 on the test cluster, but assigned
      per database). Memory is in MB (MiB). ``NO_VAL64``/``INFINITE64`` counts (e.g.
      ``energy``) are dropped.

Where records differ from ``sacct -X -P`` (checked on 22.05 by the integration test
and on the golden rows):
    * Field values: only the pending remainder of an array, which sacct prints as
      ``N_[1-3]`` (read without an array id); here ``array_job_id=N`` and
      ``array_task_id=None``. Everything else is equal field for field, including
      names (slurmdbd stores ``"`` as a backtick, which sacct prints as stored) and a
      job that ended without starting (``start_time`` ``None``; 22.05's sacct prints
      ``None`` too).
    * Rows: sacct omits jobs that never became eligible or become eligible after
      ``-E`` (see Window), and without ``-D`` it prints only the newest row of a job
      id among those in its window (a requeued job's ``REQUEUED`` row disappears once
      the new row is eligible); here every row is a record.
    * slurmdbd itself keeps one row for a job requeued or resized within its submit
      second: the new row has the same ``(id_job, time_submit)`` key and overwrites
      the old one (seen on 22.05 for a resize). Neither source can recover it.
"""

from __future__ import annotations

import json
import pwd
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from slurm_plugin.slurm.hostlist import HostlistError, expand
from slurm_plugin.slurm.tres import STATIC_TRES_IDS, TresError, parse_gres_count, parse_tres

from ..records import (
    BAD_HOSTLIST,
    BAD_NUMBER,
    BAD_TIME,
    BAD_TRES,
    MAX_RAW,
    MISSING_FIELD,
    UNKNOWN_STATE,
    JobRecord,
    Parsed,
    Rejected,
    TresCounts,
    check,
)

__all__ = [
    "BASE_STATES",
    "REQUIRED_COLUMNS",
    "Lookups",
    "SlurmdbdError",
    "convert_row",
    "decode_exit_code",
    "decode_mem_req",
    "decode_state",
    "job_table_columns",
    "load_lookups",
    "open_readonly",
    "read_slurmdbd",
    "row_text",
]

# Special values (slurm.h).
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
NO_VAL64 = 0xFFFFFFFFFFFFFFFE
INFINITE64 = 0xFFFFFFFFFFFFFFFF
_SPECIAL = frozenset({NO_VAL, INFINITE, NO_VAL64, INFINITE64})
#: ``mem_req`` bit meaning "MB per CPU" (slurm.h ``MEM_PER_CPU``); clear: MB per node.
MEM_PER_CPU = 1 << 63
JOB_STATE_BASE = 0xFF

#: ``enum job_states`` (slurm.h), as sacct prints them.
BASE_STATES: tuple[str, ...] = (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
)

#: State flags in the order ``job_state_string()`` tests them (the first set one wins),
#: bits from slurm.h. LAUNCH_FAILED (8) and UPDATE_DB (9) are internal and not printed;
#: POWER_UP_NODE and RECONFIG_FAIL are not in the job_state_string() seen (20.x-era) and
#: come last.
_STATE_FLAGS: tuple[tuple[int, str], ...] = (
    (1 << 15, "COMPLETING"),
    (1 << 23, "STAGE_OUT"),
    (1 << 14, "CONFIGURING"),
    (1 << 13, "RESIZING"),
    (1 << 10, "REQUEUED"),
    (1 << 20, "REQUEUE_FED"),
    (1 << 11, "REQUEUE_HOLD"),
    (1 << 12, "SPECIAL_EXIT"),
    (1 << 16, "STOPPED"),
    (1 << 19, "REVOKED"),
    (1 << 21, "RESV_DEL_HOLD"),
    (1 << 22, "SIGNALING"),
    (1 << 18, "POWER_UP_NODE"),
    (1 << 17, "RECONFIG_FAIL"),
)

#: Job table columns every supported version has; a table without them is refused.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "job_db_inx", "id_job", "id_assoc", "id_user", "id_qos", "id_array_job",
    "id_array_task", "account", "job_name", "partition", "state", "exit_code", "timelimit",
    "priority", "time_submit", "time_eligible", "time_start", "time_end", "nodelist",
    "nodes_alloc", "cpus_req", "mem_req",
)
#: Columns read when the table has them (they differ between versions).
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "tres_req", "tres_alloc", "gres_req", "gres_alloc", "restart_cnt",
)

_CLUSTER_NAME = re.compile(r"[a-z0-9_]+")
_NO_NODES = frozenset({"", "none assigned", "(null)", "(unknown)", "none"})
_COUNT_KEYS = ("node", "cpu", "mem")

# MySQL error numbers that name a cause the user can fix.
_ER_LOGIN = 1045
_ER_ACCESS = {1044, 1142, 1143, 1227, 1370}
_ER_CONNECT = {2002, 2003, 2005, 2006, 2013}
_ER_NO_DB = 1049
_ER_NO_TABLE = 1146


class SlurmdbdError(RuntimeError):
    """The database cannot be read: no connection, no permission, or an unknown schema.

    The message says what to check or do; the URL is shown without its password.
    """


@lru_cache(maxsize=4096)
def _user_name(uid: int) -> str:
    """The login name of ``uid`` on this machine, else ``uid<n>``."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return f"uid{uid}"


@dataclass(frozen=True)
class Lookups:
    """What turns ids in a job row into names.

    Attributes:
        cluster: The cluster name (put into every record).
        tres_names: TRES names by id (``{1: "cpu", 2: "mem", 1001: "gres/gpu"}``).
        qos_names: QOS names by id.
        user_of_uid: Names a user from a numeric uid when the job's association has
            no user (default: the local passwd database, else ``uid<n>``).
    """

    cluster: str
    tres_names: Mapping[int, str] = field(default_factory=lambda: dict(STATIC_TRES_IDS))
    qos_names: Mapping[int, str] = field(default_factory=dict)
    user_of_uid: Callable[[int], str] = _user_name


class _RowError(Exception):
    """One field of a row cannot be converted."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


# ====================================================================== decoding
def decode_state(value: int) -> str:
    """Name a ``state`` column value as sacct does (``job_state_string()``).

    A flag bit, if set, names the state (``JOB_REQUEUE`` gives ``"REQUEUED"``); else the
    low byte indexes :data:`BASE_STATES`.

    Args:
        value: The ``state`` column.

    Returns:
        The state name, e.g. ``"COMPLETED"``.

    Raises:
        ValueError: The base state is not one Slurm defines.
    """
    for bit, name in _STATE_FLAGS:
        if value & bit:
            return name
    base = value & JOB_STATE_BASE
    if value < 0 or base >= len(BASE_STATES):
        raise ValueError(f"state {value} (base {base}) is not a Slurm job state")
    return BASE_STATES[base]


def decode_exit_code(value: int | None) -> tuple[int | None, int | None]:
    """Split an ``exit_code`` column (a ``wait()`` status) as ``sacct`` prints it.

    ``sacct`` (``PRINT_EXITCODE``): when ``WIFSIGNALED`` the return code shown is 0 and
    the signal is ``WTERMSIG``; when ``WIFEXITED`` the code is ``WEXITSTATUS``, minus 128
    if it is 128 or more; ``NO_VAL`` prints nothing.

    Args:
        value: The column (``status << 8 | signal``), or ``None``.

    Returns:
        ``(return_code, signal)``; the signal is ``None`` when there was none.
    """
    if value is None or value in _SPECIAL or value < 0:
        return None, None
    sig = value & 0x7F
    if sig == 0:  # WIFEXITED
        code = (value >> 8) & 0xFF
        return (code - 128 if code >= 128 else code), None
    if sig != 0x7F:  # WIFSIGNALED
        return 0, sig
    return 0, None  # stopped: sacct prints 0:0


def decode_mem_req(value: int | None) -> tuple[int | None, bool]:
    """Split a ``mem_req`` column into MB and whether they are per CPU.

    Args:
        value: The column: MB, with :data:`MEM_PER_CPU` set for a per-CPU request.

    Returns:
        ``(mb, per_cpu)``; ``mb`` is ``None`` for 0 or a special value.
    """
    if value is None or value in _SPECIAL or value < 0:
        return None, False
    per_cpu = bool(value & MEM_PER_CPU)
    mb = value & ~MEM_PER_CPU
    if mb == 0:
        return None, per_cpu
    return mb, per_cpu


# ====================================================================== row conversion
def row_text(row: Mapping[str, Any]) -> str:
    """A row as ``key=value`` text (strings JSON-quoted, ``NULL`` for NULL), cut to 64 KiB."""
    parts = []
    for key, value in row.items():
        if value is None:
            text = "NULL"
        elif isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        elif isinstance(value, bytes | bytearray):
            text = json.dumps(bytes(value).decode("utf-8", "replace"), ensure_ascii=False)
        else:
            text = json.dumps(str(value), ensure_ascii=False)
        parts.append(f"{key}={text}")
    return " ".join(parts)[:MAX_RAW]


def _int(row: Mapping[str, Any], col: str) -> int | None:
    value = row.get(col)
    if value is None:
        return None
    if isinstance(value, bool):
        raise _RowError(BAD_NUMBER, f"{col} {value!r} is not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("ascii", "replace")
    text = str(value).strip()
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    raise _RowError(BAD_NUMBER, f"{col} {value!r:.60} is not a number")


def _time(row: Mapping[str, Any], col: str) -> int | None:
    n = _int(row, col)
    if n is None or n == 0 or n in _SPECIAL:
        return None
    if n < 0:
        raise _RowError(BAD_TIME, f"{col} {n} is negative")
    return n


def _text(row: Mapping[str, Any], col: str) -> str:
    value = row.get(col)
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def _special_to_none(n: int | None) -> int | None:
    return None if n is None or n in _SPECIAL else n


def _tres(row: Mapping[str, Any], col: str, names: Mapping[int, str]) -> dict[str, int]:
    try:
        tres = parse_tres(_text(row, col), id_names=names)
    except TresError as exc:
        raise _RowError(BAD_TRES, f"{col}: {exc}") from None
    # Marker values (NO_VAL64 energy in tres_alloc, ...) are not counts.
    return {k: v for k, v in tres.items() if v not in _SPECIAL}


def _gres_gpus(row: Mapping[str, Any], col: str) -> int | None:
    if col not in row or not _text(row, col).strip():
        return None
    try:
        return parse_gres_count(_text(row, col), "gpu")
    except TresError as exc:
        raise _RowError(BAD_TRES, f"{col}: {exc}") from None


def _has_gpu_key(tres: Mapping[str, int]) -> bool:
    return any(k == "gres/gpu" or k.startswith("gres/gpu:") for k in tres)


def _counts(
    row: Mapping[str, Any], side: str, names: Mapping[int, str]
) -> TresCounts:
    """Requested (``side="req"``) or allocated TRES counts of a row."""
    tres = _tres(row, f"tres_{side}", names)
    gres_gpus = None if _has_gpu_key(tres) else _gres_gpus(row, f"gres_{side}")
    if tres:
        counts = TresCounts.from_tres(tres)
        if gres_gpus is not None:
            counts = TresCounts(counts.nodes, counts.cpus, gres_gpus, counts.mem_mb)
        return counts
    if side == "alloc":
        # No allocation (pending, or cancelled before start). ``nodes_alloc`` is no
        # substitute: a requeued job's new pending row keeps the old count.
        return TresCounts()
    # No requested TRES (rows written without them): CPUs and memory from the plain
    # columns. Per-node memory needs the node count, which the row does not hold.
    cpus = _special_to_none(_int(row, "cpus_req")) or None
    if cpus is None:
        return TresCounts()
    mb, per_cpu = decode_mem_req(_int(row, "mem_req"))
    return TresCounts(None, cpus, gres_gpus, mb * cpus if mb is not None and per_cpu else None)


def _nodes(node_list: str) -> tuple[str, ...]:
    if node_list.strip().lower() in _NO_NODES:
        return ()
    try:
        return tuple(expand(node_list))
    except HostlistError as exc:
        raise _RowError(BAD_HOSTLIST, f"nodelist: {exc}") from None


def _convert(row: Mapping[str, Any], lookups: Lookups) -> JobRecord:
    job_id = _int(row, "id_job")
    if job_id is None:
        raise _RowError(MISSING_FIELD, "id_job is NULL")
    state_value = _int(row, "state")
    if state_value is None:
        raise _RowError(MISSING_FIELD, "state is NULL")
    try:
        state = decode_state(state_value)
    except ValueError as exc:
        raise _RowError(UNKNOWN_STATE, str(exc)) from None

    user = _text(row, "assoc_user")
    if not user:
        uid = _int(row, "id_user")
        user = lookups.user_of_uid(uid) if uid is not None and uid not in _SPECIAL else ""
    account = _text(row, "assoc_acct") or _text(row, "account")
    qos_id = _int(row, "id_qos")
    qos = lookups.qos_names.get(qos_id, "") if qos_id else ""

    limit = _int(row, "timelimit")
    time_limit = None if limit is None or limit in _SPECIAL else limit * 60

    array_job = _int(row, "id_array_job") or None
    task = _int(row, "id_array_task")
    array_task = task if array_job is not None and task is not None and task not in _SPECIAL \
        else None

    raw_nodes = row.get("nodelist")
    node_list = _text(row, "nodelist")
    if raw_nodes is None or node_list == "(null)":
        node_list = "(unknown)"  # as sacct prints a missing node list
    exit_code, signal = decode_exit_code(_int(row, "exit_code"))
    restarts = _special_to_none(_int(row, "restart_cnt"))
    if restarts is not None and restarts >= 0xFFFE:  # NO_VAL16/INFINITE16 (smallint)
        restarts = None

    return JobRecord(
        job_id=job_id,
        name=_text(row, "job_name"),
        user=user,
        account=account,
        partition=_text(row, "partition"),
        qos=qos,
        state=state,
        submit_time=_time(row, "time_submit") or 0,
        eligible_time=_time(row, "time_eligible"),
        start_time=_time(row, "time_start"),
        end_time=_time(row, "time_end"),
        time_limit=time_limit,
        req=_counts(row, "req", lookups.tres_names),
        alloc=_counts(row, "alloc", lookups.tres_names),
        node_list=node_list,
        nodes=_nodes(node_list),
        priority=_special_to_none(_int(row, "priority")),
        exit_code=exit_code,
        signal=signal,
        array_job_id=array_job,
        array_task_id=array_task,
        restart_count=restarts or 0,
        cluster=lookups.cluster,
    )


def convert_row(row: Mapping[str, Any], lookups: Lookups) -> Parsed:
    """Turn one job table row into a record, or a :class:`~db.records.Rejected`.

    Never raises for a bad row: an unreadable field, an unknown state, a bad TRES or
    node list, or a failed :func:`db.records.check` gives a ``Rejected`` with the row
    as :func:`row_text` and ``line`` set to the row's ``job_db_inx``.

    Args:
        row: The job table columns by name, plus ``assoc_user`` and ``assoc_acct`` from
            the job's association (``None``/absent when it has none).
        lookups: TRES and QOS names, the cluster name.

    Returns:
        The record, or the rejection.
    """
    try:
        line = _int(row, "job_db_inx")
    except _RowError:
        line = None
    try:
        record = _convert(row, lookups)
    except _RowError as exc:
        return Rejected(row_text(row), exc.reason, exc.detail, line)
    problem = check(record)
    if problem is not None:
        return Rejected(row_text(row), problem[0], problem[1], line)
    return record


# ====================================================================== database
def _safe_url(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa_exc.ArgumentError:
        return "<unparsable URL>"


def _errno(exc: BaseException) -> int | None:
    orig = getattr(exc, "orig", None)
    args = getattr(orig, "args", None)
    if args and isinstance(args[0], int):
        return args[0]
    return None


def _explain(exc: sa_exc.SQLAlchemyError, url: str, what: str) -> SlurmdbdError:
    """A :class:`SlurmdbdError` for a database error, saying what to do."""
    shown = _safe_url(url)
    code = _errno(exc)
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).splitlines()[0] if str(orig) else type(orig).__name__
    if code == _ER_LOGIN:
        hint = ("access denied: check the user and password in the URL (the user needs"
                " SELECT on slurmdbd's database)")
    elif code in _ER_ACCESS:
        hint = ("the database user lacks permission: grant it read access, e.g."
                " GRANT SELECT ON slurm_acct_db.* TO 'reader'@'host'")
    elif code in _ER_CONNECT or isinstance(exc, sa_exc.OperationalError) and code is None:
        hint = ("cannot reach the database server: check host and port (or unix_socket=...)"
                " in the URL and that MariaDB/MySQL is running")
    elif code == _ER_NO_DB:
        hint = "no such database: use slurmdbd.conf's StorageLoc (default slurm_acct_db)"
    elif code == _ER_NO_TABLE:
        hint = "a slurmdbd table is missing: is this slurmdbd's database (StorageLoc)?"
    else:
        hint = "see the database error"
    return SlurmdbdError(f"{what} at {shown}: {hint} ({first})")


def _engine(url: str) -> Engine:
    try:
        return sa.create_engine(url, poolclass=NullPool)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError) as exc:
        raise SlurmdbdError(
            f"cannot use database URL {_safe_url(url)}: {exc} (expected e.g."
            " mysql+pymysql://user:password@host/slurm_acct_db; pip install pymysql)"
        ) from None
    except ImportError as exc:
        raise SlurmdbdError(
            f"the driver for {_safe_url(url)} is not installed: {exc}"
            " (pip install 'rlsched[mysql]' for pymysql)"
        ) from None


def _set_read_only(conn: Connection) -> None:
    """Make the session read-only where the server has a way to."""
    dialect = conn.dialect.name
    if dialect in ("mysql", "mariadb"):
        conn.execute(sa.text("SET SESSION TRANSACTION READ ONLY"))
    elif dialect == "sqlite":
        conn.execute(sa.text("PRAGMA query_only = ON"))
    elif dialect == "postgresql":
        conn.execute(sa.text("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"))
    conn.rollback()


@contextmanager
def open_readonly(url: str) -> Iterator[Connection]:
    """Open a read-only connection to the database at ``url``.

    Yields:
        The connection; its session is read-only (MySQL/MariaDB:
        ``SET SESSION TRANSACTION READ ONLY``; SQLite: ``PRAGMA query_only``).

    Raises:
        SlurmdbdError: The URL is unusable or the server cannot be reached or refuses.
    """
    engine = _engine(url)
    try:
        try:
            conn = engine.connect()
        except sa_exc.SQLAlchemyError as exc:
            raise _explain(exc, url, "cannot connect to the slurmdbd database") from None
        with conn:
            try:
                _set_read_only(conn)
            except sa_exc.SQLAlchemyError as exc:
                raise _explain(exc, url, "cannot make the session read-only") from None
            yield conn
    finally:
        engine.dispose()


def _q(conn: Connection, name: str) -> str:
    """Quote an identifier for this dialect (names here are validated or constant)."""
    return conn.dialect.identifier_preparer.quote(name)


def _columns(conn: Connection, table: str) -> list[str]:
    """Column names of ``table`` in the connection's database (``[]`` if none/no access)."""
    if conn.dialect.name in ("mysql", "mariadb"):
        rows = conn.execute(
            sa.text(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS"
                " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t"
                " ORDER BY ORDINAL_POSITION"
            ),
            {"t": table},
        ).all()
        return [str(r[0]) for r in rows]
    try:
        return [str(c["name"]) for c in sa.inspect(conn).get_columns(table)]
    except sa_exc.NoSuchTableError:
        return []


def _known_clusters(conn: Connection) -> list[str]:
    try:
        rows = conn.execute(
            sa.text(f"SELECT name FROM {_q(conn, 'cluster_table')} WHERE deleted = 0")
        ).all()
        return sorted(str(r[0]) for r in rows)
    except sa_exc.SQLAlchemyError:
        conn.rollback()
        return []


def job_table_columns(conn: Connection, cluster: str) -> frozenset[str]:
    """List the columns of ``<cluster>_job_table`` and check the slurmdbd schema.

    Args:
        conn: A connection to slurmdbd's database.
        cluster: The cluster name (validated).

    Returns:
        The job table's column names.

    Raises:
        SlurmdbdError: The cluster's tables are missing (or not readable), or the job
            table lacks a column in :data:`REQUIRED_COLUMNS`.
        ValueError: ``cluster`` is not a valid cluster name.
    """
    _check_cluster(cluster)
    table = f"{cluster}_job_table"
    if conn.dialect.name in ("mysql", "mariadb"):
        database = conn.execute(sa.text("SELECT DATABASE()")).scalar()
        if not database:
            raise SlurmdbdError(
                "the database URL names no database: append /slurm_acct_db (slurmdbd.conf"
                " StorageLoc) to it"
            )
    cols = _columns(conn, table)
    if not cols:
        known = _known_clusters(conn)
        listed = ", ".join(known) if known else "none readable"
        raise SlurmdbdError(
            f"no readable table {table}: is {cluster!r} the ClusterName (clusters in this"
            f" database: {listed}) and does the user have SELECT on it?"
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise SlurmdbdError(
            f"{table} lacks columns {missing}: not a slurmdbd job table of a supported"
            " version (17.02 to 25.11)"
        )
    for other in (f"{cluster}_assoc_table", "tres_table", "qos_table"):
        if not _columns(conn, other):
            raise SlurmdbdError(
                f"no readable table {other}: grant SELECT on all of slurmdbd's database"
            )
    return frozenset(cols)


def load_lookups(conn: Connection, cluster: str) -> Lookups:
    """Read TRES and QOS names (deleted ones too: old jobs refer to them).

    Args:
        conn: A connection to slurmdbd's database.
        cluster: The cluster name, put into the records.

    Returns:
        The lookups; a TRES name is ``type`` or ``type/name`` (``gres/gpu`` is the row
        with ``type='gres' AND name='gpu'``).
    """
    tres: dict[int, str] = dict(STATIC_TRES_IDS)
    rows = conn.execute(sa.text(f"SELECT id, type, name FROM {_q(conn, 'tres_table')}"))
    for tres_id, kind, name in rows:
        kind = kind.decode() if isinstance(kind, bytes) else str(kind or "")
        name = name.decode() if isinstance(name, bytes) else str(name or "")
        tres[int(tres_id)] = f"{kind}/{name}" if name else kind
    qos = {
        int(qos_id): (name.decode() if isinstance(name, bytes) else str(name))
        for qos_id, name in conn.execute(
            sa.text(f"SELECT id, name FROM {_q(conn, 'qos_table')}")
        )
    }
    return Lookups(cluster, MappingProxyType(tres), MappingProxyType(qos))


def _check_cluster(cluster: str) -> None:
    if not isinstance(cluster, str) or _CLUSTER_NAME.fullmatch(cluster) is None:
        raise ValueError(
            f"cluster name {cluster!r} must match [a-z0-9_]+ (Slurm's ClusterName in"
            " lower case)"
        )


def _job_query(
    conn: Connection,
    cluster: str,
    columns: frozenset[str],
    *,
    since: bool,
    until: bool,
    low: bool,
    after: bool,
) -> sa.TextClause:
    """The batch query; which optional clauses it has is fixed by the flags."""
    wanted = [*REQUIRED_COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in columns)]
    select = ", ".join(f"t1.{_q(conn, c)} AS {_q(conn, c)}" for c in wanted)
    where = []
    if "deleted" in columns:
        where.append("t1.deleted = 0")
    if until:
        where.append("t1.time_submit < :until")
    if since:
        where.append("(t1.time_end >= :since OR t1.time_end = 0)")
    if low:
        where.append("t1.time_submit >= :low")
    if after:
        where.append(
            "(t1.time_submit > :k_submit OR (t1.time_submit = :k_submit AND"
            " (t1.id_job > :k_job OR (t1.id_job = :k_job AND t1.job_db_inx > :k_inx))))"
        )
    jobs = _q(conn, f"{cluster}_job_table")
    assoc = _q(conn, f"{cluster}_assoc_table")
    return sa.text(
        f"SELECT {select}, t2.{_q(conn, 'user')} AS assoc_user, t2.acct AS assoc_acct"
        f" FROM {jobs} AS t1 LEFT JOIN {assoc} AS t2 ON t1.id_assoc = t2.id_assoc"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY t1.time_submit, t1.id_job, t1.job_db_inx LIMIT :limit"
    )


def _lowest_submit(conn: Connection, cluster: str, since: int, columns: frozenset[str]) -> int:
    """Smallest ``time_submit`` of the rows the window can hold (indexed on time_end)."""
    jobs = _q(conn, f"{cluster}_job_table")
    deleted = " AND deleted = 0" if "deleted" in columns else ""
    low = None
    for cond in ("time_end >= :since", "time_end = 0"):
        value = conn.execute(
            sa.text(f"SELECT MIN(time_submit) FROM {jobs} WHERE {cond}{deleted}"),
            {"since": since},
        ).scalar()
        if value is not None:
            low = int(value) if low is None else min(low, int(value))
    return 0 if low is None else low


def _check_window(since: int | None, until: int | None, batch_size: int) -> None:
    for name, value in (("since", since), ("until", until)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValueError(f"{name} must be epoch seconds (an int >= 0), got {value!r}")
    if since is not None and until is not None and until < since:
        raise ValueError(f"until ({until}) is before since ({since})")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")


def read_slurmdbd(
    url: str,
    cluster: str,
    *,
    since: int | None = None,
    until: int | None = None,
    batch_size: int = 10000,
) -> Iterator[Parsed]:
    """Read job records of one cluster straight from slurmdbd's database, read-only.

    Rows come in ``(time_submit, id_job)`` order, ``batch_size`` at a time (keyset
    pagination). See the module docstring for the window, the columns read per Slurm
    version and how values are decoded.

    Args:
        url: SQLAlchemy URL of slurmdbd's database, e.g.
            ``mysql+pymysql://reader:pw@dbhost/slurm_acct_db``.
        cluster: The cluster's name (``ClusterName``), ``[a-z0-9_]+``.
        since: Epoch seconds (UTC): skip jobs that ended before this; ``None``: no bound.
            Jobs not ended yet are always read.
        until: Epoch seconds (UTC): skip jobs submitted at or after this; ``None``: no
            bound.
        batch_size: Rows per query.

    Returns:
        An iterator of records and rejections (one per row). The connection is opened
        on the first ``next()`` and closed when the iterator is exhausted or closed.

    Raises:
        ValueError: At once, for a bad cluster name, window or batch size.
        SlurmdbdError: While iterating, when the database cannot be reached or read, or
            its schema is not slurmdbd's.
    """
    _check_cluster(cluster)
    _check_window(since, until, batch_size)
    return _stream(url, cluster, since, until, batch_size)


def _stream(
    url: str, cluster: str, since: int | None, until: int | None, batch_size: int
) -> Iterator[Parsed]:
    with open_readonly(url) as conn:
        try:
            columns = job_table_columns(conn, cluster)
            lookups = load_lookups(conn, cluster)
            low = _lowest_submit(conn, cluster, since, columns) if since is not None else None
            conn.rollback()
        except sa_exc.SQLAlchemyError as exc:
            raise _explain(exc, url, "cannot read slurmdbd's tables") from None
        params: dict[str, int] = {"limit": batch_size}
        if since is not None:
            params["since"] = since
        if until is not None:
            params["until"] = until
        if low:
            params["low"] = low
        first = _job_query(conn, cluster, columns, since=since is not None,
                           until=until is not None, low=bool(low), after=False)
        rest = _job_query(conn, cluster, columns, since=since is not None,
                          until=until is not None, low=bool(low), after=True)
        query = first
        while True:
            try:
                result = conn.execute(query, params).mappings()
                rows = [{str(k): v for k, v in r.items()} for r in result]
                conn.rollback()  # one short read-only transaction per batch
            except sa_exc.SQLAlchemyError as exc:
                raise _explain(exc, url, f"cannot read {cluster}_job_table") from None
            for row in rows:
                yield convert_row(row, lookups)
            if len(rows) < batch_size:
                return
            last = rows[-1]
            params.update(k_submit=int(last["time_submit"]), k_job=int(last["id_job"]),
                          k_inx=int(last["job_db_inx"]))
            query = rest
