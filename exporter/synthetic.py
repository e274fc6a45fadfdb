"""Synthetic observations: the edge cases every exported model is checked on.

A :class:`Case` is one input of a contract model: an
:class:`~slurm_plugin.features.Observation` plus candidate node sets for one of its
jobs. :func:`synthetic_case` builds one from random raw tables through the shared
featurizer (:func:`slurm_plugin.features.featurize`) and candidate generator
(:func:`slurm_plugin.placement.candidates`), so it is what the helper would build on such
a cluster; :func:`edge_cases` is the fixed list the parity check and ``rlsched verify``
run: no pending job, one, 10,000 (on 1,000 nodes), every job masked, every candidate
masked, no candidate, a cluster of one node, a cluster without GPUs.

numpy and :mod:`slurm_plugin` only (``rlsched verify`` needs no torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from slurm_plugin.features import JobsRaw, NodesRaw, Observation, featurize
from slurm_plugin.placement import candidates

from .contract import feed

__all__ = ["Case", "edge_cases", "synthetic_case", "synthetic_raw"]


@dataclass(frozen=True, eq=False)
class Case:
    """One input of a contract model.

    Attributes:
        name: What the case is (for reports).
        obs: The observation.
        cand_sets: ``(K, N)`` bool candidate node sets (``K`` may be 0).
        cand_mask: ``(K,)`` usable candidates.
        place_job: Row of the job the candidates belong to (0 when there is none).
    """

    name: str
    obs: Observation
    cand_sets: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    cand_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    place_job: int = 0

    def __post_init__(self) -> None:
        n = self.obs.n_nodes
        if self.cand_sets.shape == (0, 0) and n:
            object.__setattr__(self, "cand_sets", np.zeros((0, n), dtype=bool))
        if self.cand_sets.ndim != 2 or self.cand_sets.shape[1] != n:
            raise ValueError(f"case {self.name!r}: cand_sets must be (K, {n}),"
                             f" got {self.cand_sets.shape}")
        if self.cand_mask.shape != (self.cand_sets.shape[0],):
            raise ValueError(f"case {self.name!r}: cand_mask must have one entry per set")

    @property
    def n_cands(self) -> int:
        """Candidate sets (``K``)."""
        return int(self.cand_sets.shape[0])

    def feed(self, names: frozenset[str] | set[str] | None = None) -> dict[str, np.ndarray]:
        """The model inputs (only ``names`` if given): see :func:`exporter.contract.feed`."""
        o = self.obs
        return feed(o.jobs, o.job_mask, o.nodes, o.node_leaf, o.n_leaves, o.globals,
                    self.cand_sets, self.cand_mask, self.place_job, names)


def synthetic_raw(n_jobs: int, n_nodes: int, n_leaves: int = 1, *, busy: float = 0.5,
                  rng: np.random.Generator | None = None, gpus: int = 4
                  ) -> tuple[JobsRaw, NodesRaw]:
    """Random raw tables: ``n_jobs`` pending jobs, ``n_nodes`` nodes over ``n_leaves`` leaves.

    Nodes have 16 CPUs, ``gpus`` GPUs (default 4; with 0 no job asks for any) and
    64,000 MiB; a share ``busy`` of them runs something (partly used); about 3% are down.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    j = n_jobs
    max_nodes = max(1, min(4, n_nodes))
    jr = JobsRaw.build(
        job_id=np.arange(j) + 1, eligible=rng.integers(0, 10_000, j),
        limit=np.where(rng.random(j) < 0.1, 0, rng.integers(60, 50_000, j)),
        nodes=rng.integers(1, max_nodes + 1, j), cpus=rng.integers(1, 16, j),
        gpus=rng.integers(0, 3, j) if gpus else np.zeros(j, dtype=np.int64),
        mem=np.where(rng.random(j) < 0.5, 0, 1000),
        exclusive=rng.random(j) < 0.3, user=rng.integers(0, 7, j),
        est_run=rng.random(j) * 5000, usage_share=rng.random(j), locality=rng.random(j))
    nl = max(1, min(n_leaves, n_nodes))
    leaf = np.sort(np.concatenate([np.arange(nl), rng.integers(0, nl, n_nodes - nl)]))
    idle = rng.random(n_nodes) >= busy
    nr = NodesRaw.build(
        n_leaves=nl, cap_c=np.full(n_nodes, 16), cap_g=np.full(n_nodes, gpus),
        cap_m=np.full(n_nodes, 64_000),
        free_c=np.where(idle, 16, rng.integers(0, 16, n_nodes)),
        free_g=np.where(idle, gpus, rng.integers(0, gpus, n_nodes) if gpus
                        else np.zeros(n_nodes, dtype=np.int64)),
        free_m=np.where(idle, 64_000, rng.integers(0, 64_000, n_nodes)),
        idle=idle, up=rng.random(n_nodes) < 0.97,
        remaining=np.where(idle, 0, rng.integers(1, 90_000, n_nodes)), leaf=leaf)
    return jr, nr


def synthetic_case(name: str, n_jobs: int, n_nodes: int, n_leaves: int = 1, *,
                   seed: int = 0, busy: float = 0.5, with_candidates: bool = True,
                   mask_candidates: bool = False, max_sets: int = 8, gpus: int = 4) -> Case:
    """A random observation and, if asked, the candidates of its first job that fits.

    Args:
        name: Case name.
        n_jobs: Pending jobs (0 or more).
        n_nodes: Nodes (1 or more).
        n_leaves: Leaf switches the nodes are spread over.
        seed: Seed of the random tables.
        busy: Share of nodes running something (1.0: every node is full, so no job
            fits and there is no candidate).
        with_candidates: Add candidate node sets (for the first job that fits; for a
            one-node request when no job fits or there is none).
        mask_candidates: Mark every candidate unusable.
        max_sets: Most candidate sets.
        gpus: GPUs per node (0: a cluster without GPUs).

    Raises:
        ValueError: If ``n_nodes < 1`` or ``n_jobs < 0``.
    """
    if n_nodes < 1 or n_jobs < 0:
        raise ValueError("a case needs n_nodes >= 1 and n_jobs >= 0")
    rng = np.random.default_rng(seed)
    jr, nr = synthetic_raw(n_jobs, n_nodes, n_leaves, busy=busy, rng=rng, gpus=gpus)
    if busy >= 1.0:  # every node full: nothing can start
        z = np.zeros(n_nodes, dtype=np.int64)
        nr = NodesRaw.build(n_leaves=nr.n_leaves, cap_c=nr.cap_c, cap_g=nr.cap_g,
                            cap_m=nr.cap_m, free_c=z, free_g=z, free_m=z,
                            idle=np.zeros(n_nodes, dtype=bool), up=nr.up,
                            remaining=np.full(n_nodes, 3600), leaf=nr.leaf)
    obs = featurize(20_000, jr, nr)
    if not with_candidates:
        return Case(name, obs)
    fit = np.flatnonzero(obs.job_mask)
    row = int(fit[0]) if fit.size else 0
    if fit.size:
        c = candidates(nr, int(jr.nodes[row]), int(jr.cpus[row]), int(jr.gpus[row]),
                       int(jr.mem[row]), bool(jr.exclusive[row]), max_sets)
    else:
        c = candidates(nr, 1, 1, 0, 0, False, max_sets)
    mask = np.zeros(len(c), dtype=bool) if mask_candidates else np.ones(len(c), dtype=bool)
    return Case(name, obs, c.sets, mask, row)


def edge_cases(seed: int = 0) -> list[Case]:
    """The fixed edge cases (module docstring), deterministic for a seed."""
    s = seed
    return [
        synthetic_case("0 pending jobs", 0, 16, 4, seed=s, with_candidates=False),
        synthetic_case("0 pending jobs, candidates", 0, 16, 4, seed=s + 1),
        synthetic_case("1 pending job", 1, 16, 4, seed=s + 2, busy=0.0),
        synthetic_case("10,000 pending jobs, 1,000 nodes", 10_000, 1000, 63, seed=s + 3,
                       busy=0.999),
        synthetic_case("all jobs masked", 64, 32, 4, seed=s + 4, busy=1.0),
        synthetic_case("all candidates masked", 12, 16, 4, seed=s + 5, busy=0.2,
                       mask_candidates=True),
        synthetic_case("no candidates", 30, 16, 4, seed=s + 6, with_candidates=False),
        synthetic_case("one node", 20, 1, 1, seed=s + 7, busy=0.0),
        synthetic_case("one node, no jobs", 0, 1, 1, seed=s + 8, with_candidates=False),
        synthetic_case("one leaf", 40, 24, 1, seed=s + 9),
        # jobs' amounts in CPUs, not GPUs (the priors' terms: log_est_area, log_amount)
        synthetic_case("no GPUs", 30, 16, 4, seed=s + 10, gpus=0),
    ]
