"""The job-history store: clusters, jobs, ingest runs, quarantine and the audit log.

A :class:`Store` wraps one database (SQLite file, PostgreSQL or MariaDB; see
:mod:`db.session`). Ingest is incremental and idempotent: jobs are upserted on their
unique key ``(cluster, job_id, submit_time)``, so re-running the same ingest adds
nothing, and a job first seen pending or running is updated in place when it is seen
again finished. Whatever cannot be stored is quarantined with its raw text and a reason.

Writes go in batches, never through per-row ORM objects: one ``SELECT`` of the batch's
existing keys, then the new rows handed to the driver in one go (``executemany`` of
tuples; ``COPY`` on PostgreSQL) and the changed ones updated with one Core
``executemany``. Each batch is a transaction.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from types import TracebackType
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Connection,
    CursorResult,
    Engine,
    Table,
    any_,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError, IntegrityError

from slurm_plugin.cluster import ClusterSpec

from .models import (
    CLUSTER_NAME_LEN,
    FIELD_LEN,
    MODE_LEN,
    MODEL_LEN,
    NAME_LEN,
    REASON_LEN,
    SOURCE_LEN,
    AuditEntry,
    Cluster,
    IngestRun,
    Job,
    QuarantinedRow,
)
from .records import BAD_HOSTLIST, BAD_NUMBER, JobRecord, Parsed, Rejected, TresCounts, check
from .session import StoreError, check_schema, connect_error, display_url, make_engine
from .stats import cluster_stats

__all__ = [
    "BAD_TEXT",
    "FIELD_TOO_LONG",
    "JOB_COLUMNS",
    "OTHER_CLUSTER",
    "RAW_MAX",
    "AuditRecord",
    "IngestSummary",
    "QuarantineEntry",
    "RunInfo",
    "Store",
    "UnknownClusterError",
    "clean_text",
]

# Reason codes of the store's own checks (on top of db.records.check): what the database
# could not hold the same way on every backend.
#: A string longer than its column (user, account, partition, QOS: 255 characters).
FIELD_TOO_LONG = "field too long"
#: A string no backend can store as given (a NUL character, a lone surrogate).
BAD_TEXT = "bad text"
#: A record that names a different cluster than the one being ingested into.
OTHER_CLUSTER = "other cluster"

#: Raw text kept for a quarantined row, at most (characters).
RAW_MAX = 65536
#: Detail kept for a quarantined row, at most (characters).
DETAIL_MAX = 4000

_JOBS = cast(Table, Job.__table__)
_CLUSTERS = cast(Table, Cluster.__table__)
_RUNS = cast(Table, IngestRun.__table__)
_QUARANTINE = cast(Table, QuarantinedRow.__table__)
_AUDIT = cast(Table, AuditEntry.__table__)

#: Columns of a job row as the store reads and writes them, in :func:`_row` order.
JOB_COLUMNS: tuple[str, ...] = (
    "job_id", "submit_time", "array_job_id", "array_task_id", "restart_count", "name",
    "user", "account", "partition", "qos", "state", "eligible_time", "start_time",
    "end_time", "time_limit", "req_nodes", "req_cpus", "req_gpus", "req_mem_mb",
    "alloc_nodes", "alloc_cpus", "alloc_gpus", "alloc_mem_mb", "node_list", "nodes",
    "priority", "exit_code", "signal",
)
_INSERT_COLUMNS = ("cluster_id", *JOB_COLUMNS)
_UPDATE_COLUMNS = JOB_COLUMNS[2:]  # the key (job_id, submit_time) never changes
_JOB_SELECT = [_JOBS.c[c] for c in JOB_COLUMNS]

_INT64 = 2**63
_INT32 = 2**31
_INT_POSITIONS = tuple(
    i for i, c in enumerate(JOB_COLUMNS) if c not in ("name", "user", "account", "partition",
                                                      "qos", "state", "node_list", "nodes")
)
_INT32_POSITIONS = tuple(JOB_COLUMNS.index(c) for c in ("restart_count", "exit_code", "signal"))
_int_fields = itemgetter(*_INT_POSITIONS)
_int32_fields = itemgetter(*_INT32_POSITIONS)
_INT_ONLY = {int}
_NODES = JOB_COLUMNS.index("nodes")
_NAME = JOB_COLUMNS.index("name")
_SHORT_STRINGS = ("user", "account", "partition", "qos")
_LOOKUP_CHUNK = 900  # ids per IN (...): below SQLite's oldest limit of 999 variables
_BIGINT_ARRAY = postgresql.ARRAY(BigInteger)

JobRow = tuple[Any, ...]


class UnknownClusterError(StoreError, LookupError):
    """No cluster of that name or id is in the store."""


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class IngestSummary:
    """What one :meth:`Store.ingest` run did.

    Attributes:
        run_id: The :class:`~db.models.IngestRun` row of this run.
        read: Items read from the source (jobs and rejected rows).
        inserted: New jobs stored.
        updated: Known jobs whose stored row changed (e.g. pending then, finished now).
        unchanged: Known jobs read again identical.
        quarantined: Quarantined rows per reason code.
        watermark: Where the next incremental run of the same source continues from.
    """

    run_id: int
    read: int
    inserted: int
    updated: int
    unchanged: int
    quarantined: dict[str, int]
    watermark: int | None

    @property
    def quarantined_total(self) -> int:
        """Quarantined rows, all reasons together."""
        return sum(self.quarantined.values())

    def lines(self) -> list[str]:
        """The summary as human-readable lines (counts, then one line per reason)."""
        out = [
            f"run {self.run_id}: read {self.read}, inserted {self.inserted}, updated"
            f" {self.updated}, unchanged {self.unchanged}, quarantined {self.quarantined_total}",
        ]
        for reason, n in sorted(self.quarantined.items(), key=lambda kv: (-kv[1], kv[0])):
            out.append(f"  quarantined {n:>8}  {reason}")
        return out


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One stored ingest run (see :class:`~db.models.IngestRun` for the fields)."""

    id: int
    source: str
    window_start: int | None
    window_end: int | None
    started_at: int
    finished_at: int | None
    read: int
    inserted: int
    updated: int
    unchanged: int
    quarantined: int
    watermark: int | None
    status: str
    error: str | None


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """One quarantined source row with its raw text and why it was not stored."""

    id: int
    run_id: int
    source: str
    line: int | None
    raw: str
    reason: str
    detail: str
    created_at: int


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One entry of the helper's audit log (values as text, ``None`` when unset)."""

    id: int
    cluster_id: int | None
    job_id: int
    field: str
    old_value: str | None
    new_value: str | None
    model_sha: str | None
    created_at: int
    mode: str


@dataclass
class _Counts:
    read: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


# ---------------------------------------------------------------------------- rows
def _row(r: JobRecord) -> JobRow:
    """A record as a row tuple in :data:`JOB_COLUMNS` order."""
    req, alloc = r.req, r.alloc
    return (
        r.job_id, r.submit_time, r.array_job_id, r.array_task_id, r.restart_count, r.name,
        r.user, r.account, r.partition, r.qos, r.state, r.eligible_time, r.start_time,
        r.end_time, r.time_limit, req.nodes, req.cpus, req.gpus, req.mem_mb,
        alloc.nodes, alloc.cpus, alloc.gpus, alloc.mem_mb, r.node_list, " ".join(r.nodes),
        r.priority, r.exit_code, r.signal,
    )


def _record(row: Sequence[Any], cluster: str) -> JobRecord:
    """A row in :data:`JOB_COLUMNS` order back to a record of ``cluster``."""
    (job_id, submit_time, array_job_id, array_task_id, restart_count, name, user, account,
     partition, qos, state, eligible_time, start_time, end_time, time_limit, req_nodes,
     req_cpus, req_gpus, req_mem_mb, alloc_nodes, alloc_cpus, alloc_gpus, alloc_mem_mb,
     node_list, nodes, priority, exit_code, signal) = row
    return JobRecord(
        job_id=job_id, name=name, user=user, account=account, partition=partition, qos=qos,
        state=state, submit_time=submit_time, eligible_time=eligible_time,
        start_time=start_time, end_time=end_time, time_limit=time_limit,
        req=TresCounts(req_nodes, req_cpus, req_gpus, req_mem_mb),
        alloc=TresCounts(alloc_nodes, alloc_cpus, alloc_gpus, alloc_mem_mb),
        node_list=node_list, nodes=tuple(nodes.split(" ")) if nodes else (),
        priority=priority, exit_code=exit_code, signal=signal, array_job_id=array_job_id,
        array_task_id=array_task_id, restart_count=restart_count, cluster=cluster,
    )


def clean_text(text: str, limit: int | None = None) -> str:
    r"""``text`` as every backend can store it.

    Cut to ``limit`` characters; lone surrogates (bytes a source could not decode) become
    ``\udcXX`` escapes and NUL characters ``\x00`` (PostgreSQL refuses both).
    """
    if limit is not None:
        text = text[:limit]
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def _text_problem(name: str, value: str) -> tuple[str, str] | None:
    if "\x00" in value:
        return BAD_TEXT, f"NUL character in {name}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return BAD_TEXT, f"{name} is not valid Unicode text"
    return None


def _number_problem(row: JobRow) -> tuple[str, str]:
    for i in _INT_POSITIONS:
        value = row[i]
        if value is None:
            continue
        if type(value) is not int:
            return BAD_NUMBER, f"{JOB_COLUMNS[i]} {value!r} is not an integer"
        limit = _INT32 if i in _INT32_POSITIONS else _INT64
        if not -limit <= value < limit:
            return BAD_NUMBER, f"{JOB_COLUMNS[i]} {value} out of range"
    raise AssertionError("no number problem found")  # pragma: no cover


def _storable(r: JobRecord, cluster: str, row: JobRow) -> tuple[str, str] | None:
    """Why ``r`` cannot be stored identically on every backend, or ``None``.

    Checks what :func:`db.records.check` does not: string lengths and contents, integer
    ranges, node names the expanded list can round-trip, and the record's cluster. The
    common case (everything fine) costs a few C-level calls; the slow paths only say
    what is wrong.
    """
    if r.cluster and r.cluster != cluster:
        return OTHER_CLUSTER, f"record of cluster {r.cluster!r}, ingesting into {cluster!r}"
    if max(len(r.user), len(r.account), len(r.partition), len(r.qos)) > NAME_LEN:
        for attr in _SHORT_STRINGS:
            value = getattr(r, attr)
            if len(value) > NAME_LEN:
                return FIELD_TOO_LONG, f"{attr} of {len(value)} characters (max {NAME_LEN})"
    nodes_text = row[_NODES]
    text = "".join((r.user, r.account, r.partition, r.qos, r.node_list, nodes_text))
    if "\x00" in text or not text.isascii():
        for attr in ("user", "account", "partition", "qos", "node_list"):
            problem = _text_problem(attr, getattr(r, attr))
            if problem:
                return problem
        problem = _text_problem("nodes", nodes_text)
        if problem:
            return problem
    try:
        big = list(filter(None, _int_fields(row)))  # None and 0 need no range check
        small = list(filter(None, _int32_fields(row)))
        if big and (max(big) >= _INT64 or min(big) < -_INT64 or {*map(type, big)} != _INT_ONLY) \
                or small and (max(small) >= _INT32 or min(small) < -_INT32):
            return _number_problem(row)
    except TypeError:
        return _number_problem(row)
    if r.nodes and tuple(nodes_text.split(" ")) != r.nodes:
        return BAD_HOSTLIST, "empty node name or node name with a space in the node list"
    return None


def _raw_of(r: JobRecord) -> str:
    data = dataclasses.asdict(r)
    return json.dumps(data, sort_keys=True, default=str)[:RAW_MAX]


def _now() -> int:
    return int(time.time())


def _new_id(result: CursorResult[Any]) -> int:
    pk = result.inserted_primary_key
    assert pk is not None
    return int(pk[0])


def _text(value: object) -> str | None:
    return None if value is None else str(value)


# ---------------------------------------------------------------------------- store
class Store:
    """The job-history store of one database.

    Open it with :meth:`open` (which checks the schema revision), use it as a context
    manager or call :meth:`close`. Methods are safe to call from one thread at a time.
    """

    def __init__(self, engine: Engine) -> None:
        """Wrap an engine whose database is known to be at the head revision.

        Prefer :meth:`open`, which resolves the URL and checks the schema.
        """
        self.engine = engine
        self._names: dict[int, str] = {}
        self._insert_sql: dict[str, tuple[str, tuple[str, ...] | None]] = {}

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, url: str | None = None, timeout: float | None = None) -> Store:
        """Open the store at ``url`` (see :func:`db.session.resolve_url`).

        ``timeout`` bounds connection attempts and lock waits (see
        :func:`db.session.make_engine`).

        Raises:
            NotInitialisedError: If the database has no schema (run ``rlsched db init``).
            SchemaError: If the schema is outdated (run ``rlsched db upgrade``) or newer.
            ConnectError: If the database cannot be reached.
            StoreError: If the URL is malformed or its driver missing.
        """
        engine = make_engine(url, timeout)
        try:
            check_schema(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return display_url(self.engine.url)

    def close(self) -> None:
        """Release the store's connections."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ clusters
    def cluster(self, name: str, spec: ClusterSpec | None = None) -> int:
        """The id of cluster ``name``, created if new; ``spec`` replaces its snapshot.

        Raises:
            ValueError: If the name is empty or longer than 128 characters.
        """
        if not name or len(name) > CLUSTER_NAME_LEN:
            raise ValueError(f"cluster name must be 1 to {CLUSTER_NAME_LEN} characters: {name!r}")
        text = None if spec is None else json.dumps(
            spec.to_dict(), sort_keys=True, separators=(",", ":")
        )
        c = _CLUSTERS.c
        for _attempt in range(2):
            with self.engine.begin() as conn:
                row = conn.execute(select(c.id, c.spec).where(c.name == name)).first()
                if row is not None:
                    cid = int(row.id)
                    if text is not None and row.spec != text:
                        conn.execute(update(_CLUSTERS).where(c.id == cid).values(
                            spec=text, updated_at=_now()
                        ))
                    self._names[cid] = name
                    return cid
            try:
                with self.engine.begin() as conn:
                    now = _now()
                    cid = _new_id(conn.execute(insert(_CLUSTERS).values(
                        name=name, spec=text, created_at=now, updated_at=now
                    )))
                    self._names[cid] = name
                    return cid
            except IntegrityError:
                continue  # created concurrently: read it back
        raise StoreError(f"could not create cluster {name!r}")  # pragma: no cover

    def cluster_id(self, name: str) -> int | None:
        """The id of cluster ``name``, or ``None`` if it is not in the store."""
        with self.engine.connect() as conn:
            cid = conn.execute(select(_CLUSTERS.c.id).where(_CLUSTERS.c.name == name)).scalar()
        return None if cid is None else int(cid)

    def cluster_name(self, cluster_id: int) -> str:
        """The name of cluster ``cluster_id``.

        Raises:
            UnknownClusterError: If there is no such cluster.
        """
        name = self._names.get(cluster_id)
        if name is None:
            with self.engine.connect() as conn:
                name = conn.execute(
                    select(_CLUSTERS.c.name).where(_CLUSTERS.c.id == cluster_id)
                ).scalar()
            if name is None:
                raise UnknownClusterError(f"no cluster with id {cluster_id} in {self.url}")
            self._names[cluster_id] = name
        return name

    def cluster_spec(self, name: str) -> ClusterSpec | None:
        """The stored snapshot of cluster ``name``, ``None`` if none was stored.

        Raises:
            UnknownClusterError: If there is no such cluster.
        """
        with self.engine.connect() as conn:
            row = conn.execute(
                select(_CLUSTERS.c.spec).where(_CLUSTERS.c.name == name)
            ).first()
        if row is None:
            raise UnknownClusterError(f"no cluster named {name!r} in {self.url}")
        return None if row.spec is None else ClusterSpec.from_dict(json.loads(row.spec))

    def clusters(self) -> list[str]:
        """Names of the stored clusters, sorted."""
        with self.engine.connect() as conn:
            return sorted(conn.execute(select(_CLUSTERS.c.name)).scalars())

    # ------------------------------------------------------------------ ingest
    def ingest(
        self,
        cluster_id: int,
        source: str,
        items: Iterable[Parsed],
        *,
        window: tuple[int | None, int | None] = (None, None),
        watermark: int | None = None,
        batch_size: int = 5000,
        progress: Callable[[int], None] | None = None,
    ) -> IngestSummary:
        """Store what a source read, in batches; record the run; return its summary.

        Each :class:`~db.records.JobRecord` is checked (:func:`db.records.check`, then
        what the database can hold) and upserted on ``(job_id, submit_time)``: inserted if
        new, updated if stored but different, counted unchanged if identical. Each
        :class:`~db.records.Rejected` item, and each record that fails a check, is
        quarantined with its raw text (a record's as JSON), reason and detail. Each batch
        is one transaction: if the run fails half-way, the batches before stay stored and
        the run is recorded as ``"failed"`` (re-running it is safe).

        A record whose ``cluster`` is set and differs from the cluster's name is
        quarantined (reason ``"other cluster"``); an empty ``cluster`` is accepted. A job
        name (free text, never interpreted) with a NUL character or undecodable bytes is
        stored escaped (:func:`clean_text`) rather than quarantined.

        Args:
            cluster_id: From :meth:`cluster`.
            source: What was read, e.g. ``"sacct"``, ``"swf:/data/trace.swf"``; watermarks
                are kept per source.
            items: The source's parsed items, consumed once, streaming.
            window: The submit-time window the source was asked for, recorded as is.
            watermark: Where the next incremental run continues from; by default the
                largest submit time read, never earlier than the source's last watermark.
            batch_size: Items per transaction.
            progress: Called with the number of items read so far after each batch.

        Raises:
            UnknownClusterError: If ``cluster_id`` is not a stored cluster.
            ValueError: On an empty or too long ``source`` or a non-positive ``batch_size``.
        """
        source = clean_text(source)
        if not source or len(source) > SOURCE_LEN:
            raise ValueError(f"source must be 1 to {SOURCE_LEN} characters")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        cluster = self.cluster_name(cluster_id)
        previous = self.watermark(cluster_id, source)
        started = _now()
        with self.engine.begin() as conn:
            run_id = _new_id(conn.execute(insert(_RUNS).values(
                cluster_id=cluster_id, source=source, window_start=window[0],
                window_end=window[1], started_at=started, read=0, inserted=0, updated=0,
                unchanged=0, quarantined=0, status="running",
            )))
        counts = _Counts()
        max_submit: int | None = None
        iterator = iter(items)
        try:
            while True:
                batch = list(islice(iterator, batch_size))
                if not batch:
                    break
                rows: list[JobRow] = []
                bad: list[dict[str, Any]] = []
                now = _now()
                for item in batch:
                    if isinstance(item, Rejected):
                        bad.append({"raw": clean_text(item.raw, RAW_MAX),
                                    "reason": clean_text(item.reason, REASON_LEN),
                                    "detail": clean_text(item.detail, DETAIL_MAX),
                                    "line": item.line})
                        continue
                    row = _row(item)
                    if "\x00" in item.name or not item.name.isascii():
                        row = (*row[:_NAME], clean_text(item.name), *row[_NAME + 1:])
                    problem = check(item) or _storable(item, cluster, row)
                    if problem is not None:
                        bad.append({"raw": _raw_of(item), "reason": problem[0],
                                    "detail": problem[1], "line": None})
                        continue
                    rows.append(row)
                    if max_submit is None or item.submit_time > max_submit:
                        max_submit = item.submit_time
                counts.read += len(batch)
                for b in bad:
                    b.update(run_id=run_id, cluster_id=cluster_id, source=source, created_at=now)
                    counts.reasons[b["reason"]] += 1
                with self.engine.begin() as conn:
                    if rows:
                        self._upsert(conn, cluster_id, rows, counts)
                    if bad:
                        conn.execute(insert(_QUARANTINE), bad)
                if progress is not None:
                    progress(counts.read)
        except BaseException as exc:
            self._finish_run(run_id, counts, None, "failed", f"{type(exc).__name__}: {exc}")
            raise
        if watermark is None:
            seen = [w for w in (previous, max_submit) if w is not None]
            watermark = max(seen) if seen else None
        self._finish_run(run_id, counts, watermark, "ok", None)
        return IngestSummary(
            run_id, counts.read, counts.inserted, counts.updated, counts.unchanged,
            dict(counts.reasons), watermark,
        )

    def _upsert(
        self, conn: Connection, cluster_id: int, rows: list[JobRow], counts: _Counts
    ) -> None:
        keys = {(r[0], r[1]) for r in rows}
        job_ids = sorted({r[0] for r in rows})
        c = _JOBS.c
        existing: dict[tuple[int, int], tuple[int, JobRow]] = {}
        stmt = select(c.id, *_JOB_SELECT).where(c.cluster_id == cluster_id)
        if conn.dialect.name == "postgresql":
            # one array parameter: PostgreSQL parses and plans it far faster than IN (...)
            lookups = [(stmt.where(c.job_id == any_(bindparam("ids", type_=_BIGINT_ARRAY))),
                        {"ids": job_ids})]
        else:
            lookups = [(stmt.where(c.job_id.in_(job_ids[i:i + _LOOKUP_CHUNK])), {})
                       for i in range(0, len(job_ids), _LOOKUP_CHUNK)]
        for lookup, params in lookups:
            for db_row in conn.execute(lookup, params):
                values = tuple(db_row[1:])
                key = (values[0], values[1])
                if key in keys:
                    existing[key] = (db_row[0], values)
        inserts: dict[tuple[int, int], JobRow] = {}
        updates: dict[tuple[int, int], tuple[int, JobRow]] = {}
        for r in rows:
            key = (r[0], r[1])
            new = inserts.get(key)
            if new is not None:  # the same job twice in one batch: the later one wins
                if new == r:
                    counts.unchanged += 1
                else:
                    inserts[key] = r
                    counts.updated += 1
                continue
            old = existing.get(key)
            if old is None:
                inserts[key] = r
                counts.inserted += 1
            elif old[1] == r:
                counts.unchanged += 1
            else:
                existing[key] = updates[key] = (old[0], r)
                counts.updated += 1
        if inserts:
            self._insert_jobs(conn, cluster_id, inserts.values())
        if updates:
            conn.execute(
                update(_JOBS).where(c.id == bindparam("b_id")),
                [{"b_id": db_id, **dict(zip(_UPDATE_COLUMNS, r[2:], strict=True))}
                 for db_id, r in updates.values()],
            )

    def _insert_jobs(self, conn: Connection, cluster_id: int, rows: Iterable[JobRow]) -> None:
        """``executemany`` an INSERT of the rows, straight to the driver.

        The statement is compiled once per dialect; the rows go to the DB-API cursor as
        tuples (positional paramstyles: SQLite, MySQL) or dicts (named: psycopg), which
        skips SQLAlchemy's per-row parameter processing (none of the job columns has a
        bind processor on these drivers), the bulk of the cost of a Core executemany.
        """
        dialect = conn.dialect
        if dialect.name == "postgresql" and dialect.driver == "psycopg":
            self._copy_jobs(conn, cluster_id, rows)
            return
        prepared = self._insert_sql.get(dialect.name)
        if prepared is None:
            compiled = insert(_JOBS).compile(dialect=dialect, column_keys=list(_INSERT_COLUMNS))
            positions = compiled.positiontup if compiled.positional else None
            prepared = (str(compiled), None if positions is None else tuple(positions))
            self._insert_sql[dialect.name] = prepared
        sql, order = prepared
        params: list[Any]
        if order is None:
            params = [dict(zip(_INSERT_COLUMNS, (cluster_id, *r), strict=True)) for r in rows]
        elif order == _INSERT_COLUMNS:
            params = [(cluster_id, *r) for r in rows]
        else:  # pragma: no cover - no supported dialect reorders an INSERT's columns
            pos = [_INSERT_COLUMNS.index(c) for c in order]
            params = [tuple((cluster_id, *r)[i] for i in pos) for r in rows]
        conn.exec_driver_sql(sql, params)

    @staticmethod
    def _copy_jobs(conn: Connection, cluster_id: int, rows: Iterable[JobRow]) -> None:
        """Insert with ``COPY ... FROM STDIN`` (PostgreSQL with psycopg).

        Several times faster than an ``executemany``, which costs a protocol round of
        Bind/Execute per row.
        """
        quote = conn.dialect.identifier_preparer.quote
        columns = ", ".join(quote(c) for c in _INSERT_COLUMNS)
        raw: Any = conn.connection.driver_connection
        with raw.cursor() as cur, cur.copy(f"COPY {quote('jobs')} ({columns}) FROM STDIN") as cp:
            for r in rows:
                cp.write_row((cluster_id, *r))

    def _finish_run(
        self, run_id: int, counts: _Counts, watermark: int | None, status: str,
        error: str | None,
    ) -> None:
        values = {
            "finished_at": _now(), "read": counts.read, "inserted": counts.inserted,
            "updated": counts.updated, "unchanged": counts.unchanged,
            "quarantined": sum(counts.reasons.values()), "watermark": watermark,
            "status": status, "error": None if error is None else error[:4000],
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(update(_RUNS).where(_RUNS.c.id == run_id).values(**values))
        except DBAPIError:
            if status == "ok":
                raise
            # recording a failure must not hide the error that caused it

    def watermark(self, cluster_id: int, source: str) -> int | None:
        """The watermark of the last successful run of ``source`` into the cluster.

        ``None`` if that source never ran successfully (or recorded no watermark).
        """
        r = _RUNS.c
        stmt = (
            select(r.watermark)
            .where(r.cluster_id == cluster_id, r.source == clean_text(source), r.status == "ok",
                   r.watermark.is_not(None))
            .order_by(r.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            value = conn.execute(stmt).scalar()
        return None if value is None else int(value)

    def oldest_unfinished(self, cluster_id: int) -> int | None:
        """The earliest submit time of a stored job still pending, running or suspended.

        An incremental source should re-read from there (or from its watermark, if
        earlier) so those jobs get their final state. ``None`` if there is none.
        """
        c = _JOBS.c
        stmt = select(func.min(c.submit_time)).where(
            c.cluster_id == cluster_id,
            c.state.in_(("PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING",
                         "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING",
                         "REQUEUE_HOLD", "REQUEUE_FED", "STOPPED")),
        )
        with self.engine.connect() as conn:
            value = conn.execute(stmt).scalar()
        return None if value is None else int(value)

    # ------------------------------------------------------------------ reading
    def jobs(
        self, cluster_id: int, *, since: int | None = None, until: int | None = None,
        batch_size: int = 2000,
    ) -> Iterator[JobRecord]:
        """Stream the cluster's jobs ordered by ``(submit_time, job_id)``.

        ``since``/``until`` bound the submit time: ``since <= submit_time < until``. Rows
        are fetched ``batch_size`` at a time (a server-side cursor on PostgreSQL and
        MariaDB), so memory stays flat. Records come back as stored, with ``cluster``
        set to the cluster's name.

        Raises:
            UnknownClusterError: If ``cluster_id`` is not a stored cluster.
        """
        cluster = self.cluster_name(cluster_id)
        c = _JOBS.c
        stmt = select(*_JOB_SELECT).where(c.cluster_id == cluster_id)
        if since is not None:
            stmt = stmt.where(c.submit_time >= since)
        if until is not None:
            stmt = stmt.where(c.submit_time < until)
        stmt = stmt.order_by(c.submit_time, c.job_id)
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=batch_size).execute(stmt)
            for row in result:
                yield _record(row, cluster)

    def count_jobs(self, cluster_id: int) -> int:
        """Number of stored jobs of the cluster."""
        with self.engine.connect() as conn:
            n = conn.execute(
                select(func.count()).select_from(_JOBS).where(_JOBS.c.cluster_id == cluster_id)
            ).scalar()
        return int(n or 0)

    def runs(self, cluster_id: int) -> list[RunInfo]:
        """The cluster's ingest runs, oldest first."""
        r = _RUNS.c
        stmt = select(
            r.id, r.source, r.window_start, r.window_end, r.started_at, r.finished_at,
            r.read, r.inserted, r.updated, r.unchanged, r.quarantined, r.watermark,
            r.status, r.error,
        ).where(r.cluster_id == cluster_id).order_by(r.id)
        with self.engine.connect() as conn:
            return [RunInfo(**row._mapping) for row in conn.execute(stmt)]

    def quarantined(
        self, cluster_id: int, run_id: int | None = None, *, limit: int | None = None
    ) -> list[QuarantineEntry]:
        """Quarantined rows of the cluster (of one run if given), in the order stored."""
        q = _QUARANTINE.c
        stmt = select(
            q.id, q.run_id, q.source, q.line, q.raw, q.reason, q.detail, q.created_at
        ).where(q.cluster_id == cluster_id)
        if run_id is not None:
            stmt = stmt.where(q.run_id == run_id)
        stmt = stmt.order_by(q.id)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.engine.connect() as conn:
            return [QuarantineEntry(**row._mapping) for row in conn.execute(stmt)]

    # ------------------------------------------------------------------ audit
    def audit(
        self,
        job_id: int,
        field: str,
        old: object,
        new: object,
        model_sha: str | None,
        *,
        cluster_id: int | None = None,
        mode: str = "enforce",
        at: int | None = None,
    ) -> int:
        """Record one change of a job's field by the helper; return the entry's id.

        ``old`` and ``new`` are stored as text (``str(value)``; ``None`` stays ``None``).
        ``at`` is the time of the change (epoch seconds, default now).

        Raises:
            ValueError: If ``field``, ``mode`` or ``model_sha`` is too long.
        """
        if not field or len(field) > FIELD_LEN:
            raise ValueError(f"field must be 1 to {FIELD_LEN} characters")
        if not mode or len(mode) > MODE_LEN:
            raise ValueError(f"mode must be 1 to {MODE_LEN} characters")
        if model_sha is not None and len(model_sha) > MODEL_LEN:
            raise ValueError(f"model id longer than {MODEL_LEN} characters")
        with self.engine.begin() as conn:
            return _new_id(conn.execute(insert(_AUDIT).values(
                cluster_id=cluster_id, job_id=job_id, field=field, old_value=_text(old),
                new_value=_text(new), model_sha=model_sha,
                created_at=_now() if at is None else at, mode=mode,
            )))

    def audit_many(
        self,
        entries: Sequence[tuple[int, str, object, object]],
        model_sha: str | None,
        *,
        cluster_id: int | None = None,
        mode: str = "enforce",
        at: int | None = None,
    ) -> int:
        """Record several changes in one transaction (all or none); return how many.

        Each entry is ``(job_id, field, old, new)``, stored as :meth:`audit` stores one.

        Raises:
            ValueError: If a field, ``mode`` or ``model_sha`` is too long (nothing stored).
        """
        if not mode or len(mode) > MODE_LEN:
            raise ValueError(f"mode must be 1 to {MODE_LEN} characters")
        if model_sha is not None and len(model_sha) > MODEL_LEN:
            raise ValueError(f"model id longer than {MODEL_LEN} characters")
        when = _now() if at is None else at
        rows = []
        for job_id, fld, old, new in entries:
            if not fld or len(fld) > FIELD_LEN:
                raise ValueError(f"field must be 1 to {FIELD_LEN} characters")
            rows.append({
                "cluster_id": cluster_id, "job_id": int(job_id), "field": fld,
                "old_value": _text(old), "new_value": _text(new), "model_sha": model_sha,
                "created_at": when, "mode": mode,
            })
        if rows:
            with self.engine.begin() as conn:
                conn.execute(insert(_AUDIT), rows)
        return len(rows)

    def audit_log(
        self,
        limit: int | None = 100,
        since: int | None = None,
        *,
        job_id: int | None = None,
        field: str | None = None,
        mode: str | None = None,
    ) -> list[AuditRecord]:
        """The latest ``limit`` audit entries, oldest first (``limit=None``: all).

        Optional filters: created at or after ``since``, of one job, one field, one mode.
        """
        a = _AUDIT.c
        stmt = select(
            a.id, a.cluster_id, a.job_id, a.field, a.old_value, a.new_value, a.model_sha,
            a.created_at, a.mode,
        )
        if since is not None:
            stmt = stmt.where(a.created_at >= since)
        if job_id is not None:
            stmt = stmt.where(a.job_id == job_id)
        if field is not None:
            stmt = stmt.where(a.field == field)
        if mode is not None:
            stmt = stmt.where(a.mode == mode)
        stmt = stmt.order_by(a.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.engine.connect() as conn:
            rows = list(conn.execute(stmt))
        return [AuditRecord(**row._mapping) for row in reversed(rows)]

    # ------------------------------------------------------------------ statistics
    def stats(self, cluster_id: int, *, top: int = 10) -> dict[str, Any]:
        """A summary of the cluster's history, computed in SQL (see :mod:`db.stats`).

        Raises:
            UnknownClusterError: If ``cluster_id`` is not a stored cluster.
        """
        cluster = self.cluster_name(cluster_id)
        try:
            return cluster_stats(self.engine, cluster_id, cluster, top=top)
        except DBAPIError as exc:  # pragma: no cover - server went away
            raise connect_error(self.engine, exc) from exc
