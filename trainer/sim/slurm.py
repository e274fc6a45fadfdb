"""Slurm as configured: scheduler parameters and the multifactor priority's settings.

Read from a real ``scontrol show config`` (via :func:`slurm_plugin.slurm.parse.parse_config`)
with :func:`from_config`, or built from options. Defaults are Slurm's own (22.05): a
cluster without ``PriorityWeight*`` settings has all weights 0, so Slurm, and this
replay, order jobs by job id (arrival order).

The multifactor priority (:func:`multifactor_priority`) of a pending job is, as Slurm
computes it (``priority/multifactor``)::

    floor(  PriorityWeightAge       * age
          + PriorityWeightFairShare * fair_share
          + PriorityWeightJobSize   * job_size
          + PriorityWeightPartition * partition
          + PriorityWeightQOS       * qos
          + site_factor - nice )

- ``age`` = min(now - eligible time, PriorityMaxAge) / PriorityMaxAge (1 when
  PriorityMaxAge is 0);
- ``job_size`` = the larger of the job's share of the cluster's nodes and of its CPUs
  (``PriorityFavorSmall=Yes``: one minus that);
- ``partition`` = the partition's ``PriorityJobFactor`` over the largest one (a spec
  records none: every partition gets 1.0 unless :attr:`PrioritySettings.partition_factor`
  says otherwise);
- ``qos`` = the QOS priority over the largest one (0.0 unless
  :attr:`PrioritySettings.qos_factor` says otherwise);
- ``fair_share``: a simple usage-decay model per user (Slurm's classic formula on a
  flat association tree, not Fair Tree): each user's usage is the CPU-seconds of its
  running jobs (Slurm's default billing), decayed with ``PriorityDecayHalfLife``
  (``U <- U * 2**(-dt / half_life) + cpus * dt``, no decay when the half-life is 0);
  with every user given an equal share ``S = 1 / users``, the factor is
  ``2**(-(U_user / U_total) / S)`` (1.0 while nobody has used anything).

Priorities are recalculated every ``PriorityCalcPeriod`` (at the first scheduling
event after the period elapsed: no timer events are added for it); a job's priority is
computed when it arrives. Ties keep arrival order (eligible time, then job id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from slurm_plugin.slurm import values
from slurm_plugin.slurm.parse import parse_config
from slurm_plugin.slurm.types import SchedulerConfig

__all__ = [
    "BF_PLANS",
    "PrioritySettings",
    "SchedulerOptions",
    "decay_usage",
    "fairshare_factor",
    "from_config",
    "multifactor_priority",
    "read_config",
    "static_priority",
]


#: The backfill plans of :attr:`SchedulerOptions.bf_plan`.
BF_PLANS = ("easy", "conservative")


@dataclass(frozen=True)
class SchedulerOptions:
    """The scheduler's parameters (``SchedulerType`` and ``SchedulerParameters``).

    Attributes:
        backfill: Run the backfill scheduler after the main one (``sched/backfill``);
            False is ``sched/builtin``: strict priority order only.
        bf_interval: Seconds between backfill passes (``bf_interval``, Slurm default 30);
            0 runs one at every scheduling event.
        bf_resolution: Seconds of resolution of the backfill plan (``bf_resolution``,
            default 60): a candidate's expected end is rounded up to it before it is
            compared with a reservation's shadow time.
        bf_window: How far ahead backfill plans, in seconds (``bf_window`` is in minutes,
            default 1440): a blocked job whose shadow time lies beyond gets no
            reservation.
        bf_max_job_test: Pending jobs the backfill pass looks at, in priority order
            (``bf_max_job_test``, default 500).
        max_switch_wait: Longest wait (s) for a job's ``--switches`` leaf count before it
            takes any placement (``max_switch_wait``, default 300).
        priority_calc_period: Seconds between priority recalculations
            (``PriorityCalcPeriod``, default 300).
        placement: Node selection, a name in
            :data:`~trainer.sim.placement.PLACEMENTS` (``"tree"``: topology/tree best
            fit, ``"linear"``: best fit ignoring switches, ``"pack"``, ``"gandiva"``,
            ``"random"``), for baselines that name none.
        bf_plan: How the backfill pass protects the jobs it cannot start (see
            :data:`BF_PLANS`): ``"easy"`` reserves for the first blocked job of each
            partition only (EASY); ``"conservative"`` gives every job it tests that
            cannot start now a reservation (within ``bf_window``), in priority order, as
            Slurm's ``sched/backfill`` plans, so a later job starts now only if it delays
            none of them. ``"conservative"`` needs whole-node jobs on partitions that hold
            every node (the replay says so otherwise).
    """

    backfill: bool = True
    bf_interval: int = 30
    bf_resolution: int = 60
    bf_window: int = 1440 * 60
    bf_max_job_test: int = 500
    max_switch_wait: int = 300
    priority_calc_period: int = 300
    placement: str = "tree"
    bf_plan: str = "easy"

    def __post_init__(self) -> None:
        if self.bf_plan not in BF_PLANS:
            raise ValueError(f"bf_plan must be one of {', '.join(BF_PLANS)},"
                             f" got {self.bf_plan!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and v < 0:
                raise ValueError(f"{f.name} must be >= 0, got {v}")
        if self.bf_resolution < 1:
            raise ValueError("bf_resolution must be >= 1")
        if self.bf_max_job_test < 1:
            raise ValueError("bf_max_job_test must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        """The options as a JSON-able dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class PrioritySettings:
    """Multifactor priority settings (see the module docstring for the formula).

    Attributes:
        weight_age: ``PriorityWeightAge``.
        weight_fairshare: ``PriorityWeightFairShare``.
        weight_job_size: ``PriorityWeightJobSize``.
        weight_partition: ``PriorityWeightPartition``.
        weight_qos: ``PriorityWeightQOS``.
        max_age: ``PriorityMaxAge`` in seconds (default 7 days).
        decay_half_life: ``PriorityDecayHalfLife`` in seconds (default 7 days; 0: none).
        favor_small: ``PriorityFavorSmall``.
        partition_factor: Partition name to its normalised ``PriorityJobFactor``
            (0..1); partitions not named get 1.0.
        qos_factor: QOS name to its normalised priority (0..1); others get 0.0.
    """

    weight_age: int = 0
    weight_fairshare: int = 0
    weight_job_size: int = 0
    weight_partition: int = 0
    weight_qos: int = 0
    max_age: int = 7 * 86400
    decay_half_life: int = 7 * 86400
    favor_small: bool = False
    partition_factor: Mapping[str, float] = field(default_factory=dict)
    qos_factor: Mapping[str, float] = field(default_factory=dict)

    @property
    def uses_usage(self) -> bool:
        """True when fair-share counts (its weight is not 0)."""
        return self.weight_fairshare != 0

    @property
    def time_dependent(self) -> bool:
        """True when priorities change while jobs wait (age or fair-share)."""
        return self.weight_age != 0 or self.weight_fairshare != 0

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-able dict."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["partition_factor"] = dict(self.partition_factor)
        out["qos_factor"] = dict(self.qos_factor)
        return out


def _int_param(params: Mapping[str, str], key: str, default: int) -> int:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"SchedulerParameters {key}={raw!r} is not an integer") from None


def from_config(
    cfg: SchedulerConfig, base: SchedulerOptions | None = None
) -> tuple[SchedulerOptions, PrioritySettings]:
    """Scheduler options and priority settings from ``scontrol show config``.

    Parameters the config does not set keep Slurm's defaults (or ``base``'s values).

    Raises:
        ValueError: On a malformed number in ``SchedulerParameters`` or a duration.
    """
    base = base or SchedulerOptions()
    p = cfg.scheduler_parameters
    calc = base.priority_calc_period
    raw_calc = cfg.raw.get("PriorityCalcPeriod")
    if raw_calc:
        try:
            calc = values.duration(raw_calc, "PriorityCalcPeriod") or calc
        except values.FieldError as exc:
            raise ValueError(str(exc)) from None
    opts = replace(
        base,
        backfill=cfg.scheduler_type != "sched/builtin" if cfg.scheduler_type else base.backfill,
        bf_interval=_int_param(p, "bf_interval", base.bf_interval),
        bf_resolution=max(1, _int_param(p, "bf_resolution", base.bf_resolution)),
        bf_window=_int_param(p, "bf_window", base.bf_window // 60) * 60,
        bf_max_job_test=max(1, _int_param(p, "bf_max_job_test", base.bf_max_job_test)),
        max_switch_wait=_int_param(p, "max_switch_wait", base.max_switch_wait),
        priority_calc_period=calc,
    )
    w = cfg.priority_weights
    prio = PrioritySettings(
        weight_age=int(w.get("age", 0)),
        weight_fairshare=int(w.get("fairshare", 0)),
        weight_job_size=int(w.get("job_size", 0)),
        weight_partition=int(w.get("partition", 0)),
        weight_qos=int(w.get("qos", 0)),
        max_age=cfg.priority_max_age,
        decay_half_life=cfg.priority_decay_half_life,
        favor_small=cfg.raw.get("PriorityFavorSmall", "No").strip().lower() in ("yes", "1"),
    )
    return opts, prio


def read_config(path: str | Path, base: SchedulerOptions | None = None
                ) -> tuple[SchedulerOptions, PrioritySettings, SchedulerConfig]:
    """Read a saved ``scontrol show config`` file (see :func:`from_config`).

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it is not ``scontrol show config`` output or a value is malformed.
    """
    from slurm_plugin.slurm.errors import SlurmError

    text = Path(path).read_text(encoding="utf-8", errors="replace")
    try:
        cfg = parse_config(text, command=f"scontrol show config ({path})")
    except SlurmError as exc:
        raise ValueError(str(exc)) from None
    opts, prio = from_config(cfg, base)
    return opts, prio, cfg


# ---------------------------------------------------------------------------- factors
def decay_usage(usage: np.ndarray, rate: np.ndarray, dt: np.ndarray | float,
                half_life: int) -> np.ndarray:
    """Usage after ``dt`` seconds: decayed by ``half_life``, plus ``rate * dt``."""
    if half_life > 0:
        return usage * np.exp2(-np.asarray(dt, dtype=np.float64) / half_life) + rate * dt
    return usage + rate * dt


def fairshare_factor(usage: np.ndarray) -> np.ndarray:
    """Classic fair-share factor per user with equal shares: ``2**(-(U/Utotal)/S)``."""
    total = float(usage.sum())
    if total <= 0.0 or usage.size == 0:
        return np.ones(usage.size, dtype=np.float64)
    share = 1.0 / usage.size
    return np.exp2(-(usage / total) / share)


def static_priority(
    settings: PrioritySettings,
    *,
    nodes: np.ndarray,
    cpus: np.ndarray,
    part_factor: np.ndarray,
    qos_factor: np.ndarray,
    nice: np.ndarray,
    total_nodes: int,
    total_cpus: int,
) -> np.ndarray:
    """The terms of the multifactor priority that do not change while a job waits.

    Job size, partition and QOS terms minus nice (per job; ``cpus`` is each job's total).
    """
    s = settings
    prio = -nice.astype(np.float64)
    if s.weight_job_size:
        size = np.maximum(nodes / max(1, total_nodes), cpus / max(1, total_cpus))
        size = np.clip(size, 0.0, 1.0)
        prio = prio + s.weight_job_size * ((1.0 - size) if s.favor_small else size)
    if s.weight_partition:
        prio = prio + s.weight_partition * part_factor
    if s.weight_qos:
        prio = prio + s.weight_qos * qos_factor
    out: np.ndarray = prio
    return out


def multifactor_priority(
    settings: PrioritySettings,
    *,
    now: int,
    eligible: np.ndarray,
    static: np.ndarray,
    fair_share: np.ndarray | None,
    site_factor: np.ndarray,
) -> np.ndarray:
    """Slurm's multifactor priority of some jobs (one value per job, see the module doc).

    Args:
        settings: Weights and limits.
        now: The time, epoch s.
        eligible: Eligible times of the jobs.
        static: Their :func:`static_priority`.
        fair_share: Their users' fair-share factors (``None`` when its weight is 0).
        site_factor: Their site factors.
    """
    s = settings
    prio = static + site_factor
    if s.weight_age:
        if s.max_age > 0:
            age = np.minimum(np.maximum(now - eligible, 0), s.max_age) / s.max_age
            prio = prio + s.weight_age * age
        else:
            prio = prio + s.weight_age
    if s.weight_fairshare and fair_share is not None:
        prio = prio + s.weight_fairshare * fair_share
    out: np.ndarray = np.floor(prio)
    return out
