"""The Slurm client built on pyslurm 25.11 (the Slurm C API, in process), for Slurm 25.11 sites.

pyslurm is imported when a :class:`PySlurmClient` is built, not when this module is
imported, so the rest of rlsched works where pyslurm is not installed (it builds only
against the Slurm 25.11 headers).

What is read from pyslurm (all from the pyslurm 25.11 sources; units as documented there):

* jobs: ``pyslurm.Jobs.load()`` -- a collection of ``pyslurm.Job``; times are epoch
  seconds, ``time_limit`` is in **minutes** (``None`` for unlimited), ``memory`` and the
  ``mem`` TRES are MiB, ``nice`` is already signed, node lists are hostlist strings.
* nodes: ``pyslurm.Nodes.load()`` -- ``pyslurm.Node``; memory in MiB, ``state`` is
  ``BASE+FLAG+...`` (e.g. ``IDLE+DRAIN``), GRES as dicts.
* accounting: ``pyslurm.db.Jobs.load(pyslurm.db.JobFilter(...))`` -- ``pyslurm.db.Job``.
* configuration: ``pyslurm.slurmctld.Config.load()``; ``priority_max_age`` and
  ``priority_decay_half_life`` in seconds.
* changes: ``pyslurm.Job(job_id).modify(pyslurm.JobSubmitDescription(...))`` with
  ``site_factor`` or ``required_nodes``.

pyslurm has no topology API, so :meth:`PySlurmClient.topology` runs
``scontrol show topology`` through :class:`~slurm_plugin.slurm.cli_backend.CliSlurmClient`.
pyslurm also cannot send two of the values rlsched needs (``JobSubmitDescription``
drops a ``site_factor`` of 0 and turns an empty ``required_nodes`` into "unchanged"),
so setting a site factor of 0 and clearing a ReqNodeList go through ``scontrol update``
the same way.

Timeouts: a pyslurm call is a blocking C call that Python cannot interrupt. Each call
(with the conversion of its result) runs in a daemon worker thread, and the caller waits
for it through a :class:`concurrent.futures.Future` for at most :attr:`timeout` seconds;
past that it gets a :class:`~slurm_plugin.slurm.errors.SlurmError`. **The worker thread
cannot be killed**: it goes on until libslurm returns (its result is then dropped). Being
a daemon thread, it does not keep the process from exiting. While
:data:`MAX_HUNG_CALLS` such abandoned calls are still running, new calls are refused at
once instead of piling up more threads on an unresponsive slurmctld.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..when import epoch_s
from . import values as v
from .client import DEFAULT_TIMEOUT, SlurmClient, req_nodes_hostlist
from .errors import SlurmError
from .hostlist import expand
from .tres import gpu_count
from .types import (
    PENDING,
    RUNNING,
    AccountingJob,
    SchedulerConfig,
    SlurmJob,
    SlurmNode,
    SwitchTree,
    TresCounts,
)

if TYPE_CHECKING:
    from .cli_backend import CliSlurmClient

__all__ = ["MAX_HUNG_CALLS", "NOT_INSTALLED", "PySlurmClient"]

T = TypeVar("T")

#: Reason given when pyslurm cannot be imported.
NOT_INSTALLED = (
    "pyslurm is not installed: pip install 'rlsched[pyslurm]' (needs Slurm 25.11 headers)"
    " or use the cli backend"
)

#: Timed-out pyslurm calls that may still be running before new calls are refused.
MAX_HUNG_CALLS = 4

#: What rlsched needs of the pyslurm module (present in pyslurm 25.11).
_REQUIRED = ("Jobs", "Job", "JobSubmitDescription", "Nodes", "db", "slurmctld")


#: ``slurm_job_state_string()`` names a state flag instead of the base state when one is
#: set; these flags are only ever set on running jobs.
_RUNNING_FLAGS = frozenset({"CONFIGURING", "RESIZING"})

#: Strings Slurm uses for "no nodes" in node-list fields.
_NO_NODES = frozenset({"", "none assigned", "(null)", "none"})

#: Priority weights: SchedulerConfig key -> (pyslurm Config attribute, scontrol key).
_WEIGHTS = {
    "age": ("priority_weight_age", "PriorityWeightAge"),
    "assoc": ("priority_weight_assoc", "PriorityWeightAssoc"),
    "fairshare": ("priority_weight_fair_share", "PriorityWeightFairShare"),
    "job_size": ("priority_weight_job_size", "PriorityWeightJobSize"),
    "partition": ("priority_weight_partition", "PriorityWeightPartition"),
    "qos": ("priority_weight_qos", "PriorityWeightQOS"),
}


def _import_pyslurm() -> Any:
    """Import pyslurm, turning any failure into a :class:`SlurmError`."""
    try:
        import pyslurm
    except ModuleNotFoundError as exc:
        if exc.name != "pyslurm":
            # pyslurm is there but a module it needs is not.
            raise SlurmError("import pyslurm", f"pyslurm could not be loaded: {exc}") from None
        raise SlurmError("import pyslurm", NOT_INSTALLED) from None
    except (ImportError, OSError) as exc:
        # Installed, but built against another libslurm, or libslurm is missing.
        raise SlurmError("import pyslurm", f"pyslurm could not be loaded: {exc}") from None
    return pyslurm


# ------------------------------------------------------------------ value helpers
def _int(value: Any) -> int | None:
    """A pyslurm number as an int; ``None``, ``"UNLIMITED"`` and other markers give ``None``.

    pyslurm's ``u32_parse``/``_raw_time`` return ``None`` for unset (``NO_VAL``, often 0)
    and the string ``"UNLIMITED"`` (or ``None``) for ``INFINITE``.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    """A pyslurm string; ``None`` gives ``""``."""
    return "" if value is None else str(value)


def _timestamp(value: Any) -> int | None:
    """Epoch seconds; unset (``None``, 0) gives ``None``."""
    n = _int(value)
    return n if n is not None and n > 0 else None


def _minutes(value: Any) -> int | None:
    """A pyslurm time limit in minutes to seconds; unlimited/unset give ``None``."""
    n = _int(value)
    return None if n is None else n * 60


def _nodes(value: Any) -> tuple[str, ...]:
    """A hostlist string (or a list of names) expanded to names."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(str(x) for x in value if x)
    text = str(value).strip()
    if text.lower() in _NO_NODES:
        return ()
    return tuple(expand(text))


def _str_tuple(value: Any) -> tuple[str, ...]:
    """A pyslurm list of strings (or a comma-separated string)."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(x) for x in items if x and x != "(null)")


def _count(value: Any) -> int | None:
    """The count in a GRES/TRES value: an int, a digit string, ``{"count": n}`` or ``.count``."""
    if isinstance(value, Mapping):
        return _int(value.get("count"))
    n = _int(value)
    if n is not None:
        return n
    return _int(getattr(value, "count", None))


def _gres_tres(gres: Any) -> dict[str, int]:
    """A pyslurm GRES dict (``{"gpu:a100": 4}``, ``{"gres/gpu": 2}``) in TRES form.

    Keys get a ``gres/`` prefix (``{"gres/gpu:a100": 4}``), as :func:`_tres` gives them.
    """
    out: dict[str, int] = {}
    if not gres:
        return out
    for key, value in dict(gres).items():
        name = str(key)
        for prefix in ("gres/", "gres:"):
            if name.startswith(prefix):
                name = name[len(prefix) :]
        n = _count(value)
        if name and n is not None:
            out[f"gres/{name}"] = n
    return out


def _tres(tres: Any) -> dict[str, int]:
    """A ``pyslurm.db.TrackableResources`` (or ``None``) as ``{"cpu": 4, "mem": MiB, ...}``.

    Keys as :func:`~slurm_plugin.slurm.tres.parse_tres` gives them: ``cpu``, ``mem`` (MiB,
    pyslurm converts it), ``node``, ``billing`` and ``gres/<name>``.
    """
    out: dict[str, int] = {}
    if tres is None:
        return out
    for key in ("cpu", "mem", "node", "billing"):
        n = _count(getattr(tres, key, None))
        if n is not None:
            out[key] = n
    out.update(_gres_tres(getattr(tres, "gres", None)))
    return out


def _gpus_of_gres(gres: Any) -> int:
    """GPUs in a pyslurm GRES dict (``configured_gres``, ``allocated_gres``)."""
    return gpu_count(_gres_tres(gres))


def _base_state(state: Any) -> str:
    """A job state string as ``slurm_job_state_string()`` gives it, as a base state."""
    s = _text(state).strip().upper()
    return RUNNING if s in _RUNNING_FLAGS else s


def _array_ids(job: Any) -> tuple[int | None, int | None]:
    """``(array_job_id, array_task_id)`` of a pyslurm job (live or accounting).

    pyslurm maps an ``array_task_id`` of 0 to ``None`` (``u32_parse`` treats 0 as unset),
    so a task of an array whose record is not the pending remainder (which has
    ``array_tasks_waiting`` set) and has no task id is task 0.
    """
    array_job = _int(getattr(job, "array_id", None)) or None
    if array_job is None:
        return None, None
    task = _int(getattr(job, "array_task_id", None))
    if task is None and not getattr(job, "array_tasks_waiting", None):
        task = 0
    return array_job, task


def _epoch(t: datetime, *, ceil: bool = False) -> int:
    """A datetime as epoch seconds, truncated (or rounded up with ``ceil``).

    Naive datetimes are taken as UTC (like the CLI backend).
    """
    return epoch_s(t, ceil=ceil)


# ------------------------------------------------------------------ conversions
def _slurm_job(job: Any) -> SlurmJob:
    """A ``pyslurm.Job`` as a :class:`SlurmJob`."""
    state = _base_state(job.state)
    alloc = _tres(job.allocated_tres)
    running = state != PENDING and bool(alloc)
    tres = alloc if running else _tres(job.requested_tres)
    num_nodes = _int(job.num_nodes) or tres.get("node") or 1
    num_cpus = _int(job.cpus) or tres.get("cpu") or 0
    gpus = gpu_count(tres)
    if not gpus:
        per_job = gpu_count(_tres(job.tres_per_job))
        per_node = gpu_count(_tres(job.tres_per_node))
        gpus = per_job or per_node * num_nodes
    mem = tres.get("mem") or _int(job.memory)
    switches = _int(job.required_switches)
    if switches is not None and switches <= 0:
        switches = None
    array_job, array_task = _array_ids(job)
    return SlurmJob(
        job_id=int(job.id),
        name=_text(job.name),
        user=_text(job.user_name),
        account=_text(job.account),
        partition=_text(job.partition).split(",")[0],
        qos=_text(job.qos),
        state=state,
        state_reason=_text(job.state_reason) or "None",
        submit_time=_timestamp(job.submit_time) or 0,
        eligible_time=_timestamp(job.eligible_time),
        start_time=_timestamp(job.start_time),
        time_limit=_minutes(job.time_limit),
        num_nodes=int(num_nodes),
        num_cpus=int(num_cpus),
        num_gpus=int(gpus),
        mem_mb=mem,
        priority=_int(job.priority) or 0,
        site_factor=None,
        nice=_int(job.nice) or 0,
        required_nodes=_nodes(job.required_nodes),
        excluded_nodes=_nodes(job.excluded_nodes),
        features=",".join(_str_tuple(job.constraints)),
        switches=switches,
        switches_wait=_int(job.max_wait_time_switches) if switches is not None else None,
        nodes=_nodes(job.allocated_nodes) if state != PENDING else (),
        array_job_id=array_job,
        array_task_id=array_task,
    )


def _slurm_node(node: Any) -> SlurmNode:
    """A ``pyslurm.Node`` as a :class:`SlurmNode`."""
    state, flags = v.states(_text(node.state), f"node {node.name}.state")
    return SlurmNode(
        name=_text(node.name),
        state=state,
        state_flags=flags,
        cpus=_int(node.total_cpus) or 0,
        alloc_cpus=_int(node.allocated_cpus) or 0,
        gpus=_gpus_of_gres(node.configured_gres),
        alloc_gpus=_gpus_of_gres(node.allocated_gres),
        real_memory_mb=_int(node.real_memory) or 0,
        alloc_memory_mb=_int(node.allocated_memory) or 0,
        features=_str_tuple(node.available_features),
        active_features=_str_tuple(node.active_features),
        partitions=_str_tuple(node.partitions),
    )


def _accounting_job(job: Any) -> AccountingJob:
    """A ``pyslurm.db.Job`` as an :class:`AccountingJob`."""
    req = _tres(job.requested_tres)
    alloc = _tres(job.allocated_tres)
    node_list = _text(job.nodelist)
    array_job, array_task = _array_ids(job)
    return AccountingJob(
        job_id=int(job.id),
        name=_text(job.name),
        user=_text(job.user_name),
        account=_text(job.account),
        partition=_text(job.partition),
        qos=_text(job.qos),
        state=_text(job.state).split()[0].upper() if _text(job.state).strip() else "",
        submit_time=_timestamp(job.submit_time) or 0,
        eligible_time=_timestamp(job.eligible_time),
        start_time=_timestamp(job.start_time),
        end_time=_timestamp(job.end_time),
        # minutes; None for INFINITE, the string "PartitionLimit" when unset.
        time_limit=_minutes(job.time_limit),
        req=TresCounts.from_tres(req),
        alloc=TresCounts.from_tres(alloc),
        node_list=node_list,
        nodes=_nodes(node_list),
        priority=_int(job.priority),
        exit_code=_int(job.exit_code),
        signal=_int(job.exit_code_signal) or None,
        array_job_id=array_job,
        array_task_id=array_task,
        restart_count=_int(job.requeue_count) or 0,
        cluster=_text(job.cluster),
    )


def _format_pairs(mapping: Any) -> str:
    """``{"a": 1, "flag": True}`` as ``a=1,flag``; empty gives ``(null)`` as scontrol prints."""
    if not mapping:
        return "(null)"
    parts = [str(k) if val is True else f"{k}={val}" for k, val in dict(mapping).items()]
    return ",".join(parts)


def _scheduler_config(conf: Any) -> SchedulerConfig:
    """A ``pyslurm.slurmctld.Config`` as a :class:`SchedulerConfig`.

    ``raw`` holds the keys read here, spelled and formatted as ``scontrol show config``
    prints them (pyslurm has no "as printed" text).
    """
    weights = {name: _int(getattr(conf, attr, None)) or 0 for name, (attr, _) in _WEIGHTS.items()}
    max_age = _int(conf.priority_max_age) or 0
    half_life = _int(conf.priority_decay_half_life) or 0
    params_in = conf.scheduler_parameters or {}
    params = {str(k): "" if val is True else str(val) for k, val in dict(params_in).items()}
    raw: dict[str, str] = {
        "ClusterName": _text(conf.cluster_name),
        "SLURM_VERSION": _text(conf.version),
        "PriorityType": _text(conf.priority_type),
        "PriorityMaxAge": v.format_duration(max_age),
        "PriorityDecayHalfLife": v.format_duration(half_life),
        "PriorityWeightTRES": _format_pairs(getattr(conf, "priority_weight_tres", None)),
        "SchedulerType": _text(conf.scheduler_type),
        "SchedulerParameters": _format_pairs(params_in),
        "SelectType": _text(conf.select_type),
        "TopologyPlugin": _text(conf.topology_plugin),
    }
    for name, (_, key) in _WEIGHTS.items():
        raw[key] = str(weights[name])
    return SchedulerConfig(
        cluster_name=_text(conf.cluster_name),
        slurm_version=_text(conf.version),
        priority_type=_text(conf.priority_type),
        priority_weights=weights,
        priority_max_age=max_age,
        priority_decay_half_life=half_life,
        scheduler_type=_text(conf.scheduler_type),
        scheduler_parameters=params,
        select_type=_text(conf.select_type),
        topology_plugin=_text(conf.topology_plugin),
        raw=raw,
    )


# ------------------------------------------------------------------ the client
class PySlurmClient(SlurmClient):
    """:class:`SlurmClient` on pyslurm 25.11 (Slurm 25.11 sites).

    Args:
        timeout: Seconds allowed for each call (see the module docstring: enforced by
            waiting on a worker thread, which cannot be killed).
        module: The pyslurm module to use; default: ``import pyslurm`` (tests pass a fake).

    Raises:
        SlurmError: If pyslurm is not installed (``command="import pyslurm"``), cannot be
            loaded, or lacks the 25.11 API.
    """

    backend = "pyslurm"

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, module: Any = None) -> None:
        super().__init__(timeout)
        mod = _import_pyslurm() if module is None else module
        missing = [name for name in _REQUIRED if not hasattr(mod, name)]
        if missing:
            version = getattr(mod, "__version__", "unknown")
            raise SlurmError(
                "import pyslurm",
                f"pyslurm {version} lacks {', '.join(missing)}: rlsched needs pyslurm 25.11",
            )
        self.pyslurm: Any = mod
        self._cli: CliSlurmClient | None = None
        self._hung = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ running
    def call(self, command: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` (pyslurm calls and the conversion of their results) with the timeout.

        ``fn`` runs in a daemon worker thread; this waits on its
        :class:`~concurrent.futures.Future` for at most :attr:`timeout` seconds. A call that
        times out keeps running in its thread (a C call cannot be interrupted) and counts
        as hung until it returns.

        Args:
            command: What is called, for error messages, e.g. ``"pyslurm Jobs.load"``.
            fn: The work to do.

        Returns:
            What ``fn`` returned.

        Raises:
            SlurmError: ``fn`` raised (a :class:`SlurmError` as it is, anything else as
                ``SlurmError(command, str(exc))``), timed out, or too many earlier calls
                are still hung.
        """
        with self._lock:
            if self._hung >= MAX_HUNG_CALLS:
                raise SlurmError(
                    command,
                    f"refused: {self._hung} earlier pyslurm calls timed out and are still"
                    " running (slurmctld/slurmdbd not answering?)",
                )
        # A bare Future and a daemon thread rather than a ThreadPoolExecutor: the
        # executor's workers are joined at interpreter exit, so one call stuck in
        # libslurm would keep the process from exiting.
        future: Future[T] = Future()
        state = {"abandoned": False}

        def work() -> None:
            try:
                if future.set_running_or_notify_cancel():
                    future.set_result(fn())
            except BaseException as exc:  # handed to the caller through the future
                future.set_exception(exc)
            finally:
                with self._lock:
                    if state["abandoned"]:
                        self._hung -= 1

        worker = threading.Thread(target=work, name=f"rlsched {command}", daemon=True)
        worker.start()
        try:
            return future.result(timeout=self.timeout)
        except FutureTimeout:
            with self._lock:
                if not future.done():
                    state["abandoned"] = True
                    self._hung += 1
            if not state["abandoned"]:
                return future.result()
            raise SlurmError(
                command,
                f"timed out after {self.timeout:g} s (the call goes on in a background thread)",
            ) from None
        except SlurmError:
            raise
        except Exception as exc:
            reason = str(exc).strip() or type(exc).__name__
            raise SlurmError(command, reason.splitlines()[0]) from exc

    def _cli_client(self) -> CliSlurmClient:
        """The CLI client used for what pyslurm cannot do (created on first use)."""
        if self._cli is None:
            from .cli_backend import CliSlurmClient

            self._cli = CliSlurmClient(timeout=self.timeout)
        return self._cli

    # ------------------------------------------------------------------ reading
    def jobs(self, states: Iterable[str] = (PENDING, RUNNING)) -> list[SlurmJob]:
        """Jobs in ``states`` from ``pyslurm.Jobs.load()``.

        ``site_factor`` is ``None``: pyslurm's ``Job`` does not expose it.
        ``state_reason`` is pyslurm's (the reason's description when slurmctld set one,
        as ``squeue -o %r`` prints it).
        """
        want = {s.upper() for s in states}
        mod = self.pyslurm

        def load() -> list[SlurmJob]:
            return [
                _slurm_job(job)
                for job in mod.Jobs.load().values()
                if _base_state(job.state) in want
            ]

        return self.call("pyslurm Jobs.load", load)

    def nodes(self) -> list[SlurmNode]:
        """Every node once, from ``pyslurm.Nodes.load()``."""
        mod = self.pyslurm

        def load() -> list[SlurmNode]:
            out: dict[str, SlurmNode] = {}
            for node in mod.Nodes.load().values():
                converted = _slurm_node(node)
                out.setdefault(converted.name, converted)
            return list(out.values())

        return self.call("pyslurm Nodes.load", load)

    def topology(self) -> SwitchTree:
        """The switch tree from ``scontrol show topology`` (pyslurm has no topology API)."""
        return self._cli_client().topology()

    def config(self) -> SchedulerConfig:
        """The configuration from ``pyslurm.slurmctld.Config.load()``."""
        mod = self.pyslurm
        return self.call(
            "pyslurm slurmctld.Config.load",
            lambda: _scheduler_config(mod.slurmctld.Config.load()),
        )

    def accounting(
        self,
        start: datetime,
        end: datetime,
        *,
        states: Sequence[str] = (),
        all_users: bool = True,
    ) -> list[AccountingJob]:
        """Jobs from ``pyslurm.db.Jobs.load(pyslurm.db.JobFilter(...))`` in ``[start, end)``.

        The local cluster only; one record per job id (the latest, like ``sacct`` without
        ``--duplicates``). pyslurm's ``JobFilter`` cannot filter on states, so ``states``
        is applied here.

        Args:
            start: Window start (naive datetimes are taken as UTC).
            end: Window end.
            states: Keep only these job states.
            all_users: Every user's jobs; otherwise only those of the calling user.
        """
        mod = self.pyslurm
        want = {s.upper() for s in states}
        users = None if all_users else [os.getuid()]
        window = (_epoch(start), _epoch(end, ceil=True))  # slurmdbd: eligible < end

        def load() -> list[AccountingJob]:
            db_filter = mod.db.JobFilter(start_time=window[0], end_time=window[1], users=users)
            jobs = [_accounting_job(job) for job in mod.db.Jobs.load(db_filter).values()]
            return [j for j in jobs if j.state in want] if want else jobs

        return self.call("pyslurm db.Jobs.load", load)

    def job_state(self, job_id: int) -> str | None:
        """The base state of one job from ``pyslurm.Job.load``.

        Raises:
            SlurmError: If the job cannot be loaded (e.g. an unknown job id).
        """
        mod = self.pyslurm
        jid = int(job_id)
        return self.call(f"pyslurm Job.load({jid})", lambda: _base_state(mod.Job.load(jid).state))

    # ------------------------------------------------------------------ changing
    def _modify(self, job_id: int, what: str, **changes: Any) -> None:
        """``pyslurm.Job(job_id).modify(pyslurm.JobSubmitDescription(**changes))``."""
        mod = self.pyslurm
        jid = int(job_id)
        self.call(
            f"pyslurm Job({jid}).modify({what})",
            lambda: mod.Job(jid).modify(mod.JobSubmitDescription(**changes)),
        )

    def set_site_factor(self, job_id: int, value: int) -> None:
        """Set a job's site factor with ``JobSubmitDescription(site_factor=value)``.

        A value of 0 goes through ``scontrol update JobId=N SiteFactor=0``: pyslurm
        leaves a falsy ``site_factor`` out of the update message.
        """
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"site factor must be an int, got {value!r}")
        if value == 0:
            self._cli_client().set_site_factor(job_id, 0)
            return
        self._modify(job_id, f"site_factor={value}", site_factor=value)

    def _refuse_unless_pending(self, command: str, job: Any) -> None:
        state = _base_state(job.state)
        if state != PENDING:
            raise SlurmError(
                command,
                f"refused: job {int(job.id)} is {state or 'unknown'}, not PENDING"
                " (changing the node list of a running job would resize it)",
            )

    def set_req_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        """Require a pending job to run on ``nodes`` (``JobSubmitDescription(required_nodes=)``).

        The job is loaded first and the change refused unless it is PENDING; the check and
        the change run back to back in one worker call (slurmctld may still start the job
        in between).

        Raises:
            ValueError: If ``nodes`` is empty or holds something that is not a node name.
            SlurmError: If the job is not pending, or a pyslurm call fails.
        """
        hostlist = req_nodes_hostlist(nodes)
        mod = self.pyslurm
        jid = int(job_id)
        command = f"pyslurm Job({jid}).modify(required_nodes={hostlist})"

        def work() -> None:
            self._refuse_unless_pending(command, mod.Job.load(jid))
            mod.Job(jid).modify(mod.JobSubmitDescription(required_nodes=hostlist))

        self.call(command, work)

    def clear_req_nodes(self, job_id: int) -> None:
        """Remove a pending job's ReqNodeList.

        The job is loaded with pyslurm and the change refused unless it is PENDING; a job
        without a ReqNodeList is left alone. The clearing itself is
        ``scontrol update JobId=N ReqNodeList=``: pyslurm turns an empty ``required_nodes``
        into "no change".

        Raises:
            SlurmError: If the job is not pending, or a call fails.
        """
        mod = self.pyslurm
        jid = int(job_id)
        command = f"pyslurm Job.load({jid})"

        def check() -> bool:
            job = mod.Job.load(jid)
            self._refuse_unless_pending(f"scontrol update JobId={jid} ReqNodeList=", job)
            return bool(_nodes(job.required_nodes))

        if self.call(command, check):
            self._cli_client().clear_req_nodes(jid)

    def set_switches(self, job_id: int, count: int, wait: int) -> None:
        """``scontrol update JobId=N Switches=count@wait`` on a pending job only.

        pyslurm's ``JobSubmitDescription`` has no switch count, so this goes through
        :class:`~slurm_plugin.slurm.cli_backend.CliSlurmClient`, as clearing does.
        """
        self._cli_client().set_switches(job_id, count, wait)

    def clear_switches(self, job_id: int) -> None:
        """``scontrol update JobId=N Switches=0`` on a pending job only (as set)."""
        self._cli_client().clear_switches(job_id)
