"""Seeded synthetic workloads for GPU and CPU (HPC) clusters, calibrated to published figures.

:func:`generate` turns a :class:`WorkloadConfig` into a list of :class:`SyntheticJob`
(submit time, user, request, time limit, actual run time, final state, locality
sensitivity). The same config always gives the same list: every random draw comes from
one ``numpy.random.Generator(PCG64(seed))``, in a fixed order, one array per quantity (a
change to one class's parameters leaves the draws of the other quantities alone). Once a
scheduler (the simulator) has decided when and where a job ran,
:meth:`SyntheticJob.to_record` makes the accounting record Slurm would have written, so
a synthetic history can be dumped as ``sacct`` text and ingested like a real one.
:func:`default_cluster` is the cluster the defaults are calibrated for (every request
fits it), and :func:`describe` summarises a list of jobs.

Sources (the papers in ``shared/papers``):

* **[SCHED2]** Luan et al., "SCHED²: Scheduling Deep Learning Training via Deep
  Reinforcement Learning": a production DLT trace of 6,261 jobs where 68% of jobs use one
  GPU (Fig. 3a), the mean interval between arrivals is 172 s and the arrivals are not
  Poisson (§IV-A, §V), run times range from minutes to hours (Fig. 3b), 15 servers x 8
  GPUs (§IV-A); job categories CV 10%, NLP 60%, Speech 30% (§IV-A, quoting Gandiva); a
  4-GPU job on two servers instead of one runs 5.9x slower for VGG16, 2.7x for
  Transformer, 1.6x for DeepSpeech, 1.4x for Inception3 (Fig. 1); mean execution time
  5,422 s under SCHED², 8,427 s under the baselines (Fig. 10a).
* **[GANDIVA]** Xiao et al., "Gandiva: Introspective Cluster Scheduling for Deep
  Learning": the same 10/60/30 category mix with its models (Table 2: InceptionV3,
  ResNet-50, AlexNet, VGG16 / Bi-Att-Flow, LanguageModel, GNMT, Transformer / Wavenet,
  DeepSpeech); a 2-GPU job split over two servers slows by up to 47% (ResNet-50), 30%
  (InceptionV3), 5% (DeepSpeech) (Fig. 4); VGG16 reaches 60% of its best speed with
  the worst intra-server locality, ResNet-50 is unaffected (Fig. 1); GPU requests are
  powers of two (§4.2); users kill jobs early on feedback (§1, §2); training "often
  lasts for hours or days" (§6.1).
* **[DL2]** Peng et al., "DL²": mean job duration 147 min, over half the jobs run for
  more than an hour and some for days (Fig. 8b); the arrival rate varies strongly over
  the day and week (Fig. 8a, no numbers in the text).
* **[CHIC]** and **[RL-TAPS]** only use synthetic workloads (Poisson arrivals at
  0.9-2.7 jobs/h; uniform sizes and lengths) and give no statistics used here.

Defaults, kind ``"gpu"`` (``[paper]`` = a published figure, ``[assumed]`` = our choice):

=========================  ===============================================================
inter-arrival              mean 172 s [paper: SCHED2]; gamma-distributed gaps, CV 1.5
                           [assumed; SCHED2 says the trace is not Poisson]; diurnal and
                           weekly modulation [assumed shape; DL2 Fig. 8a shows one]:
                           rate x (1 + 0.5 cos(2 pi (hour - 14) / 24)), x 0.6 on Saturday
                           and Sunday (UTC), renormalised to keep the weekly mean rate
GPUs per job               1: 68% [paper: SCHED2]; 2: 12%, 4: 9%, 8: 7%, 16: 2.5%,
                           32: 1%, 64: 0.5% [assumed: powers of two as in GANDIVA §4.2,
                           falling with size]; mean 2.88 GPUs
classes                    cv 10%, nlp 60%, speech 30% [paper: SCHED2, GANDIVA]
run time (natural)         log-normal per class [assumed]: median cv 3,000 s, nlp
                           1,800 s, speech 2,400 s, sigma 1.5 / 1.5 / 1.4, at least 60 s;
                           mean ~6,200 s as drawn, ~5,300 s once failures, cancellations
                           and timeouts cut runs short [calibrated to SCHED2's 5,422 s
                           mean; DL2's 147 min is the same order]; p99/p50 ~ 34
                           (minutes to days); offered load ~70% of the default cluster
locality sensitivity       per model, s = 1 - 1/slowdown (see below): vgg16 0.83,
                           transformer 0.63, deepspeech 0.375, inception3 0.29 [paper:
                           SCHED2 Fig. 1]; resnet50 0.32 [paper: GANDIVA Fig. 4, 47%];
                           alexnet 0.75, gnmt 0.55, lm 0.50, bidaf 0.40, wavenet 0.25
                           [assumed]; per job the excess slowdown 1/(1-s) - 1 is
                           scaled by U(0.8, 1.2) [assumed: SCHED2 notes sensitivity
                           varies with batch size and allocation], s at most 0.95
cluster                    16 nodes x 8 GPUs, 64 CPUs, 512,000 MiB; leaf switches of 4
                           nodes under one spine [assumed: the demo's default; SCHED2
                           uses 15 x 8]; partition ``gpu``, MaxTime 7 days [assumed]
CPUs / memory per GPU      4 (30%), 6 (20%), 8 (50%) CPUs; 16,000 (20%), 32,000 (35%),
                           64,000 (45%) MiB [assumed]
=========================  ===============================================================

Defaults, kind ``"hpc"`` (all [assumed]; none of the papers describes a CPU cluster):
64 nodes x 64 CPUs x 256,000 MiB in leaf switches of 16 nodes; classes ``mpi`` (60%:
whole nodes, 1 node 30%, 2: 14%, 3: 3%, 4: 14%, 6: 3%, 8: 12%, 12: 2%, 16: 9%, 24: 1%,
32: 7%, 64: 5%, i.e. powers of two heavy at small sizes; log-normal run time, median
1,800 s, sigma 1.8; locality 0.25-0.45 by application) and ``serial`` (40%: one node,
1-32 CPUs, median 600 s, sigma 1.8, locality 0); run times from 10 s to over a day;
memory 1,000/2,000/4,000 MiB per CPU; partitions ``batch`` (MaxTime 1 day) and
``debug`` (MaxTime 30 min, weight 0.2 among the partitions a job's limit fits); mean
inter-arrival 820 s, which offers about 70% of the cluster's CPUs. MPI locality
sensitivities (wrf 0.40, openfoam 0.35, vasp 0.45, gromacs 0.30, lammps 0.25) stand for
communication-bound codes slowed by oversubscribed uplinks between leaf switches.

Both kinds [assumed]: 50 users with Zipf (exponent 1) job counts, 8 accounts; final
states FAILED 10%, CANCELLED 10% (GANDIVA: users kill jobs on early feedback), TIMEOUT 5%
(plus jobs whose run exceeds the partition's MaxTime), the rest COMPLETED. Time limits:
users overestimate and pick round values. A user's habit is a factor ``3 x
exp(N(0, 0.5))``, a job's factor ``max(1, habit x exp(N(0, 0.7)))``; the limit is run
time x factor rounded up to 5, 10, 15, 30 min, 1, 2, 4, 8, 12 h, 1, 2, 3, 5, 7 days
(capped at MaxTime), and 10% of jobs just ask for MaxTime. This gives a median limit/run
of ~5 for completed jobs.

**Locality sensitivity** ``s`` in [0, 1] is the share of a job's speed lost when its
GPUs (nodes) are spread over servers (leaf switches) instead of packed: spread, the job
runs ``run_time / (1 - s)``. SCHED²'s "x-times slower on two servers" gives ``s = 1 -
1/x``; Gandiva's "47% slowdown" is read as 1.47x. It only matters for a job that can be
spread (more than one GPU or node); a speed model in the simulator decides how it grows
with the number of servers or switches crossed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from db.records import JobRecord, TresCounts
from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.slurm.hostlist import compress, expand

__all__ = [
    "DEFAULT_START_EPOCH",
    "FAILED_EXIT_CODES",
    "MAX_LOCALITY",
    "STATES",
    "TIME_LIMIT_STEPS",
    "JobClass",
    "Kind",
    "Model",
    "Partition",
    "SyntheticJob",
    "WorkloadConfig",
    "default_cluster",
    "describe",
    "generate",
]

#: The two kinds of cluster a workload is made for.
Kind = Literal["gpu", "hpc"]

#: Weighted choices: ``((value, weight), ...)``; weights need not sum to 1.
Weights = tuple[tuple[int, float], ...]

#: 2024-01-01T00:00:00Z, a Monday: the default first day of a synthetic history.
DEFAULT_START_EPOCH = 1_704_067_200

#: The "round" time limits users ask for (seconds): 5, 10, 15, 30 min, 1, 2, 4, 8, 12 h,
#: 1, 2, 3, 5, 7 days. A wanted limit is rounded up to the next one.
TIME_LIMIT_STEPS: tuple[int, ...] = (
    300, 600, 900, 1800, 3600, 7200, 14400, 28800, 43200,
    86400, 172800, 259200, 432000, 604800,
)

#: Final states a synthetic job ends in, indexed by the generator's state code.
STATES: tuple[str, ...] = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")

#: Exit codes of FAILED jobs and their weights [assumed]: mostly 1, some usage errors
#: (2), command not found (127), and 255.
FAILED_EXIT_CODES: Weights = ((1, 0.75), (2, 0.10), (127, 0.10), (255, 0.05))

#: Largest locality sensitivity drawn (a job never loses all its speed when spread).
MAX_LOCALITY = 0.95

#: SIGTERM: the signal a ``scancel`` sends; sacct prints CANCELLED jobs as ``0:15``.
_SIGTERM = 15
_DAY = 86_400
_WEEK = 7 * _DAY
_GRID_STEP = 60.0  # seconds per bin of the diurnal/weekly rate profile
_CODE_COMPLETED, _CODE_FAILED, _CODE_CANCELLED, _CODE_TIMEOUT = 0, 1, 2, 3

_T = TypeVar("_T")


# ----------------------------------------------------------------------------- config types
@dataclass(frozen=True, slots=True)
class Model:
    """A representative application of a job class; it names the job.

    Attributes:
        name: Job name given to jobs of this model, e.g. ``"vgg16"``.
        weight: Relative frequency within its class.
        locality_sensitivity: The model's sensitivity ``s`` in [0, 1] (see the module
            docstring); each job varies it by the class's ``locality_jitter``.
        source: Where ``locality_sensitivity`` comes from, e.g. ``"SCHED2 Fig. 1: 5.9x"``
            or ``"assumed"``.
    """

    name: str
    weight: float
    locality_sensitivity: float
    source: str = "assumed"


@dataclass(frozen=True, slots=True)
class JobClass:
    """A class of jobs: its share, run-time distribution, models and request shape.

    Attributes:
        name: Class name, e.g. ``"nlp"`` (:attr:`SyntheticJob.job_class`).
        share: Relative frequency among the classes.
        run_median_s: Median of the log-normal natural run time, seconds.
        run_sigma: Sigma of the log-normal (of ``ln run_time``).
        models: The models jobs of this class run (at least one).
        run_min_s: Shortest natural run time, seconds (draws below are raised to it).
        sizes: Request sizes for this class (GPUs for ``"gpu"``, nodes for ``"hpc"``);
            ``None``: the config's :attr:`WorkloadConfig.sizes`.
        cpus: ``"hpc"`` only: CPUs per node for jobs that share nodes; ``None``: whole
            nodes (``cpus_per_node`` each).
        locality_jitter: ``j``: each job's excess slowdown when spread is its model's
            times ``U(1 - j, 1 + j)``, i.e. ``1/(1 - s) - 1`` is scaled, not ``s``.
    """

    name: str
    share: float
    run_median_s: float
    run_sigma: float
    models: tuple[Model, ...]
    run_min_s: int = 60
    sizes: Weights | None = None
    cpus: Weights | None = None
    locality_jitter: float = 0.2

    @property
    def locality_range(self) -> tuple[float, float]:
        """The smallest and largest sensitivity a job of this class can be given."""
        lo = min(m.locality_sensitivity for m in self.models)
        hi = max(m.locality_sensitivity for m in self.models)
        return (float(_jittered(lo, 1.0 - self.locality_jitter)),
                float(_jittered(hi, 1.0 + self.locality_jitter)))


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition jobs are submitted to (every partition spans all nodes).

    Attributes:
        name: Partition name.
        share: Weight among the partitions whose ``max_time`` allows a job's limit.
        max_time: Slurm's ``MaxTime`` in seconds (whole minutes): no job's time limit
            exceeds it.
    """

    name: str
    share: float
    max_time: int


# Locality of the GPU models: s = 1 - 1/slowdown on two servers instead of one.
_GPU_CLASSES: tuple[JobClass, ...] = (
    JobClass("cv", 0.10, 3000.0, 1.5, (
        Model("vgg16", 1.0, 0.83, "SCHED2 Fig. 1: 5.9x"),
        Model("alexnet", 1.0, 0.75, "assumed (FC-heavy like VGG16)"),
        Model("resnet50", 1.0, 0.32, "Gandiva Fig. 4: 47% inter-server slowdown"),
        Model("inception3", 1.0, 0.29, "SCHED2 Fig. 1: 1.4x (Gandiva Fig. 4: 30%)"),
    )),
    JobClass("nlp", 0.60, 1800.0, 1.5, (
        Model("transformer", 1.0, 0.63, "SCHED2 Fig. 1: 2.7x"),
        Model("gnmt", 1.0, 0.55, "assumed"),
        Model("lm", 1.0, 0.50, "assumed"),
        Model("bidaf", 1.0, 0.40, "assumed"),
    )),
    JobClass("speech", 0.30, 2400.0, 1.4, (
        Model("deepspeech", 1.0, 0.375, "SCHED2 Fig. 1: 1.6x (Gandiva Fig. 4: 5%)"),
        Model("wavenet", 1.0, 0.25, "assumed"),
    )),
)

_GPU_SIZES: Weights = (
    (1, 0.68), (2, 0.12), (4, 0.09), (8, 0.07), (16, 0.025), (32, 0.01), (64, 0.005),
)

_HPC_CLASSES: tuple[JobClass, ...] = (
    JobClass("mpi", 0.60, 1800.0, 1.8, (
        Model("wrf", 1.0, 0.40),
        Model("openfoam", 1.0, 0.35),
        Model("vasp", 1.0, 0.45),
        Model("gromacs", 1.0, 0.30),
        Model("lammps", 1.0, 0.25),
    ), run_min_s=10),
    JobClass("serial", 0.40, 600.0, 1.8, (
        Model("python", 2.0, 0.0),
        Model("matlab", 1.0, 0.0),
        Model("rscript", 1.0, 0.0),
    ), run_min_s=10, sizes=((1, 1.0),),
        cpus=((1, 0.35), (2, 0.10), (4, 0.15), (8, 0.15), (16, 0.15), (32, 0.10))),
)

_HPC_SIZES: Weights = (
    (1, 0.30), (2, 0.14), (3, 0.03), (4, 0.14), (6, 0.03), (8, 0.12), (12, 0.02),
    (16, 0.09), (24, 0.01), (32, 0.07), (64, 0.05),
)

_KIND_DEFAULTS: dict[str, dict[str, object]] = {
    "gpu": {
        "mean_interarrival_s": 172.0,
        "sizes": _GPU_SIZES,
        "classes": _GPU_CLASSES,
        "partitions": (Partition("gpu", 1.0, 7 * _DAY),),
        "num_nodes": 16,
        "nodes_per_leaf": 4,
        "cpus_per_node": 64,
        "gpus_per_node": 8,
        "mem_mb_per_node": 512_000,
    },
    "hpc": {
        "mean_interarrival_s": 820.0,
        "sizes": _HPC_SIZES,
        "classes": _HPC_CLASSES,
        "partitions": (Partition("batch", 0.8, _DAY), Partition("debug", 0.2, 1800)),
        "num_nodes": 64,
        "nodes_per_leaf": 16,
        "cpus_per_node": 64,
        "gpus_per_node": 0,
        "mem_mb_per_node": 256_000,
    },
}


@dataclass(frozen=True)
class WorkloadConfig:
    """Everything :func:`generate` needs; the single source of the workload's defaults.

    Fields left ``None`` take the default of ``kind`` when the config is made, so a
    constructed config is always complete (write ``dataclasses.asdict(config)`` next to
    what it produced). The defaults and their sources are listed in the module docstring.
    ``dataclasses.replace`` keeps the filled-in values: to change ``kind``, make a new
    config.

    Raises:
        ValueError: On an unknown kind, a non-positive size or mean, weights that are
            not positive, shares outside [0, 1] or a request that cannot fit a node.
    """

    kind: Kind = "gpu"
    """``"gpu"``: a DL training cluster, requests in GPUs. ``"hpc"``: a CPU cluster,
    requests in nodes (or CPUs of one node), no GPUs."""
    num_jobs: int = 1000
    """Number of jobs to generate."""
    seed: int = 0
    """Seed of the ``PCG64`` generator: the same config gives the same jobs."""
    start_epoch: int = DEFAULT_START_EPOCH
    """Epoch (UTC) the history starts at; the first job arrives one gap after it."""
    first_job_id: int = 1
    """Job id of the first job; ids rise by one in submit order."""
    mean_interarrival_s: float | None = None
    """Mean seconds between submissions. Default gpu: 172 (SCHED²); hpc: 820 (about
    70% offered load on the default HPC cluster, assumed). With ``diurnal`` the mean
    holds over whole weeks; a shorter history sees the rates of its own days (20,000
    GPU jobs from a Monday average ~170 s)."""
    interarrival_cv: float = 1.5
    """Coefficient of variation of the gaps (gamma distributed; 1.0 is Poisson). 1.5 is
    assumed: SCHED² reports its production arrivals are not Poisson."""
    diurnal: bool = True
    """Modulate the arrival rate over the day and week (keeping its weekly mean)."""
    diurnal_amplitude: float = 0.5
    """Relative amplitude of the daily cosine, in [0, 1): peak rate 1.5x, trough 0.5x."""
    diurnal_peak_hour: float = 14.0
    """Hour of day (UTC) of the busiest submission rate."""
    weekend_factor: float = 0.6
    """Rate on Saturdays and Sundays (UTC) relative to weekdays."""
    sizes: Weights | None = None
    """``((size, weight), ...)``: GPUs per job (gpu) or nodes per job (hpc). Sizes larger
    than the cluster are clamped to it. A class's own ``sizes`` overrides this."""
    classes: tuple[JobClass, ...] | None = None
    """Job classes with their shares, run-time distributions and models."""
    num_users: int = 50
    """Number of users; user ``i`` (1-based) submits a share proportional to
    ``1 / i ** user_zipf_exponent`` of the jobs (assumed)."""
    user_zipf_exponent: float = 1.0
    """Exponent of the Zipf-like distribution of jobs over users."""
    num_accounts: int = 8
    """Number of accounts; each user belongs to one, drawn uniformly."""
    limit_factor_median: float = 3.0
    """Median factor by which users overestimate their run time (assumed). Each user
    has a habit ``limit_factor_median * exp(N(0, user_factor_sigma))``, each job a
    factor ``max(1, habit * exp(N(0, limit_factor_sigma)))``; the time limit is the run
    time times the factor, rounded up to the next of ``time_limit_steps`` and capped at
    the partition's MaxTime. Failed and cancelled jobs keep the limit of the run they
    were meant to have."""
    limit_factor_sigma: float = 0.7
    """Per-job spread (sigma of the log) of the overestimation factor."""
    user_factor_sigma: float = 0.5
    """Spread between users (sigma of the log) of their overestimation habit."""
    max_limit_share: float = 0.10
    """Share of jobs whose limit is simply the partition's MaxTime (assumed)."""
    time_limit_steps: tuple[int, ...] = TIME_LIMIT_STEPS
    """The round time limits users pick from, seconds, ascending, whole minutes (Slurm
    keeps limits in minutes)."""
    failed_share: float = 0.10
    """Share of jobs that fail (nonzero exit) after ``run * U**2`` of their run time."""
    cancelled_share: float = 0.10
    """Share of jobs cancelled by their user after ``run * U`` of their run time."""
    timeout_share: float = 0.05
    """Share of jobs whose user underestimated: the limit is the largest step at or
    below the run time (the smallest step if none) and the job runs until it. Jobs whose
    run exceeds the partition's MaxTime also end in TIMEOUT."""
    partitions: tuple[Partition, ...] | None = None
    """Partitions, each spanning all nodes. A job goes to one whose MaxTime allows its
    limit, chosen by ``share``; if none does, to the one with the largest MaxTime."""
    num_nodes: int | None = None
    """Nodes in the cluster the requests must fit (gpu: 16, hpc: 64)."""
    nodes_per_leaf: int | None = None
    """Nodes per leaf switch of :func:`default_cluster` (gpu: 4, hpc: 16)."""
    cpus_per_node: int | None = None
    """CPUs per node (64 for both)."""
    gpus_per_node: int | None = None
    """GPUs per node (gpu: 8, hpc: 0)."""
    mem_mb_per_node: int | None = None
    """Memory per node, MiB (gpu: 512,000, hpc: 256,000)."""
    cpus_per_gpu: Weights = ((4, 0.3), (6, 0.2), (8, 0.5))
    """gpu: CPUs requested per GPU, capped at ``cpus_per_node // gpus_per_node``."""
    mem_mb_per_gpu: Weights = ((16_000, 0.2), (32_000, 0.35), (64_000, 0.45))
    """gpu: MiB requested per GPU, capped at ``mem_mb_per_node // gpus_per_node``."""
    mem_mb_per_cpu: Weights = ((1000, 0.2), (2000, 0.3), (4000, 0.5))
    """hpc: MiB requested per CPU, capped at ``mem_mb_per_node // cpus_per_node``."""

    def __post_init__(self) -> None:
        defaults = _KIND_DEFAULTS.get(self.kind)
        if defaults is None:
            raise ValueError(f"kind must be 'gpu' or 'hpc', not {self.kind!r}")
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        _validate(self)


def _validate(c: WorkloadConfig) -> None:
    """Check a config whose kind defaults are filled in; raise ValueError if bad."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f"WorkloadConfig: {what}")

    def weights_ok(w: Weights | None, what: str, minimum: int = 1) -> None:
        need(w is None or (len(w) > 0 and all(v >= minimum and p > 0 for v, p in w)),
             f"{what} must be non-empty ((value >= {minimum}, weight > 0), ...)")

    need(c.num_jobs >= 0, "num_jobs must be >= 0")
    need(c.start_epoch > 0 and c.first_job_id >= 1, "start_epoch and first_job_id must be > 0")
    need(_get(c.mean_interarrival_s) > 0 and c.interarrival_cv > 0,
         "mean_interarrival_s and interarrival_cv must be > 0")
    need(0 <= c.diurnal_amplitude < 1, "diurnal_amplitude must be in [0, 1)")
    need(c.weekend_factor > 0, "weekend_factor must be > 0")
    need(c.num_users >= 1 and c.num_accounts >= 1, "num_users and num_accounts must be >= 1")
    need(c.limit_factor_median >= 1, "limit_factor_median must be >= 1")
    need(c.limit_factor_sigma >= 0 and c.user_factor_sigma >= 0, "sigmas must be >= 0")
    steps = c.time_limit_steps
    need(len(steps) > 0 and steps[0] > 0 and all(a < b for a, b in pairwise(steps)),
         "time_limit_steps must be positive and ascending")
    need(all(x % 60 == 0 for x in steps), "time_limit_steps must be whole minutes (as Slurm)")
    shares = (c.failed_share, c.cancelled_share, c.timeout_share, c.max_limit_share)
    need(all(0 <= s <= 1 for s in shares), "shares must be in [0, 1]")
    need(c.failed_share + c.cancelled_share + c.timeout_share <= 1,
         "failed, cancelled and timeout shares must sum to <= 1")
    weights_ok(c.sizes, "sizes")
    weights_ok(c.cpus_per_gpu, "cpus_per_gpu")
    weights_ok(c.mem_mb_per_gpu, "mem_mb_per_gpu")
    weights_ok(c.mem_mb_per_cpu, "mem_mb_per_cpu")
    classes = _get(c.classes)
    need(len(classes) > 0, "classes must not be empty")
    for jc in classes:
        need(jc.share > 0 and jc.run_median_s > 0 and jc.run_sigma >= 0 and jc.run_min_s >= 1,
             f"class {jc.name!r}: share, run_median_s > 0, run_sigma >= 0, run_min_s >= 1")
        need(len(jc.models) > 0 and all(m.weight > 0 and 0 <= m.locality_sensitivity <= 1
                                        for m in jc.models),
             f"class {jc.name!r}: models need weight > 0 and sensitivity in [0, 1]")
        need(0 <= jc.locality_jitter < 1, f"class {jc.name!r}: locality_jitter in [0, 1)")
        weights_ok(jc.sizes, f"class {jc.name!r} sizes")
        weights_ok(jc.cpus, f"class {jc.name!r} cpus")
    parts = _get(c.partitions)
    need(len(parts) > 0 and all(p.share > 0 and p.max_time > 0 for p in parts),
         "partitions need share > 0 and max_time > 0")
    need(all(p.max_time % 60 == 0 for p in parts), "partition max_time must be whole minutes")
    need(len({p.name for p in parts}) == len(parts), "partition names must be unique")
    need(_get(c.num_nodes) >= 1 and _get(c.nodes_per_leaf) >= 1 and _get(c.cpus_per_node) >= 1,
         "num_nodes, nodes_per_leaf and cpus_per_node must be >= 1")
    need(_get(c.mem_mb_per_node) >= 1, "mem_mb_per_node must be >= 1")
    gpn = _get(c.gpus_per_node)
    if c.kind == "gpu":
        need(gpn >= 1, "a gpu workload needs gpus_per_node >= 1")
        need(_get(c.cpus_per_node) >= gpn, "cpus_per_node must be >= gpus_per_node")
        need(_get(c.mem_mb_per_node) >= gpn, "mem_mb_per_node must be >= gpus_per_node")
    else:
        need(gpn >= 0, "gpus_per_node must be >= 0")
        need(_get(c.mem_mb_per_node) >= _get(c.cpus_per_node),
             "mem_mb_per_node must be >= cpus_per_node")


def _get(value: _T | None) -> _T:
    """A kind-dependent field after ``__post_init__`` filled it in."""
    if value is None:  # pragma: no cover - __post_init__ fills every such field
        raise ValueError("WorkloadConfig field not resolved")
    return value


def _jittered(s: npt.ArrayLike, scale: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Sensitivities ``s`` with their excess slowdown ``1/(1 - s) - 1`` scaled by ``scale``.

    Scaling the slowdown keeps SCHED²'s "x-times slower" reading (a 5.9x model stays
    between 4.9x and 6.9x at a jitter of 0.2); the result is capped at
    :data:`MAX_LOCALITY`.
    """
    s_capped = np.minimum(np.asarray(s, dtype=np.float64), MAX_LOCALITY)
    slowdown = 1.0 + (1.0 / (1.0 - s_capped) - 1.0) * np.asarray(scale, dtype=np.float64)
    out: npt.NDArray[np.float64] = np.clip(1.0 - 1.0 / slowdown, 0.0, MAX_LOCALITY)
    return out


# ----------------------------------------------------------------------------- jobs
@dataclass(frozen=True, slots=True)
class SyntheticJob:
    """One synthetic job: what was asked for and how it would run, not yet scheduled.

    Attributes:
        job_id: Slurm job id (ascending in submit order).
        submit_time: Submission time, epoch seconds UTC.
        user: User name, e.g. ``"user07"``.
        account: Account of the user, e.g. ``"proj03"``.
        partition: Partition the job was submitted to.
        job_class: Class name, e.g. ``"nlp"`` or ``"mpi"``.
        req_nodes: Requested (minimum) node count: ``ceil(gpus / gpus_per_node)`` for a
            GPU job, which may be spread over more nodes.
        req_gpus: Requested GPUs in total (0 for hpc).
        req_cpus: Requested CPUs in total.
        req_mem_mb: Requested memory in total, MiB.
        time_limit: Time limit, seconds.
        run_time: Seconds the job runs when placed with the best locality (``<=
            time_limit``; equal for TIMEOUT).
        state: Final state: ``"COMPLETED"``, ``"FAILED"``, ``"CANCELLED"`` or
            ``"TIMEOUT"``.
        exit_code: Exit code Slurm records (nonzero only for FAILED).
        locality_sensitivity: Share of speed lost when spread (module docstring).
        name: Job name (the model it runs, e.g. ``"vgg16"``).
    """

    job_id: int
    submit_time: int
    user: str
    account: str
    partition: str
    job_class: str
    req_nodes: int
    req_gpus: int
    req_cpus: int
    req_mem_mb: int
    time_limit: int
    run_time: int
    state: str
    exit_code: int
    locality_sensitivity: float
    name: str

    @property
    def req(self) -> TresCounts:
        """The requested TRES, as an accounting record holds them."""
        return TresCounts(self.req_nodes, self.req_cpus, self.req_gpus, self.req_mem_mb)

    def to_record(
        self,
        start_time: int,
        nodes: Sequence[str],
        cluster: str = "",
        *,
        run_time: int | None = None,
    ) -> JobRecord:
        """The accounting record Slurm writes for this job once it ran.

        ``alloc`` equals ``req`` except ``alloc.nodes``, the number of nodes given;
        ``node_list`` is the compressed hostlist and ``nodes`` its expansion (sorted as
        sacct prints it); ``end_time = start_time + run_time``; ``eligible_time`` is the
        submit time, ``qos`` ``"normal"``, ``priority`` unknown. A CANCELLED job records
        signal 15 (sacct's ``0:15``).

        Args:
            start_time: When the scheduler started the job, epoch seconds.
            nodes: The nodes it ran on (at least ``req_nodes``, distinct).
            cluster: The cluster name to record.
            run_time: The elapsed time if the placement changed it (e.g. a job slowed
                down by being spread); reaching ``time_limit`` makes the record TIMEOUT
                with ``end_time = start_time + time_limit``. Default: :attr:`run_time`.

        Returns:
            A record that passes :func:`db.records.check`.

        Raises:
            ValueError: If the job would start before it was submitted, the node list
                is empty, repeats a node or has fewer than ``req_nodes`` nodes, or a
                TIMEOUT job is given a run shorter than its limit.
        """
        if start_time < self.submit_time:
            raise ValueError(
                f"job {self.job_id}: start {start_time} before submit {self.submit_time}")
        names = tuple(nodes)
        if not names or len(set(names)) != len(names) or len(names) < self.req_nodes:
            raise ValueError(
                f"job {self.job_id}: needs {self.req_nodes}+ distinct nodes, got {names!r}")
        state, exit_code, elapsed = self.state, self.exit_code, self.run_time
        if run_time is not None:
            if run_time < 0:
                raise ValueError(f"job {self.job_id}: negative run time {run_time}")
            if run_time >= self.time_limit:
                state, exit_code, elapsed = "TIMEOUT", 0, self.time_limit
            elif self.state == "TIMEOUT":
                raise ValueError(
                    f"job {self.job_id}: a TIMEOUT job runs to its limit {self.time_limit}")
            else:
                elapsed = run_time
        node_list = compress(names)
        req = self.req
        return JobRecord(
            job_id=self.job_id,
            name=self.name,
            user=self.user,
            account=self.account,
            partition=self.partition,
            qos="normal",
            state=state,
            submit_time=self.submit_time,
            eligible_time=self.submit_time,
            start_time=start_time,
            end_time=start_time + elapsed,
            time_limit=self.time_limit,
            req=req,
            alloc=replace(req, nodes=len(names)),
            node_list=node_list,
            nodes=tuple(expand(node_list)),
            priority=None,
            exit_code=exit_code,
            signal=_SIGTERM if state == "CANCELLED" else None,
            cluster=cluster,
        )


# ----------------------------------------------------------------------------- generation
def _pick(
    weights: Sequence[float] | npt.NDArray[np.float64], u: npt.NDArray[np.float64]
) -> npt.NDArray[np.intp]:
    """Indices into ``weights`` for uniform draws ``u`` (inverse CDF, vectorised)."""
    cum = np.cumsum(np.asarray(weights, dtype=np.float64))
    cum /= cum[-1]
    idx = np.searchsorted(cum, u, side="right")
    return np.minimum(idx, len(cum) - 1)


def _warp(op: npt.NDArray[np.float64], c: WorkloadConfig) -> npt.NDArray[np.float64]:
    """Map arrival times of a constant-rate process to the diurnal/weekly rate.

    ``op`` holds times at the mean rate; the result ``t`` solves ``Lambda(t) = op`` where
    ``Lambda`` is the cumulative rate profile (mean slope 1 over each week), so a whole
    week keeps its expected number of arrivals.
    """
    edges = np.arange(0.0, _WEEK + _GRID_STEP, _GRID_STEP)
    mid = c.start_epoch + edges[:-1] + _GRID_STEP / 2
    hour = (mid % _DAY) / 3600.0
    rate = 1.0 + c.diurnal_amplitude * np.cos(2 * np.pi * (hour - c.diurnal_peak_hour) / 24.0)
    weekday = (np.floor_divide(mid, _DAY) + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
    rate = np.where(weekday >= 5, rate * c.weekend_factor, rate)
    rate /= rate.mean()
    cum = np.concatenate(([0.0], np.cumsum(rate * _GRID_STEP)))
    cum[-1] = float(_WEEK)
    weeks = np.floor(op / _WEEK)
    t: npt.NDArray[np.float64] = weeks * _WEEK + np.interp(op - weeks * _WEEK, cum, edges)
    return t


def _names(prefix: str, count: int) -> list[str]:
    """``prefix01``, ``prefix02``, ... zero-padded to the width of ``count`` (at least 2)."""
    width = max(2, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def generate(config: WorkloadConfig) -> list[SyntheticJob]:
    """Generate ``config.num_jobs`` jobs in submit order.

    Deterministic: the same config gives an identical list (one ``PCG64(seed)``
    generator, draws in a fixed order); a different seed gives a different one.

    Args:
        config: The workload to generate.

    Returns:
        The jobs, ascending in ``submit_time`` and ``job_id``.
    """
    c = config
    n = c.num_jobs
    if n == 0:
        return []
    rng = np.random.Generator(np.random.PCG64(c.seed))
    classes = _get(c.classes)
    parts = _get(c.partitions)
    num_nodes, cpn = _get(c.num_nodes), _get(c.cpus_per_node)
    gpn, mem_node = _get(c.gpus_per_node), _get(c.mem_mb_per_node)

    # Per-user draws, then one array per quantity per job, always in this order.
    nu = c.num_users
    user_habit = c.limit_factor_median * np.exp(c.user_factor_sigma * rng.standard_normal(nu))
    user_account = rng.integers(0, c.num_accounts, size=nu)
    cv2 = c.interarrival_cv ** 2
    gaps = rng.gamma(1.0 / cv2, cv2, size=n)
    u_user, u_class, u_model, u_jitter = (rng.random(n) for _ in range(4))
    u_size, u_cpu, u_mem = (rng.random(n) for _ in range(3))
    z_run, z_limit = rng.standard_normal(n), rng.standard_normal(n)
    u_max, u_part, u_state, u_cut, u_exit = (rng.random(n) for _ in range(5))

    # Arrivals.
    op = np.cumsum(gaps) * _get(c.mean_interarrival_s)
    t = _warp(op, c) if c.diurnal else op
    submit = c.start_epoch + np.floor(t).astype(np.int64)

    # Users and classes.
    user = _pick(1.0 / np.arange(1, nu + 1, dtype=np.float64) ** c.user_zipf_exponent, u_user)
    cls = _pick([jc.share for jc in classes], u_class)

    # Model (name, locality) and request size, per class.
    model_names: list[str] = []
    model_loc: list[float] = []
    model = np.empty(n, dtype=np.intp)
    size = np.empty(n, dtype=np.int64)
    cpus_per_node_req = np.full(n, cpn, dtype=np.int64)
    jitter = np.empty(n, dtype=np.float64)
    base_sizes = _get(c.sizes)
    for k, jc in enumerate(classes):
        mask = cls == k
        offset = len(model_names)
        model_names.extend(m.name for m in jc.models)
        model_loc.extend(m.locality_sensitivity for m in jc.models)
        model[mask] = offset + _pick([m.weight for m in jc.models], u_model[mask])
        jitter[mask] = jc.locality_jitter
        sizes = jc.sizes if jc.sizes is not None else base_sizes
        size[mask] = np.asarray([s for s, _ in sizes], dtype=np.int64)[
            _pick([w for _, w in sizes], u_size[mask])]
        if jc.cpus is not None and c.kind == "hpc":
            cpus_per_node_req[mask] = np.asarray([v for v, _ in jc.cpus], dtype=np.int64)[
                _pick([w for _, w in jc.cpus], u_cpu[mask])]
    locality = np.round(_jittered(np.asarray(model_loc)[model],
                                  1.0 + jitter * (2.0 * u_jitter - 1.0)), 4)

    if c.kind == "gpu":
        gpus = np.minimum(size, num_nodes * gpn)
        nodes = -(-gpus // gpn)
        cpg = np.minimum(_values(c.cpus_per_gpu, u_cpu), max(1, cpn // gpn))
        mpg = np.minimum(_values(c.mem_mb_per_gpu, u_mem), mem_node // gpn)
        cpus, mem = gpus * cpg, gpus * mpg
    else:
        nodes = np.minimum(size, num_nodes)
        gpus = np.zeros(n, dtype=np.int64)
        cpus = nodes * np.minimum(cpus_per_node_req, cpn)
        mem = cpus * np.minimum(_values(c.mem_mb_per_cpu, u_mem), mem_node // cpn)

    # Natural run time (log-normal per class).
    median = np.asarray([jc.run_median_s for jc in classes])[cls]
    sigma = np.asarray([jc.run_sigma for jc in classes])[cls]
    run_min = np.asarray([jc.run_min_s for jc in classes], dtype=np.int64)[cls]
    natural = np.maximum(np.ceil(median * np.exp(sigma * z_run)).astype(np.int64), run_min)

    # Time limit: overestimate, round up to a step, pick a partition that allows it.
    steps = np.asarray(c.time_limit_steps, dtype=np.int64)
    factor = np.maximum(1.0, user_habit[user] * np.exp(c.limit_factor_sigma * z_limit))
    want_idx = np.minimum(np.searchsorted(steps, natural * factor, side="left"), len(steps) - 1)
    wanted = steps[want_idx]
    pmax = np.asarray([p.max_time for p in parts], dtype=np.int64)
    weight = (pmax[None, :] >= wanted[:, None]) * np.asarray([p.share for p in parts])
    total = weight.sum(axis=1)
    none_fits = total <= 0
    weight[none_fits, int(np.argmax(pmax))] = 1.0
    total[none_fits] = 1.0
    part = (np.cumsum(weight, axis=1) <= (u_part * total)[:, None]).sum(axis=1)
    part = np.minimum(part, len(parts) - 1)
    part_max = pmax[part]
    limit = np.minimum(wanted, part_max)
    limit = np.where(u_max < c.max_limit_share, part_max, limit)

    # Final state and actual run time.
    t_timeout = c.timeout_share
    t_failed = t_timeout + c.failed_share
    t_cancel = t_failed + c.cancelled_share
    state = np.select(
        [u_state < t_timeout, u_state < t_failed, u_state < t_cancel],
        [_CODE_TIMEOUT, _CODE_FAILED, _CODE_CANCELLED], _CODE_COMPLETED)
    floor_idx = np.maximum(np.searchsorted(steps, natural, side="right") - 1, 0)
    planned_to = state == _CODE_TIMEOUT
    limit = np.where(planned_to, np.minimum(np.minimum(wanted, part_max), steps[floor_idx]),
                     limit)
    forced = ~planned_to & (natural > limit)
    state = np.where(forced, _CODE_TIMEOUT, state)
    run = np.select(
        [state == _CODE_TIMEOUT, state == _CODE_FAILED, state == _CODE_CANCELLED],
        [limit,
         np.maximum(1, np.floor(natural * u_cut ** 2)).astype(np.int64),
         np.maximum(1, np.floor(natural * u_cut)).astype(np.int64)],
        natural)
    exit_code = np.where(state == _CODE_FAILED, _values(FAILED_EXIT_CODES, u_exit), 0)

    user_names = _names("user", nu)
    account_names = _names("proj", c.num_accounts)
    user_col = np.asarray(user_names, dtype=object)[user].tolist()
    account_col = np.asarray(account_names, dtype=object)[user_account[user]].tolist()
    part_col = np.asarray([p.name for p in parts], dtype=object)[part].tolist()
    class_col = np.asarray([jc.name for jc in classes], dtype=object)[cls].tolist()
    name_col = np.asarray(model_names, dtype=object)[model].tolist()
    state_col = np.asarray(STATES, dtype=object)[state].tolist()
    return list(map(
        SyntheticJob,
        range(c.first_job_id, c.first_job_id + n),
        submit.tolist(), user_col, account_col, part_col, class_col,
        nodes.tolist(), gpus.tolist(), cpus.tolist(), mem.tolist(),
        limit.tolist(), run.tolist(), state_col, exit_code.tolist(),
        locality.tolist(), name_col,
    ))


def _values(weights: Weights, u: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """The values of ``weights`` picked by uniform draws ``u``."""
    return np.asarray([v for v, _ in weights], dtype=np.int64)[_pick([w for _, w in weights], u)]


# ----------------------------------------------------------------------------- cluster
def default_cluster(config: WorkloadConfig, name: str | None = None) -> ClusterSpec:
    """The cluster ``config`` is calibrated for; every generated request fits it.

    gpu: 16 nodes ``gpu01``-``gpu16`` x 8 GPUs, 64 CPUs, 512,000 MiB, in leaf switches of
    4 nodes under one spine (the demo's default). hpc: 64 nodes ``cn01``-``cn64`` x 64
    CPUs, 256,000 MiB, leaf switches of 16 nodes. Every partition of the config spans all
    nodes. Sizes follow the config's ``num_nodes`` ... ``mem_mb_per_node``.

    Args:
        config: The workload config.
        name: Cluster name; default ``"synthetic-gpu"`` or ``"synthetic-hpc"``.

    Returns:
        The cluster spec.
    """
    parts = _get(config.partitions)
    spec = ClusterSpec.synthetic(
        name or f"synthetic-{config.kind}",
        _get(config.num_nodes),
        cpus_per_node=_get(config.cpus_per_node),
        gpus_per_node=_get(config.gpus_per_node),
        mem_mb_per_node=_get(config.mem_mb_per_node),
        nodes_per_leaf=_get(config.nodes_per_leaf),
        partition=parts[0].name,
        node_prefix="gpu" if config.kind == "gpu" else "cn",
    )
    if len(parts) == 1:
        return spec
    names = tuple(n.name for n in spec.nodes)
    part_names = tuple(p.name for p in parts)
    return replace(
        spec,
        nodes=tuple(replace(n, partitions=part_names) for n in spec.nodes),
        partitions={p: names for p in part_names},
    )


# ----------------------------------------------------------------------------- summary
def describe(jobs: Sequence[SyntheticJob], cluster: ClusterSpec | None = None) -> dict[str, Any]:
    """Summary statistics of a workload (for tests and reports).

    Args:
        jobs: Jobs as :func:`generate` returns them.
        cluster: If given, the offered load on it is reported too.

    Returns:
        A JSON-able dict: ``num_jobs``; ``one_gpu_share`` and ``one_node_share``;
        ``size_shares`` (by GPUs if any job has GPUs, else by nodes; keys as strings);
        ``mean_gpus``, ``mean_nodes``; ``mean_interarrival_s`` (span of submit times over
        jobs - 1); ``span_s``; ``run_time`` (``mean``, ``p10``, ``p50``, ``p90``, ``p99``,
        ``max``, ``p99_p50``); ``overestimation`` (limit / run of COMPLETED jobs:
        ``median``, ``mean``; ``median_all`` over every job); ``state_shares``;
        ``class_shares``; ``partition_shares``; ``locality`` per class (``min``,
        ``mean``, ``max``); ``users``, ``top_user_share``; and with a cluster
        ``offered_load``: requested GPU-seconds (CPU-seconds without GPUs) over the
        cluster's capacity during the submit span.
        An empty list gives ``{"num_jobs": 0}``.
    """
    n = len(jobs)
    if n == 0:
        return {"num_jobs": 0}
    submit = np.fromiter((j.submit_time for j in jobs), np.int64, n)
    run = np.fromiter((j.run_time for j in jobs), np.float64, n)
    limit = np.fromiter((j.time_limit for j in jobs), np.float64, n)
    gpus = np.fromiter((j.req_gpus for j in jobs), np.int64, n)
    nodes = np.fromiter((j.req_nodes for j in jobs), np.int64, n)
    cpus = np.fromiter((j.req_cpus for j in jobs), np.int64, n)
    loc = np.fromiter((j.locality_sensitivity for j in jobs), np.float64, n)
    states = [j.state for j in jobs]
    classes = [j.job_class for j in jobs]
    completed = np.fromiter((s == "COMPLETED" for s in states), bool, n)
    ratio = limit / np.maximum(run, 1.0)

    def shares(values: Sequence[object]) -> dict[str, float]:
        return {str(k): v / n for k, v in sorted(Counter(values).items())}

    span = int(submit.max() - submit.min())
    p10, p50, p90, p99 = np.percentile(run, [10, 50, 90, 99])
    by_gpu = bool(gpus.any())
    class_arr = np.asarray(classes, dtype=object)
    locality = {}
    for name in sorted(set(classes)):
        values = loc[class_arr == name]
        locality[name] = {"min": float(values.min()), "mean": float(values.mean()),
                          "max": float(values.max())}
    users = Counter(j.user for j in jobs)
    out: dict[str, Any] = {
        "num_jobs": n,
        "one_gpu_share": float(np.mean(gpus == 1)),
        "one_node_share": float(np.mean(nodes == 1)),
        "size_shares": shares((gpus if by_gpu else nodes).tolist()),
        "mean_gpus": float(gpus.mean()),
        "mean_nodes": float(nodes.mean()),
        "mean_interarrival_s": span / (n - 1) if n > 1 else 0.0,
        "span_s": span,
        "run_time": {
            "mean": float(run.mean()), "p10": float(p10), "p50": float(p50),
            "p90": float(p90), "p99": float(p99), "max": float(run.max()),
            "p99_p50": float(p99 / max(p50, 1.0)),
        },
        "overestimation": {
            "median": float(np.median(ratio[completed])) if completed.any() else math.nan,
            "mean": float(ratio[completed].mean()) if completed.any() else math.nan,
            "median_all": float(np.median(ratio)),
        },
        "state_shares": shares(states),
        "class_shares": shares(classes),
        "partition_shares": shares([j.partition for j in jobs]),
        "locality": locality,
        "users": len(users),
        "top_user_share": users.most_common(1)[0][1] / n,
    }
    if cluster is not None:
        demand = float((run * gpus).sum()) if by_gpu else float((run * cpus).sum())
        capacity = cluster.total_gpus if by_gpu else cluster.total_cpus
        out["offered_load"] = demand / (capacity * span) if capacity and span else math.nan
    return out


def replay_records(jobs: Sequence[SyntheticJob], cluster: ClusterSpec) -> list[JobRecord]:
    """Records to replay a synthetic workload from (no scheduler has run it yet).

    Each job "starts" at its submit time on the cluster's first ``req_nodes`` nodes: the
    simulator only reads arrival, request, limit and run time, and decides the rest.

    Raises:
        ValueError: If a job asks for more nodes than the cluster has.
    """
    names = [n.name for n in cluster.nodes]
    return [j.to_record(j.submit_time, names[:max(1, j.req_nodes)], cluster.name)
            for j in jobs]
