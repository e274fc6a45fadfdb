"""Imitation of the site's own scheduler (DL²'s supervised warm start).

Decision reconstruction (:func:`reconstruct`)
    The history (job records: from the store or a trace, :mod:`trainer.sim.load`) is
    replayed in time order on the :class:`~trainer.sim.state.Cluster`, as the simulator
    reads records (:func:`~trainer.sim.state.build_jobs`: requests, limits, eligible
    times; records that never started are not replayed). At each time ``t`` completions
    come first (their nodes are freed and the user's history grows by the finished job),
    then the jobs recorded as starting at ``t``, one *decision* each, in job id order:

    - *pending* = jobs with ``eligible <= t < start``, plus the jobs of this time not
      yet decided (each start leaves the pending set, and takes its nodes, before the
      next decision);
    - *running* = jobs with ``start <= t < end``: on their recorded nodes when the
      record names nodes of the cluster that are free for it, else where the
      topology/tree best fit (:func:`trainer.sim.placement.tree_best_fit`) puts them;
    - the observation (:func:`trainer.sim.observe.observe`, with the users' history as
      it was at ``t``) shows at most ``max_visible`` pending jobs, the oldest, plus the
      started job when it is younger; the *chosen row* is the started job's row;
    - for a start of ``place_min_nodes`` or more nodes whose record names its nodes, the
      candidate node sets (:func:`slurm_plugin.placement.candidates`) that span exactly
      the record's leaf switches are the placement label (all of them: the loss is the
      log of their total probability).

    A decision whose started job does not fit the reconstructed state (the history
    used nodes this model does not see as free) is counted and left out; so is the
    allocation of a job that finds no room at all (``overcommitted``).

Training (:func:`train_imitation`)
    Records are split by submit time: the first ``train`` share of the jobs, the next
    ``val`` share, the rest for testing; a decision belongs to the split of the job it
    started. Cross-entropy on the choice among the pending jobs (and hold: the site
    never held at a start) plus, where labelled, on the choice among candidate sets;
    Adam; the weights of the epoch with the best validation top-1 are kept.
    Agreement (top-1, top-5) on the held-out test decisions is reported for the net and
    for references ranking the jobs that fit now: FIFO (earliest eligible first),
    FIFO with EASY backfill (the earliest eligible among the jobs that would not delay
    the oldest job that cannot start, :func:`slurm_plugin.features.backfill_ok`: how
    much of the history a first-come-first-served Slurm with backfill explains), the
    record's priority when the history has one, and a uniformly random choice.
    The same records, config and seed give identical weights.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm  # type: ignore[import-untyped]

from db.records import JobRecord
from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.features import (
    Normalisation,
    Observation,
    UserHistory,
    backfill_ok,
    featurize,
)
from slurm_plugin.placement import candidates
from slurm_plugin.slurm.hostlist import compress

from .policy import Batch, PolicyConfig, PolicyNet, batch_tensors, deterministic_torch
from .sim.engine import EngineOptions, SimResult, Simulator
from .sim.observe import raw_from_sim
from .sim.placement import Request, tree_best_fit
from .sim.policies import Policy
from .sim.slurm import SchedulerOptions
from .sim.state import Cluster, JobTable, NodeState, build_jobs

__all__ = [
    "OWN_PRIOR_DEFAULT",
    "SPLITS",
    "TEACHER_PRIORS",
    "Decision",
    "DecisionDataset",
    "ImitationConfig",
    "ImitationReport",
    "Reconstruction",
    "agreement",
    "evaluate",
    "fit_est_prior",
    "reconstruct",
    "place_head_learned",
    "records_from_sim",
    "replay_history",
    "split_decisions",
    "train_imitation",
]

#: The time splits, in order.
SPLITS = ("train", "val", "test")
TEACHER_PRIORS = {"sef": "est_prior", "seaf": "area_prior", "lrf": "amount_prior"}
"""Teachers whose order a fitted prior alone expresses, and the net's prior that does:
``sef``'s by ``est_prior`` (shortest estimate first), ``seaf``'s by ``area_prior``
(smallest estimated area first, :func:`~trainer.policy.log_est_area`), ``lrf``'s by
``amount_prior`` (fewest GPUs, or CPUs, first, :func:`~trainer.policy.log_amount`). The
last two are fixed (:data:`~trainer.policy.FIXED_PRIORS`): fitted, then not trained."""
OWN_PRIOR_DEFAULT = ("sef", "seaf")
"""The teachers that fit their own prior by default
(:attr:`ImitationConfig.teacher_prior` ``None``); ``lrf`` only when asked."""

# reconstruction counters
STARTS = "starts"
DECISIONS = "decisions"
SKIPPED = "skipped by stride"
INFEASIBLE = "chosen job does not fit"
BEYOND_CAP = "chosen beyond max_visible"
NODES_UNKNOWN = "recorded nodes unknown or busy"
OVERCOMMITTED = "overcommitted"
PLACE_LABELS = "placement labels"
PLACE_NO_MATCH = "no candidate matches the recorded leaves"
#: Placement labels an imitation needs for its placement head to count as trained
#: (:func:`place_head_learned`).
MIN_PLACE_LABELS = 50


# ---------------------------------------------------------------------------- decisions
@dataclass(frozen=True, eq=False)
class Decision:
    """One start the site's scheduler made, as the policy would have seen it.

    Attributes:
        obs: The observation just before the start.
        chosen: Row of the started job in ``obs``.
        job_id: The started job's id.
        submit: Its submit time (the split key).
        time: The start time.
        cand_sets: ``(K, N)`` candidate node sets for it (``None``: no placement label).
        cand_match: ``(K,)`` candidates that span the recorded leaves.
        priority: Per visible row, the record's priority (``NaN``: unknown); ``None``
            when the history has none.
        backfill: Per visible row, :func:`~slurm_plugin.features.backfill_ok` (fits
            now and would not delay the oldest job that does not); ``None``: not known.
    """

    obs: Observation
    chosen: int
    job_id: int
    submit: int
    time: int
    cand_sets: np.ndarray | None = None
    cand_match: np.ndarray | None = None
    priority: np.ndarray | None = None
    backfill: np.ndarray | None = None

    @property
    def feasible(self) -> int:
        """Pending jobs that fit now (the choices)."""
        return int(np.count_nonzero(self.obs.job_mask))


@dataclass
class Reconstruction:
    """What :func:`reconstruct` found.

    Attributes:
        decisions: The decisions, in time order.
        jobs: The replayed job table.
        cluster: The cluster.
        stats: Counters (starts, decisions, reasons decisions or placements were lost).
        has_priority: The records carry Slurm's priority.
    """

    decisions: list[Decision]
    jobs: JobTable
    cluster: Cluster
    stats: Counter[str] = field(default_factory=Counter)
    has_priority: bool = False


def _record_index(records: Sequence[JobRecord]) -> dict[tuple[int, int], JobRecord]:
    return {(r.job_id, r.submit_time): r for r in records
            if r.start_time is not None and r.end_time is not None}


def reconstruct(
    records: Iterable[JobRecord],
    cluster: ClusterSpec | Cluster,
    *,
    max_visible: int = 512,
    max_decisions: int | None = None,
    max_sets: int = 8,
    place_min_nodes: int = 2,
    norm: Normalisation | None = None,
    default_time_limit: int | None = None,
    progress: bool | None = None,
) -> Reconstruction:
    """Rebuild the site's decisions from its history (module docstring).

    Args:
        records: Job records (any order).
        cluster: The cluster they ran on.
        max_visible: Pending jobs an observation shows (the oldest; the started job is
            always shown).
        max_decisions: At most this many decisions, every ``k``-th start over the whole
            history (the state is still replayed at every start); ``None``: all.
        max_sets: Candidate node sets per placement label.
        place_min_nodes: Smallest start (in nodes) that gets a placement label.
        norm: Feature normalisation.
        default_time_limit: As :func:`~trainer.sim.state.build_jobs`.
        progress: Show a progress bar (default: when stderr is a terminal).

    Raises:
        ValueError: If ``max_visible`` or ``max_decisions`` is not positive.
    """
    if max_visible < 1:
        raise ValueError("max_visible must be >= 1")
    if max_decisions is not None and max_decisions < 1:
        raise ValueError("max_decisions must be >= 1 (or None for all)")
    cl = cluster if isinstance(cluster, Cluster) else Cluster.from_spec(cluster)
    recs = list(records)
    jobs = build_jobs(recs, cl, default_time_limit=default_time_limit)
    by_key = _record_index(recs)
    n = jobs.n
    stats: Counter[str] = Counter()
    rows = [by_key[(int(a), int(b))] for a, b in zip(jobs.job_id.tolist(),
                                                    jobs.submit.tolist(), strict=True)]
    start = np.array([r.start_time for r in rows], dtype=np.int64).reshape(-1)
    end = start + jobs.run
    has_prio = bool(rows) and all(r.priority is not None for r in rows)
    prio = (np.array([float(r.priority) for r in rows], dtype=np.float64)  # type: ignore[arg-type]
            if has_prio else None)
    pos = {name: i for i, name in enumerate(cl.node_names)}
    every = max(1, math.ceil(n / max_decisions)) if max_decisions else 1

    state = NodeState(cl)
    state.whole_only = bool(n) and bool(jobs.exclusive.all())
    hist = UserHistory(norm)
    pending = np.zeros(n, dtype=bool)
    done = np.zeros(n, dtype=bool)
    alloc: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
    total_c = jobs.total_cpus(cl)
    users = jobs.users
    sh = list(zip(jobs.shape_part.tolist(), jobs.shape_excl.tolist(), jobs.shape_c.tolist(),
                  jobs.shape_g.tolist(), jobs.shape_m.tolist(), strict=True))

    # events: (time, kind, job id, row); kind 0 = end, 1 = start, 2 = end of a 0 s job
    events: list[tuple[int, int, int, int]] = []
    for j in range(n):
        events.append((int(start[j]), 1, int(jobs.job_id[j]), j))
        events.append((int(end[j]), 0 if end[j] > start[j] else 2, int(jobs.job_id[j]), j))
    events.sort()

    def finish(j: int, t: int) -> None:
        got = alloc.pop(j, None)
        if got is None:
            return
        nodes, slots = got
        if slots is None:
            state.release_whole(nodes)
        else:
            state.release_shared(slots)
        limit = int(jobs.limit[j]) if jobs.limit_known[j] else 0
        hist.record(users[int(jobs.user[j])] if users else "", t, int(jobs.run[j]), limit,
                    int(total_c[j]), int(np.unique(cl.leaf_of[nodes]).size))

    def recorded(j: int) -> np.ndarray | None:
        names = rows[j].nodes
        if not names or any(x not in pos for x in names):
            return None
        return np.array(sorted(pos[x] for x in names), dtype=np.int64)

    def place_and_start(j: int, t: int) -> None:
        p, excl, c, g, m = sh[int(jobs.shape[j])]
        usable = state.fit_mask(p, excl, c, g, m)
        nodes = recorded(j)
        if nodes is None or not usable[nodes].all():
            if rows[j].nodes:
                stats[NODES_UNKNOWN] += 1
            res = tree_best_fit(cl, state, usable, Request(int(jobs.nodes[j]), c, g, excl))
            if res is None:
                stats[OVERCOMMITTED] += 1
                return
            nodes = res[0]
        exp = t + int(jobs.limit[j])
        if excl:
            state.allocate_whole(nodes, exp, int(end[j]))
            alloc[j] = (nodes, None)
        else:
            alloc[j] = (nodes, state.allocate_shared(nodes, c, g, m, exp, int(end[j])))

    decisions: list[Decision] = []
    nxt = 0  # next row to arrive (rows are in eligible order)
    k_start = 0
    bar = tqdm(total=n, desc="reconstruct", unit="start", leave=False,
               disable=not (sys.stderr.isatty() if progress is None else progress))
    e = 0
    while e < len(events):
        t = events[e][0]
        hi = e
        while hi < len(events) and events[hi][0] == t:
            hi += 1
        group = events[e:hi]
        e = hi
        for _, kind, _, j in group:
            if kind == 0:
                finish(j, t)
        while nxt < n and jobs.eligible[nxt] <= t:
            pending[nxt] = not done[nxt]
            nxt += 1
        starting = [j for _, kind, _, j in group if kind == 1]
        for j in starting:
            pending[j] = True
        for j in starting:
            stats[STARTS] += 1
            bar.update(1)
            if k_start % every == 0:
                d = _decision(jobs, cl, state, hist, t, j, pending, max_visible, norm,
                              recorded(j) if rows[j].nodes else None, max_sets, place_min_nodes,
                              prio, stats)
                if d is not None:
                    decisions.append(d)
            else:
                stats[SKIPPED] += 1
            k_start += 1
            pending[j] = False
            done[j] = True
            place_and_start(j, t)
        for _, kind, _, j in group:
            if kind == 2:
                finish(j, t)
    bar.close()
    stats[DECISIONS] = len(decisions)
    for reason, count in jobs.skipped.items():
        stats[f"record {reason}"] = count
    return Reconstruction(decisions, jobs, cl, stats, has_prio)


def _decision(jobs: JobTable, cl: Cluster, state: NodeState, hist: UserHistory, t: int,
              j: int, pending: np.ndarray, max_visible: int, norm: Normalisation | None,
              rec_nodes: np.ndarray | None, max_sets: int,
              place_min_nodes: int, prio: np.ndarray | None, stats: Counter[str]
              ) -> Decision | None:
    """The decision of starting row ``j`` at ``t`` (``None``: left out, counted)."""
    pend = np.flatnonzero(pending)
    vis = pend
    if pend.size > max_visible:
        vis = pend[:max_visible]
        if j > vis[-1]:
            stats[BEYOND_CAP] += 1
            vis = np.append(vis, j)
    chosen = int(np.searchsorted(vis, j))
    jr, nr = raw_from_sim(jobs, vis, cl, state, t, hist)
    obs = featurize(t, jr, nr, norm)
    if not obs.job_mask[chosen]:
        stats[INFEASIBLE] += 1
        return None
    sets = match = None
    if rec_nodes is not None and int(jobs.nodes[j]) >= place_min_nodes:
        cands = candidates(nr, int(jr.nodes[chosen]), int(jr.cpus[chosen]),
                           int(jr.gpus[chosen]), int(jr.mem[chosen]),
                           bool(jr.exclusive[chosen]), max_sets)
        want = set(np.unique(cl.leaf_of[rec_nodes]).tolist())
        ok = np.array([set(np.unique(nr.leaf[row]).tolist()) == want for row in cands.sets],
                      dtype=bool)
        if len(cands) >= 2 and ok.any():
            sets, match = cands.sets, ok
            stats[PLACE_LABELS] += 1
        elif len(cands) >= 2:
            stats[PLACE_NO_MATCH] += 1
    return Decision(obs, chosen, int(jobs.job_id[j]), int(jobs.submit[j]), t, sets, match,
                    None if prio is None else prio[vis], backfill_ok(jr, nr, obs.job_mask))


def records_from_sim(records: Iterable[JobRecord], result: SimResult) -> list[JobRecord]:
    """The records as the simulated scheduler ran them: its start, end and nodes.

    Makes a history to imitate from a replay (``EngineOptions(keep_placements=True)``);
    records the replay did not run are left out.

    Raises:
        ValueError: If the replay did not keep its placements.
    """
    if result.placements is None:
        raise ValueError("simulate with EngineOptions(keep_placements=True) to keep the nodes")
    jobs = result.jobs
    row = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(
        jobs.job_id.tolist(), jobs.submit.tolist(), strict=True))}
    out: list[JobRecord] = []
    for r in records:
        i = row.get((r.job_id, r.submit_time))
        if i is None or result.start[i] < 0:
            continue
        names = result.placements[i]
        out.append(replace(r, start_time=int(result.start[i]), end_time=int(result.end[i]),
                           eligible_time=int(jobs.eligible[i]), nodes=names,
                           node_list=compress(names)))
    return out


def replay_history(records: Iterable[JobRecord], jobs: JobTable, cluster: Cluster,
                   policy: Policy, options: SchedulerOptions, *, seed: int = 0,
                   speed_model: str = "none") -> tuple[list[JobRecord], SimResult]:
    """Replay ``jobs`` under ``policy`` and return the history that schedule would have logged.

    The teacher of :func:`train_imitation` when the records hold no schedule of their own
    (a trace's, or a demo's or live replay's synthetic past): the simulator runs with its
    placements kept and :func:`records_from_sim` writes them back into ``records``.

    Args:
        records: The records ``jobs`` was built from (:func:`~trainer.sim.state.build_jobs`).
        jobs: Their job table.
        cluster: The cluster to replay on.
        policy: The scheduler to replay (a baseline's, e.g. ``BASELINES[name].build``).
        options: Its scheduler options.
        seed: Seed of the replay's random generator.
        speed_model: How run times depend on placement (as RL will train with).

    Returns:
        The history and the replay's result (for its metrics).
    """
    res = Simulator(jobs, cluster, policy, options,
                    EngineOptions(seed=seed, keep_placements=True,
                                  speed_model=speed_model)).run()
    return records_from_sim(records, res), res


def split_decisions(decisions: Sequence[Decision], submits: np.ndarray, train: float,
                    val: float) -> dict[str, list[int]]:
    """Decision indices per split, by the started job's submit time.

    The first ``train`` share of the jobs (by submit time) train, the next ``val``
    share validate, the rest test.

    Raises:
        ValueError: If the shares are not in ``(0, 1)`` with ``train + val < 1``.
    """
    if not (0 < train < 1 and 0 <= val < 1 and train + val < 1):
        raise ValueError(f"split shares must satisfy 0 < train, train + val < 1: {train}, {val}")
    s = np.sort(np.asarray(submits, dtype=np.int64))
    out: dict[str, list[int]] = {k: [] for k in SPLITS}
    if not s.size:
        return out
    cut1 = s[min(s.size - 1, int(train * s.size))]
    cut2 = s[min(s.size - 1, int((train + val) * s.size))]
    for i, d in enumerate(decisions):
        key = "train" if d.submit < cut1 else "val" if d.submit < cut2 else "test"
        out[key].append(i)
    return out


# ---------------------------------------------------------------------------- dataset
class DecisionDataset(Dataset[Decision]):
    """Decisions as a torch dataset; :meth:`collate` pads a list of them into a batch."""

    def __init__(self, decisions: Sequence[Decision]) -> None:
        self.decisions = list(decisions)

    def __len__(self) -> int:
        """Number of decisions."""
        return len(self.decisions)

    def __getitem__(self, i: int) -> Decision:
        """Decision ``i``."""
        return self.decisions[i]

    @staticmethod
    def collate(items: Sequence[Decision]) -> tuple[Batch, torch.Tensor, torch.Tensor,
                                                    torch.Tensor]:
        """``(batch, chosen rows [B], placement labels [B, K] bool, has label [B] bool)``."""
        batch = batch_tensors([(d.obs, d.cand_sets, d.chosen) for d in items])
        k = int(batch.cand_sets.shape[1])
        match = torch.zeros(len(items), k, dtype=torch.bool)
        has = torch.zeros(len(items), dtype=torch.bool)
        for i, d in enumerate(items):
            if d.cand_match is not None:
                match[i, :d.cand_match.size] = torch.from_numpy(d.cand_match)
                has[i] = True
        return batch, torch.tensor([d.chosen for d in items], dtype=torch.int64), match, has


# ---------------------------------------------------------------------------- metrics
def _rank(scores: np.ndarray, feasible: np.ndarray, chosen: int) -> int:
    """Rank of ``chosen`` among feasible rows (ties: lower row first)."""
    s = scores[chosen]
    idx = np.arange(scores.size)
    ahead = feasible & ((scores > s) | ((scores == s) & (idx < chosen)))
    return int(np.count_nonzero(ahead))


def agreement(ranks: Sequence[int], feasible: Sequence[int], ks: Sequence[int] = (1, 5)
              ) -> dict[str, float]:
    """Top-k agreement from the chosen job's ranks (``top1_nontrivial``: 2+ choices)."""
    r = np.asarray(ranks, dtype=np.int64)
    f = np.asarray(feasible, dtype=np.int64)
    out: dict[str, float] = {"decisions": float(r.size)}
    for k in ks:
        out[f"top{k}"] = float((r < k).mean()) if r.size else float("nan")
    nt = f >= 2
    out["top1_nontrivial"] = float((r[nt] < 1).mean()) if nt.any() else float("nan")
    return out


def _reference_ranks(decisions: Sequence[Decision], has_priority: bool
                     ) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"fifo": []}
    backfill = all(d.backfill is not None for d in decisions)
    if backfill:
        out["fifo_backfill"] = []
    if has_priority:
        out["priority"] = []
    for d in decisions:
        m = d.obs.job_mask
        fifo = -np.arange(m.size, dtype=np.float64)
        out["fifo"].append(_rank(fifo, m, d.chosen))
        if backfill:  # the backfill rows first, each part in arrival order
            out["fifo_backfill"].append(_rank(fifo + 2.0 * m.size * np.asarray(d.backfill),
                                              m, d.chosen))
        if has_priority and d.priority is not None:
            p = np.where(np.isnan(d.priority), -np.inf, d.priority)
            out["priority"].append(_rank(p, m, d.chosen))
    return out


def _random_agreement(decisions: Sequence[Decision], ks: Sequence[int] = (1, 5)
                      ) -> dict[str, float]:
    f = np.array([d.feasible for d in decisions], dtype=np.float64)
    out: dict[str, float] = {"decisions": float(f.size)}
    for k in ks:
        out[f"top{k}"] = float((np.minimum(k, f) / f).mean()) if f.size else float("nan")
    nt = f >= 2
    out["top1_nontrivial"] = float((1.0 / f[nt]).mean()) if nt.any() else float("nan")
    return out


def _net_outputs(net: PolicyNet, decisions: Sequence[Decision], batch: int
                 ) -> tuple[list[int], list[int], list[bool]]:
    """Ranks of the chosen jobs (hold competes), and per labelled decision top-1 placement."""
    ranks: list[int] = []
    place_ok: list[bool] = []
    place_first: list[bool] = []
    net.eval()
    with torch.no_grad():
        for lo in range(0, len(decisions), batch):
            items = decisions[lo:lo + batch]
            b, _, match, has = DecisionDataset.collate(items)
            jl, pl, _ = net.forward_batch(b)
            jl_np = jl.numpy()
            for i, d in enumerate(items):
                j = d.obs.n_jobs
                scores = np.append(jl_np[i, :j], jl_np[i, -1])
                feas = np.append(d.obs.job_mask, True)
                ranks.append(_rank(scores, feas, d.chosen))
                if bool(has[i]):
                    k = int(d.cand_match.size)  # type: ignore[union-attr]
                    place_ok.append(bool(match[i, int(torch.argmax(pl[i, :k]))]))
                    place_first.append(bool(d.cand_match[0]))  # type: ignore[index]
    return ranks, [int(x) for x in place_ok], place_first


def _mean_job_logit(net: PolicyNet, decisions: Sequence[Decision], batch: int = 64) -> float:
    """The net's mean score of the jobs shown in ``decisions`` (hold left out)."""
    total, count = 0.0, 0
    net.eval()
    with torch.no_grad():
        for lo in range(0, len(decisions), batch):
            items = decisions[lo:lo + batch]
            b = DecisionDataset.collate(items)[0]
            jl = net.forward_batch(b)[0].numpy()
            for i, d in enumerate(items):
                total += float(jl[i, :d.obs.n_jobs].sum())
                count += d.obs.n_jobs
    return total / count if count else 0.0


# ---------------------------------------------------------------------------- training
@dataclass(frozen=True)
class ImitationConfig:
    """Options of :func:`train_imitation` (the single source of their defaults)."""

    epochs: int = 10
    """Passes over the training decisions."""
    lr: float = 1e-3
    """Adam learning rate."""
    batch: int = 32
    """Decisions per gradient step."""
    max_decisions: int | None = 10_000
    """At most this many decisions are reconstructed, every k-th start over the whole
    history; ``None``: every start. Each holds its observation in memory (about 30
    bytes per node plus 60 per visible job: 10,000 decisions on 4,000 nodes ~ 1.2 GB)."""
    hidden: int = 64
    """Width of the policy network (:class:`~trainer.policy.PolicyConfig`)."""
    seed: int = 0
    """Seed of the initial weights and of the order of the batches."""
    train: float = 0.7
    """Share of the jobs, by submit time, whose starts train the net."""
    val: float = 0.1
    """Share of the jobs after those that pick the best epoch; the rest are the test."""
    max_visible: int = 512
    """Pending jobs an observation shows (the oldest, plus the started job)."""
    place_weight: float = 1.0
    """Weight of the placement cross-entropy in the loss."""
    place_min_nodes: int = 2
    """Smallest start (nodes) whose recorded leaves label a placement decision."""
    max_sets: int = 8
    """Candidate node sets per placement decision."""
    weight_decay: float = 0.0
    """Adam weight decay."""
    prior_fit: bool = True
    """Before training, set the net's ``est_prior`` (the weight of ``-log_est_run`` in
    every job score) to the value that alone best explains the training decisions
    (:func:`fit_est_prior`); the hidden layers then learn the rest. A teacher that
    orders by the estimate (``sef``) is then copied from the first step. For a teacher
    whose prior is a fixed one (:data:`TEACHER_PRIORS`: ``seaf``; ``lrf`` with
    :attr:`teacher_prior`) the fitted weight is that prior's instead (``area_prior`` of
    ``-log_est_area``, ``amount_prior`` of ``-log_amount``; fixed while ``est_prior``
    trains from 0), so the net orders as that teacher from the first step. After training,
    if the fitted prior is the teacher's own (:data:`TEACHER_PRIORS`: the prior alone
    expresses its order) and the prior alone (the job head's output zeroed) agrees with
    it at least as well as the trained job head on the validation decisions, the kept net
    orders jobs by the prior alone (:attr:`ImitationReport.prior_alone`; the head's bias
    moves so that the mean job score, which hold competes with, stays; the other heads
    stay trained): the head's corrections would only add noise to that teacher's order."""
    teacher_prior: bool | None = None
    """Which prior a teacher of :data:`TEACHER_PRIORS` fits. ``None`` (the default): its
    own for ``sef`` and ``seaf`` (:data:`OWN_PRIOR_DEFAULT`), ``est_prior`` for ``lrf``;
    ``True``: its own for all three (``lrf``'s ``amount_prior`` too); ``False``:
    ``est_prior`` for every teacher, as nets imitating ``seaf`` were trained before
    ``area_prior`` existed. A prior other than the teacher's own is never kept alone
    (``est_prior`` alone is not ``seaf``'s or ``lrf``'s order). ``lrf``'s is not the
    default because RL started worse from it: on Lublin behind 2 days ``age`` with a
    15-minute lane (stop 60, an AMD EPYC, seeds 10 to 17 of the admin guide's command),
    15 of the 64 later checkpoints kept every quality line against 29 of 64 from the
    net with a trained head, although the net itself scored 150.3 (``lrf``'s order)
    against 160.6."""
    teacher: str | None = None
    """Name of the baseline whose replay is imitated (``None``: the recorded history).
    Only a teacher of :data:`TEACHER_PRIORS` may be kept by the prior alone: a prior is
    one order, and any other teacher's order needs the head. Before ``seaf`` had its own
    prior, the Lublin trace's ``seaf`` teacher was agreed with about as well by
    ``est_prior`` alone (top-1 0.878 against the head's 0.874 on the validation
    decisions), which would have kept ``sef``'s order instead of ``seaf``'s: a mean
    bounded slowdown of 92.5 against 39.7 over the jobs before the test period."""
    prior_max: float = 20.0
    """Bound of the fitted ``est_prior`` (a teacher that always starts the shortest
    estimate is explained better by every larger weight)."""
    threads: int | None = None
    """torch CPU threads during training (``None``: leave torch's setting)."""
    progress: bool | None = None
    """Show progress bars (``None``: when stderr is a terminal)."""

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.batch < 1 or self.lr <= 0 or self.hidden < 1:
            raise ValueError("epochs >= 0, batch >= 1, lr > 0 and hidden >= 1 are required")
        split_decisions([], np.zeros(0), self.train, self.val)  # validates the shares

    def to_dict(self) -> dict[str, Any]:
        """The config as a JSON-able dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def place_head_learned(stats: Mapping[str, int]) -> bool:
    """An imitation with these reconstruction counters trained its placement head.

    It did when at least :data:`MIN_PLACE_LABELS` starts had a placement label
    (multi-node starts whose nodes are known). On a trace with few (Philly: 5) the head
    has learnt nothing and should not place jobs
    (:func:`slurm_plugin.model.place_head_trained`).
    """
    return int(stats.get(PLACE_LABELS, 0)) >= MIN_PLACE_LABELS


@dataclass
class ImitationReport:
    """What :func:`train_imitation` measured.

    Attributes:
        config: The resolved config.
        stats: Reconstruction counters.
        splits: Decisions per split.
        metrics: ``{split: {method: {top1, top5, top1_nontrivial, decisions}}}`` for
            ``net``, ``fifo``, ``fifo_backfill``, ``random`` and ``priority`` (when the
            records have it);
            ``placement`` holds the net's, the first candidate's and random top-1 on
            labelled placement decisions.
        history: Per epoch: mean training loss and validation top-1.
        best_epoch: Epoch whose weights were kept (0: the initial ones).
        reconstruct_s: Wall time of the reconstruction, s.
        train_s: Wall time of training, s.
        est_prior: ``est_prior`` fitted before training (``None``: not fitted, or the
            teacher's prior is a fixed one), and ``est_prior_final`` the kept net's.
        area_prior: ``area_prior`` fitted before training for a ``seaf`` teacher
            (:data:`TEACHER_PRIORS`; ``None``: none; it is not trained).
        amount_prior: ``amount_prior`` fitted before training for an ``lrf`` teacher
            (``None``: none; it is not trained either).
        prior_alone: The kept net orders jobs by its prior alone (the job head's output
            zeroed: it agreed with the teacher at least as well on the validation
            decisions), with ``prior_top1`` and ``head_top1`` the two validation top-1
            (``None`` unless the fitted prior is the teacher's own, :data:`TEACHER_PRIORS`).
    """

    config: dict[str, Any]
    stats: dict[str, int]
    splits: dict[str, int]
    metrics: dict[str, dict[str, dict[str, float]]]
    history: list[dict[str, float]]
    best_epoch: int
    reconstruct_s: float
    train_s: float
    est_prior: float | None = None
    est_prior_final: float | None = None
    area_prior: float | None = None
    amount_prior: float | None = None
    prior_alone: bool = False
    prior_top1: float | None = None
    head_top1: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return asdict(self)


def fit_est_prior(decisions: Sequence[Decision], bound: float = 20.0,
                  iterations: int = 50, *, prior: str = "est_prior") -> float:
    """The weight ``w`` of the net's prior ``prior`` that alone best explains the decisions.

    Maximises the likelihood of the chosen rows under ``softmax(-w x)`` over the rows
    that fit now (``x``: what the prior weighs, :func:`~trainer.policy.prior_input`:
    the ``log_est_run`` column for ``est_prior``, :func:`~trainer.policy.log_est_area`
    for ``area_prior``, :func:`~trainer.policy.log_amount` for ``amount_prior``; the
    hold action is left out): a
    convex problem in one variable, solved by Newton steps from 0 and clipped to
    ``[-bound, bound]`` (a teacher that always starts the shortest estimate among those
    that fit has no finite optimum). Decisions with fewer than two choices carry no
    information and are skipped; without any, 0.
    """
    from .policy import gpu_cluster, prior_input

    rows = []
    for d in decisions:
        m = np.asarray(d.obs.job_mask, dtype=bool)
        if np.count_nonzero(m) < 2 or not m[d.chosen]:
            continue
        gpu = gpu_cluster(torch.from_numpy(np.asarray(d.obs.nodes, dtype=np.float32)))
        x = prior_input(prior, torch.from_numpy(np.asarray(d.obs.jobs, dtype=np.float32)),
                        gpu).numpy().astype(np.float64)
        rows.append((x[m], float(x[d.chosen])))
    if not rows:
        return 0.0
    width = max(len(x) for x, _ in rows)
    xs = np.zeros((len(rows), width))
    valid = np.zeros((len(rows), width), dtype=bool)
    for k, (x, _) in enumerate(rows):
        xs[k, :len(x)] = x
        valid[k, :len(x)] = True
    xc = np.array([c for _, c in rows])
    w = 0.0
    for _ in range(iterations):
        z = np.where(valid, -w * xs, -np.inf)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        mean = (p * xs).sum(axis=1)
        grad = float((xc - mean).sum())  # d/dw of the negative log-likelihood
        hess = float((p * xs * xs).sum(axis=1).sum() - (mean * mean).sum())
        if hess <= 1e-12:
            break
        w_new = min(bound, max(-bound, w - grad / hess))
        done = abs(w_new - w) < 1e-6
        w = w_new
        if done:
            break
    return float(w)


def _loss(net: PolicyNet, items: Sequence[Decision], place_weight: float) -> torch.Tensor:
    b, target, match, has = DecisionDataset.collate(items)
    jl, pl, _ = net.forward_batch(b)
    loss = torch.nn.functional.cross_entropy(jl, target)
    if place_weight and bool(has.any()):
        pl, match = pl[has], match[has]
        neg = torch.full_like(pl, -1e9)
        picked = torch.logsumexp(torch.where(match, pl, neg), -1)
        loss = loss + place_weight * (torch.logsumexp(pl, -1) - picked).mean()
    return loss


def evaluate(net: PolicyNet, decisions: Sequence[Decision], *, has_priority: bool = False,
             batch: int = 64) -> dict[str, dict[str, float]]:
    """Agreement of the net and of the references on ``decisions``."""
    ranks, place_ok, place_first = _net_outputs(net, decisions, batch)
    feas = [d.feasible for d in decisions]
    out = {"net": agreement(ranks, feas)}
    for name, r in _reference_ranks(decisions, has_priority).items():
        out[name] = agreement(r, feas)
    out["random"] = _random_agreement(decisions)
    labelled = [d for d in decisions if d.cand_match is not None]
    rnd = [float(d.cand_match.mean()) for d in labelled]  # type: ignore[union-attr]
    out["placement"] = {
        "decisions": float(len(labelled)),
        "net_top1": float(np.mean(place_ok)) if place_ok else float("nan"),
        "first_candidate_top1": float(np.mean(place_first)) if place_first else float("nan"),
        "random_top1": float(np.mean(rnd)) if rnd else float("nan"),
    }
    return out


def train_imitation(records: Iterable[JobRecord] | Reconstruction,
                    cluster: ClusterSpec | Cluster | None = None,
                    config: ImitationConfig | None = None) -> tuple[PolicyNet, ImitationReport]:
    """Train a :class:`PolicyNet` to imitate the history's decisions (module docstring).

    Args:
        records: Job records, or a :class:`Reconstruction` already made from them.
        cluster: The cluster (needed with records).
        config: Options.

    Returns:
        The net (best validation epoch, eval mode) and the report.

    Raises:
        ValueError: If records come without a cluster, or there is no training decision.
    """
    cfg = config or ImitationConfig()
    show = sys.stderr.isatty() if cfg.progress is None else cfg.progress
    t0 = time.perf_counter()
    if isinstance(records, Reconstruction):
        rec = records
    else:
        if cluster is None:
            raise ValueError("train_imitation needs the cluster the records ran on")
        rec = reconstruct(records, cluster, max_visible=cfg.max_visible,
                          max_decisions=cfg.max_decisions, max_sets=cfg.max_sets,
                          place_min_nodes=cfg.place_min_nodes, progress=show)
    t1 = time.perf_counter()
    parts = split_decisions(rec.decisions, rec.jobs.submit, cfg.train, cfg.val)
    data = {k: [rec.decisions[i] for i in v] for k, v in parts.items()}
    if not data["train"]:
        raise ValueError(f"no training decision (stats: {dict(rec.stats)}); more history "
                         f"or a larger train share is needed")
    with deterministic_torch(cfg.threads):
        torch.manual_seed(cfg.seed)
        net = PolicyNet(PolicyConfig(hidden=cfg.hidden))
        own = (cfg.teacher in OWN_PRIOR_DEFAULT if cfg.teacher_prior is None
               else cfg.teacher_prior)
        which = TEACHER_PRIORS.get(cfg.teacher or "", "est_prior") if own else "est_prior"
        fixed = which != "est_prior"  # a buffer: est_prior trains from 0 beside it
        prior = (fit_est_prior(data["train"], cfg.prior_max, prior=which) if cfg.prior_fit
                 else None)
        if prior is not None:
            with torch.no_grad():
                getattr(net, which).fill_(prior)
        opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        rng = np.random.default_rng(cfg.seed)
        train = data["train"]
        val = data["val"]

        def val_top1() -> float:
            if not val:
                return float("nan")
            ranks = _net_outputs(net, val, 64)[0]
            return float((np.asarray(ranks) < 1).mean())

        best = (val_top1(), 0)
        best_state = copy.deepcopy(net.state_dict())
        history: list[dict[str, float]] = []
        n_batches = math.ceil(len(train) / cfg.batch)
        bar = tqdm(total=cfg.epochs * n_batches, desc="imitate", unit="batch",
                   disable=not show)
        for epoch in range(1, cfg.epochs + 1):
            net.train()
            order = rng.permutation(len(train))
            total = 0.0
            for lo in range(0, len(train), cfg.batch):
                items = [train[i] for i in order[lo:lo + cfg.batch].tolist()]
                loss = _loss(net, items, cfg.place_weight)
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                total += float(loss.detach()) * len(items)
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{float(loss.detach()):.3f}")
            v = val_top1()
            history.append({"epoch": epoch, "loss": total / len(train), "val_top1": v})
            if not val or v > best[0] or math.isnan(best[0]):
                best = (v, epoch)
                best_state = copy.deepcopy(net.state_dict())
        bar.close()
        net.load_state_dict(best_state)
        net.eval()
        prior_alone, prior_top1, head_top1 = False, None, None
        if prior is not None and val and which == TEACHER_PRIORS.get(cfg.teacher or ""):
            out = net.job_head.out
            kept = (out.weight.detach().clone(), out.bias.detach().clone(),
                    net.est_prior.detach().clone())
            head_top1 = val_top1()
            before = _mean_job_logit(net, val)
            with torch.no_grad():
                out.weight.zero_()
                if fixed:  # the prior alone is the fixed one's: est_prior trained beside it
                    net.est_prior.zero_()
                # the same mean job score as before, so hold competes as it did
                out.bias.add_(before - _mean_job_logit(net, val))
            prior_top1 = val_top1()
            prior_alone = prior_top1 >= head_top1
            if not prior_alone:
                with torch.no_grad():
                    out.weight.copy_(kept[0])
                    out.bias.copy_(kept[1])
                    net.est_prior.copy_(kept[2])
        t2 = time.perf_counter()
        metrics = {k: evaluate(net, data[k], has_priority=rec.has_priority)
                   for k in SPLITS if data[k]}
    report = ImitationReport(
        config=cfg.to_dict(), stats=dict(rec.stats), splits={k: len(v) for k, v in data.items()},
        metrics=metrics, history=history, best_epoch=best[1], reconstruct_s=t1 - t0,
        train_s=t2 - t1, est_prior=None if fixed else prior,
        est_prior_final=float(net.est_prior.detach()),
        area_prior=prior if which == "area_prior" else None,
        amount_prior=prior if which == "amount_prior" else None,
        prior_alone=prior_alone, prior_top1=prior_top1, head_top1=head_top1)
    return net, report
