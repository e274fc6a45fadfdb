"""The simulator side of the feature schema: raw tables from the replay's arrays.

:func:`raw_from_sim` fills :class:`~slurm_plugin.features.JobsRaw` and
:class:`~slurm_plugin.features.NodesRaw` from a :class:`~trainer.sim.state.JobTable`
(the pending rows), the :class:`~trainer.sim.state.Cluster` and the
:class:`~trainer.sim.state.NodeState`, exactly as the live helper fills them from
squeue/sinfo (:func:`slurm_plugin.features.raw_from_slurm`), so that
:func:`slurm_plugin.features.featurize` sees the same thing in training and in
production. Users are keyed by name in the :class:`~slurm_plugin.features.UserHistory`,
as the helper keys them.

:func:`observe` does both steps. No torch, no Gymnasium.
"""

from __future__ import annotations

import numpy as np

from slurm_plugin.features import (
    JobsRaw,
    NodesRaw,
    Normalisation,
    Observation,
    UserHistory,
    featurize,
)

from .state import BIG, Cluster, JobTable, NodeState

__all__ = ["nodes_raw", "observe", "raw_from_sim"]


def nodes_raw(cluster: Cluster, state: NodeState, now: int) -> NodesRaw:
    """The node table now (a node with unknown memory reports 0 = unknown)."""
    idle = state.idle.copy()
    if state.whole_only:  # per-node amounts are not kept: a busy node is full
        free_c = np.where(idle, cluster.cap_c, 0)
        free_g = np.where(idle, cluster.cap_g, 0)
        free_m = np.where(idle, cluster.cap_m, 0)
    else:
        free_c, free_g, free_m = state.free_c, state.free_g, state.free_m
    known_m = cluster.cap_m < BIG
    rem = np.where(idle, 0, np.clip(state.node_end - now, 0, None))
    return NodesRaw(
        cap_c=cluster.cap_c.astype(np.int64), cap_g=cluster.cap_g.astype(np.int64),
        cap_m=np.where(known_m, cluster.cap_m, 0).astype(np.int64),
        free_c=np.asarray(free_c, dtype=np.int64), free_g=np.asarray(free_g, dtype=np.int64),
        free_m=np.where(known_m, free_m, 0).astype(np.int64),
        idle=idle, up=np.ones(cluster.num_nodes, dtype=bool),
        remaining=rem.astype(np.int64), leaf=cluster.leaf_of.astype(np.int64),
        n_leaves=cluster.num_leaves)


def raw_from_sim(jobs: JobTable, idx: np.ndarray, cluster: Cluster, state: NodeState,
                 now: int, history: UserHistory | None = None) -> tuple[JobsRaw, NodesRaw]:
    """Raw tables for the pending rows ``idx`` of ``jobs`` at ``now``.

    A job whose record gave no time limit gets 0 (unknown), as a live job without one.
    """
    hist = history or UserHistory()
    idx = np.asarray(idx, dtype=np.int64)
    limit = np.where(jobs.limit_known[idx], jobs.limit[idx], 0).astype(np.int64)
    names = [jobs.users[u] for u in jobs.user[idx].tolist()] if jobs.users else []
    est, share, loc = hist.estimates(names, limit.tolist(), now)
    excl = jobs.exclusive[idx]
    jr = JobsRaw(
        job_id=jobs.job_id[idx].astype(np.int64), eligible=jobs.eligible[idx].astype(np.int64),
        limit=limit, nodes=jobs.nodes[idx].astype(np.int64),
        cpus=np.where(excl, 0, jobs.cpus[idx]).astype(np.int64),
        gpus=np.where(excl, 0, jobs.gpus[idx]).astype(np.int64),
        mem=np.where(excl, 0, jobs.mem[idx]).astype(np.int64),
        exclusive=excl.astype(bool), user=jobs.user[idx].astype(np.int64),
        est_run=est, usage_share=share, locality=loc)
    return jr, nodes_raw(cluster, state, now)


def observe(jobs: JobTable, idx: np.ndarray, cluster: Cluster, state: NodeState, now: int,
            history: UserHistory | None = None, norm: Normalisation | None = None
            ) -> Observation:
    """The :class:`~slurm_plugin.features.Observation` for the pending rows ``idx``."""
    jr, nr = raw_from_sim(jobs, idx, cluster, state, now, history)
    return featurize(now, jr, nr, norm)
