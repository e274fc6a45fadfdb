"""Pure parsers for what Slurm prints: JSON (v0.0.38 to v0.0.44) and text.

Parsing is kept apart from running commands (see :mod:`.cli_backend`), so the parsers are
tested on golden files captured from a real cluster (``tests/golden/``).

JSON documents are parsed by the format version they declare in ``meta``: openapi
v0.0.38 (Slurm 22.05) prints plain numbers and state strings; the data_parser formats
v0.0.39 to v0.0.44 (Slurm 23.02 to 25.11) print numbers as ``{set, infinite, number}``
objects (from v0.0.39/40 on) and states as arrays (from v0.0.40 on). The value readers in
:mod:`.values` accept both shapes, so one parser serves every version; where a field
moved, the versions are told apart explicitly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from . import values as v
from .errors import SlurmError
from .hostlist import HostlistError, expand
from .tres import TresError, format_tres, gpu_count, parse_gres_count, parse_tres
from .types import (
    AccountingJob,
    SchedulerConfig,
    SlurmJob,
    SlurmNode,
    Switch,
    SwitchTree,
    TresCounts,
)

#: Format versions this module parses (the ``0.0.N`` minor number).
MIN_VERSION = 38
MAX_VERSION = 44

T = TypeVar("T")
_VERSION_RE = re.compile(r"v0\.0\.(\d+)")


# ============================================================== document plumbing
def load_document(raw: str | bytes, command: str) -> tuple[dict[str, Any], int]:
    """Decode a JSON document and find the format version it declares.

    Returns:
        The document and the version minor number (38 for openapi v0.0.38...).

    Raises:
        SlurmError: On invalid JSON, a non-object document, no declared version, an
            unsupported version, or errors Slurm reported inside the document.
    """
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SlurmError(
            command, f"invalid JSON (truncated or garbled output): {exc.msg} at char {exc.pos}"
        ) from None
    if not isinstance(doc, dict):
        raise SlurmError(command, f"expected a JSON object, got {type(doc).__name__}")
    version = detect_version(doc, command)
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        msg = first.get("description") or first.get("error") if isinstance(first, dict) else first
        raise SlurmError(command, f"Slurm reported an error: {msg}", field="errors[0]")
    return doc, version


def detect_version(doc: Mapping[str, Any], command: str) -> int:
    """The ``v0.0.N`` format version declared in a document's ``meta`` block.

    v0.0.38 declares ``meta.plugin.type`` (``openapi/v0.0.38``, ``openapi/dbv0.0.38``);
    23.02 declares ``meta.plugins.data_parser`` (``data_parser/v0.0.39``); later versions
    ``meta.plugin.data_parser`` (``data_parser/v0.0.40``).
    """
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        raise SlurmError(command, "no 'meta' block: cannot tell the format version", field="meta")
    candidates: list[Any] = []
    # 23.02 (v0.0.39) writes meta.plugins (plural) on the command line.
    for key in ("plugin", "plugins"):
        plugin = meta.get(key)
        if isinstance(plugin, dict):
            candidates += [plugin.get("data_parser"), plugin.get("type"), plugin.get("name")]
    candidates.append(meta.get("data_parser"))
    for c in candidates:
        if isinstance(c, str) and (m := _VERSION_RE.search(c)):
            n = int(m.group(1))
            if MIN_VERSION <= n <= MAX_VERSION:
                return n
            raise SlurmError(
                command,
                f"unsupported format version v0.0.{n} (rlsched parses v0.0.{MIN_VERSION}"
                f" to v0.0.{MAX_VERSION})",
                field="meta.plugin",
            )
    raise SlurmError(command, "no format version declared in 'meta.plugin'", field="meta.plugin")


def _records(doc: Mapping[str, Any], key: str, command: str) -> list[Any]:
    recs = doc.get(key)
    if not isinstance(recs, list):
        got = "missing" if recs is None else type(recs).__name__
        raise SlurmError(command, f"expected a list of records, got {got}", field=key)
    return recs


def _each(
    recs: Sequence[Any], key: str, command: str, fn: Callable[[Mapping[str, Any], str], T]
) -> Iterator[T]:
    for i, rec in enumerate(recs):
        path = f"{key}[{i}]"
        if not isinstance(rec, dict):
            raise SlurmError(command, f"expected an object, got {type(rec).__name__}", field=path)
        try:
            yield fn(rec, path)
        except v.FieldError as exc:
            raise SlurmError(command, exc.message, field=exc.field) from None
        except (HostlistError, TresError) as exc:
            raise SlurmError(command, str(exc), field=path) from None


def _need(rec: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in rec:
        raise v.FieldError(f"{path}.{key}", "missing required field", v.KIND_MISSING)
    return rec[key]


def _nodes(value: Any, field: str) -> tuple[str, ...]:
    """A node list given as a hostlist string or a list of names."""
    if isinstance(value, list):
        return tuple(v.text(x, field) for x in value)
    s = v.text(value, field).strip()
    if s.lower() in ("", "none assigned", "(null)", "none"):
        return ()
    return tuple(expand(s))


def _str_list(value: Any, field: str) -> tuple[str, ...]:
    """A comma-separated string or a list of strings."""
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(v.text(x, field) for x in value if x)
    return tuple(p for p in v.text(value, field).split(",") if p and p != "(null)")


# ============================================================== squeue --json
def _switches(rec: Mapping[str, Any], path: str) -> tuple[int | None, int | None]:
    """Requested switch count and max wait (seconds), where the format has them.

    v0.0.38 has neither (the CLI backend reads them from ``scontrol show job``);
    v0.0.39-41 print ``minimum_switches``, v0.0.42+ ``required_switches``, and both
    ``maximum_switch_wait_time``.
    """
    key = "required_switches" if "required_switches" in rec else "minimum_switches"
    count = v.number(rec.get(key), f"{path}.{key}")
    if count is None or count <= 0:
        return None, None
    wait = v.number(rec.get("maximum_switch_wait_time"), f"{path}.maximum_switch_wait_time")
    return count, wait


def _job(rec: Mapping[str, Any], path: str) -> SlurmJob:
    state, _flags = v.states(_need(rec, "job_state", path), f"{path}.job_state")
    job_id = v.number(_need(rec, "job_id", path), f"{path}.job_id")
    if job_id is None:
        raise v.FieldError(f"{path}.job_id", "job id is not set")
    req = parse_tres(v.text(rec.get("tres_req_str"), f"{path}.tres_req_str"))
    alloc = parse_tres(v.text(rec.get("tres_alloc_str"), f"{path}.tres_alloc_str"))
    running = state != "PENDING" and bool(alloc)
    tres = alloc if running else req
    num_nodes = v.number(rec.get("node_count"), f"{path}.node_count") or tres.get("node") or 1
    num_cpus = v.number(rec.get("cpus"), f"{path}.cpus") or tres.get("cpu") or 0
    gpus = gpu_count(tres)
    if not gpus:
        per_job = parse_gres_count(v.text(rec.get("tres_per_job"), f"{path}.tres_per_job"))
        per_node = parse_gres_count(v.text(rec.get("tres_per_node"), f"{path}.tres_per_node"))
        gpus = per_job or per_node * num_nodes
    nice_raw = v.number(rec.get("nice"), f"{path}.nice")
    array_job = v.number(rec.get("array_job_id"), f"{path}.array_job_id")
    array_task = v.number(rec.get("array_task_id"), f"{path}.array_task_id")
    switches, switches_wait = _switches(rec, path)
    site = rec.get("site_factor")
    return SlurmJob(
        job_id=job_id,
        name=v.text(rec.get("name"), f"{path}.name"),
        user=v.text(rec.get("user_name"), f"{path}.user_name"),
        account=v.text(rec.get("account"), f"{path}.account"),
        partition=v.text(rec.get("partition"), f"{path}.partition").split(",")[0],
        qos=v.text(rec.get("qos"), f"{path}.qos"),
        state=state,
        state_reason=v.text(rec.get("state_reason"), f"{path}.state_reason") or "None",
        submit_time=v.timestamp(rec.get("submit_time"), f"{path}.submit_time") or 0,
        eligible_time=v.timestamp(rec.get("eligible_time"), f"{path}.eligible_time"),
        start_time=v.timestamp(rec.get("start_time"), f"{path}.start_time"),
        time_limit=v.minutes_to_seconds(rec.get("time_limit"), f"{path}.time_limit"),
        num_nodes=int(num_nodes),
        num_cpus=int(num_cpus),
        num_gpus=int(gpus),
        mem_mb=tres.get("mem"),
        priority=v.number(rec.get("priority"), f"{path}.priority") or 0,
        site_factor=v.site_factor(site, f"{path}.site_factor"),
        nice=0 if nice_raw is None else v.signed32(nice_raw),
        required_nodes=_nodes(rec.get("required_nodes"), f"{path}.required_nodes"),
        excluded_nodes=_nodes(rec.get("excluded_nodes"), f"{path}.excluded_nodes"),
        features=v.text(rec.get("features"), f"{path}.features"),
        switches=switches,
        switches_wait=switches_wait,
        nodes=_nodes(rec.get("nodes"), f"{path}.nodes") if running else (),
        array_job_id=array_job or None,
        array_task_id=array_task if array_job else None,
    )


def parse_squeue_json(raw: str | bytes, command: str = "squeue --json") -> list[SlurmJob]:
    """Parse ``squeue --json`` (any supported version) into jobs.

    Raises:
        SlurmError: Naming the offending field, on any malformed or unknown input.
    """
    return parse_squeue_document(raw, command)[0]


def parse_squeue_document(
    raw: str | bytes, command: str = "squeue --json"
) -> tuple[list[SlurmJob], int]:
    """Like :func:`parse_squeue_json`, also returning the declared format version."""
    doc, version = load_document(raw, command)
    return list(_each(_records(doc, "jobs", command), "jobs", command, _job)), version


# ============================================================== sinfo/scontrol nodes --json
def _node(rec: Mapping[str, Any], path: str) -> SlurmNode:
    state, flags = v.states(_need(rec, "state", path), f"{path}.state")
    extra = rec.get("state_flags")
    if isinstance(extra, list):
        flags = flags + tuple(str(f).upper() for f in extra if str(f).upper() not in flags)
    gres = rec.get("gres")
    gres_used = rec.get("gres_used")
    return SlurmNode(
        name=v.text(_need(rec, "name", path), f"{path}.name"),
        state=state,
        state_flags=flags,
        cpus=v.number(rec.get("cpus"), f"{path}.cpus") or 0,
        alloc_cpus=v.number(rec.get("alloc_cpus"), f"{path}.alloc_cpus") or 0,
        gpus=parse_gres_count(v.text(gres, f"{path}.gres")),
        alloc_gpus=parse_gres_count(v.text(gres_used, f"{path}.gres_used")),
        real_memory_mb=v.number(rec.get("real_memory"), f"{path}.real_memory") or 0,
        alloc_memory_mb=v.number(rec.get("alloc_memory"), f"{path}.alloc_memory") or 0,
        features=_str_list(rec.get("features"), f"{path}.features"),
        active_features=_str_list(rec.get("active_features"), f"{path}.active_features"),
        partitions=_str_list(rec.get("partitions"), f"{path}.partitions"),
    )


def parse_nodes_json(raw: str | bytes, command: str = "sinfo --json") -> list[SlurmNode]:
    """Parse a per-node document (``sinfo --json`` on 22.05/23.02, ``scontrol show nodes --json``).

    Each node appears once (the first record wins if Slurm repeats a node per partition).

    Raises:
        SlurmError: On malformed input, or on the grouped ``sinfo`` form of 23.11+ (use
            ``scontrol show nodes --json`` there: :func:`is_grouped_sinfo` tells).
    """
    doc, _version = load_document(raw, command)
    if "nodes" not in doc and "sinfo" in doc:
        raise SlurmError(
            command, "grouped sinfo output has no per-node allocation; read"
            " 'scontrol show nodes --json' instead", field="sinfo",
        )
    out: dict[str, SlurmNode] = {}
    for node in _each(_records(doc, "nodes", command), "nodes", command, _node):
        out.setdefault(node.name, node)
    return list(out.values())


def is_grouped_sinfo(raw: str | bytes) -> bool:
    """True when an ``sinfo --json`` document is the grouped form (top-level ``sinfo``)."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError:
        return False
    return isinstance(doc, dict) and "sinfo" in doc and "nodes" not in doc


# ============================================================== sacct --json
def _tres_list(value: Any, field: str) -> dict[str, int]:
    """Sacct's TRES arrays ``[{type, name, id, count}]`` to ``{"cpu": 4, "gres/gpu": 2}``."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise v.FieldError(field, f"expected a TRES list, got {type(value).__name__}")
    out: dict[str, int] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise v.FieldError(f"{field}[{i}]", "expected a TRES object")
        typ = v.text(item.get("type"), f"{field}[{i}].type")
        name = v.text(item.get("name"), f"{field}[{i}].name")
        count = v.number(item.get("count"), f"{field}[{i}].count")
        if count is None or count < 0:
            continue
        out[f"{typ}/{name}" if name else typ] = count
    return out


def _exit(value: Any, field: str) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise v.FieldError(field, "expected an exit code object")
    rc = v.number(value.get("return_code"), f"{field}.return_code")
    sig = value.get("signal")
    signo = None
    if isinstance(sig, dict):
        signo = v.number(sig.get("id", sig.get("signal_id")), f"{field}.signal.id")
    return rc, signo or None


def _acct_job(rec: Mapping[str, Any], path: str) -> AccountingJob:
    job_id = v.number(_need(rec, "job_id", path), f"{path}.job_id")
    if job_id is None:
        raise v.FieldError(f"{path}.job_id", "job id is not set")
    t = rec.get("time") or {}
    if not isinstance(t, dict):
        raise v.FieldError(f"{path}.time", "expected an object")
    st = rec.get("state") or {}
    if not isinstance(st, dict):
        raise v.FieldError(f"{path}.state", "expected an object")
    state, _ = v.states(_need(st, "current", f"{path}.state"), f"{path}.state.current")
    tres = rec.get("tres") or {}
    req = _tres_list(tres.get("requested"), f"{path}.tres.requested")
    alloc = _tres_list(tres.get("allocated"), f"{path}.tres.allocated")
    arr = rec.get("array") or {}
    array_job = v.number(arr.get("job_id"), f"{path}.array.job_id") if arr else None
    array_task = v.number(arr.get("task_id"), f"{path}.array.task_id") if arr else None
    rc, sig = _exit(rec.get("exit_code"), f"{path}.exit_code")
    node_list = v.text(rec.get("nodes"), f"{path}.nodes")
    limit = t.get("limit")
    return AccountingJob(
        job_id=job_id,
        name=v.text(rec.get("name"), f"{path}.name"),
        user=v.text(rec.get("user"), f"{path}.user"),
        account=v.text(rec.get("account"), f"{path}.account"),
        partition=v.text(rec.get("partition"), f"{path}.partition"),
        qos=v.text(rec.get("qos"), f"{path}.qos"),
        state=state,
        submit_time=v.timestamp(t.get("submission"), f"{path}.time.submission") or 0,
        eligible_time=v.timestamp(t.get("eligible"), f"{path}.time.eligible"),
        start_time=v.timestamp(t.get("start"), f"{path}.time.start"),
        end_time=v.timestamp(t.get("end"), f"{path}.time.end"),
        time_limit=v.minutes_to_seconds(limit, f"{path}.time.limit"),
        req=TresCounts.from_tres(req),
        alloc=TresCounts.from_tres(alloc),
        node_list=node_list,
        nodes=_nodes(node_list, f"{path}.nodes"),
        priority=v.number(rec.get("priority"), f"{path}.priority"),
        exit_code=rc,
        signal=sig,
        array_job_id=array_job or None,
        array_task_id=array_task if array_job else None,
        restart_count=v.number(rec.get("restart_cnt"), f"{path}.restart_cnt") or 0,
        cluster=v.text(rec.get("cluster"), f"{path}.cluster"),
    )


def parse_sacct_json(raw: str | bytes, command: str = "sacct --json") -> list[AccountingJob]:
    """Parse ``sacct --json`` (any supported version); steps are not returned."""
    return list(_each(sacct_json_records(raw, command), "jobs", command, _acct_job))


def sacct_json_records(raw: str | bytes, command: str = "sacct --json") -> list[Any]:
    """The raw job objects of a ``sacct --json`` document (for record-by-record ingest).

    Raises:
        SlurmError: If the document as a whole is unreadable (see :func:`load_document`).
    """
    doc, _version = load_document(raw, command)
    return _records(doc, "jobs", command)


def sacct_json_record(rec: Any, path: str) -> AccountingJob:
    """Parse one job object of a ``sacct --json`` document.

    Raises:
        FieldError, HostlistError, TresError: On a malformed record.
    """
    if not isinstance(rec, dict):
        raise v.FieldError(path, f"expected an object, got {type(rec).__name__}")
    return _acct_job(rec, path)


# ============================================================== sacct -P
#: Columns rlsched asks of ``sacct -P``; JobName is last so a ``|`` in a name cannot shift
#: the other columns.
SACCT_FIELDS = (
    "JobIDRaw", "JobID", "Cluster", "User", "Account", "Partition", "QOS", "State",
    "Submit", "Eligible", "Start", "End", "Timelimit", "ReqTRES", "AllocTRES", "NodeList",
    "Priority", "ExitCode", "JobName",
)

_JOBID_RE = re.compile(r"^(\d+)(?:_(\d+|\[.*\]))?(?:\+\d+)?(?:\.\S+)?$")


def parse_sacct_parsable(raw: str, command: str = "sacct -P") -> list[AccountingJob]:
    """Parse ``sacct -P`` output that starts with its header line.

    The columns may be :data:`SACCT_FIELDS` or any superset or reordering of them. Step
    lines (``123.batch``) are skipped.

    Raises:
        SlurmError: Naming the line and column on malformed input.
    """
    lines = [ln for ln in raw.splitlines() if ln.strip()]
    if not lines:
        return []
    try:
        reader = SacctParsableReader(lines[0])
    except v.FieldError as exc:
        raise SlurmError(command, exc.message, field=exc.field) from None
    out: list[AccountingJob] = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            job = reader.row(line, n)
        except v.FieldError as exc:
            raise SlurmError(command, exc.message, field=exc.field) from None
        except (HostlistError, TresError) as exc:
            raise SlurmError(command, str(exc), field=f"line {n}") from None
        if job is not None:
            out.append(job)
    return out


class SacctParsableReader:
    """Reads ``sacct -P`` output one line at a time (for streaming ingest).

    Args:
        header: The header line (column names separated by ``|``).

    Raises:
        FieldError: If the header lacks JobIDRaw, State or Submit.
    """

    def __init__(self, header: str) -> None:
        self.header = header.rstrip("\r\n").split("|")
        missing = [f for f in ("JobIDRaw", "State", "Submit") if f not in self.header]
        if missing:
            raise v.FieldError("header", f"header lacks columns {missing}", v.KIND_MISSING)
        self._joins_name = self.header[-1] == "JobName"

    def row(self, line: str, n: int) -> AccountingJob | None:
        """Parse one data line (``n`` is its line number); ``None`` for a job step.

        Raises:
            FieldError, HostlistError, TresError: On a malformed line.
        """
        parts = line.rstrip("\r\n").split("|")
        width = len(self.header)
        if len(parts) > width and self._joins_name:
            parts = parts[:width - 1] + ["|".join(parts[width - 1:])]
        if len(parts) != width:
            raise v.FieldError(
                f"line {n}", f"expected {width} columns, got {len(parts)}", v.KIND_FIELD_COUNT
            )
        return _acct_row(dict(zip(self.header, parts, strict=True)), f"line {n}")


def _acct_row(row: Mapping[str, str], path: str) -> AccountingJob | None:
    raw_id = row["JobIDRaw"]
    if "." in raw_id:
        return None  # a step
    m = _JOBID_RE.match(row.get("JobID", raw_id))
    if not m:
        raise v.FieldError(
            f"{path}.JobID", f"not a job id: {row.get('JobID')!r:.40}", v.KIND_NUMBER
        )
    job_id = v.int_text(raw_id.split("+")[0], f"{path}.JobIDRaw")
    if job_id is None:
        raise v.FieldError(f"{path}.JobIDRaw", "job id is not set")
    array_job = array_task = None
    if m.group(2) is not None:
        # "12_3" is task 3 of array 12; "12_[4-9]" is the array's still-pending remainder
        # (no task id yet), as slurmdbd records it too.
        array_job = int(m.group(1))
        array_task = int(m.group(2)) if m.group(2).isdigit() else None
    req = parse_tres(row.get("ReqTRES", ""))
    alloc = parse_tres(row.get("AllocTRES", ""))
    state = row["State"].split()[0].upper() if row["State"].strip() else ""
    if not state:
        raise v.FieldError(f"{path}.State", "empty state", v.KIND_STATE)
    exit_code = sig = None
    if ec := row.get("ExitCode", "").strip():
        a, _, b = ec.partition(":")
        exit_code = v.int_text(a, f"{path}.ExitCode")
        sig = v.int_text(b, f"{path}.ExitCode") if b else None
    node_list = row.get("NodeList", "")
    limit = row.get("Timelimit", "")
    return AccountingJob(
        job_id=job_id,
        name=row.get("JobName", ""),
        user=row.get("User", ""),
        account=row.get("Account", ""),
        partition=row.get("Partition", ""),
        qos=row.get("QOS", ""),
        state=state,
        submit_time=v.iso_utc(row["Submit"], f"{path}.Submit") or 0,
        eligible_time=v.iso_utc(row.get("Eligible", ""), f"{path}.Eligible"),
        start_time=v.iso_utc(row.get("Start", ""), f"{path}.Start"),
        end_time=v.iso_utc(row.get("End", ""), f"{path}.End"),
        time_limit=v.duration(limit, f"{path}.Timelimit") if limit else None,
        req=TresCounts.from_tres(req),
        alloc=TresCounts.from_tres(alloc),
        node_list=node_list,
        nodes=_nodes(node_list, f"{path}.NodeList"),
        priority=v.int_text(row.get("Priority", ""), f"{path}.Priority"),
        exit_code=exit_code,
        signal=sig or None,
        array_job_id=array_job,
        array_task_id=array_task,
        restart_count=v.int_text(row.get("Restarts", "0") or "0", f"{path}.Restarts") or 0,
        cluster=row.get("Cluster", ""),
    )


# ============================================================== scontrol show topology
def _kv_tokens(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in line.split():
        key, sep, val = tok.partition("=")
        if sep:
            out[key] = val
    return out


def parse_topology(text: str, command: str = "scontrol show topology") -> SwitchTree:
    """Parse ``scontrol show topology`` (``SwitchName=.. Level=.. Nodes=.. Switches=..``).

    Raises:
        SlurmError: On a switch line without a name or with a bad level or node list.
    """
    switches: list[Switch] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if "SwitchName=" not in line:
            continue
        kv = _kv_tokens(line)
        name = kv.get("SwitchName", "")
        if not name:
            raise SlurmError(command, "switch without a name", field=f"line {n}")
        try:
            level = v.int_text(kv.get("Level", "0"), f"line {n}.Level") or 0
            speed = v.int_text(kv.get("LinkSpeed", ""), f"line {n}.LinkSpeed")
            nodes = _nodes(kv.get("Nodes", ""), f"line {n}.Nodes")
            children = _nodes(kv.get("Switches", ""), f"line {n}.Switches")
        except v.FieldError as exc:
            raise SlurmError(command, exc.message, field=exc.field) from None
        except HostlistError as exc:
            raise SlurmError(command, str(exc), field=f"line {n}") from None
        switches.append(Switch(name, level, nodes, children, speed))
    return SwitchTree.from_switches(switches)


# ============================================================== scontrol show config
_WEIGHTS = {
    "PriorityWeightAge": "age",
    "PriorityWeightAssoc": "assoc",
    "PriorityWeightFairShare": "fairshare",
    "PriorityWeightJobSize": "job_size",
    "PriorityWeightPartition": "partition",
    "PriorityWeightQOS": "qos",
}


def parse_key_values(text: str) -> dict[str, str]:
    """``Key = Value`` lines (as ``scontrol show config`` prints) into a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, val = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            out.setdefault(key, val.strip())
    return out


def parse_scheduler_parameters(value: str) -> dict[str, str]:
    """``bf_window=1440,bf_resolution=60,default_queue_depth=100`` into a dict."""
    out: dict[str, str] = {}
    if value.strip().lower() in ("", "(null)"):
        return out
    for item in value.split(","):
        key, _, val = item.strip().partition("=")
        if key:
            out[key] = val
    return out


def parse_config(text: str, command: str = "scontrol show config") -> SchedulerConfig:
    """Parse ``scontrol show config`` into the scheduling-relevant configuration.

    Raises:
        SlurmError: When the text has no ``key = value`` lines or a weight is not a number.
    """
    raw = parse_key_values(text)
    if not raw:
        raise SlurmError(command, "no 'key = value' lines in the output")
    weights: dict[str, int] = {}
    try:
        for key, name in _WEIGHTS.items():
            weights[name] = v.int_text(raw.get(key, "0"), key) or 0
        max_age = v.duration(raw.get("PriorityMaxAge", "7-0"), "PriorityMaxAge") or 0
        half = v.duration(raw.get("PriorityDecayHalfLife", "7-0"), "PriorityDecayHalfLife") or 0
    except v.FieldError as exc:
        raise SlurmError(command, exc.message, field=exc.field) from None
    return SchedulerConfig(
        cluster_name=raw.get("ClusterName", ""),
        slurm_version=raw.get("SLURM_VERSION", ""),
        priority_type=raw.get("PriorityType", ""),
        priority_weights=weights,
        priority_max_age=max_age,
        priority_decay_half_life=half,
        scheduler_type=raw.get("SchedulerType", ""),
        scheduler_parameters=parse_scheduler_parameters(raw.get("SchedulerParameters", "")),
        select_type=raw.get("SelectType", ""),
        topology_plugin=raw.get("TopologyPlugin", ""),
        raw=raw,
    )


# ============================================================== sprio
def parse_sprio_site(text: str, command: str = "sprio") -> dict[int, int]:
    """``sprio -h -o '%i %S'`` output (job id, site factor) into ``{job_id: site}``.

    sprio lists only eligible pending jobs, and with none it prints ``Unable to find jobs
    matching user/id(s) specified`` (exit code 0): that gives ``{}``.
    """
    out: dict[int, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts or line.startswith("Unable to find jobs"):
            continue
        if len(parts) != 2:
            raise SlurmError(command, f"expected 2 columns, got {len(parts)}", field=f"line {n}")
        try:
            job = v.int_text(parts[0], f"line {n}.JOBID")
            site = v.int_text(parts[1], f"line {n}.SITE")
        except v.FieldError as exc:
            raise SlurmError(command, exc.message, field=exc.field) from None
        if job is not None and site is not None:
            out[job] = site
    return out


# ============================================================== squeue -O (22.05 switches)
#: ``squeue`` format giving each job's wanted switch count and max wait, ``|``-separated
#: (22.05's JSON has neither field).
SQUEUE_SWITCHES_FORMAT = "JobID:|,ReqSwitch:|,Wait4Switch:|"


def parse_squeue_switches(
    text: str, command: str = "squeue -O ReqSwitch"
) -> dict[int, tuple[int | None, int | None]]:
    """``squeue -h -O`` :data:`SQUEUE_SWITCHES_FORMAT` output into ``{job: (count, wait_s)}``.

    A count of 0 (not requested) gives ``(None, None)``. Array tasks print ``12_3``: the
    part before ``_`` is the array's id, which the JSON also calls the task's job id only
    for the last task, so such lines are skipped.
    """
    out: dict[int, tuple[int | None, int | None]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3:
            raise SlurmError(command, f"expected 3 columns, got {len(parts)}", field=f"line {n}")
        if not parts[0].isdigit():
            continue
        try:
            count = v.int_text(parts[1], f"line {n}.REQ_SWITCH")
            wait = v.duration(parts[2], f"line {n}.WAIT4SWITCH")
        except v.FieldError as exc:
            raise SlurmError(command, exc.message, field=exc.field) from None
        out[int(parts[0])] = (count, wait) if count else (None, None)
    return out


# ============================================================== writing sacct -P
def _tres_text(counts: TresCounts) -> str:
    tres = {k: n for k, n in (("cpu", counts.cpus), ("mem", counts.mem_mb),
                              ("node", counts.nodes), ("gres/gpu", counts.gpus))
            if n is not None and (n or k != "gres/gpu")}
    return format_tres(tres)


def _iso(t: int | None, missing: str = "Unknown") -> str:
    if t is None:
        return missing
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def format_sacct_row(job: AccountingJob) -> str:
    """One ``sacct -P`` line in :data:`SACCT_FIELDS` order, as Slurm prints it (UTC).

    For writing accounting dumps (the demo's synthetic history) that
    :class:`SacctParsableReader` reads back to an equal record. A pending array's
    remainder (array id, no task id) is written ``N_[]``.
    """
    if job.array_job_id is None:
        shown = str(job.job_id)
    elif job.array_task_id is None:
        shown = f"{job.array_job_id}_[]"
    else:
        shown = f"{job.array_job_id}_{job.array_task_id}"
    exit_code = "" if job.exit_code is None else f"{job.exit_code}:{job.signal or 0}"
    fields = (
        str(job.job_id), shown, job.cluster, job.user, job.account, job.partition, job.qos,
        job.state, _iso(job.submit_time), _iso(job.eligible_time), _iso(job.start_time),
        _iso(job.end_time), "UNLIMITED" if job.time_limit is None
        else v.format_duration(job.time_limit), _tres_text(job.req), _tres_text(job.alloc),
        job.node_list or "None assigned", "" if job.priority is None else str(job.priority),
        exit_code, job.name.replace("\n", " ").replace("\r", " "),
    )
    return "|".join(fields)


def sacct_header() -> str:
    """The header line of a ``sacct -P`` dump written with :func:`format_sacct_row`."""
    return "|".join(SACCT_FIELDS)
