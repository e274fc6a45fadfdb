"""SQLAlchemy 2 models of the job-history store.

The same schema runs on SQLite (the embedded default), PostgreSQL and MariaDB/MySQL, and
is created and upgraded only through the Alembic migrations in :mod:`db.migrations` (a
test checks that the migration head matches these models on all three backends).

Schema decisions, the same on every backend:

- **Times are integer epoch seconds, UTC** (``BIGINT``), as Slurm keeps them: no
  ``DATETIME``/``TIMESTAMP`` column, so no time zone can slip in through a driver or a
  server setting, and a round trip is exact. ``NULL`` means "not (yet) known".
- **Durations are integer seconds** (``time_limit``: ``NULL`` is unlimited), memory MiB.
- **Allocated nodes are kept twice**: ``node_list`` as Slurm printed it (a hostlist
  expression such as ``gpu[01-04]``), and ``nodes`` expanded, as the host names joined
  by single spaces in allocation order (``""`` when no node was allocated). Slurm node
  names never contain white space; the store refuses a record whose names do.
- Strings that are grouped or filtered on (user, account, partition, QOS, state,
  reasons, sources) are ``VARCHAR`` of a bounded length so MariaDB can index them with
  ``utf8mb4``; free text (job names, raw rows, node lists, audit values, specs) is
  ``TEXT`` (``LONGTEXT`` on MariaDB/MySQL, whose ``TEXT`` stops at 64 KiB).
- Integer surrogate keys everywhere; a job is unique per cluster by
  ``(job_id, submit_time)``, as slurmdbd has it (a requeued job is a new row).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AuditEntry",
    "Base",
    "Cluster",
    "IngestRun",
    "Job",
    "QuarantinedRow",
    "LONG_TEXT",
    "NAME_LEN",
    "REASON_LEN",
    "SOURCE_LEN",
    "STATE_LEN",
    "FIELD_LEN",
    "MODE_LEN",
    "MODEL_LEN",
    "CLUSTER_NAME_LEN",
    "MYSQL_TABLE_OPTIONS",
]

#: Longest user, account, partition or QOS name the store keeps.
NAME_LEN = 255
#: Longest job state (Slurm's longest base state is 14 characters).
STATE_LEN = 32
#: Longest cluster name.
CLUSTER_NAME_LEN = 128
#: Longest ingest source description (``"sacct"``, ``"swf:/path/trace.swf"``...).
SOURCE_LEN = 512
#: Longest quarantine reason code.
REASON_LEN = 128
#: Longest audited field name.
FIELD_LEN = 64
#: Longest audit mode (``"enforce"``, ``"dry-run"``...).
MODE_LEN = 16
#: Longest model id (a sha256 in hex is 64 characters).
MODEL_LEN = 128

#: Unbounded text: ``TEXT`` on SQLite and PostgreSQL, ``LONGTEXT`` on MariaDB/MySQL.
LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")

#: An auto-incrementing 64-bit primary key (SQLite only auto-increments ``INTEGER``).
BigId = BigInteger().with_variant(Integer(), "sqlite")

#: Constraint names are fixed here, so migrations and every backend agree on them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


#: MariaDB/MySQL table options: InnoDB, full Unicode, and binary (case- and
#: accent-sensitive) comparison, so names group and match as on SQLite and PostgreSQL.
MYSQL_TABLE_OPTIONS = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


class Base(DeclarativeBase):
    """Declarative base of every rlsched table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Cluster(Base):
    """A cluster whose history is stored, with a snapshot of its shape.

    ``spec`` is :meth:`slurm_plugin.cluster.ClusterSpec.to_dict` as JSON text (nodes,
    GPUs, CPUs, memory, features, partitions, switch tree), ``NULL`` until known.
    """

    __tablename__ = "clusters"
    __table_args__ = (MYSQL_TABLE_OPTIONS,)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(CLUSTER_NAME_LEN), unique=True)
    spec: Mapped[str | None] = mapped_column(LONG_TEXT)
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)


class Job(Base):
    """One job of a cluster's accounting history (a :data:`db.records.JobRecord`).

    ``req_*`` are the requested TRES, ``alloc_*`` the allocated TRES (``NULL``: not
    recorded / never allocated). See the module docstring for times and node lists.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("cluster_id", "job_id", "submit_time"),
        Index(None, "cluster_id", "submit_time"),
        Index(None, "cluster_id", "end_time"),
        MYSQL_TABLE_OPTIONS,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("clusters.id", ondelete="CASCADE")
    )
    job_id: Mapped[int] = mapped_column(BigInteger)
    submit_time: Mapped[int] = mapped_column(BigInteger)
    array_job_id: Mapped[int | None] = mapped_column(BigInteger)
    array_task_id: Mapped[int | None] = mapped_column(BigInteger)
    restart_count: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(LONG_TEXT)
    user: Mapped[str] = mapped_column(String(NAME_LEN))
    account: Mapped[str] = mapped_column(String(NAME_LEN))
    partition: Mapped[str] = mapped_column(String(NAME_LEN))
    qos: Mapped[str] = mapped_column(String(NAME_LEN))
    state: Mapped[str] = mapped_column(String(STATE_LEN))
    eligible_time: Mapped[int | None] = mapped_column(BigInteger)
    start_time: Mapped[int | None] = mapped_column(BigInteger)
    end_time: Mapped[int | None] = mapped_column(BigInteger)
    time_limit: Mapped[int | None] = mapped_column(BigInteger)
    req_nodes: Mapped[int | None] = mapped_column(BigInteger)
    req_cpus: Mapped[int | None] = mapped_column(BigInteger)
    req_gpus: Mapped[int | None] = mapped_column(BigInteger)
    req_mem_mb: Mapped[int | None] = mapped_column(BigInteger)
    alloc_nodes: Mapped[int | None] = mapped_column(BigInteger)
    alloc_cpus: Mapped[int | None] = mapped_column(BigInteger)
    alloc_gpus: Mapped[int | None] = mapped_column(BigInteger)
    alloc_mem_mb: Mapped[int | None] = mapped_column(BigInteger)
    node_list: Mapped[str] = mapped_column(LONG_TEXT)
    nodes: Mapped[str] = mapped_column(LONG_TEXT)
    priority: Mapped[int | None] = mapped_column(BigInteger)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)


class IngestRun(Base):
    """One run of an ingest source into a cluster's history.

    ``window_start``/``window_end`` are the time window the source was asked for
    (``NULL``: open); ``watermark`` is where the next incremental run of the same
    source continues from (epoch seconds). ``status`` is ``"running"``, ``"ok"`` or
    ``"failed"`` (then ``error`` says why).
    """

    __tablename__ = "ingest_runs"
    __table_args__ = (Index(None, "cluster_id", "source"), MYSQL_TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("clusters.id", ondelete="CASCADE")
    )
    source: Mapped[str] = mapped_column(String(SOURCE_LEN))
    window_start: Mapped[int | None] = mapped_column(BigInteger)
    window_end: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[int] = mapped_column(BigInteger)
    finished_at: Mapped[int | None] = mapped_column(BigInteger)
    read: Mapped[int] = mapped_column(BigInteger)
    inserted: Mapped[int] = mapped_column(BigInteger)
    updated: Mapped[int] = mapped_column(BigInteger)
    unchanged: Mapped[int] = mapped_column(BigInteger)
    quarantined: Mapped[int] = mapped_column(BigInteger)
    watermark: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)


class QuarantinedRow(Base):
    """A source row that could not be stored, kept with its raw text and the reason."""

    __tablename__ = "quarantined_rows"
    __table_args__ = (Index(None, "cluster_id", "run_id"), MYSQL_TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("ingest_runs.id", ondelete="CASCADE")
    )
    cluster_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("clusters.id", ondelete="CASCADE")
    )
    source: Mapped[str] = mapped_column(String(SOURCE_LEN))
    line: Mapped[int | None] = mapped_column(BigInteger)
    raw: Mapped[str] = mapped_column(LONG_TEXT)
    reason: Mapped[str] = mapped_column(String(REASON_LEN))
    detail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(BigInteger)


class AuditEntry(Base):
    """One change the helper made (or, in a dry run, would have made) to a job.

    ``old_value``/``new_value`` are the field's values as text; ``model_sha`` names the
    policy model that decided; ``mode`` is e.g. ``"enforce"`` or ``"dry-run"``.
    """

    __tablename__ = "audit_log"
    __table_args__ = (Index(None, "created_at"), MYSQL_TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("clusters.id", ondelete="SET NULL")
    )
    job_id: Mapped[int] = mapped_column(BigInteger)
    field: Mapped[str] = mapped_column(String(FIELD_LEN))
    old_value: Mapped[str | None] = mapped_column(LONG_TEXT)
    new_value: Mapped[str | None] = mapped_column(LONG_TEXT)
    model_sha: Mapped[str | None] = mapped_column(String(MODEL_LEN))
    created_at: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[str] = mapped_column(String(MODE_LEN))
