"""Plain data the Slurm boundary returns, whatever the backend (CLI/JSON or pyslurm).

Special Slurm values are converted here, once: ``UNLIMITED``/``INFINITE`` become ``None``
for limits, ``NO_VAL`` and unset numbers become ``None``; times are integer epoch seconds
(UTC); memory is in MiB; ``time_limit`` is in seconds. Node lists are expanded tuples
of host names (see :mod:`slurm_plugin.slurm.hostlist` to compress them for display).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .tres import gpu_count

#: Job states the helper may act on.
PENDING = "PENDING"
RUNNING = "RUNNING"


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A job as slurmctld sees it now (``squeue``), pending or running.

    Attributes:
        job_id: The job id (for array tasks, the task's own id).
        array_job_id: The array's master job id, or ``None`` for a plain job.
        array_task_id: The array task index, or ``None``.
        name: Job name (data only: never interpreted).
        user: User name.
        account: Account.
        partition: Partition (the first one if several were requested).
        qos: QOS name.
        state: Base job state, e.g. ``"PENDING"``, ``"RUNNING"``.
        state_reason: Why it is pending (``"Priority"``, ``"Resources"``...), ``"None"`` if not.
        submit_time: Submission time, epoch seconds.
        eligible_time: Time the job became eligible, or ``None`` if not yet.
        start_time: Actual (running) or expected (pending) start, or ``None``.
        time_limit: Time limit in seconds; ``None`` means unlimited.
        num_nodes: Requested (pending) or allocated (running) node count.
        num_cpus: Requested/allocated CPUs in total.
        num_gpus: Requested/allocated GPUs in total.
        mem_mb: Requested/allocated memory in MiB in total, ``None`` if unknown.
        priority: Current scheduling priority.
        site_factor: The job's site factor, ``None`` when the backend cannot see it.
        nice: The nice value, decoded to a signed integer.
        required_nodes: Expanded ReqNodeList.
        excluded_nodes: Expanded ExcNodeList.
        features: The constraint expression (``--constraint``), ``""`` if none.
        switches: Wanted leaf-switch count (``--switches``), ``None`` if not requested.
        switches_wait: Max seconds to wait for that switch count, ``None`` if unset.
        nodes: Allocated nodes (running jobs), expanded; empty when pending.
    """

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: str
    state_reason: str
    submit_time: int
    eligible_time: int | None
    start_time: int | None
    time_limit: int | None
    num_nodes: int
    num_cpus: int
    num_gpus: int
    mem_mb: int | None
    priority: int
    site_factor: int | None
    nice: int
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    features: str = ""
    switches: int | None = None
    switches_wait: int | None = None
    nodes: tuple[str, ...] = ()
    array_job_id: int | None = None
    array_task_id: int | None = None

    @property
    def is_pending(self) -> bool:
        """True when the job is waiting to start."""
        return self.state == PENDING

    @property
    def is_running(self) -> bool:
        """True when the job holds nodes."""
        return self.state == RUNNING


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """A compute node (``sinfo``).

    Attributes:
        name: Node name.
        state: Base state in upper case, e.g. ``"IDLE"``, ``"MIXED"``, ``"ALLOCATED"``, ``"DOWN"``.
        state_flags: Extra flags, e.g. ``("DRAIN",)``.
        cpus: Configured CPUs.
        alloc_cpus: Allocated CPUs.
        gpus: Configured GPUs (GRES ``gpu``).
        alloc_gpus: Allocated GPUs.
        real_memory_mb: Configured memory, MiB.
        alloc_memory_mb: Allocated memory, MiB.
        features: Available features.
        active_features: Currently active features.
        partitions: Partitions the node belongs to.
    """

    name: str
    state: str
    state_flags: tuple[str, ...]
    cpus: int
    alloc_cpus: int
    gpus: int
    alloc_gpus: int
    real_memory_mb: int
    alloc_memory_mb: int
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """True when the node can run new work (not down, drained or failing)."""
        bad = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "INVAL",
               "MAINTENANCE", "NOT_RESPONDING", "POWERED_DOWN", "FUTURE", "RESERVED"}
        return self.state not in bad and not bad.intersection(self.state_flags)


@dataclass(frozen=True, slots=True)
class Switch:
    """One switch of the topology/tree (``scontrol show topology``).

    Attributes:
        name: Switch name.
        level: 0 for leaf switches, higher towards the root.
        nodes: Nodes below this switch (all of them, at every level), expanded.
        switches: Child switch names (empty for a leaf).
        link_speed: The configured link speed (relative units), if given.
    """

    name: str
    level: int
    nodes: tuple[str, ...]
    switches: tuple[str, ...] = ()
    link_speed: int | None = None


@dataclass(frozen=True, slots=True)
class SwitchTree:
    """The switch tree. Empty when the cluster has no topology/tree plugin."""

    switches: Mapping[str, Switch] = field(default_factory=dict)

    @classmethod
    def from_switches(cls, switches: Iterable[Switch]) -> SwitchTree:
        """Build a tree from switch records, keyed by name in input order."""
        return cls({s.name: s for s in switches})

    @property
    def leaves(self) -> tuple[Switch, ...]:
        """Leaf switches (those with nodes directly attached), in a stable order."""
        return tuple(s for s in self.switches.values() if s.level == 0)

    def leaf_of(self, node: str) -> str | None:
        """Name of the leaf switch a node hangs off, or ``None`` if it is not in the tree."""
        for s in self.leaves:
            if node in s.nodes:
                return s.name
        return None

    def node_to_leaf(self) -> dict[str, str]:
        """Map every node to its leaf switch name."""
        return {n: s.name for s in self.leaves for n in s.nodes}

    @property
    def root(self) -> Switch | None:
        """The top switch (highest level), or ``None`` for an empty tree."""
        if not self.switches:
            return None
        return max(self.switches.values(), key=lambda s: (s.level, len(s.nodes)))


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """What of ``scontrol show config`` matters for scheduling.

    Attributes:
        cluster_name: ``ClusterName``.
        slurm_version: ``SLURM_VERSION`` as printed, e.g. ``"22.05.8"``.
        priority_type: e.g. ``"priority/multifactor"``.
        priority_weights: Weights by factor name: ``age``, ``assoc``, ``fairshare``,
            ``job_size``, ``partition``, ``qos``, ``tres`` (the TRES string kept raw in
            :attr:`raw`); missing weights are 0.
        priority_max_age: ``PriorityMaxAge`` in seconds.
        priority_decay_half_life: ``PriorityDecayHalfLife`` in seconds (0: no decay).
        scheduler_type: e.g. ``"sched/backfill"``.
        scheduler_parameters: ``SchedulerParameters`` split into ``key -> value``
            (flags without a value map to ``""``).
        select_type: e.g. ``"select/cons_tres"``.
        topology_plugin: e.g. ``"topology/tree"``.
        raw: Every ``key = value`` line as printed.
    """

    cluster_name: str
    slurm_version: str
    priority_type: str
    priority_weights: Mapping[str, int]
    priority_max_age: int
    priority_decay_half_life: int
    scheduler_type: str
    scheduler_parameters: Mapping[str, str]
    select_type: str
    topology_plugin: str
    raw: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TresCounts:
    """Node, CPU, GPU and memory counts of one TRES set; ``None`` where not recorded."""

    nodes: int | None = None
    cpus: int | None = None
    gpus: int | None = None
    mem_mb: int | None = None

    @classmethod
    def from_tres(cls, tres: Mapping[str, int]) -> TresCounts:
        """From a parsed TRES mapping (``{"node": 2, "cpu": 4, "gres/gpu": 8, "mem": 1024}``).

        An empty mapping (nothing requested or allocated) gives all ``None``.
        """
        if not tres:
            return cls()
        return cls(tres.get("node"), tres.get("cpu"), gpu_count(tres), tres.get("mem"))


@dataclass(frozen=True, slots=True)
class AccountingJob:
    """A job from accounting (``sacct``), finished or not.

    Attributes mirror :class:`SlurmJob` where they overlap. ``req`` holds the requested
    TRES, ``alloc`` the allocated TRES (all ``None`` if never allocated).
    ``exit_code`` is the return code (``None`` if unknown), ``signal`` the terminating
    signal if any. ``nodes`` is the expanded allocated node list, ``node_list`` the
    same as Slurm printed it.
    """

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: str
    submit_time: int
    eligible_time: int | None
    start_time: int | None
    end_time: int | None
    time_limit: int | None
    req: TresCounts
    alloc: TresCounts
    node_list: str
    nodes: tuple[str, ...]
    priority: int | None
    exit_code: int | None
    signal: int | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    restart_count: int = 0
    cluster: str = ""
