"""Scheduling policies behind one narrow interface, and the baselines built from them.

A :class:`Policy` does two things:

- ``score(jobs, idx, ctx)``: one score per pending job ``idx`` (higher runs first),
  computed vectorised from the columns of the :class:`~trainer.sim.state.JobTable`
  (submit/eligible time, time limit, size, user...) and the context (now, per-user
  usage, the cluster). Ties keep arrival order. A policy whose scores change while jobs
  wait (``dynamic = True``) is re-scored every ``priority_calc_period``; otherwise a
  job is scored once, when it arrives.
- ``place(cluster, state, usable, request)``: which nodes a job gets among the usable
  ones (the engine computes the usable-node mask once per request shape and view and
  shares it); by default the placement named by ``placement`` in
  :data:`trainer.sim.placement.PLACEMENTS`.

Backfill on/off is a scheduler option (:class:`~trainer.sim.slurm.SchedulerOptions`),
not part of a policy: :data:`BASELINES` pairs a policy with it.

How the learned policy plugs in (LATER, with ``slurm_plugin/features.py``): an adapter
``LearnedPolicy(Policy)`` wraps the DESIGN's ``Policy.score(obs)`` /
``place(obs, job, candidates)``. Its ``score`` builds the ``Observation`` from the same
arrays this interface passes (the pending rows ``idx`` of the job table; the node
state's free CPUs/GPUs, ``node_end`` remaining times and per-leaf counts; the switch
tree), through the one featurizer shared with the live helper, and returns the model's
per-job scores (``dynamic = True``, so it is re-scored each calc period); the "hold"
score becomes a threshold below which a job is not started. Its ``place`` turns the
usable mask into candidate node sets (e.g. one per leaf switch, plus the tree best fit)
and returns the model's choice. The engine, metrics and CLI need no change.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .placement import PLACEMENTS, Request
from .slurm import PrioritySettings, fairshare_factor, multifactor_priority, static_priority
from .state import Cluster, JobTable, NodeState

__all__ = [
    "BASELINES",
    "POLICIES",
    "Baseline",
    "Fifo",
    "Multifactor",
    "Policy",
    "ScoreContext",
    "Sjf",
    "make_policy",
]


@dataclass(frozen=True, eq=False)
class ScoreContext:
    """What a policy may look at besides the job columns.

    Attributes:
        now: Current time, epoch s.
        cluster: The cluster.
        state: The node state now (free resources, expected ends).
        usage: Decayed usage per user (CPU-seconds), when the policy asked for it
            (``uses_usage``); else zeros.
        rng: The replay's random generator (seeded: a replay repeats exactly).
    """

    now: int
    cluster: Cluster
    state: NodeState
    usage: np.ndarray
    rng: np.random.Generator


class Policy(ABC):
    """The scheduling policy interface (see the module docstring).

    Attributes:
        name: Registry name.
        dynamic: Scores change while jobs wait (re-scored every calc period).
        uses_usage: The engine must track per-user usage for :attr:`ScoreContext.usage`.
        settles_after: For a dynamic policy, seconds after its eligible time from which a
            job's score no longer changes while it waits (the engine then re-scores
            only the jobs younger than that); ``None``: it may change at any time.
        placement: Name of the placement in :data:`~trainer.sim.placement.PLACEMENTS`.
    """

    name: ClassVar[str] = ""
    dynamic: bool = False
    uses_usage: bool = False
    settles_after: int | None = None

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {placement!r}: {sorted(PLACEMENTS)}")
        self.settings = settings or PrioritySettings()
        self.placement = placement
        self._place = PLACEMENTS[placement]

    @abstractmethod
    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """One float score per job of ``idx`` (higher runs first)."""

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The nodes a job gets among ``usable`` and the leaves they span, or ``None``.

        ``leaf_counts`` (usable nodes per leaf switch) is passed when the engine has it.
        """
        return self._place(cluster, state, usable, req, leaf_counts)


class Fifo(Policy):
    """First come, first served: by eligible time (then job id)."""

    name = "fifo"

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Earlier arrival scores higher."""
        out: np.ndarray = -jobs.eligible[idx].astype(np.float64)
        return out


class Sjf(Policy):
    """Shortest job first, by time limit (the user's estimate), then arrival."""

    name = "sjf"

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """A shorter time limit scores higher."""
        out: np.ndarray = -jobs.limit[idx].astype(np.float64)
        return out


class Multifactor(Policy):
    """Slurm's multifactor priority (see :mod:`trainer.sim.slurm` for the formula)."""

    name = "multifactor"

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        super().__init__(settings, placement)
        self.dynamic = self.settings.time_dependent
        self.uses_usage = self.settings.uses_usage
        # only the age factor moves (no fair-share): constant once it reaches max_age
        self.settles_after = None if self.uses_usage else max(0, self.settings.max_age)
        self._static: tuple[int, np.ndarray] | None = None

    def static(self, jobs: JobTable, cluster: Cluster) -> np.ndarray:
        """Per job, the priority terms that do not change while it waits (cached)."""
        if self._static is None or self._static[0] != id(jobs):
            pf = self.settings.partition_factor
            qf = self.settings.qos_factor
            part = np.array([float(pf.get(p, 1.0)) for p in cluster.part_names])
            qos = np.array([float(qf.get(q, 0.0)) for q in jobs.qos_names] or [0.0])
            cpus = np.where(jobs.exclusive, int(cluster.cap_c.max()), jobs.cpus) * jobs.nodes
            values = static_priority(
                self.settings, nodes=jobs.nodes, cpus=cpus, part_factor=part[jobs.part],
                qos_factor=qos[jobs.qos], nice=jobs.nice, total_nodes=cluster.num_nodes,
                total_cpus=cluster.total_cpus)
            self._static = (id(jobs), values)
        return self._static[1]

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The multifactor priority now (the site factor is read live from the table)."""
        fs = None
        if self.settings.weight_fairshare:
            fs = fairshare_factor(ctx.usage)[jobs.user[idx]]
        return multifactor_priority(
            self.settings, now=ctx.now, eligible=jobs.eligible[idx],
            static=self.static(jobs, ctx.cluster)[idx], fair_share=fs,
            site_factor=jobs.site_factor[idx])


#: Policies by name: ``factory(settings, placement) -> Policy``.
POLICIES: dict[str, Callable[[PrioritySettings | None, str], Policy]] = {
    "fifo": Fifo,
    "sjf": Sjf,
    "multifactor": Multifactor,
}


@dataclass(frozen=True)
class Baseline:
    """A named baseline: a policy plus backfill on or off.

    Attributes:
        policy: Key in :data:`POLICIES`.
        backfill: Backfill on/off; ``None``: as the Slurm configuration says
            (``SchedulerType``).
        help: One line for ``--help``.
    """

    policy: str
    backfill: bool | None
    help: str


#: Baselines by name, as ``rlsched simulate --policy`` and ``rlsched compare`` know them.
BASELINES: dict[str, Baseline] = {
    "slurm": Baseline("multifactor", None,
                      "Slurm as configured: multifactor priority, backfill per SchedulerType"),
    "fifo": Baseline("fifo", True, "FIFO by eligible time, with EASY backfill"),
    "fifo-nobf": Baseline("fifo", False, "FIFO by eligible time, no backfill"),
    "sjf": Baseline("sjf", True, "shortest time limit first, with EASY backfill"),
    "sjf-nobf": Baseline("sjf", False, "shortest time limit first, no backfill"),
}


def make_policy(name: str, settings: PrioritySettings | None = None,
                placement: str = "tree") -> Policy:
    """A policy from :data:`POLICIES` by name.

    Raises:
        KeyError: If the name is not registered.
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}: {sorted(POLICIES)}") from None
    return factory(settings, placement)
