"""The simulator side of the feature schema: raw tables from the replay's arrays.

:func:`raw_from_sim` fills :class:`~slurm_plugin.features.JobsRaw` and
:class:`~slurm_plugin.features.NodesRaw` from a :class:`~trainer.sim.state.JobTable`
(the pending rows), the :class:`~trainer.sim.state.Cluster` and the
:class:`~trainer.sim.state.NodeState`, exactly as the live helper fills them from
squeue/sinfo (:func:`slurm_plugin.features.raw_from_slurm`), so that
:func:`slurm_plugin.features.featurize` sees the same thing in training and in
production. Users are keyed by name in the :class:`~slurm_plugin.features.UserHistory`,
as the helper keys them.

:func:`observe` does both steps. :class:`CompletionFeed` grows a user history with the
completions of a batch replay, as the step-able core does as jobs finish. No torch, no
Gymnasium.
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

__all__ = ["CompletionFeed", "history_before", "nodes_raw", "observe", "raw_from_sim"]


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
        # copies: a table kept past this call must not follow the replay's state
        free_c=np.array(free_c, dtype=np.int64), free_g=np.array(free_g, dtype=np.int64),
        free_m=np.where(known_m, free_m, 0).astype(np.int64),
        idle=idle, up=np.ones(cluster.num_nodes, dtype=bool),
        remaining=rem.astype(np.int64), leaf=cluster.leaf_of.astype(np.int64),
        n_leaves=cluster.num_leaves)


def history_estimates(jobs: JobTable, idx: np.ndarray, history: UserHistory, now: int
                      ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rows ``idx``'s time limits and ``history``'s ``(est_run, usage_share, locality)``.

    A job whose record gave no time limit gets 0 (unknown), as a live job without one.
    """
    limit = np.where(jobs.limit_known[idx], jobs.limit[idx], 0).astype(np.int64)
    names = [jobs.users[u] for u in jobs.user[idx].tolist()] if jobs.users else []
    return limit, history.estimates(names, limit.tolist(), now)


def raw_from_sim(jobs: JobTable, idx: np.ndarray, cluster: Cluster, state: NodeState,
                 now: int, history: UserHistory | None = None) -> tuple[JobsRaw, NodesRaw]:
    """Raw tables for the pending rows ``idx`` of ``jobs`` at ``now``.

    A job whose record gave no time limit gets 0 (unknown), as a live job without one.
    """
    idx = np.asarray(idx, dtype=np.int64)
    limit, (est, share, loc) = history_estimates(jobs, idx, history or UserHistory(), now)
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


def history_before(hist: UserHistory, jobs: JobTable, cluster: Cluster, lo: int, k: int,
                   *, relative: bool = False) -> UserHistory:
    """Fill ``hist`` with the users' history at row ``lo``'s arrival and return it.

    Up to ``k`` of the jobs before ``lo`` (looking back at most ``8 * k`` rows) that had
    ended by its arrival, recorded in end order; end times as recorded (arrival + run
    time), as the training environment, the evaluation and the RL report all build it.
    ``relative``: end times relative to ``lo``'s arrival (the env's clock starts there).
    """
    if not lo or not k:
        return hist
    t0 = int(jobs.eligible[lo])
    rows = np.arange(max(0, lo - 8 * k), lo)
    end = jobs.eligible[rows] + jobs.run[rows]
    keep = end <= t0
    rows, end = rows[keep], end[keep]
    order = np.argsort(end, kind="stable")[-k:]
    cap_c = int(cluster.cap_c.max())
    shift = t0 if relative else 0
    for r, e in zip(rows[order].tolist(), end[order].tolist(), strict=True):
        per = cap_c if bool(jobs.exclusive[r]) else int(jobs.cpus[r])
        limit = int(jobs.limit[r]) if bool(jobs.limit_known[r]) else 0
        user = jobs.users[int(jobs.user[r])] if jobs.users else ""
        hist.record(user, int(e) - shift, int(jobs.run[r]), limit, per * int(jobs.nodes[r]))
    return hist


class CompletionFeed:
    """Feeds a :class:`~slurm_plugin.features.UserHistory` with a replay's completions.

    The batch engine (:class:`~trainer.sim.engine.Simulator`) tells its policy of no
    completion, so a learned policy's history would stay as it was when the replay
    began, while in training (:class:`~trainer.sim.stepper.Stepper`) and in production
    (the helper reads recent history) it grows as jobs end. The feed reads the replay's
    ``start``, ``end`` and ``leaves`` arrays instead (a job's actual end is set when it
    starts): :meth:`advance` records, in end order, every job that started and ended by
    ``now`` and was not recorded yet, with the same fields the step-able core records.

    Args:
        history: The history to grow.
        jobs: The replay's job table (rows in arrival order).
        cluster: The cluster (CPUs of a whole-node job).
        start, end, leaves: The replay's per-row arrays (``-1``: not started).
    """

    def __init__(self, history: UserHistory, jobs: JobTable, cluster: Cluster,
                 start: np.ndarray, end: np.ndarray, leaves: np.ndarray) -> None:
        self.history = history
        self.jobs = jobs
        self.start, self.end, self.leaves = start, end, leaves
        self._fed = np.zeros(jobs.n, dtype=bool)
        self._lo = 0  # every row before it is fed
        cap = int(cluster.cap_c.max()) if cluster.num_nodes else 0
        self._cpus = np.where(jobs.exclusive, cap, jobs.cpus).astype(np.int64) * jobs.nodes

    def advance(self, now: int) -> int:
        """Record the jobs that ended by ``now``; returns how many."""
        jobs = self.jobs
        lo = self._lo
        hi = int(np.searchsorted(jobs.eligible, now, side="right"))
        if hi <= lo:
            return 0
        st, en = self.start[lo:hi], self.end[lo:hi]
        new = np.flatnonzero((st >= 0) & (en <= now) & ~self._fed[lo:hi]) + lo
        if new.size:
            new = new[np.argsort(self.end[new], kind="stable")]
            self._fed[new] = True
            for r in new.tolist():
                limit = int(jobs.limit[r]) if bool(jobs.limit_known[r]) else 0
                user = jobs.users[int(jobs.user[r])] if jobs.users else ""
                self.history.record(user, int(self.end[r]), int(self.end[r] - self.start[r]),
                                    limit, int(self._cpus[r]), int(self.leaves[r]))
        fed = self._fed[lo:hi]
        self._lo = lo + (int(np.argmin(fed)) if not fed.all() else fed.size)
        return int(new.size)
