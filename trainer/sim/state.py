"""Array state of a replay: the job table, the cluster's static shape and its node state.

Everything here is a numpy struct of arrays, so that a scheduling pass over thousands of
pending jobs is a handful of vector operations, not a Python loop per job:

- :class:`JobTable`: one row per job to replay (arrival order), built from
  :data:`~db.records.JobRecord` items by :func:`build_jobs`;
- :class:`Cluster`: the static cluster from a :class:`~slurm_plugin.cluster.ClusterSpec`,
  with nodes renumbered leaf-major (the nodes of a leaf switch are contiguous), so
  per-leaf counts are one ``np.add.reduceat``;
- :class:`NodeState`: what is free on each node now, which nodes are idle, and when the
  jobs on each node are expected to end.

How a record becomes a request (documented once, here):

- **Run time** is ``end_time - start_time`` of the record. Records that never started
  (no start or no end time) are skipped and counted (``"never started"``).
- **Nodes** ``n``: ``req.nodes``, else ``alloc.nodes``, else derived from the GPUs
  (``ceil(gpus / GPUs per node)``) or CPUs (``ceil(cpus / CPUs per node)``), else 1.
- **Whole-node (exclusive) requests**: a job that names neither CPUs nor GPUs (a
  node-based trace such as Theta) takes whole nodes: a node must be idle to take it.
  So is a request of every CPU and GPU of a node on a cluster of identical nodes
  (an SWF trace of one-CPU nodes).
- **Shared-node requests**: otherwise each of the ``n`` nodes gives the job
  ``ceil(cpus / n)`` CPUs (at least 1, as Slurm allocates), ``ceil(gpus / n)`` GPUs and
  ``ceil(mem / n)`` MiB, and a node's GPUs and CPUs are shared by several jobs (a 1-GPU
  job takes 1 GPU of a node). Memory counts only on nodes whose memory is known.
- **Time limit** (the user's estimate, what backfill plans with): ``time_limit`` when
  known and positive; unknown (``None``, e.g. SWF without requested time, Philly) ->
  ``default_time_limit`` if given, else the job's own recorded run time (a perfect
  estimate, the usual choice when a trace has none). A job may run past its limit (the
  history says it did); backfill then expects it to end "now" until it does.
- **Partition**: the record's partition when the spec has it, else any node of the
  cluster (SWF queues such as ``q0`` name no partition of a synthetic spec).
- Jobs that can never fit their partition (more nodes, or more per node, than it has)
  are skipped and counted (``"exceeds cluster"``), so that one cannot block a FIFO queue
  forever.
- **Locality sensitivity** ``s`` in [0, 1] (the share of speed a job loses when spread
  over two servers instead of one; :mod:`trainer.sim.workload`), used only by the
  placement-dependent speed models (:mod:`trainer.sim.speed`). Accounting records do
  not carry it, so it comes from ``build_jobs(locality=...)`` per job id when given
  (e.g. the synthetic jobs' own values), else from :func:`record_locality`: the value of
  the synthetic workload's model of that name when the job name is one (``vgg16`` ->
  0.83, the SCHED² and Gandiva figures), else a model drawn from the default model mix
  (GPU models for a job with GPUs, the multi-node HPC models otherwise) by a stable hash
  of ``(user, job name)``: the same application of the same user always gets the same
  sensitivity, in any replay.
- **User**: the record's user; a record without one (a trace that names none, such as
  Philly, whose virtual cluster is its ``account``) counts as its account, so that
  per-user history, fair-share and locality follow the trace's groups instead of
  lumping every job under one nameless user.

Times are integer epoch seconds; jobs arrive at their ``eligible_time`` (the submit time
when there is none).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from db.records import JobRecord
from slurm_plugin.cluster import ClusterSpec

from .workload import WorkloadConfig

__all__ = [
    "ANY_PARTITION",
    "BIG",
    "Cluster",
    "JobTable",
    "NodeState",
    "build_jobs",
    "record_locality",
]

#: Name of the pseudo-partition of jobs whose partition the spec does not know: all nodes.
ANY_PARTITION = "*"

#: "Unbounded" for int64 resource arrays (memory of nodes whose memory is unknown).
BIG = 2**62

#: Skip reasons counted by :func:`build_jobs`.
NEVER_STARTED = "never started"
EXCEEDS_CLUSTER = "exceeds cluster"

_I64 = np.int64


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------- cluster
@dataclass(frozen=True, eq=False)
class Cluster:
    """The static cluster: nodes (leaf-major order), leaf switches, partitions.

    Attributes:
        name: Cluster name.
        node_names: Node names in internal order (the nodes of each leaf contiguous).
        cap_c: CPUs per node.
        cap_g: GPUs per node.
        cap_m: Memory per node in MiB (:data:`BIG` where the spec does not know it).
        leaf_of: Leaf index of each node.
        leaf_start: First node index of each leaf (for ``np.add.reduceat``).
        leaf_size: Nodes per leaf.
        leaf_names: Leaf switch names; ``("(all)",)`` when the cluster has no tree.
        has_tree: True when the spec has a switch tree.
        uppers: Switches above the leaves (level >= 1) that do not span every leaf, as
            ``(name, level, leaf indices)``, lowest level first.
        part_names: Partition names; the last one is :data:`ANY_PARTITION` (all nodes).
        part_mask: ``(partitions, nodes)`` membership.
        part_all: Per partition, True when it holds every node.
        small_leaves: Every leaf has fewer than 32,768 nodes (int16 counts).
        max_leaf: Nodes of the largest leaf.
        homogeneous: Every node has the same CPUs, GPUs and memory.
    """

    name: str
    node_names: tuple[str, ...]
    cap_c: np.ndarray
    cap_g: np.ndarray
    cap_m: np.ndarray
    leaf_of: np.ndarray
    leaf_start: np.ndarray
    leaf_size: np.ndarray
    leaf_names: tuple[str, ...]
    has_tree: bool
    uppers: tuple[tuple[str, int, np.ndarray], ...]
    part_names: tuple[str, ...]
    part_mask: np.ndarray
    part_all: tuple[bool, ...]
    small_leaves: bool
    max_leaf: int
    homogeneous: bool

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> Cluster:
        """Build from a spec (nodes renumbered leaf-major, in the spec's order within a leaf).

        Raises:
            ValueError: If the spec has no nodes.
        """
        if not spec.nodes:
            raise ValueError(f"cluster {spec.name!r} has no nodes")
        pos = {n.name: i for i, n in enumerate(spec.nodes)}
        leaves = spec.switches.leaves
        groups: list[tuple[str, list[int]]] = []
        taken: set[int] = set()
        for leaf in leaves:
            members = sorted({pos[n] for n in leaf.nodes if n in pos} - taken)
            if members:
                groups.append((leaf.name, members))
                taken.update(members)
        rest = [i for i in range(len(spec.nodes)) if i not in taken]
        if rest:
            groups.append(("(none)" if groups else "(all)", rest))
        order = [i for _, members in groups for i in members]
        nodes = [spec.nodes[i] for i in order]
        leaf_of = np.repeat(np.arange(len(groups), dtype=np.int32),
                            [len(m) for _, m in groups])
        sizes = np.array([len(m) for _, m in groups], dtype=_I64)
        leaf_start = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(_I64)
        cap_m = np.array([n.mem_mb if n.mem_mb > 0 else BIG for n in nodes], dtype=_I64)

        internal = {spec.nodes[i].name: k for k, i in enumerate(order)}
        uppers: list[tuple[str, int, np.ndarray]] = []
        for sw in spec.switches.switches.values():
            if sw.level < 1:
                continue
            idx = [internal[n] for n in sw.nodes if n in internal]
            ids = np.unique(leaf_of[idx]) if idx else np.zeros(0, np.int32)
            if 0 < ids.size < len(groups):
                uppers.append((sw.name, sw.level, ids.astype(np.int32)))
        uppers.sort(key=lambda u: (u[1], u[0]))

        part_names = [p for p in spec.partitions if p != ANY_PARTITION]
        mask = np.zeros((len(part_names) + 1, len(nodes)), dtype=bool)
        for k, p in enumerate(part_names):
            for n in spec.partitions[p]:
                if n in internal:
                    mask[k, internal[n]] = True
        mask[-1] = True
        return cls(
            name=spec.name,
            node_names=tuple(n.name for n in nodes),
            cap_c=np.array([max(1, n.cpus) for n in nodes], dtype=_I64),
            cap_g=np.array([max(0, n.gpus) for n in nodes], dtype=_I64),
            cap_m=cap_m,
            leaf_of=leaf_of,
            leaf_start=leaf_start,
            leaf_size=sizes,
            leaf_names=tuple(name for name, _ in groups),
            has_tree=bool(leaves),
            uppers=tuple(uppers),
            part_names=(*part_names, ANY_PARTITION),
            part_mask=mask,
            part_all=tuple(bool(row.all()) for row in mask),
            small_leaves=bool(sizes.max() < 32768),
            max_leaf=int(sizes.max()),
            homogeneous=len({(n.cpus, n.gpus, n.mem_mb) for n in nodes}) == 1,
        )

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.node_names)

    @property
    def num_leaves(self) -> int:
        """Number of leaf switches (1 when there is no tree)."""
        return len(self.leaf_names)

    @property
    def total_gpus(self) -> int:
        """GPUs in the cluster."""
        return int(self.cap_g.sum())

    @property
    def total_cpus(self) -> int:
        """CPUs in the cluster."""
        return int(self.cap_c.sum())

    def partition_index(self, name: str) -> int:
        """Index of a partition; unknown names (and ``""``) map to :data:`ANY_PARTITION`."""
        try:
            return self.part_names.index(name) if name != ANY_PARTITION else len(
                self.part_names) - 1
        except ValueError:
            return len(self.part_names) - 1


# ---------------------------------------------------------------------------- jobs
@dataclass(eq=False)
class JobTable:
    """The jobs of a replay as columns, in arrival order (eligible time, submit, job id).

    Per-node amounts (``cpus``, ``gpus``, ``mem``) are what each of the job's ``nodes``
    nodes gives it; an ``exclusive`` job takes whole nodes (its per-node amounts are 0
    and it needs idle nodes). ``shape`` numbers the distinct requests
    ``(partition, exclusive, cpus, gpus, mem)``, so a pass computes each node mask once
    per shape, not once per job.

    Attributes:
        job_id: Slurm job id (or trace job number).
        submit: Submit time, epoch s.
        eligible: Arrival (eligible) time, epoch s.
        run: Run time from history, s.
        limit: Time limit the scheduler plans with, s (see the module docstring).
        limit_known: True when the record gave the time limit.
        nodes: Nodes requested.
        cpus: CPUs per node (shared-node requests).
        gpus: GPUs per node.
        mem: Memory per node, MiB (0: not counted).
        exclusive: Whole-node request.
        part: Partition index into :attr:`Cluster.part_names`.
        user: User index into :attr:`users`.
        qos: QOS index into :attr:`qos_names`.
        site_factor: Slurm's site factor (added to the multifactor priority); 0 from
            history, set by an experiment or the learned policy.
        nice: Slurm's nice value (subtracted from the priority).
        switches: Wanted maximum leaf-switch count (``--switches``), 0 when not asked.
        switches_wait: Seconds the job waits for that switch count before taking any
            placement (capped by ``max_switch_wait``).
        locality: Locality sensitivity ``s`` in [0, 1] (see the module docstring).
        shape: Request shape index (see above).
        shape_part, shape_excl, shape_c, shape_g, shape_m: The shapes' columns.
        users: User names.
        qos_names: QOS names.
        skipped: Records not replayed, per reason.
    """

    job_id: np.ndarray
    submit: np.ndarray
    eligible: np.ndarray
    run: np.ndarray
    limit: np.ndarray
    limit_known: np.ndarray
    nodes: np.ndarray
    cpus: np.ndarray
    gpus: np.ndarray
    mem: np.ndarray
    exclusive: np.ndarray
    part: np.ndarray
    user: np.ndarray
    qos: np.ndarray
    site_factor: np.ndarray
    nice: np.ndarray
    switches: np.ndarray
    switches_wait: np.ndarray
    locality: np.ndarray
    shape: np.ndarray
    shape_part: np.ndarray
    shape_excl: np.ndarray
    shape_c: np.ndarray
    shape_g: np.ndarray
    shape_m: np.ndarray
    users: tuple[str, ...]
    qos_names: tuple[str, ...]
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def n(self) -> int:
        """Number of jobs."""
        return int(self.job_id.size)

    def total_cpus(self, cluster: Cluster) -> np.ndarray:
        """CPUs each job holds in total (whole nodes count their node's CPUs)."""
        per = np.where(self.exclusive, int(cluster.cap_c.max()), self.cpus)
        out: np.ndarray = per * self.nodes
        return out

    def total_gpus(self, cluster: Cluster) -> np.ndarray:
        """GPUs each job holds in total (whole nodes count their node's GPUs)."""
        per = np.where(self.exclusive, int(cluster.cap_g.max()), self.gpus)
        out: np.ndarray = per * self.nodes
        return out


def _request(r: JobRecord, gpn: int, cpn: int) -> tuple[int, int, int, int, bool]:
    """``(nodes, cpus per node, gpus per node, mem per node, exclusive)`` of a record."""
    req, alloc = r.req, r.alloc
    g = req.gpus if req.gpus is not None else alloc.gpus
    c = req.cpus if req.cpus is not None else alloc.cpus
    m = req.mem_mb if req.mem_mb is not None else alloc.mem_mb
    n = req.nodes or alloc.nodes or 0
    if n <= 0:
        if g and gpn:
            n = _ceil_div(g, gpn)
        elif c:
            n = _ceil_div(c, cpn)
        else:
            n = 1
    if not g and not c:
        return n, 0, 0, 0, True
    return (n, max(1, _ceil_div(c, n)) if c else 1, _ceil_div(g, n) if g else 0,
            _ceil_div(m, n) if m else 0, False)


@cache
def _model_mix(gpu: bool) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """The default models' sensitivities by name, and the mix of one kind.

    Returns ``(sensitivity by model name, cumulative weights, sensitivities)`` where the
    mix is the GPU workload's models (``gpu``) or the HPC models of classes that can
    span several nodes, each weighted by its class share times its share in the class.
    """
    by_name: dict[str, float] = {}
    for kind in ("gpu", "hpc"):
        for jc in WorkloadConfig(kind=kind, num_jobs=0).classes or ():
            for m in jc.models:
                by_name.setdefault(m.name.lower(), m.locality_sensitivity)
    weights: list[float] = []
    values: list[float] = []
    for jc in WorkloadConfig(kind="gpu" if gpu else "hpc", num_jobs=0).classes or ():
        if not gpu and jc.sizes is not None and all(n <= 1 for n, _ in jc.sizes):
            continue  # one-node classes (serial): never spread
        total = sum(m.weight for m in jc.models)
        for m in jc.models:
            weights.append(jc.share * m.weight / total)
            values.append(m.locality_sensitivity)
    cum = np.cumsum(weights)
    return by_name, cum / cum[-1], np.array(values, dtype=np.float64)


def record_user(record: JobRecord) -> str:
    """Whom a record's job counts for: its user, else its account (module docstring)."""
    return record.user or record.account


def record_locality(record: JobRecord) -> float:
    """The locality sensitivity of a record that carries none (module docstring).

    The sensitivity of the synthetic workload's model named like the job
    (case-insensitive, e.g. ``"vgg16"`` -> 0.83), else the sensitivity of a model drawn
    from the default mix (GPU models when the job asks for GPUs, multi-node HPC models
    otherwise) by the BLAKE2b hash of ``user`` (``account`` when the record has no user,
    as a Philly job's virtual cluster) and ``name``: deterministic across runs and
    machines (unlike Python's ``hash``).
    """
    g = record.req.gpus if record.req.gpus is not None else record.alloc.gpus
    by_name, cum, values = _model_mix(bool(g))
    s = by_name.get(record.name.strip().lower())
    if s is not None:
        return s
    who = record_user(record)
    digest = hashlib.blake2b(f"{who}\0{record.name}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2.0**64
    return float(values[min(int(np.searchsorted(cum, u, side="right")), values.size - 1)])


def build_jobs(
    records: Iterable[JobRecord],
    cluster: Cluster,
    *,
    default_time_limit: int | None = None,
    locality: Mapping[int, float] | None = None,
) -> JobTable:
    """The job table of a replay (see the module docstring for how records are read).

    Args:
        records: Job records, in any order.
        cluster: The cluster they run on.
        default_time_limit: Time limit (s) of jobs whose record has none; ``None``: their
            recorded run time.
        locality: Locality sensitivity per job id (e.g. ``{j.job_id:
            j.locality_sensitivity for j in synthetic_jobs}``); jobs it does not name get
            :func:`record_locality`.

    Raises:
        ValueError: If a given sensitivity is outside [0, 1].
    """
    if locality is not None:
        bad = {k: v for k, v in locality.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"locality sensitivities must be in [0, 1]; got {bad}")
    loc_of: dict[tuple[str, str, bool], float] = {}
    skipped: Counter[str] = Counter()
    users: dict[str, int] = {}
    qoss: dict[str, int] = {}
    parts: dict[str, int] = {}
    rows: list[tuple[int, ...]] = []
    sens: list[float] = []
    mem_known = bool((cluster.cap_m < BIG).any())
    gpn = int(cluster.cap_g.max())
    cpn = int(cluster.cap_c.max())
    homogeneous = (int(cluster.cap_c.min()) == cpn and int(cluster.cap_g.min()) == gpn)
    for r in records:
        if r.start_time is None or r.end_time is None:
            skipped[NEVER_STARTED] += 1
            continue
        run = max(0, r.end_time - r.start_time)
        eligible = r.eligible_time if r.eligible_time is not None else r.submit_time
        eligible = max(eligible, r.submit_time)
        tl = r.time_limit
        known = tl is not None and tl > 0
        if known:
            limit = int(tl)  # type: ignore[arg-type]
        else:
            limit = default_time_limit if default_time_limit is not None else run
        n, c, g, m, excl = _request(r, gpn, cpn)
        if not mem_known:
            m = 0
        if not excl and homogeneous and c == cpn and g == gpn and not m:
            excl = True  # every CPU and GPU of a node: a whole-node request
            c = g = 0
        p = parts.get(r.partition)
        if p is None:
            p = parts[r.partition] = cluster.partition_index(r.partition)
        who = record_user(r)
        u = users.setdefault(who, len(users))
        q = qoss.setdefault(r.qos, len(qoss))
        rows.append((r.job_id, r.submit_time, eligible, run, max(0, limit), int(known), n, c,
                     g, m, int(excl), p, u, q))
        sv = locality.get(r.job_id) if locality is not None else None
        if sv is None:
            rg = r.req.gpus if r.req.gpus is not None else r.alloc.gpus
            key = (who, r.name, bool(rg))
            sv = loc_of.get(key)
            if sv is None:
                sv = loc_of[key] = record_locality(r)
        sens.append(sv)
    arr = np.array(rows, dtype=_I64).reshape(-1, 14)
    order = np.lexsort((arr[:, 0], arr[:, 1], arr[:, 2]))
    arr = arr[order]
    loc = np.array(sens, dtype=np.float64)[order]
    col = [np.ascontiguousarray(arr[:, i]) for i in range(14)]
    exclusive = col[10].astype(bool)
    part = col[11].astype(np.int32)

    # distinct request shapes, and which of them can ever fit their partition
    keys = np.stack([col[11], col[10], col[7], col[8], col[9]], axis=1)
    if keys.shape[0]:
        uniq, shape = np.unique(keys, axis=0, return_inverse=True)
        shape = shape.reshape(-1)
    else:
        uniq, shape = np.zeros((0, 5), dtype=_I64), np.zeros(0, dtype=_I64)
    capacity = np.zeros(uniq.shape[0], dtype=_I64)
    for s, (sp, sx, sc, sg, sm) in enumerate(uniq.tolist()):
        pm = cluster.part_mask[sp]
        if sx:
            capacity[s] = int(pm.sum())
        else:
            capacity[s] = int((pm & (cluster.cap_c >= sc) & (cluster.cap_g >= sg)
                               & (cluster.cap_m >= sm)).sum())
    fits = col[6] <= capacity[shape]
    if not fits.all():
        skipped[EXCEEDS_CLUSTER] += int((~fits).sum())
        col = [c_[fits] for c_ in col]
        exclusive, part, shape, loc = exclusive[fits], part[fits], shape[fits], loc[fits]
        # renumber shapes to those still used
        used, shape = np.unique(shape, return_inverse=True)
        uniq = uniq[used]
        shape = shape.reshape(-1)
    n_jobs = col[0].size
    return JobTable(
        job_id=col[0], submit=col[1], eligible=col[2], run=col[3], limit=col[4],
        limit_known=col[5].astype(bool), nodes=col[6], cpus=col[7], gpus=col[8], mem=col[9],
        exclusive=exclusive, part=part, user=col[12].astype(np.int32),
        qos=col[13].astype(np.int32), site_factor=np.zeros(n_jobs, dtype=np.float64),
        nice=np.zeros(n_jobs, dtype=_I64), switches=np.zeros(n_jobs, dtype=np.int32),
        switches_wait=np.zeros(n_jobs, dtype=_I64), locality=loc,
        shape=shape.astype(np.int32),
        shape_part=uniq[:, 0].astype(np.int32), shape_excl=uniq[:, 1].astype(bool),
        shape_c=uniq[:, 2].copy(), shape_g=uniq[:, 3].copy(), shape_m=uniq[:, 4].copy(),
        users=tuple(users), qos_names=tuple(qoss), skipped=skipped,
    )


# ---------------------------------------------------------------------------- nodes
class NodeState:
    """What is free on each node now, and when the jobs there are expected to end.

    Whole-node jobs are tracked per node only (one job per node). Shared-node jobs also
    get one *allocation row* per node they use (node, amounts, expected and actual end),
    kept in slot arrays, so shadow times and fragmentation can be computed for nodes
    shared by several jobs without a Python loop over jobs.

    Attributes:
        free_c, free_g, free_m: Free CPUs, GPUs, memory per node.
        njobs: Jobs running on each node.
        idle: Nodes with no job.
        excl: Nodes held by a whole-node job.
        node_end: Latest expected end (start + time limit) of the jobs on each node.
        node_aend: Latest actual end of the jobs on each node.
        idle_count: Idle nodes per partition (a list: read one partition at a time, in
            the scheduler's inner loops, where numpy scalars cost more).
        leaf_idle: Idle nodes per leaf switch.
        used_c, used_g, busy_nodes: Allocated CPUs, GPUs and non-idle nodes in total.
        version: Bumped on every allocation or release (cache key of node masks).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        n = cluster.num_nodes
        self.free_c = cluster.cap_c.copy()
        self.free_g = cluster.cap_g.copy()
        self.free_m = cluster.cap_m.copy()
        self.njobs = np.zeros(n, dtype=np.int32)
        self.idle = np.ones(n, dtype=bool)
        self.excl = np.zeros(n, dtype=bool)
        self.node_end = np.zeros(n, dtype=_I64)
        self.node_aend = np.zeros(n, dtype=_I64)
        self.idle_count: list[int] = cluster.part_mask.sum(axis=1).tolist()
        self.leaf_idle = cluster.leaf_size.copy()
        self.used_c = 0
        self.used_g = 0
        self.busy_nodes = 0
        self.version = 0
        #: Set when only whole-node jobs will ever run: per-node free CPUs/GPUs/memory and
        #: job counts are then not kept (``idle`` says it all), which saves work per job.
        self.whole_only = False
        # partitions that do not hold every node: their idle counts need a gather
        self._partial = np.array([k for k, a in enumerate(cluster.part_all) if not a],
                                 dtype=np.int64)
        self._node_c = int(cluster.cap_c[0]) if cluster.homogeneous else -1
        self._node_g = int(cluster.cap_g[0]) if cluster.homogeneous else -1
        # allocation rows of shared-node jobs
        cap = 64
        self.row_node = np.zeros(cap, dtype=_I64)
        self.row_c = np.zeros(cap, dtype=_I64)
        self.row_g = np.zeros(cap, dtype=_I64)
        self.row_m = np.zeros(cap, dtype=_I64)
        self.row_end = np.zeros(cap, dtype=_I64)
        self.row_aend = np.zeros(cap, dtype=_I64)
        self.row_alive = np.zeros(cap, dtype=bool)
        self._free_slots: list[int] = list(range(cap - 1, -1, -1))
        self.shared_rows = 0

    # ------------------------------------------------------------------ rows
    def _slots(self, n: int) -> np.ndarray:
        if len(self._free_slots) < n:
            old = self.row_node.size
            new = max(2 * old, old + n)
            for name in ("row_node", "row_c", "row_g", "row_m", "row_end", "row_aend",
                         "row_alive"):
                a = getattr(self, name)
                b = np.zeros(new, dtype=a.dtype)
                b[:old] = a
                setattr(self, name, b)
            self._free_slots[:0] = range(new - 1, old - 1, -1)
        slots = self._free_slots[-n:]
        del self._free_slots[-n:]
        return np.array(slots, dtype=_I64)

    # ------------------------------------------------------------------ changes
    def _idle_delta(self, nodes: np.ndarray, sign: int) -> None:
        n = int(nodes.size)
        self.busy_nodes -= sign * n
        if n <= 8:
            leaf_idle = self.leaf_idle
            for k in self.cluster.leaf_of[nodes].tolist():
                leaf_idle[k] += sign
        else:  # (one count per leaf; cheaper than np.add.at)
            counts = np.bincount(self.cluster.leaf_of[nodes], minlength=self.leaf_idle.size)
            if sign > 0:
                self.leaf_idle += counts
            else:
                self.leaf_idle -= counts
        ic = self.idle_count
        for k in range(len(ic)):
            ic[k] += sign * n
        if self._partial.size:  # partitions without every node: count theirs
            part = self._partial
            inside = self.cluster.part_mask[part][:, nodes].sum(axis=1).tolist()
            for k, c in zip(part.tolist(), inside, strict=True):
                ic[k] += sign * c - sign * n

    def _mark_busy(self, nodes: np.ndarray) -> None:
        self.idle[nodes] = False
        self._idle_delta(nodes, -1)

    def _mark_idle(self, nodes: np.ndarray) -> None:
        self.idle[nodes] = True
        self._idle_delta(nodes, 1)

    def _caps(self, nodes: np.ndarray) -> tuple[int, int]:
        if self._node_c >= 0:
            return self._node_c * int(nodes.size), self._node_g * int(nodes.size)
        cl = self.cluster
        return int(cl.cap_c[nodes].sum()), int(cl.cap_g[nodes].sum())

    def allocate_whole(self, nodes: np.ndarray, end: int, aend: int) -> None:
        """Give idle ``nodes`` to a whole-node job expected to end at ``end``."""
        if not self.whole_only:
            self.free_c[nodes] = 0
            self.free_g[nodes] = 0
            self.free_m[nodes] = 0
            self.njobs[nodes] = 1
        self.excl[nodes] = True
        self.node_end[nodes] = end
        self.node_aend[nodes] = aend
        c, g = self._caps(nodes)
        self.used_c += c
        self.used_g += g
        self.idle[nodes] = False
        self._idle_delta(nodes, -1)
        self.version += 1

    def release_whole(self, nodes: np.ndarray) -> None:
        """Free the nodes of a whole-node job."""
        if not self.whole_only:
            cl = self.cluster
            self.free_c[nodes] = cl.cap_c[nodes]
            self.free_g[nodes] = cl.cap_g[nodes]
            self.free_m[nodes] = cl.cap_m[nodes]
            self.njobs[nodes] = 0
        self.excl[nodes] = False
        self.node_end[nodes] = 0
        self.node_aend[nodes] = 0
        c, g = self._caps(nodes)
        self.used_c -= c
        self.used_g -= g
        self.idle[nodes] = True
        self._idle_delta(nodes, 1)
        self.version += 1

    def allocate_shared(self, nodes: np.ndarray, c: int, g: int, m: int, end: int,
                        aend: int) -> np.ndarray:
        """Give ``c`` CPUs, ``g`` GPUs, ``m`` MiB of each node; returns the row slots."""
        if self.whole_only:
            raise RuntimeError("NodeState.whole_only is set: no shared-node job may run")
        self.free_c[nodes] -= c
        self.free_g[nodes] -= g
        if m:
            self.free_m[nodes] -= m
        newly = nodes[self.idle[nodes]]
        if newly.size:
            self._mark_busy(newly)
        self.njobs[nodes] += 1
        self.node_end[nodes] = np.maximum(self.node_end[nodes], end)
        self.node_aend[nodes] = np.maximum(self.node_aend[nodes], aend)
        self.used_c += c * int(nodes.size)
        self.used_g += g * int(nodes.size)
        slots = self._slots(int(nodes.size))
        self.row_node[slots] = nodes
        self.row_c[slots] = c
        self.row_g[slots] = g
        self.row_m[slots] = m
        self.row_end[slots] = end
        self.row_aend[slots] = aend
        self.row_alive[slots] = True
        self.shared_rows += int(slots.size)
        self.version += 1
        return slots

    def release_shared(self, slots: np.ndarray) -> None:
        """Free the allocation rows ``slots`` of a shared-node job."""
        nodes = self.row_node[slots]
        c, g, m = int(self.row_c[slots[0]]), int(self.row_g[slots[0]]), int(self.row_m[slots[0]])
        end, aend = int(self.row_end[slots[0]]), int(self.row_aend[slots[0]])
        self.row_alive[slots] = False
        self.shared_rows -= int(slots.size)
        self._free_slots.extend(slots.tolist())
        self.free_c[nodes] += c
        self.free_g[nodes] += g
        if m:
            self.free_m[nodes] += m
        self.used_c -= c * int(nodes.size)
        self.used_g -= g * int(nodes.size)
        self.njobs[nodes] -= 1
        left = self.njobs[nodes]
        gone = nodes[left == 0]
        if gone.size:
            self.node_end[gone] = 0
            self.node_aend[gone] = 0
            self._mark_idle(gone)
        stay = nodes[left > 0]
        if stay.size:
            stale = stay[(self.node_end[stay] <= end) | (self.node_aend[stay] <= aend)]
            if stale.size:
                self._recompute_ends(stale)
        self.version += 1

    def _recompute_ends(self, nodes: np.ndarray) -> None:
        alive = np.flatnonzero(self.row_alive)
        rows = alive[np.isin(self.row_node[alive], nodes)]
        self.node_end[nodes] = 0
        self.node_aend[nodes] = 0
        np.maximum.at(self.node_end, self.row_node[rows], self.row_end[rows])
        np.maximum.at(self.node_aend, self.row_node[rows], self.row_aend[rows])

    # ------------------------------------------------------------------ queries
    def fit_mask(self, part: int, excl: bool, c: int, g: int, m: int) -> np.ndarray:
        """Nodes of partition ``part`` that can take one node's share of a request now."""
        pm = self.cluster.part_mask[part]
        mask: np.ndarray
        if excl:
            mask = self.idle & pm
            return mask
        mask = (self.free_c >= c) & pm
        if g:
            mask &= self.free_g >= g
        if m:
            mask &= self.free_m >= m
        return mask

    def live_rows(self) -> np.ndarray:
        """Slots of the allocation rows of running shared-node jobs."""
        rows: np.ndarray = np.flatnonzero(self.row_alive)
        return rows

    def ready_shared(self, t: int, pm: np.ndarray, c: int, g: int, m: int) -> np.ndarray:
        """Per node, the earliest time one node's share ``(c, g, m)`` will be free.

        From the running jobs' expected ends (start + time limit), at ``t`` or later;
        nodes outside ``pm`` or too small never (:data:`BIG`). EASY backfill's shadow time
        of a job asking for ``n`` such shares is the ``n``-th smallest.
        """
        cl = self.cluster
        ready = np.full(cl.num_nodes, BIG, dtype=np.int64)
        now_ok = self.fit_mask(len(cl.part_names) - 1, False, c, g, m) & pm
        ready[now_ok] = t
        cap_ok = pm & (cl.cap_c >= c) & (cl.cap_g >= g) & (cl.cap_m >= m) & ~now_ok
        ex = cap_ok & self.excl
        ready[ex] = np.maximum(self.node_end[ex], t)
        shared = cap_ok & ~self.excl & ~self.idle
        if not shared.any():
            return ready
        rows = self.live_rows()
        rows = rows[shared[self.row_node[rows]]]
        if not rows.size:
            return ready
        node = self.row_node[rows]
        end = np.maximum(self.row_end[rows], t)
        o = np.lexsort((end, node))
        rows, node, end = rows[o], node[o], end[o]
        first = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
        seg = np.diff(np.r_[first, node.size])

        def seg_cumsum(x: np.ndarray) -> np.ndarray:
            cs = np.cumsum(x)
            base = np.repeat(cs[first] - x[first], seg)
            out: np.ndarray = cs - base
            return out

        ok = self.free_c[node] + seg_cumsum(self.row_c[rows]) >= c
        if g:
            ok &= self.free_g[node] + seg_cumsum(self.row_g[rows]) >= g
        if m:
            ok &= self.free_m[node] + seg_cumsum(self.row_m[rows]) >= m
        okr = np.flatnonzero(ok)
        if okr.size:
            u, k = np.unique(node[okr], return_index=True)
            ready[u] = end[okr[k]]
        return ready

    def free_at(self, nodes: np.ndarray, when: int, t: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Free CPUs, GPUs, memory of ``nodes`` (sorted) at ``when`` (>= ``t``, now).

        If every running job ends at its expected end (start + time limit).
        """
        cl = self.cluster
        fc = self.free_c[nodes].copy()
        fg = self.free_g[nodes].copy()
        fm = self.free_m[nodes].copy()
        ex = self.excl[nodes] & (np.maximum(self.node_end[nodes], t) <= when)
        fc[ex] = cl.cap_c[nodes[ex]]
        fg[ex] = cl.cap_g[nodes[ex]]
        fm[ex] = cl.cap_m[nodes[ex]]
        rows = self.live_rows()
        if rows.size:
            rn = self.row_node[rows]
            sel = np.isin(rn, nodes) & (np.maximum(self.row_end[rows], t) <= when)
            if sel.any():
                rows = rows[sel]
                pos = np.searchsorted(nodes, self.row_node[rows])
                k = nodes.size
                fc += np.bincount(pos, weights=self.row_c[rows], minlength=k).astype(np.int64)
                fg += np.bincount(pos, weights=self.row_g[rows], minlength=k).astype(np.int64)
                fm += np.bincount(pos, weights=self.row_m[rows], minlength=k).astype(np.int64)
        return fc, fg, fm

    def ready_whole(self, t: int, pm: np.ndarray) -> np.ndarray:
        """Per node, the earliest time it will be idle (expected ends; as :meth:`ready_shared`)."""
        ready: np.ndarray = np.where(pm, np.where(self.idle, t, np.maximum(self.node_end, t)),
                                     BIG)
        return ready
