"""A minimal fake of the pyslurm 25.11 API that rlsched's pyslurm backend uses.

Only what :mod:`slurm_plugin.slurm.pyslurm_backend` touches is here, with the class and
attribute names, argument names and units of the real pyslurm 25.11.2 sources (the sdist
of ``pyslurm==25.11.2``); each class cites the file it mirrors. Attributes hold what the
real properties *return*, i.e. after pyslurm's own conversions:

* ``u32_parse``/``u16_parse`` (pyslurm/utils/uint.pyx): unset (``NO_VAL``, and 0 unless
  ``zero_is_noval=False``) gives ``None``, ``INFINITE`` gives the string ``"UNLIMITED"``;
* ``_raw_time`` (pyslurm/utils/ctime.pyx): 0/``NO_VAL`` give ``None`` (or ``on_noval``),
  ``INFINITE`` gives ``None`` (or ``on_inf``);
* ``cstr.to_unicode``: empty C strings give ``None``; ``cstr.to_list``: ``[]``.

State lives in :data:`STATE`; call :func:`reset` before each test. Calls are logged in
``STATE.calls`` (including the ones rlsched must never make: hold, release, cancel,
requeue), ``STATE.fail[name]`` makes a call raise, and ``STATE.gates[name]`` (a
:class:`threading.Event`) makes it block until the event is set.
"""

from __future__ import annotations

import re
import threading
import types
from dataclasses import dataclass, field
from typing import Any

__version__ = "25.11.2"

#: pyslurm/constants.py
UNLIMITED = "UNLIMITED"


# ---------------------------------------------------------------- errors
class PyslurmError(Exception):
    """pyslurm/core/error.pyx: base of pyslurm's exceptions."""


class RPCError(PyslurmError):
    """pyslurm/core/error.pyx: ``RPCError(errno=SLURM_ERROR, msg=None)``; str() is the msg."""

    def __init__(self, errno: int = -1, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg or "Unspecified error"
        super().__init__(self.msg)


# ---------------------------------------------------------------- state
@dataclass
class State:
    jobs: dict[int, Job] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    db_jobs: list[DbJob] = field(default_factory=list)
    config: Config | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    #: (job id, {field: value}) as slurm_update_job would receive them
    modify_calls: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    db_filters: list[JobFilter] = field(default_factory=list)
    site_factors: dict[int, int] = field(default_factory=dict)
    fail: dict[str, BaseException] = field(default_factory=dict)
    gates: dict[str, threading.Event] = field(default_factory=dict)


STATE = State()

#: Calls rlsched must never make.
FORBIDDEN = ("Job.hold", "Job.release", "Job.cancel", "Job.requeue", "Job.send_signal",
             "Job.suspend")


def reset() -> State:
    """Start over with an empty cluster."""
    global STATE
    for gate in STATE.gates.values():
        gate.set()
    STATE = State()
    return STATE


def _enter(name: str, arg: Any = None) -> None:
    STATE.calls.append((name, arg))
    gate = STATE.gates.get(name)
    if gate is not None:
        gate.wait(10)
    exc = STATE.fail.get(name)
    if exc is not None:
        raise exc


# ---------------------------------------------------------------- collections
class _MultiClusterMap:
    """pyslurm/xcollections.pyx ``MultiClusterMap``: ``{cluster: {id: item}}``.

    ``values()`` yields the items of every cluster; ``[key]`` looks in the local cluster.
    """

    def __init__(self, items: list[Any], key: str) -> None:
        self.data: dict[str, dict[Any, Any]] = {}
        for item in items:
            self.data.setdefault(item.cluster or "cluster", {})[getattr(item, key)] = item

    def values(self) -> Any:
        for cluster in self.data.values():
            yield from cluster.values()

    def keys(self) -> Any:
        for cluster in self.data.values():
            yield from cluster

    def __len__(self) -> int:
        return sum(len(d) for d in self.data.values())

    def __getitem__(self, key: Any) -> Any:
        for cluster in self.data.values():
            if key in cluster:
                return cluster[key]
        raise KeyError(key)


# ---------------------------------------------------------------- TRES (pyslurm/db/tres.pyx)
#: pyslurm/utils/helpers.pyx MEMORY_UNITS (bytes per unit)
MEMORY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60,
                "Z": 2**70}


def dehumanize(humanized_str: Any, target: str = "M") -> int | None:
    """pyslurm/utils/helpers.pyx ``dehumanize``: ``"8G"`` -> 8192 (MiB); digits as they are."""
    if not humanized_str:
        return None
    parts = re.split(f"([{' '.join(MEMORY_UNITS)}])", str(humanized_str))
    if len(parts) == 1:
        return int(humanized_str)
    return round(float(parts[0]) * MEMORY_UNITS[parts[1]] / MEMORY_UNITS[target])


class TrackableResource:
    """pyslurm/db/tres.pyx ``TrackableResource(tres_type, count, name=None, tres_id=None)``."""

    def __init__(self, tres_type: str, count: Any, name: str | None = None,
                 tres_id: int | None = None) -> None:
        self.type = tres_type
        self.id = tres_id
        self.name = name
        self.count = int(count)


class GPU:
    """pyslurm/db/tres.pyx ``GPU(count, gpu_type=None, tres_id=None)``; ``name`` is gpu[:type]."""

    def __init__(self, count: Any, gpu_type: str | None = None,
                 tres_id: int | None = None) -> None:
        self.count = int(count)
        self.type = gpu_type
        self.id = tres_id

    @property
    def name(self) -> str:
        return f"gpu:{self.type}" if self.type else "gpu"


class TrackableResources:
    """pyslurm/db/tres.pyx ``TrackableResources``.

    ``cpu``, ``mem`` (MiB), ``node``, ``billing``... are ``TrackableResource`` or ``None``;
    ``gres`` maps ``"gpu"``/``"gpu:a100"`` to ``GPU`` (other GRES to ``TrackableResource``).
    """

    def __init__(self, **kwargs: Any) -> None:
        self.cpu = self.mem = self.energy = self.node = self.billing = None
        self.vmem = self.pages = None
        self.gres: dict[str, Any] = {}
        self.fs: dict[str, Any] = {}
        self.license: dict[str, Any] = {}
        self.interconnect: dict[str, Any] = {}
        self.other: dict[str, Any] = {}
        for key, value in kwargs.items():
            setattr(self, key, value)

    @staticmethod
    def from_str(tres_str: str | None, global_tres_data: Any = None,
                 on_empty: Any = None) -> Any:
        """Parse ``cpu=4,mem=8G,node=1,gres/gpu=2`` like ``from_cstr`` (via ``cstr.to_dict``)."""
        if not tres_str:
            return on_empty
        out = TrackableResources()
        for item in tres_str.split(","):
            key, _, val = item.partition("=")
            if key.isdigit():
                continue  # id form without global TRES data: skipped, as in pyslurm
            typ, _, name = key.partition("/")
            count = dehumanize(val) if typ == "mem" else int(val)
            if typ == "gres":
                if name == "gpu" or name.startswith("gpu:"):
                    gpu_type = name.split(":", 1)[1] if ":" in name else None
                    out.gres[name] = GPU(count, gpu_type)
                else:
                    out.gres[name] = TrackableResource("gres", count, name)
            elif hasattr(out, typ) and not name:
                setattr(out, typ, TrackableResource(typ, count))
            else:
                out.other[key] = TrackableResource(typ, count, name or None)
        return out


# ---------------------------------------------------------------- jobs (pyslurm/core/job)
#: Public attributes of pyslurm/core/job/submission.pxd ``JobSubmitDescription``.
SUBMIT_FIELDS = (
    "name", "account", "user_id", "group_id", "priority", "site_factor", "wckey", "array",
    "batch_constraints", "begin_time", "clusters", "cluster_constraints", "comment",
    "admin_comment", "requires_contiguous_nodes", "cores_reserved_for_system",
    "threads_reserved_for_system", "working_directory", "cpu_frequency", "nodes",
    "deadline", "delay_boot_time", "dependencies", "excluded_nodes", "required_nodes",
    "constraints", "kill_on_node_fail", "licenses", "mail_user", "mail_types", "mcs_label",
    "memory_per_cpu", "memory_per_node", "memory_per_gpu", "network", "nice",
    "log_files_open_mode", "overcommit", "partitions", "profile_types",
    "accounting_gather_frequency", "qos", "requires_node_reboot", "is_requeueable",
    "reservations", "script", "script_args", "environment", "resource_sharing",
    "distribution", "time_limit", "time_limit_min", "container", "container_id",
    "cpus_per_task", "cpus_per_gpu", "sockets_per_node", "cores_per_socket",
    "threads_per_core", "gpus", "gpus_per_socket", "gpus_per_task", "gres_per_node",
    "gpu_binding", "ntasks", "ntasks_per_node", "ntasks_per_socket", "ntasks_per_core",
    "ntasks_per_gpu", "switches", "signal", "standard_in", "standard_output",
    "standard_error", "kill_on_invalid_dependency", "spreads_over_nodes", "use_min_nodes",
    "gres_binding", "gres_tasks_per_sharing", "temporary_disk_per_node",
    "get_user_environment", "min_cpus_per_node", "wait_all_nodes", "selinux_context",
    "segment_size", "reserved_ports", "extra",
)


class JobSubmitDescription:
    """pyslurm/core/job/submission.pyx ``JobSubmitDescription(**kwargs)``.

    A cdef class: setting an attribute it does not have raises ``AttributeError``.
    """

    __slots__ = SUBMIT_FIELDS

    def __init__(self, **kwargs: Any) -> None:
        for name in SUBMIT_FIELDS:
            object.__setattr__(self, name, None)
        for key, value in kwargs.items():
            setattr(self, key, value)

    def sent_fields(self) -> dict[str, Any]:
        """What ``_create_job_submit_desc(is_update=True)`` would put into the update message.

        As in submission.pyx: ``nice``/``site_factor`` only when truthy
        (``if self.site_factor: ptr.site_factor = NICE_OFFSET + int(...)``), strings and
        node lists only when non-empty (``cstr.fmalloc`` stores NULL, "no change", for
        ``""``/``[]``/``None``), other fields when not ``None``.
        """
        out: dict[str, Any] = {}
        for name in SUBMIT_FIELDS:
            value = getattr(self, name)
            if name in ("nice", "site_factor"):
                if value:
                    out[name] = int(value)
            elif name in ("required_nodes", "excluded_nodes", "partitions", "licenses"):
                text = value if isinstance(value, str) or not value else ",".join(value)
                if text:
                    out[name] = text
            elif isinstance(value, str):
                if value:
                    out[name] = value
            elif value is not None:
                out[name] = value
        return out


class Job:
    """pyslurm/core/job/job.pyx ``Job(job_id)`` (attributes documented in job.pxd).

    Units: times are unix timestamps (``None`` when 0), ``time_limit`` in minutes
    (``None`` for unlimited), ``max_wait_time_switches`` in seconds, ``memory`` in MiB,
    ``nice`` signed (``int(ptr.nice) - NICE_OFFSET``); node lists are hostlist strings
    (``None`` when empty); ``constraints`` is ``cstr.to_list(features)``.
    """

    def __init__(self, job_id: int) -> None:
        self.id = job_id
        self.name: str | None = None
        self.user_name: str | None = None
        self.account: str | None = None
        self.partition: str | None = None
        self.qos: str | None = None
        self.state: str | None = None
        self.state_reason: str | None = None
        self.priority: Any = None
        self.nice: int | None = None
        self.submit_time: int | None = None
        self.eligible_time: int | None = None
        self.start_time: int | None = None
        self.end_time: int | None = None
        self.time_limit: int | None = None
        self.num_nodes: Any = None
        self.cpus: Any = 1
        self.memory: int | None = None
        self.required_nodes: str | None = None
        self.excluded_nodes: str | None = None
        self.allocated_nodes: str | None = None
        self.constraints: list[str] = []
        self.required_switches: Any = None
        self.max_wait_time_switches: int | None = None
        self.array_id: int | None = None
        self.array_task_id: int | None = None
        self.array_tasks_waiting: str | None = None
        self.cluster = "cluster"
        self.requested_tres: TrackableResources | None = None
        self.allocated_tres: TrackableResources | None = None
        self.tres_per_job: TrackableResources | None = None
        self.tres_per_node: TrackableResources | None = None

    def __repr__(self) -> str:
        return f"pyslurm.Job({self.id})"

    @staticmethod
    def load(job_id: int) -> Job:
        """``Job.load(job_id)``: the slurm_load_job RPC; RPCError for an unknown id."""
        _enter("Job.load", job_id)
        job = STATE.jobs.get(job_id)
        if job is None:
            raise RPCError(msg="Invalid job id specified")
        return job

    def modify(self, changes: JobSubmitDescription) -> None:
        """``Job(id).modify(JobSubmitDescription)``: the slurm_update_job RPC."""
        if not isinstance(changes, JobSubmitDescription):
            raise TypeError("Argument 'changes' has incorrect type")
        sent = changes.sent_fields()
        _enter("Job.modify", (self.id, sent))
        if self.id not in STATE.jobs:
            raise RPCError(msg="Invalid job id specified")
        STATE.modify_calls.append((self.id, sent))
        job = STATE.jobs[self.id]
        if "required_nodes" in sent:
            job.required_nodes = sent["required_nodes"]
        if "site_factor" in sent:
            STATE.site_factors[self.id] = sent["site_factor"]

    # Calls rlsched must never make; they only log themselves.
    def hold(self, mode: str | None = None) -> None:
        _enter("Job.hold", self.id)

    def release(self) -> None:
        _enter("Job.release", self.id)

    def cancel(self) -> None:
        _enter("Job.cancel", self.id)

    def requeue(self, hold: bool = False) -> None:
        _enter("Job.requeue", self.id)

    def send_signal(self, signal: Any, steps: str = "children", hurry: bool = False) -> None:
        _enter("Job.send_signal", self.id)

    def suspend(self) -> None:
        _enter("Job.suspend", self.id)


class Jobs(_MultiClusterMap):
    """pyslurm/core/job/job.pyx ``Jobs``: ``Jobs.load()`` loads every job (SHOW_ALL)."""

    @staticmethod
    def load(preload_passwd_info: bool = False, frozen: bool = False) -> Jobs:
        _enter("Jobs.load")
        return Jobs(list(STATE.jobs.values()), "id")


# ---------------------------------------------------------------- nodes (pyslurm/core/node.pyx)
class Node:
    """pyslurm/core/node.pyx ``Node`` (attributes documented in node.pxd).

    ``state`` is ``slurm_node_state_string_complete()``: ``BASE+FLAG+...``; memory in
    MiB; ``configured_gres`` is ``cstr.to_gres_dict(gres)`` (``{"gpu:a100": 4}``);
    ``allocated_gres`` is ``gres_from_tres_dict(allocated_tres)`` (``{"gpu": 2}``, values
    as ``cstr.to_dict`` gives them: int for digits).
    """

    def __init__(self, name: str | None = None, **kwargs: Any) -> None:
        self.name = name
        self.cluster = "cluster"
        self.state = "IDLE"
        self.total_cpus = 0
        self.effective_cpus = 0
        self.allocated_cpus = 0
        self.configured_gres: dict[str, Any] = {}
        self.allocated_tres: dict[str, Any] = {}
        self.real_memory: int | None = None
        self.allocated_memory = 0
        self.available_features: list[str] = []
        self.active_features: list[str] = []
        self.partitions: list[str] = []
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def allocated_gres(self) -> dict[str, Any]:
        return {k.replace("gres/", ""): v for k, v in self.allocated_tres.items() if "gres/" in k}


class Nodes(_MultiClusterMap):
    """pyslurm/core/node.pyx ``Nodes``: ``Nodes.load()`` loads every node."""

    @staticmethod
    def load(preload_passwd_info: bool = False) -> Nodes:
        _enter("Nodes.load")
        return Nodes(list(STATE.nodes), "name")


# ---------------------------------------------------------------- accounting (pyslurm/db/job.pyx)
#: Public attributes of pyslurm/db/job.pxd ``JobFilter``.
FILTER_FIELDS = (
    "ids", "start_time", "end_time", "accounts", "association_ids", "clusters",
    "constraints", "cpus", "max_cpus", "nodes", "max_nodes", "qos", "names", "partitions",
    "groups", "timelimit", "max_timelimit", "users", "wckeys", "nodelist", "with_script",
    "with_env", "truncate_time",
)


class JobFilter:
    """pyslurm/db/job.pyx ``JobFilter(**kwargs)`` (a cdef class: unknown names fail)."""

    __slots__ = FILTER_FIELDS

    def __init__(self, **kwargs: Any) -> None:
        for name in FILTER_FIELDS:
            object.__setattr__(self, name, None)
        for key, value in kwargs.items():
            setattr(self, key, value)


class DbJob:
    """pyslurm/db/job.pyx ``pyslurm.db.Job`` (attributes documented in db/job.pxd).

    ``time_limit`` is ``_raw_time(timelimit, "PartitionLimit")``: minutes, ``None`` for
    INFINITE, ``"PartitionLimit"`` when unset; ``nodelist`` is the raw string
    (``"None assigned"`` for jobs that never ran); ``requested_tres``/``allocated_tres``
    are ``TrackableResources`` or ``None``; ``exit_code``/``exit_code_signal`` come from
    ``_get_exit_code``.
    """

    def __init__(self, job_id: int = 0, cluster: str | None = None, **kwargs: Any) -> None:
        self.id = job_id
        self.cluster = cluster or "cluster"
        self.name: str | None = None
        self.user_name: str | None = None
        self.user_id: int | None = None
        self.account: str | None = None
        self.partition: str | None = None
        self.qos: str | None = None
        self.state: str | None = None
        self.submit_time: int | None = None
        self.eligible_time: int | None = None
        self.start_time: int | None = None
        self.end_time: int | None = None
        self.time_limit: Any = "PartitionLimit"
        self.requested_tres: TrackableResources | None = None
        self.allocated_tres: TrackableResources | None = None
        self.nodelist: str | None = None
        self.priority: Any = None
        self.exit_code = 0
        self.exit_code_signal = 0
        self.array_id: int | None = None
        self.array_task_id: int | None = None
        self.array_tasks_waiting: str | None = None
        self.requeue_count = 0
        for key, value in kwargs.items():
            setattr(self, key, value)


class DbJobs(_MultiClusterMap):
    """pyslurm/db/job.pyx ``pyslurm.db.Jobs``: ``load(db_filter=None, db_connection=None)``."""

    @staticmethod
    def load(db_filter: JobFilter | None = None, db_connection: Any = None) -> DbJobs:
        if db_filter is not None and not isinstance(db_filter, JobFilter):
            raise TypeError("Argument 'db_filter' has incorrect type")
        _enter("db.Jobs.load", db_filter)
        STATE.db_filters.append(db_filter or JobFilter())
        jobs = STATE.db_jobs
        if db_filter is not None and db_filter.users:
            uids = {int(u) for u in db_filter.users}
            jobs = [j for j in jobs if j.user_id in uids]
        return DbJobs(list(jobs), "id")


db = types.SimpleNamespace(
    Job=DbJob,
    Jobs=DbJobs,
    JobFilter=JobFilter,
    JobSearchFilter=JobFilter,
    TrackableResources=TrackableResources,
    TrackableResource=TrackableResource,
    GPU=GPU,
)


# ---------------------------------------------------------------- config
class Config:
    """pyslurm/core/slurmctld/config.pyx ``Config``; ``Config.load()`` is slurm_load_ctl_conf.

    ``priority_max_age``/``priority_decay_half_life`` are seconds (``u32_parse``: 0 gives
    ``None``); weights are ints (``zero_is_noval=False``); ``priority_weight_tres`` and
    ``scheduler_parameters`` are ``cstr.to_dict`` dicts (int for digit values, ``True``
    for flags without a value).
    """

    def __init__(self, **kwargs: Any) -> None:
        self.cluster_name: str | None = "cluster"
        self.version: str | None = "25.11.2"
        self.priority_type: str | None = "priority/multifactor"
        self.priority_weight_age = 0
        self.priority_weight_assoc = 0
        self.priority_weight_fair_share = 0
        self.priority_weight_job_size = 0
        self.priority_weight_partition = 0
        self.priority_weight_qos = 0
        self.priority_weight_tres: dict[str, Any] = {}
        self.priority_max_age: int | None = 604800
        self.priority_decay_half_life: int | None = 604800
        self.scheduler_type: str | None = "sched/backfill"
        self.scheduler_parameters: dict[str, Any] = {}
        self.select_type: str | None = "select/cons_tres"
        self.topology_plugin: str | None = "topology/tree"
        for key, value in kwargs.items():
            setattr(self, key, value)

    @staticmethod
    def load() -> Config:
        _enter("Config.load")
        if STATE.config is None:
            raise RPCError(msg="Unable to contact slurm controller (connect failure)")
        return STATE.config


slurmctld = types.SimpleNamespace(Config=Config)


# ---------------------------------------------------------------- builders for tests
def add_job(job_id: int, **attrs: Any) -> Job:
    """A pending job with pyslurm-like defaults, stored in :data:`STATE`; ``attrs`` override.

    TRES given as strings (``requested_tres="cpu=4,mem=8G"``) are parsed with
    :meth:`TrackableResources.from_str`.
    """
    job = Job(job_id)
    job.name = f"job{job_id}"
    job.user_name = "alice"
    job.account = "acct"
    job.partition = "gpu"
    job.qos = "normal"
    job.state = "PENDING"
    job.state_reason = "Priority"
    job.priority = 1000
    job.nice = 0
    job.submit_time = 1_700_000_000
    job.eligible_time = 1_700_000_000
    job.time_limit = 60
    job.num_nodes = 1
    job.cpus = 1
    for key, value in attrs.items():
        if key in ("requested_tres", "allocated_tres", "tres_per_job", "tres_per_node") and (
            isinstance(value, str)
        ):
            value = TrackableResources.from_str(value)
        if not hasattr(job, key):
            raise AttributeError(f"pyslurm.Job has no attribute {key!r}")
        setattr(job, key, value)
    STATE.jobs[job_id] = job
    return job


def add_db_job(job_id: int, **attrs: Any) -> DbJob:
    """A finished accounting job stored in :data:`STATE`; ``attrs`` override."""
    defaults: dict[str, Any] = dict(
        name=f"job{job_id}", user_name="alice", user_id=1000, account="acct",
        partition="gpu", qos="normal", state="COMPLETED", submit_time=1_700_000_000,
        eligible_time=1_700_000_000, start_time=1_700_000_100, end_time=1_700_003_700,
        time_limit=60, priority=1000,
    )
    defaults.update(attrs)
    for key in ("requested_tres", "allocated_tres"):
        if isinstance(defaults.get(key), str):
            defaults[key] = TrackableResources.from_str(defaults[key])
    job = DbJob(job_id, **defaults)
    STATE.db_jobs.append(job)
    return job
