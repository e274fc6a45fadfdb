"""What ingest sources produce: job records, and rows they could not read.

Every ingest source (sacct, the slurmdbd database, trace files) is a pure iterator of
:data:`Parsed` items: a :class:`JobRecord` for each job it read, or a :class:`Rejected`
for each row it could not, with the raw text and the reason. The ingest driver stores
the first and quarantines the second, so nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_plugin.slurm import values
from slurm_plugin.slurm.hostlist import HostlistError
from slurm_plugin.slurm.tres import TresError
from slurm_plugin.slurm.types import AccountingJob, TresCounts

#: A job as the store keeps it: the Slurm boundary's accounting record. Times are epoch
#: seconds UTC, ``time_limit`` seconds (``None``: unlimited), memory MiB; special Slurm
#: values are already converted. Unique per cluster by ``(job_id, submit_time)``.
JobRecord = AccountingJob

__all__ = ["JobRecord", "Parsed", "Rejected", "TresCounts"]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A row a source could not turn into a :class:`JobRecord`.

    Attributes:
        raw: The row as read (a text line, a JSON object dumped to text, a DB row as
            ``key=value`` text), cut to 64 KiB.
        reason: A short, stable reason code, e.g. ``"bad time"``, ``"wrong field count"``,
            ``"end before start"``; counted per reason in the run summary.
        detail: One line with the specifics (field name, value).
        line: The line number or record index in the source, if it has one.
    """

    raw: str
    reason: str
    detail: str = ""
    line: int | None = None


Parsed = JobRecord | Rejected


# Reason codes, shared by every source so the run summary counts like with like.
WRONG_FIELD_COUNT = "wrong field count"
BAD_TIME = "bad time"
BAD_NUMBER = "bad number"
NEGATIVE_DURATION = "negative duration"
END_BEFORE_START = "end before start"
UNKNOWN_STATE = "unknown state"
BAD_HOSTLIST = "bad hostlist"
BAD_TRES = "bad tres"
BAD_JSON = "bad json"
MISSING_FIELD = "missing field"
BAD_VALUE = "bad value"

#: Maximum raw text kept for a quarantined row.
MAX_RAW = 65536

_KIND_REASON = {
    values.KIND_TIME: BAD_TIME,
    values.KIND_NUMBER: BAD_NUMBER,
    values.KIND_STATE: UNKNOWN_STATE,
    values.KIND_MISSING: MISSING_FIELD,
    values.KIND_FIELD_COUNT: WRONG_FIELD_COUNT,
    values.KIND_VALUE: BAD_VALUE,
}


def rejection(exc: Exception, raw: str, line: int | None = None) -> Rejected:
    """Turn a parser error on one row into a :class:`Rejected` with a reason code.

    Args:
        exc: A :class:`~slurm_plugin.slurm.values.FieldError`, ``HostlistError`` or
            ``TresError`` (anything else counts as ``bad value``).
        raw: The row as read.
        line: Its line number or index, if any.
    """
    if isinstance(exc, values.FieldError):
        reason = _KIND_REASON.get(exc.kind, BAD_VALUE)
    elif isinstance(exc, HostlistError):
        reason = BAD_HOSTLIST
    elif isinstance(exc, TresError):
        reason = BAD_TRES
    else:
        reason = BAD_VALUE
    detail = str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
    return Rejected(raw[:MAX_RAW], reason, detail, line)

#: Job states Slurm records (base states; sacct prints e.g. ``CANCELLED by 0``).
JOB_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
    "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REQUEUED",
    "RESIZING", "REVOKED", "SPECIAL_EXIT", "COMPLETING", "CONFIGURING", "STAGE_OUT",
    "SIGNALING", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "STOPPED", "UPDATE_DB",
    "POWER_UP_NODE", "LAUNCH_FAILED", "RECONFIG_FAIL",
})


def check(record: JobRecord) -> tuple[str, str] | None:
    """Consistency checks every source applies before a record is stored.

    Returns:
        ``(reason, detail)`` when the record must be quarantined, else ``None``.
    """
    if record.state not in JOB_STATES:
        return UNKNOWN_STATE, f"state {record.state!r}"
    if record.submit_time <= 0:
        return BAD_TIME, f"submit time {record.submit_time}"
    if record.time_limit is not None and record.time_limit < 0:
        return NEGATIVE_DURATION, f"time limit {record.time_limit} s"
    start, end = record.start_time, record.end_time
    if start is not None and end is not None and end < start:
        return END_BEFORE_START, f"end {end} < start {start}"
    for name in ("nodes", "cpus", "gpus", "mem_mb"):
        for side in (record.req, record.alloc):
            n = getattr(side, name)
            if n is not None and n < 0:
                return BAD_NUMBER, f"{name} {n}"
    return None
