"""Ingest from workload trace files: SWF, the ANL SWF variant and Philly-style CSV.

Each reader is pure and streaming: it reads the file's header eagerly and returns it with
a lazy iterator of :data:`~db.records.Parsed` items. Every job row yields exactly one
item, a :class:`~db.records.JobRecord` that passes :func:`~db.records.check` or a
:class:`~db.records.Rejected` with the raw line (line terminator removed, cut to
``MAX_RAW``, lone surrogates backslash-escaped so it is valid UTF-8), a reason code
from :mod:`db.records`, a one-line detail and the 1-based line number. Rows that are not
job rows yield nothing: blank lines (``line.strip() == ""``) everywhere, and in SWF
files comment lines (first non-blank character ``;``), wherever they appear; in a CSV
file, the column header line.

The file is read lazily and never held whole: a path is opened twice, once for the
header and once when the iterator is first advanced (``.gz`` files are read through
gzip); an iterable of lines is consumed once. Undecodable bytes are read as U+FFFD and
end up in a rejected row. A trace with no machine layout gets one from
:func:`synthetic_spec`.

SWF (Parallel Workloads Archive, 18 whitespace-separated numeric fields; ``-1`` means
unknown and becomes ``None`` or ``""``):

======================== ==============================================================
SWF field                :class:`~db.records.JobRecord`
======================== ==============================================================
1 job number             ``job_id`` (``-1``: missing field; ``0``: bad number)
2 submit time            ``submit_time`` = epoch offset + value (see below);
                         ``eligible_time`` = ``submit_time``
3 wait time              ``start_time`` = ``submit_time`` + wait. Unknown wait with a
                         known run time: ``start_time`` = ``submit_time`` (zero wait
                         assumed, so the run time survives) unless
                         ``assume_zero_wait=False``, then ``start_time`` = ``None``
4 run time               ``end_time`` = ``start_time`` + run time (``None`` if either
                         is unknown)
5 allocated processors   standard: ``alloc.cpus``; ``alloc.nodes`` =
                         ceil(cpus / cpus-per-node). ANL: ``alloc.nodes``;
                         ``alloc.cpus`` = nodes * ``cpus_per_node`` if given, else None
6 average CPU time       standard: not kept. ANL: requested wall time ->
                         ``time_limit``
7 used memory            not kept (used is not allocated)
8 requested processors   ``req.cpus`` (standard) / ``req.nodes`` (ANL) as field 5;
                         unknown -> the allocated count
9 requested time         standard: ``time_limit`` (seconds). ANL: not used
10 requested memory      ``req.mem_mb`` = ceil(KiB per processor (ANL: per node) x
                         requested count / 1024)
11 status                ``state``, see :data:`SWF_STATES`
12 user id               ``user`` = ``"u<id>"``
13 group id              ``account`` = ``"g<id>"``
14 executable number     ``name`` = ``"x<id>"``
15 queue number          ``partition`` = ``"q<id>"``
16 partition number      ``partition`` = ``"p<id>"`` when the queue is unknown
17, 18 preceding job,    checked to be numbers, not kept
think time
======================== ==============================================================

``qos``, ``node_list`` and ``priority`` are unknown (``""``/``None``); ``alloc.mem_mb``,
``alloc.gpus`` and ``req.gpus`` are ``None``. ``time_limit`` ``None`` means the trace
does not give it (the store reads ``None`` as unlimited).

Times are integer epoch seconds UTC: SWF times are seconds after ``UnixStartTime`` (an
epoch, so no time-zone conversion applies; ``TimeZoneString`` is kept in the header for
local-time analyses). Without that header line the offset is
:data:`DEFAULT_START_EPOCH`; ``start_epoch=`` overrides both. Fractional seconds are
rounded. Counts of processors per node: ``MaxProcs // MaxNodes`` when the header gives
both, else 1 (``cpus_per_node=`` overrides).

The ANL variant (:file:`../shared/traces/README.md`: Theta) is node-based: field 5 counts
nodes, field 6 is the requested wall time, field 2 is already a Unix epoch (offset 0
unless ``start_epoch=`` is given). It is detected when the header has no
``UnixStartTime`` and the first job row's submit time is at least
:data:`ANL_EPOCH_THRESHOLD` (``1e9`` s = 2001-09-09, far beyond any relative trace
time); pass ``variant=`` to force either.

Philly-style CSV: a header row names the columns (case-insensitive; see
:data:`PHILLY_COLUMNS` for the names read, others are ignored); ``timestamp``,
``duration`` and ``num_gpus`` are required. ``timestamp`` is ``YYYY-MM-DD HH:MM:SS``
(``T`` also accepted, fractional seconds dropped) read in ``tz`` (default UTC), or an
integer epoch. ``num_gpus`` -> ``req.gpus`` = ``alloc.gpus``, ``nodes`` =
max(1, ceil(gpus / ``gpus_per_node``)), ``cpus`` and memory ``None``; ``duration``
(seconds, empty: unknown) gives ``end_time`` as for SWF; there is no wait unless a
``wait`` column gives it (zero assumed as above). ``cluster``/``vc`` -> ``account``,
``user`` -> ``user``, ``status`` -> ``state`` (Philly ``Pass``/``Killed``/``Failed`` or
a Slurm state name; no column: ``COMPLETED``), ``time_limit`` -> ``time_limit``;
``gpu_time`` is checked to be a number, not kept. Name cells must be printable text of
at most 256 characters.
``job_id`` is the integer ``jobid`` column if there is one, else the 1-based index of
the data row (blank lines not counted, rejected rows counted), and a non-integer
``jobid`` is kept as ``name``.

Values must fit a signed 64-bit integer and times must lie before the year 10000, or
the row is rejected.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timezone, tzinfo
from functools import partial
from itertools import chain
from types import MappingProxyType
from typing import Literal

from slurm_plugin.cluster import ClusterSpec

from ..records import (
    BAD_NUMBER,
    BAD_TIME,
    BAD_VALUE,
    JOB_STATES,
    MAX_RAW,
    MISSING_FIELD,
    NEGATIVE_DURATION,
    UNKNOWN_STATE,
    WRONG_FIELD_COUNT,
    JobRecord,
    Parsed,
    Rejected,
    TresCounts,
    check,
)

__all__ = [
    "ANL_EPOCH_THRESHOLD",
    "DEFAULT_CPUS_PER_NODE",
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_START_EPOCH",
    "PHILLY_COLUMNS",
    "PHILLY_STATES",
    "SWF_FIELDS",
    "SWF_STATES",
    "TraceHeader",
    "Variant",
    "read_philly_csv",
    "read_swf",
    "synthetic_spec",
]

#: The kinds of trace this module reads.
Variant = Literal["standard", "anl", "philly"]

#: Epoch (2000-01-01T00:00:00Z) added to relative SWF times when the header has no
#: ``UnixStartTime`` (e.g. a model such as Lublin-Feitelson) and none is passed.
DEFAULT_START_EPOCH = 946_684_800

#: A first submit time at least this large (2001-09-09 as an epoch) marks the ANL variant.
ANL_EPOCH_THRESHOLD = 1_000_000_000

#: CPUs per node of a synthetic node where nothing says otherwise (as ClusterSpec).
DEFAULT_CPUS_PER_NODE = 64

#: GPUs per node of a GPU trace where nothing says otherwise.
DEFAULT_GPUS_PER_NODE = 8

#: The 18 SWF fields, in order (names used in rejection details).
SWF_FIELDS: tuple[str, ...] = (
    "job number", "submit time", "wait time", "run time", "allocated processors",
    "average cpu time", "used memory", "requested processors", "requested time",
    "requested memory", "status", "user id", "group id", "executable number",
    "queue number", "partition number", "preceding job", "think time",
)

#: SWF status -> Slurm state. ``-1`` (unknown, e.g. every ANL row) is taken as a job
#: that ran to its end. 2/3/4 are partial executions of a checkpointed/swapped job.
SWF_STATES: Mapping[int | None, str] = MappingProxyType({
    None: "COMPLETED",  # -1: unknown
    0: "FAILED",
    1: "COMPLETED",
    2: "REQUEUED",  # partial execution, will be continued
    3: "COMPLETED",  # last partial execution, job completed
    4: "FAILED",  # last partial execution, job failed
    5: "CANCELLED",
})

#: Philly ``status`` values (case-insensitive) -> Slurm state; Slurm state names are
#: accepted as they are.
PHILLY_STATES: Mapping[str, str] = MappingProxyType({
    "pass": "COMPLETED", "passed": "COMPLETED", "succeeded": "COMPLETED",
    "killed": "CANCELLED", "failed": "FAILED",
})

#: CSV column names read (lower-cased header cell -> role); other columns are ignored.
PHILLY_COLUMNS: Mapping[str, str] = MappingProxyType({
    "timestamp": "submit", "submit_time": "submit", "submitted_time": "submit",
    "submit": "submit",
    "duration": "duration", "run_time": "duration", "runtime": "duration",
    "elapsed": "duration",
    "num_gpus": "gpus", "gpus": "gpus", "ngpus": "gpus", "gpu_num": "gpus",
    "jobid": "jobid", "job_id": "jobid",
    "user": "user", "user_id": "user",
    "cluster": "vc", "vc": "vc", "virtual_cluster": "vc",
    "status": "status", "state": "status",
    "time_limit": "limit", "timelimit": "limit", "requested_time": "limit",
    "wall_time": "limit", "walltime": "limit",
    "wait": "wait", "wait_time": "wait",
    "gpu_time": "gpu_time",
})
_PHILLY_REQUIRED = ("submit", "duration", "gpus")

_INT64_MAX = 2**63 - 1
#: 9999-12-31T23:59:59Z: the last instant a datetime can hold.
_MAX_EPOCH = 253_402_300_799
_MAX_TOKEN = 40  # longer numeric tokens are rejected before int()/float() see them
_FLOAT_RE = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,4})?", re.ASCII)
_HEADER_RE = re.compile(r";\s*([A-Za-z][A-Za-z0-9_ ]*?)\s*:\s*(.*?)\s*", re.ASCII)
_HEADER_INT_RE = re.compile(r"-?\d{1,18}", re.ASCII)
_TS_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?", re.ASCII
)
_EPOCH_RE = re.compile(r"\d{1,12}", re.ASCII)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
#: SWF fields (0-based) that must be whole numbers; the others are times/memory (rounded).
_SWF_INTEGRAL = frozenset({0, 4, 7, 10, 11, 12, 13, 14, 15, 16})


@dataclass(frozen=True, slots=True)
class TraceHeader:
    """What a trace file says about itself, and how its rows are read.

    Attributes:
        variant: ``"standard"`` SWF, ``"anl"`` SWF variant, or ``"philly"`` CSV.
        fields: SWF header comments ``; Key: value`` as written (a repeated key's values
            joined by newlines); empty for CSV.
        columns: CSV column names as written; empty for SWF.
        max_jobs: ``MaxJobs``.
        max_records: ``MaxRecords``.
        max_nodes: ``MaxNodes`` (``None`` if absent or not positive).
        max_procs: ``MaxProcs`` (``None`` if absent or not positive).
        max_runtime: ``MaxRuntime`` in seconds.
        max_memory: ``MaxMemory`` in KiB.
        unix_start_time: ``UnixStartTime`` (epoch of relative time 0).
        time_zone_string: ``TimeZoneString``, e.g. ``"US/Pacific"`` (information only).
        start_epoch: The offset added to each submit time of the file.
        node_based: True when the per-job count (SWF field 5) counts nodes (ANL).
        cpus_per_node: Processors per node used to derive node counts (standard SWF),
            or to derive CPUs from nodes (ANL, ``None`` unless given).
        gpus_per_node: GPUs per node used to derive node counts (CSV), else ``None``.
    """

    variant: Variant
    fields: Mapping[str, str] = field(default_factory=dict)
    columns: tuple[str, ...] = ()
    max_jobs: int | None = None
    max_records: int | None = None
    max_nodes: int | None = None
    max_procs: int | None = None
    max_runtime: int | None = None
    max_memory: int | None = None
    unix_start_time: int | None = None
    time_zone_string: str | None = None
    start_epoch: int = 0
    node_based: bool = False
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None


class _Reject(Exception):
    """Internal: a row is to be quarantined with this reason and detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


# ---------------------------------------------------------------------------- inputs
PathOrLines = str | os.PathLike[str] | Iterable[str]


def _open_lines(path: str | os.PathLike[str]) -> Generator[str, None, None]:
    p = os.fspath(path)
    if p.endswith(".gz"):
        with gzip.open(p, "rt", encoding="utf-8", errors="replace") as gz:
            yield from gz
    else:
        with open(p, encoding="utf-8", errors="replace") as fh:
            yield from fh


def _head_and_body(src: PathOrLines) -> tuple[list[str], Iterator[str]]:
    """Read the leading blank/``;`` lines and the first other line (header or first row).

    Returns the lines read and an iterator over the whole input from line 1. For a path
    the file is read again from the start (lazily); an iterable is consumed once.
    """
    if isinstance(src, (str, os.PathLike)):
        reader = _open_lines(src)
        try:
            head = _take_head(reader)
        finally:
            reader.close()
        return head, _open_lines(src)
    it = iter(src)
    head = _take_head(it)
    return head, chain(head, it)


def _take_head(it: Iterator[str]) -> list[str]:
    head: list[str] = []
    for line in it:
        head.append(line)
        s = line.strip()
        if s and not s.startswith(";"):
            break
    return head


def _reject(raw: str, reason: str, detail: str, line: int) -> Rejected:
    raw = raw[:MAX_RAW]
    if not raw.isascii():  # lone surrogates (from a caller's lines) cannot be stored
        raw = raw.encode("utf-8", "backslashreplace").decode("utf-8")[:MAX_RAW]
    return Rejected(raw, reason, detail, line)


def _checked(raw: str, n: int, build: Callable[[], JobRecord]) -> Parsed:
    """One line's item: its record if it builds and passes ``check``, else a Rejected."""
    try:
        record = build()
    except _Reject as exc:
        return _reject(raw, exc.reason, exc.detail, n)
    problem = check(record)
    return record if problem is None else _reject(raw, problem[0], problem[1], n)


def _show(tok: str) -> str:
    """A token for a one-line detail (repr escapes newlines; long ones are cut)."""
    return repr(tok if len(tok) <= 40 else tok[:37] + "...")


# ---------------------------------------------------------------------------- numbers
def _number(tok: str, name: str, integral: bool) -> int:
    """Parse a numeric token (ASCII digits, optional fraction/exponent) to an int.

    Fractions are rounded unless ``integral``, where they are rejected.
    """
    if len(tok) > _MAX_TOKEN or not tok.isascii():
        raise _Reject(BAD_NUMBER, f"{name} {_show(tok)}")
    if tok.isdigit() or (tok[:1] == "-" and tok[1:].isdigit()):
        v = int(tok)
    else:
        if _FLOAT_RE.fullmatch(tok) is None:
            raise _Reject(BAD_NUMBER, f"{name} {_show(tok)}")
        f = float(tok)
        if not math.isfinite(f) or (integral and not f.is_integer()):
            raise _Reject(BAD_NUMBER, f"{name} {_show(tok)}")
        v = round(f)
    if not -_INT64_MAX <= v <= _INT64_MAX:
        raise _Reject(BAD_NUMBER, f"{name} {_show(tok)} out of range")
    return v


def _bounded(v: int, name: str) -> int:
    if v > _INT64_MAX:
        raise _Reject(BAD_NUMBER, f"{name} {v} out of range")
    return v


def _time(v: int, name: str) -> int:
    if v > _MAX_EPOCH:
        raise _Reject(BAD_TIME, f"{name} {v} after year 9999")
    return v


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------- SWF
def _parse_swf_header(lines: Iterable[str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in lines:
        m = _HEADER_RE.fullmatch(line.strip())
        if m is None:
            continue
        key, value = m.group(1), m.group(2)
        fields[key] = f"{fields[key]}\n{value}" if key in fields else value
    return fields


def _header_int(fields: Mapping[str, str], key: str, *, positive: bool = False) -> int | None:
    lower = key.lower()
    for k, v in fields.items():
        if k.lower().replace(" ", "") == lower:
            m = _HEADER_INT_RE.match(v)
            if m is None:
                return None
            n = int(m.group())
            return None if positive and n < 1 else n
    return None


def _header_str(fields: Mapping[str, str], key: str) -> str | None:
    lower = key.lower()
    for k, v in fields.items():
        if k.lower().replace(" ", "") == lower:
            return v
    return None


def _first_submit(head: list[str]) -> int | None:
    """The submit time of the first job row read, if it is a number."""
    for line in head:
        s = line.strip()
        if s and not s.startswith(";"):
            toks = s.split()
            if len(toks) < 2:
                return None
            try:
                return _number(toks[1], "submit time", False)
            except _Reject:
                return None
    return None


@dataclass(frozen=True, slots=True)
class _SwfOptions:
    anl: bool
    base: int
    cpus_per_node: int | None
    assume_zero_wait: bool
    cluster: str


def read_swf(
    path_or_lines: PathOrLines,
    *,
    variant: Literal["standard", "anl"] | None = None,
    start_epoch: int | None = None,
    cpus_per_node: int | None = None,
    assume_zero_wait: bool = True,
    cluster: str = "",
) -> tuple[TraceHeader, Iterator[Parsed]]:
    """Read an SWF trace: its header now, its jobs lazily (see the module docstring).

    Args:
        path_or_lines: A file path (``.gz`` read through gzip) or an iterable of lines
            (with or without their line terminators).
        variant: ``"standard"`` or ``"anl"``; ``None`` detects it (module docstring).
        start_epoch: Epoch added to submit times; default ``UnixStartTime`` from the
            header, 0 for the ANL variant (its times are epochs), else
            :data:`DEFAULT_START_EPOCH`.
        cpus_per_node: Standard: processors per node for node counts (default from the
            header, else 1). ANL: CPUs per node to derive ``cpus`` (default: unknown).
        assume_zero_wait: When the wait is unknown but the run time known, start the job
            at its submit time (else ``start_time`` and ``end_time`` are ``None``).
        cluster: Stored in each record's ``cluster``.

    Returns:
        The header, and an iterator yielding one :data:`~db.records.Parsed` per job row.

    Raises:
        ValueError: On an unknown variant or a non-positive ``cpus_per_node``.
        OSError: If the file cannot be opened.
    """
    if variant not in (None, "standard", "anl"):
        raise ValueError(f"unknown SWF variant {variant!r}")
    if cpus_per_node is not None and cpus_per_node < 1:
        raise ValueError("cpus_per_node must be >= 1")
    head, body = _head_and_body(path_or_lines)
    fields = _parse_swf_header(line for line in head if line.lstrip().startswith(";"))
    unix_start = _header_int(fields, "UnixStartTime")
    if variant is None:
        first = _first_submit(head)
        anl = unix_start is None and first is not None and first >= ANL_EPOCH_THRESHOLD
    else:
        anl = variant == "anl"
    max_nodes = _header_int(fields, "MaxNodes", positive=True)
    max_procs = _header_int(fields, "MaxProcs", positive=True)
    if anl:
        base = 0 if start_epoch is None else start_epoch
        per_node = cpus_per_node
    else:
        if start_epoch is not None:
            base = start_epoch
        elif unix_start is not None:
            base = unix_start
        else:
            base = DEFAULT_START_EPOCH
        if cpus_per_node is not None:
            per_node = cpus_per_node
        elif max_nodes is not None and max_procs is not None:
            per_node = max(1, max_procs // max_nodes)
        else:
            per_node = 1
    header = TraceHeader(
        variant="anl" if anl else "standard",
        fields=MappingProxyType(fields),
        max_jobs=_header_int(fields, "MaxJobs"),
        max_records=_header_int(fields, "MaxRecords"),
        max_nodes=max_nodes,
        max_procs=max_procs,
        max_runtime=_header_int(fields, "MaxRuntime"),
        max_memory=_header_int(fields, "MaxMemory"),
        unix_start_time=unix_start,
        time_zone_string=_header_str(fields, "TimeZoneString"),
        start_epoch=base,
        node_based=anl,
        cpus_per_node=per_node,
    )
    opts = _SwfOptions(anl, base, per_node, assume_zero_wait, cluster)
    return header, _swf_rows(body, opts)


def _swf_rows(lines: Iterator[str], opts: _SwfOptions) -> Iterator[Parsed]:
    for n, line in enumerate(lines, start=1):
        s = line.strip()
        if not s or s[0] == ";":
            continue
        raw = line.rstrip("\r\n")
        yield _checked(raw, n, partial(_swf_record, s, opts))


def _swf_record(s: str, o: _SwfOptions) -> JobRecord:
    if not s.isascii():
        raise _Reject(BAD_NUMBER, "non-ASCII text in an SWF row")
    toks = s.split()
    if len(toks) != 18:
        raise _Reject(WRONG_FIELD_COUNT, f"{len(toks)} fields, SWF has 18")
    v: list[int | None] = []
    for i, tok in enumerate(toks):
        x = _number(tok, SWF_FIELDS[i], i in _SWF_INTEGRAL)
        v.append(None if x == -1 else x)
    (job, submit, wait, run, count, f6, _used_mem, req_count, f9, req_mem, status, user,
     group, exe, queue, part, _prev, _think) = v

    if job is None:
        raise _Reject(MISSING_FIELD, "job number -1")
    if job < 1:
        raise _Reject(BAD_NUMBER, f"job number {job}")
    if submit is None:
        raise _Reject(MISSING_FIELD, "submit time -1")
    if submit < 0:
        raise _Reject(BAD_TIME, f"submit time {submit}")
    for value, name in ((wait, "wait time"), (run, "run time")):
        if value is not None and value < 0:
            raise _Reject(NEGATIVE_DURATION, f"{name} {value}")
    limit = f6 if o.anl else f9
    if limit is not None and limit < 0:
        raise _Reject(NEGATIVE_DURATION, f"requested time {limit}")
    for value, name in ((count, SWF_FIELDS[4]), (req_count, SWF_FIELDS[7]),
                        (req_mem, SWF_FIELDS[9]), (user, SWF_FIELDS[11]),
                        (group, SWF_FIELDS[12]), (exe, SWF_FIELDS[13]),
                        (queue, SWF_FIELDS[14]), (part, SWF_FIELDS[15])):
        if value is not None and value < 0:
            raise _Reject(BAD_NUMBER, f"{name} {value}")
    state = SWF_STATES.get(status)
    if state is None:
        raise _Reject(UNKNOWN_STATE, f"SWF status {status}")

    submit_t = _time(o.base + submit, "submit time")
    if wait is not None:
        start: int | None = _time(submit_t + wait, "start time")
    elif o.assume_zero_wait and run is not None:
        start = submit_t
    else:
        start = None
    end = _time(start + run, "end time") if start is not None and run is not None else None

    if req_count is None:
        req_count = count
    if o.anl:
        alloc_nodes, req_nodes = count, req_count
        per = o.cpus_per_node
        alloc_cpus = _bounded(count * per, "cpus") if count is not None and per else None
        req_cpus = _bounded(req_count * per, "cpus") if req_count is not None and per else None
    else:
        alloc_cpus, req_cpus = count, req_count
        per = o.cpus_per_node or 1
        alloc_nodes = _ceil_div(count, per) if count is not None else None
        req_nodes = _ceil_div(req_count, per) if req_count is not None else None
    mem_mb = (_bounded(_ceil_div(req_mem * req_count, 1024), "requested memory")
              if req_mem is not None and req_count is not None else None)

    if queue is not None:
        partition = f"q{queue}"
    elif part is not None:
        partition = f"p{part}"
    else:
        partition = ""
    return JobRecord(
        job_id=job,
        name=f"x{exe}" if exe is not None else "",
        user=f"u{user}" if user is not None else "",
        account=f"g{group}" if group is not None else "",
        partition=partition,
        qos="",
        state=state,
        submit_time=submit_t,
        eligible_time=submit_t,
        start_time=start,
        end_time=end,
        time_limit=limit,
        req=TresCounts(req_nodes, req_cpus, None, mem_mb),
        alloc=TresCounts(alloc_nodes, alloc_cpus, None, None),
        node_list="",
        nodes=(),
        priority=None,
        exit_code=None,
        cluster=o.cluster,
    )


# ---------------------------------------------------------------------------- CSV
@dataclass(frozen=True, slots=True)
class _CsvOptions:
    ncols: int
    index: Mapping[str, int]
    gpus_per_node: int
    tz: tzinfo | None  # None: UTC (fast path)
    assume_zero_wait: bool
    cluster: str


def read_philly_csv(
    path_or_lines: PathOrLines,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    tz: tzinfo = timezone.utc,
    assume_zero_wait: bool = True,
    cluster: str = "",
) -> tuple[TraceHeader, Iterator[Parsed]]:
    """Read a Philly-style CSV trace: its header now, its jobs lazily.

    Args:
        path_or_lines: A file path (``.gz`` read through gzip) or an iterable of lines.
        gpus_per_node: GPUs per node, for each job's node count.
        tz: Zone of the timestamps (the original Philly logs are in US Pacific time;
            the default reads them as UTC).
        assume_zero_wait: Without a ``wait`` column, start each job at its submit time
            (else ``start_time`` and ``end_time`` are ``None``).
        cluster: Stored in each record's ``cluster``.

    Returns:
        The header (``variant="philly"``, ``columns``), and an iterator yielding one
        :data:`~db.records.Parsed` per data row.

    Raises:
        ValueError: If there is no header row, a required column is missing, a column is
            named twice, or ``gpus_per_node`` is not positive.
        OSError: If the file cannot be opened.
    """
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be >= 1")
    head, body = _head_and_body(path_or_lines)
    header_line = next((ln for ln in head if ln.strip()), None)
    if header_line is None:
        raise ValueError("no CSV header row (empty input)")
    header_no = head.index(header_line) + 1
    try:
        columns = next(csv.reader([header_line.strip().lstrip("\ufeff")], strict=True))
    except (csv.Error, StopIteration):
        columns = []
    index: dict[str, int] = {}
    for i, col in enumerate(columns):
        role = PHILLY_COLUMNS.get(col.strip().lower())
        if role is None:
            continue
        if role in index:
            raise ValueError(f"CSV column for {role!r} given twice ({col!r})")
        index[role] = i
    missing = [r for r in _PHILLY_REQUIRED if r not in index]
    if missing:
        raise ValueError(
            f"CSV header {header_line.strip()[:200]!r} lacks column(s) for {missing}:"
            " need timestamp, duration and num_gpus"
        )
    header = TraceHeader(variant="philly", columns=tuple(columns), gpus_per_node=gpus_per_node)
    utc = tz is timezone.utc
    opts = _CsvOptions(len(columns), MappingProxyType(index), gpus_per_node,
                       None if utc else tz, assume_zero_wait, cluster)
    return header, _csv_rows(body, header_no, opts)


def _csv_rows(lines: Iterator[str], header_no: int, opts: _CsvOptions) -> Iterator[Parsed]:
    days: dict[str, int] = {}
    row = 0
    for n, line in enumerate(lines, start=1):
        if n <= header_no or not line.strip():
            continue
        row += 1
        raw = line.rstrip("\r\n")
        yield _checked(raw, n, partial(_csv_record, raw, row, opts, days))


def _csv_split(raw: str) -> list[str]:
    if '"' not in raw:
        return raw.split(",")
    try:
        return next(csv.reader([raw], strict=True))
    except (csv.Error, StopIteration) as exc:
        raise _Reject(BAD_VALUE, f"malformed CSV quoting: {exc}".splitlines()[0]) from None


def _csv_record(raw: str, row: int, o: _CsvOptions, days: dict[str, int]) -> JobRecord:
    cells = _csv_split(raw)
    if len(cells) != o.ncols:
        raise _Reject(WRONG_FIELD_COUNT, f"{len(cells)} fields, header has {o.ncols}")
    idx = o.index

    def cell(role: str) -> str | None:
        i = idx.get(role)
        return None if i is None else cells[i].strip()

    ts = cell("submit") or ""
    if not ts:
        raise _Reject(MISSING_FIELD, "timestamp empty")
    submit = _philly_time(ts, o.tz, days)

    gtok = cell("gpus") or ""
    if not gtok:
        raise _Reject(MISSING_FIELD, "num_gpus empty")
    gpus = _number(gtok, "num_gpus", True)
    if gpus < 0:
        raise _Reject(BAD_NUMBER, f"num_gpus {gpus}")

    duration = _duration(cell("duration"), "duration")
    wait = _duration(cell("wait"), "wait")
    limit = _duration(cell("limit"), "time_limit")
    _duration(cell("gpu_time"), "gpu_time")  # checked, not kept

    status = cell("status")
    if not status:
        state = "COMPLETED"
    else:
        mapped = PHILLY_STATES.get(status.lower())
        state = mapped if mapped is not None else status.upper()
        if state not in JOB_STATES or not status.isascii():
            raise _Reject(UNKNOWN_STATE, f"status {_show(status)}")
    user = _text(cell("user"), "user")
    account = _text(cell("vc"), "cluster")

    job_id = row
    name = ""
    jobid = cell("jobid")
    if jobid:
        if jobid.isascii() and jobid.isdigit() and len(jobid) <= 18:
            job_id = int(jobid)
        else:
            name = _text(jobid, "jobid")

    if wait is not None:
        start: int | None = _time(submit + wait, "start time")
    elif o.assume_zero_wait and duration is not None:
        start = submit
    else:
        start = None
    end = (_time(start + duration, "end time")
           if start is not None and duration is not None else None)
    nodes = max(1, _ceil_div(gpus, o.gpus_per_node))
    tres = TresCounts(nodes, None, gpus, None)
    return JobRecord(
        job_id=job_id,
        name=name,
        user=user,
        account=account,
        partition="",
        qos="",
        state=state,
        submit_time=submit,
        eligible_time=submit,
        start_time=start,
        end_time=end,
        time_limit=limit,
        req=tres,
        alloc=tres,
        node_list="",
        nodes=(),
        priority=None,
        exit_code=None,
        cluster=o.cluster,
    )


def _text(tok: str | None, name: str) -> str:
    """A name cell: printable text (no control characters), at most 256 characters."""
    if not tok:
        return ""
    if len(tok) > 256 or not tok.isprintable():
        raise _Reject(BAD_VALUE, f"{name} {_show(tok)}")
    return tok


def _duration(tok: str | None, name: str) -> int | None:
    """A CSV duration in seconds; empty or absent: unknown."""
    if not tok:
        return None
    v = _number(tok, name, False)
    if v < 0:
        raise _Reject(NEGATIVE_DURATION, f"{name} {_show(tok)}")
    return v


def _philly_time(ts: str, tz: tzinfo | None, days: dict[str, int]) -> int:
    m = _TS_RE.fullmatch(ts)
    if m is None:
        if _EPOCH_RE.fullmatch(ts):
            return _time(int(ts), "timestamp")
        raise _Reject(BAD_TIME, f"timestamp {_show(ts)}")
    hh, mm, ss = int(m.group(4)), int(m.group(5)), int(m.group(6))
    if hh > 23 or mm > 59 or ss > 59:
        raise _Reject(BAD_TIME, f"timestamp {_show(ts)}")
    if tz is None:
        day = ts[:10]
        base = days.get(day)
        if base is None:
            try:
                d = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
            except ValueError:
                raise _Reject(BAD_TIME, f"timestamp {_show(ts)}") from None
            base = (d.toordinal() - _EPOCH_ORDINAL) * 86400
            if len(days) < 100_000:
                days[day] = base
        return base + hh * 3600 + mm * 60 + ss
    try:
        dt = datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), hh, mm, ss,
                      tzinfo=tz)
        return int(dt.timestamp())
    except (ValueError, OverflowError):
        raise _Reject(BAD_TIME, f"timestamp {_show(ts)}") from None


# ---------------------------------------------------------------------------- spec
def synthetic_spec(
    name: str,
    header_or_records: TraceHeader | Iterable[Parsed],
    *,
    gpus_per_node: int | None = None,
    cpus_per_node: int | None = None,
    nodes_per_leaf: int = 4,
    num_nodes: int | None = None,
) -> ClusterSpec:
    """A homogeneous :class:`~slurm_plugin.cluster.ClusterSpec` for a trace.

    Sized from a header, or from the largest job of some records (rejected items are
    skipped), unless ``num_nodes`` is given. Defaults by source:

    - standard SWF header: ``MaxNodes`` nodes (else ``MaxProcs`` / cpus per node) of
      the header's processors per node (:attr:`TraceHeader.cpus_per_node`), no GPUs;
    - ANL header: ``MaxNodes`` (else ``MaxProcs``) nodes of
      :data:`DEFAULT_CPUS_PER_NODE` CPUs (or the header's), no GPUs;
    - Philly header: no size (pass ``num_nodes``); :attr:`TraceHeader.gpus_per_node`
      GPUs per node;
    - records: enough nodes for the largest node, CPU and GPU count of any one job;
      :data:`DEFAULT_GPUS_PER_NODE` GPUs per node if any job uses GPUs, else 0;
      :data:`DEFAULT_CPUS_PER_NODE` CPUs per node.

    Args:
        name: The cluster name.
        header_or_records: A :class:`TraceHeader`, or records (e.g. a reader's items).
        gpus_per_node: GPUs per node (default above).
        cpus_per_node: CPUs per node (default above).
        nodes_per_leaf: Nodes per leaf switch.
        num_nodes: Number of nodes (default above).

    Raises:
        ValueError: If the size cannot be told (a header without ``MaxNodes`` or
            ``MaxProcs``, no records) and ``num_nodes`` is not given, or on a
            non-positive size.
    """
    if isinstance(header_or_records, TraceHeader):
        h = header_or_records
        if h.variant == "philly":
            if gpus_per_node is None:
                gpn = h.gpus_per_node or DEFAULT_GPUS_PER_NODE
            else:
                gpn = gpus_per_node
            cpn = cpus_per_node or DEFAULT_CPUS_PER_NODE
            n = num_nodes
        else:
            gpn = 0 if gpus_per_node is None else gpus_per_node
            if h.node_based:
                cpn = cpus_per_node or h.cpus_per_node or DEFAULT_CPUS_PER_NODE
                n = num_nodes or h.max_nodes or h.max_procs
            else:
                cpn = cpus_per_node or h.cpus_per_node or 1
                n = num_nodes or h.max_nodes or (
                    _ceil_div(h.max_procs, cpn) if h.max_procs else None)
        if n is None:
            raise ValueError(
                f"trace {name!r}: the header gives no machine size (MaxNodes/MaxProcs);"
                " pass num_nodes"
            )
    else:
        max_nodes = max_cpus = max_gpus = 0
        seen = False
        for item in header_or_records:
            if isinstance(item, Rejected):
                continue
            seen = True
            for side in (item.req, item.alloc):
                max_nodes = max(max_nodes, side.nodes or 0)
                max_cpus = max(max_cpus, side.cpus or 0)
                max_gpus = max(max_gpus, side.gpus or 0)
        if gpus_per_node is None:
            gpn = DEFAULT_GPUS_PER_NODE if max_gpus else 0
        else:
            gpn = gpus_per_node
        cpn = cpus_per_node or DEFAULT_CPUS_PER_NODE
        if num_nodes is not None:
            n = num_nodes
        elif not seen:
            raise ValueError(f"trace {name!r}: no records to size the cluster; pass num_nodes")
        else:
            n = max(1, max_nodes, _ceil_div(max_cpus, cpn),
                    _ceil_div(max_gpus, gpn) if gpn else 0)
    return ClusterSpec.synthetic(
        name, n, cpus_per_node=cpn, gpus_per_node=gpn, nodes_per_leaf=nodes_per_leaf
    )
