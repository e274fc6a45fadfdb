"""The permutation-invariant policy network, its checkpoints, and its simulator adapter.

:class:`PolicyNet` scores what one :class:`~slurm_plugin.features.Observation` shows
(the only inputs are the tables of :mod:`slurm_plugin.features`):

- a shared-weight encoder per pending job (``job_enc``) and per node (``node_enc``);
- node embeddings mean-pooled per leaf switch, then a shared-weight encoder per leaf
  (``leaf_enc``: SCHED²'s shared weights per server, here per switch);
- a global context (``ctx_enc``) from the global features and symmetric pools of the
  jobs (mean and max of all, mean and max of those that fit now) and of the leaves
  (mean, max);
- heads: one score per pending job from its embedding and the context, a *hold* score
  (SCHED²'s empty action: start nothing now) from the context, a critic ``value`` from
  the context, and a placement head scoring candidate node sets
  (:func:`slurm_plugin.placement.candidates`) for one chosen job;
- a learned scalar ``est_prior`` times the job's ``log_est_run`` feature subtracted from
  its score: shortest estimated run first (the ``sef`` baseline's order, the estimate
  the helper computes from each user's history) is one weight away, whatever the
  hidden layers learn beside it. It starts at 0 (the net alone); imitating ``sef`` or
  any teacher that favours short jobs grows it, and the job head learns the residual;
- a second scalar, ``area_prior`` (a buffer, not trained), times :func:`log_est_area`:
  the log of that estimate times the job's GPUs (CPUs on a cluster without GPUs),
  computed from the same features, is the ``seaf`` baseline's order. Only imitating
  ``seaf`` sets it (:func:`trainer.imitate.fit_est_prior` with ``area_prior``); at 0 it
  adds exactly nothing, so every other net trains and scores as before it existed;
- a third, ``amount_prior`` (a buffer too), times :func:`log_amount`: the log of the
  job's GPUs in total (CPUs on a cluster without GPUs; a whole-node job counts its
  nodes'), the ``lrf`` baseline's order (SCHED²'s least resource first). Only
  imitating ``lrf`` with ``teacher_prior`` (``--teacher-prior``) sets it; at 0 it adds
  exactly nothing, and a checkpoint whose ``amount_prior`` is 0 is saved without it
  (:func:`save_checkpoint`), as before it existed.

Every pool is a sum, mean or max over rows, so permuting the jobs permutes their scores
and reordering nodes (within or across leaves) changes nothing: any queue length (0 to
10,000+) and any cluster size. Embeddings end in a ReLU (non-negative), so a max pool
over a zero row appended to the rows is the max over the rows when there are any, and
zero when there are none.

:meth:`PolicyNet.forward` is the deploy contract that the exporter turns into ONNX
(dynamic axes ``J``, ``N``, ``K``): tensors in, tensors out, no Python loop or branch on
data. Leaves are pooled with a one-hot ``(N, L)`` matrix (``node_leaf`` compared with
``arange(L)``, ``L = max(node_leaf) + 1`` computed as a tensor); masked entries are
filled with ``-1e9``. :meth:`PolicyNet.forward_batch` computes the same thing for a
padded batch (:class:`Batch`, :func:`batch_tensors`), with scatter-adds instead of the
one-hot matrix, for training and fast inference; a test holds the two to 1e-5. On a big
cluster (:data:`_DEDUP_ROWS` node rows or more in a batch, on the CPU) it encodes each distinct node
row once, sums the leaves from ``(leaf, row, count)`` pairs and encodes once each group
of leaves made of the same rows (checked exactly): a whole-node cluster's node table is
mostly idle nodes and the nodes of a few jobs, so a PPO update on Theta's 4,392 nodes
encodes about 1,000 times fewer node rows. Leaves made of the same rows are the same
function of the weights, so the outputs and the gradients are those of encoding every
node and leaf (up to float rounding; a test compares both).

Checkpoints (:func:`save_checkpoint`, :func:`load_checkpoint`) hold the weights, the
:class:`PolicyConfig`, the feature schema (:func:`slurm_plugin.features.schema`, with
its normalisation constants), its hash and the rlsched version; a checkpoint whose
schema does not hash like the installed one is refused. A checkpoint may hold a
:class:`PolicyEnsemble` (``train rl --ensemble``): several nets of one configuration
whose outputs are averaged, loaded and exported as one net is.

:class:`TorchPolicy` plugs a net into the simulator's :class:`~trainer.sim.policies.Policy`
interface, so ``simulate()`` evaluates it against every baseline.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from slurm_plugin import __version__
from slurm_plugin.features import (
    GLOBAL_FEATURES,
    JOB_FEATURES,
    NODE_FEATURES,
    SCHEMA_VERSION,
    JobsRaw,
    Normalisation,
    Observation,
    UserHistory,
    featurize,
    schema,
    schema_hash,
)
from slurm_plugin.model import PLACE_TRAINED, place_head_trained
from slurm_plugin.placement import Candidates, candidates
from trainer.sim.observe import CompletionFeed, nodes_raw, observe
from trainer.sim.placement import Request
from trainer.sim.policies import Multifactor, Policy, ScoreContext
from trainer.sim.slurm import PrioritySettings
from trainer.sim.state import Cluster, JobTable, NodeState

__all__ = [
    "HELPER_CYCLE",
    "MASKED",
    "PLACE_TRAINED",
    "Batch",
    "Checkpoint",
    "deterministic_torch",
    "PolicyConfig",
    "Net",
    "PolicyEnsemble",
    "PolicyNet",
    "SchemaMismatchError",
    "TorchPolicy",
    "batch_tensors",
    "load_checkpoint",
    "load_ensemble",
    "obs_tensors",
    "place_head_trained",
    "save_checkpoint",
]

#: Logit of a masked entry (an infeasible job, a padded row, an unusable node set).
MASKED = -1e9

#: Added to the scores of the jobs that fit now without ``rank_all`` (above any Slurm
#: priority, which is a 32-bit unsigned integer).
FITS_FIRST = 1e10

#: Bumped when the checkpoint layout changes: the newest layout this version reads. 2: a
#: :class:`PolicyEnsemble` (one net is still saved as 1, which every version reads); 3: a
#: net whose ``amount_prior`` is set (one without it is saved as before, 1 or 2).
CHECKPOINT_FORMAT = 3

#: Column of the job features that :attr:`PolicyNet.est_prior` weighs.
_EST = JOB_FEATURES.index("log_est_run")
#: Columns :func:`log_est_area` reads: GPUs and CPUs in total, and a node's GPUs.
_GPUS = JOB_FEATURES.index("log_gpus")
_CPUS = JOB_FEATURES.index("log_cpus")
_HAS_GPUS = NODE_FEATURES.index("has_gpus")
#: Steps per unit of :func:`log_est_area` (areas closer than 1e-5, relative, tie).
_AREA_GRID = 1e5


def log_est_area(jobs: Tensor, gpu_cluster: Tensor) -> Tensor:
    """``log1p(estimated run time x GPUs, or CPUs, in total)`` of each job: ``seaf``'s order.

    Computed from the features the net has (``exp(x) - 1`` of ``log_est_run``, in units of
    the time scale, times that of ``log_gpus`` on a cluster with GPUs, of ``log_cpus``
    without: the amount :class:`~trainer.sim.policies.Seaf` multiplies by).

    Args:
        jobs: ``[..., J, Fj]`` job features.
        gpu_cluster: ``[...]`` bool: the observation's cluster has GPUs.
    """
    # In float64, as exp(x) - 1 (ONNX has no expm1; in float32 it loses the short jobs'
    # estimates to rounding), then on a grid of _AREA_GRID: products that tie exactly in
    # seaf's arithmetic (1 h x 8 CPUs, 2 h x 4) tie here too, and go in arrival order.
    x = jobs.to(torch.float64)
    amount = torch.where(gpu_cluster.unsqueeze(-1), torch.exp(x[..., _GPUS]),
                         torch.exp(x[..., _CPUS])) - 1.0
    area = (torch.exp(x[..., _EST]) - 1.0).clamp(min=0.0) * amount.clamp(min=0.0)
    return (torch.round(torch.log1p(area) * _AREA_GRID) / _AREA_GRID).to(jobs.dtype)


def log_amount(jobs: Tensor, gpu_cluster: Tensor) -> Tensor:
    """``log1p(GPUs, or CPUs, in total)`` of each job: ``lrf``'s order.

    The job's ``log_gpus`` feature on a cluster with GPUs, its ``log_cpus`` without: the
    amount :class:`~trainer.sim.policies.Lrf` orders by (a whole-node job counts its
    nodes' GPUs or CPUs in both). Equal amounts give equal values (ties go in arrival
    order).

    Args:
        jobs: ``[..., J, Fj]`` job features.
        gpu_cluster: ``[...]`` bool: the observation's cluster has GPUs.
    """
    return torch.where(gpu_cluster.unsqueeze(-1), jobs[..., _GPUS], jobs[..., _CPUS])


#: The fixed priors (buffers, not trained), each set only by imitating its teacher
#: (:data:`trainer.imitate.TEACHER_PRIORS`); :func:`prior_input` says what each weighs.
FIXED_PRIORS = ("area_prior", "amount_prior")
#: Every prior, in the order :meth:`PolicyNet._minus_priors` subtracts them.
PRIORS = ("est_prior", *FIXED_PRIORS)


def prior_input(name: str, jobs: Tensor, gpu: Tensor) -> Tensor:
    """What the prior ``name`` (one of :data:`PRIORS`) weighs.

    Each job's score is minus the weight times this: ``log_est_run``
    (``est_prior``), :func:`log_est_area` (``area_prior``), :func:`log_amount`
    (``amount_prior``).

    Raises:
        ValueError: For another name.
    """
    if name == "est_prior":
        return jobs[..., _EST]
    if name == "area_prior":
        return log_est_area(jobs, gpu)
    if name == "amount_prior":
        return log_amount(jobs, gpu)
    raise ValueError(f"no prior {name!r}: {', '.join(PRIORS)}")


def gpu_cluster(nodes: Tensor, valid: Tensor | None = None) -> Tensor:
    """Whether an observation's cluster has GPUs: some node's ``has_gpus`` is set.

    What :func:`log_est_area` multiplies by (GPUs or CPUs) follows from it; every caller
    (:meth:`PolicyNet.forward`, :meth:`PolicyNet.forward_batch`,
    :func:`trainer.imitate.fit_est_prior`) reads it here.

    Args:
        nodes: ``[..., N, Fn]`` node features.
        valid: ``[..., N]`` bool, the rows that are nodes (a batch's padding is not); default
            every row.

    Returns:
        ``[...]`` bool; a table with no rows has no GPUs.
    """
    has = nodes[..., _HAS_GPUS]
    if valid is not None:
        has = has * valid.to(has.dtype)
    # a sum, not a max: it is defined on no rows, and has_gpus is 0 or 1
    return has.sum(-1) > 0


class SchemaMismatchError(ValueError):
    """A checkpoint was trained on another feature schema than the installed one."""


# ---------------------------------------------------------------------------- config
@dataclass(frozen=True)
class PolicyConfig:
    """Sizes of :class:`PolicyNet` (saved with every checkpoint).

    Attributes:
        hidden: Width of every embedding and hidden layer.
        job_features: Columns of the job table (``len(JOB_FEATURES)``).
        node_features: Columns of the node table (``len(NODE_FEATURES)``).
        global_features: Global features (``len(GLOBAL_FEATURES)``).
    """

    hidden: int = 64
    job_features: int = len(JOB_FEATURES)
    node_features: int = len(NODE_FEATURES)
    global_features: int = len(GLOBAL_FEATURES)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"PolicyConfig.{f.name} must be a positive int, not {v!r}")

    def to_dict(self) -> dict[str, int]:
        """The config as a JSON-able dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PolicyConfig:
        """From :meth:`to_dict` output.

        Raises:
            ValueError: On an unknown key.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        extra = set(d) - known
        if extra:
            raise ValueError(f"unknown PolicyConfig keys {sorted(extra)}; known {sorted(known)}")
        return cls(**dict(d))


#: Rows below which :meth:`PolicyNet.forward_batch` encodes every node and leaf (finding
#: the distinct ones costs more than it saves).
_DEDUP_ROWS = 4096
#: Nodes per observation from which the candidate node sets are summed over the distinct
#: node rows (:func:`_set_rows`, never building ``[B, N, H]``): on Theta's 4,392 nodes,
#: imitation steps ran 2.8x as fast (``benchmarks/imitate_speed.py``). On Lublin's 256
#: they ran at 0.93x, and summing in another order would change every net trained so far
#: on a small cluster, so below this ``bmm`` over ``[B, N, H]`` stays.
_SET_ROWS_NODES = 1024


def _row_key_weights(f: int) -> Tensor:
    """Weights of :func:`_row_groups`'s row keys (square roots: no rational relation)."""
    return torch.arange(1, f + 1, dtype=torch.float64).sqrt_().add_(0.5)


def _key_groups(key: Tensor) -> tuple[Tensor, Tensor] | None:
    """``(first, inv)``: the first index of each distinct ``key`` and each index's group.

    ``None`` when fewer than half the keys repeat (grouping would not pay).
    """
    rows = int(key.shape[0])
    uniq, inv = torch.unique(key, return_inverse=True)
    n = int(uniq.shape[0])
    if n * 2 > rows:
        return None
    first = torch.full((n,), rows, dtype=torch.int64).scatter_reduce_(
        0, inv, torch.arange(rows), "amin")
    return first, inv


def _groups(key: Tensor, x: Tensor) -> tuple[Tensor, Tensor] | None:
    """:func:`_key_groups` of ``key``, checked against the rows ``x`` (``[R, F]``).

    ``None`` also when two rows of one key differ (then every row must be encoded).
    """
    groups = _key_groups(key)
    if groups is None:
        return None
    first, inv = groups
    xd = x.detach()
    if not torch.equal(xd.index_select(0, first).index_select(0, inv), xd):
        return None
    return groups


def _row_groups(x: Tensor) -> tuple[Tensor, Tensor] | None:
    """:func:`_groups` of the distinct rows of ``x`` (``[R, F]``, needing no gradient).

    CPU only (on an accelerator, encoding every row is cheap and the bookkeeping is not).
    """
    if int(x.shape[0]) < _DEDUP_ROWS or x.requires_grad or x.device.type != "cpu":
        return None
    return _groups(x.to(torch.float64).matmul(_row_key_weights(int(x.shape[1]))), x)


def _node_pairs(flat: Tensor, inv: Tensor, slots: int
                ) -> tuple[Tensor, Tensor, Tensor] | None:
    """The ``(leaf slot, distinct row, count)`` pairs of the valid nodes, sorted.

    ``flat``: each node's leaf slot (``slots`` for padding), ``inv``: its distinct row.
    ``None`` if the pair keys would not fit in int64.
    """
    u = int(inv.max()) + 1 if inv.numel() else 1
    if slots * u >= 2**62:
        return None
    valid = flat < slots
    keys, counts = torch.unique(flat[valid] * u + inv[valid], return_counts=True)
    return keys // u, keys % u, counts


def _set_rows(c: Tensor, inv: Tensor, rows: Tensor) -> Tensor:
    """``bmm(c, rows[inv].reshape(B, N, H))`` without building ``[B, N, H]``.

    ``c``: ``[B, K, N]`` node weights of each candidate set, ``inv``: ``[B * N]`` each
    node's distinct row, ``rows``: ``[U, H]``. The set's nodes are counted per distinct
    row (a big cluster's idle nodes share a few rows), then the rows are weighted.
    """
    bsz, kmax, n = (int(x) for x in c.shape)
    u = int(rows.shape[0])
    flat = c.reshape(-1)
    idx = flat.nonzero().squeeze(1)
    node = (idx // (kmax * n)) * n + idx % n
    keys, kinv = torch.unique((idx // n) * u + inv.index_select(0, node), return_inverse=True)
    w = torch.zeros(int(keys.shape[0]), dtype=c.dtype, device=c.device).index_add(
        0, kinv, flat.index_select(0, idx))
    out = torch.zeros(bsz * kmax, int(rows.shape[1]), dtype=rows.dtype, device=rows.device)
    out = out.index_add(0, keys // u, rows.index_select(0, keys % u) * w.unsqueeze(-1))
    return out.reshape(bsz, kmax, -1)


def _leaf_groups(ps: Tensor, pu: Tensor, pc: Tensor, slots: int, n_rows: int
                 ) -> tuple[Tensor, Tensor, Tensor] | None:
    """Leaves made of the same node rows: ``(group of each slot, its first slot, pairs)``.

    ``pairs`` are the indices of the first slots' pairs (:func:`_node_pairs`). Slots
    are keyed by a sum of random codes of their pairs, then checked exactly: every slot
    has as many pairs as its group's first slot, and each of its ``(row, count)`` pairs
    is one of that slot's. ``None`` when there are few leaves or few repeats, or when
    the check fails (a shared key).
    """
    if slots < _DEDUP_ROWS:
        return None
    # codes < 2**40 times counts < 2**23, summed: exact in int64 whatever the order
    codes = torch.randint(0, 2**40, (n_rows,), generator=torch.Generator().manual_seed(0))
    key = torch.zeros(slots, dtype=torch.int64).index_add(
        0, ps, codes.index_select(0, pu) * pc)
    npairs = torch.zeros(slots, dtype=torch.int64).index_add(0, ps, torch.ones_like(ps))
    groups = _key_groups(key)
    if groups is None:
        return None
    rep, group = groups
    n = int(rep.shape[0])
    if not torch.equal(npairs, npairs.index_select(0, rep).index_select(0, group)):
        return None
    cmax = int(pc.max()) + 1 if pc.numel() else 1
    if n * n_rows * cmax >= 2**62:
        return None
    g = group.index_select(0, ps)
    triple = (g * n_rows + pu) * cmax + pc
    is_rep = rep.index_select(0, g) == ps
    rep_pair = is_rep.nonzero().squeeze(1)
    known = torch.sort(triple.index_select(0, rep_pair)).values
    if triple.numel():  # (then some first slot has pairs: the counts matched)
        at = torch.searchsorted(known, triple).clamp(max=int(known.shape[0]) - 1)
        if not torch.equal(known.index_select(0, at), triple):
            return None
    return group, rep, rep_pair


def _mlp(n_in: int, hidden: int) -> nn.Sequential:
    """Two ReLU layers (the output is non-negative: see the module docstring)."""
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU())


class _Head(nn.Module):
    """``relu(A x + B c) -> scalar``: an MLP on ``concat(x, c)`` with ``c`` broadcast."""

    def __init__(self, n_x: int, n_c: int, hidden: int) -> None:
        super().__init__()
        self.lin_x = nn.Linear(n_x, hidden)
        self.lin_c = nn.Linear(n_c, hidden, bias=False)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        """``x [..., R, n_x]``, ``c [..., n_c]`` -> ``[..., R]``."""
        h = torch.relu(self.lin_x(x) + self.lin_c(c).unsqueeze(-2))
        out: Tensor = self.out(h).squeeze(-1)
        return out


# ---------------------------------------------------------------------------- batch
@dataclass
class Batch:
    """Observations padded to one shape (see :func:`batch_tensors`).

    Padding rows are zero and invalid. ``job_mask`` and ``cand_mask`` are already
    and-ed with their validity. ``place_job`` is ``-1`` where no job is placed.

    Attributes:
        jobs: ``[B, J, Fj]``.
        job_valid: ``[B, J]`` real rows.
        job_mask: ``[B, J]`` jobs that may start now.
        nodes: ``[B, N, Fn]``.
        node_valid: ``[B, N]`` real rows.
        node_leaf: ``[B, N]`` leaf index of each node (0 for padding).
        globals: ``[B, G]``.
        cand_sets: ``[B, K, N]`` float 0/1.
        cand_mask: ``[B, K]`` usable candidates.
        place_job: ``[B]`` row of the job to place, ``-1``: none.
    """

    jobs: Tensor
    job_valid: Tensor
    job_mask: Tensor
    nodes: Tensor
    node_valid: Tensor
    node_leaf: Tensor
    globals: Tensor
    cand_sets: Tensor
    cand_mask: Tensor
    place_job: Tensor

    @property
    def size(self) -> int:
        """Observations in the batch."""
        return int(self.jobs.shape[0])

    @property
    def hold_index(self) -> int:
        """Column of the hold logit in :meth:`PolicyNet.forward_batch`'s job logits."""
        return int(self.jobs.shape[1])

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device``."""
        return Batch(**{f.name: getattr(self, f.name).to(device)
                        for f in dataclasses.fields(self)})


def obs_tensors(obs: Observation, cands: Candidates | np.ndarray | None = None,
                place_job: int | None = None) -> tuple[Tensor, ...]:
    """The inputs of :meth:`PolicyNet.forward` for one observation, in order.

    Args:
        obs: The observation.
        cands: Candidate node sets (or their ``(K, N)`` bool matrix); ``None``: none.
        place_job: Row of the job the candidates are for; ``None``: no job.

    Returns:
        ``(jobs, job_mask, nodes, node_leaf, globals, cand_sets, cand_mask, place_job)``.

    Raises:
        ValueError: If the candidate sets do not have one column per node.
    """
    sets = _sets(cands, obs.n_nodes)
    return (
        torch.from_numpy(np.ascontiguousarray(obs.jobs, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(obs.job_mask, dtype=bool)),
        torch.from_numpy(np.ascontiguousarray(obs.nodes, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(obs.node_leaf, dtype=np.int64)),
        torch.from_numpy(np.ascontiguousarray(obs.globals, dtype=np.float32)),
        torch.from_numpy(sets),
        torch.ones(sets.shape[0], dtype=torch.bool),
        torch.tensor(-1 if place_job is None else int(place_job), dtype=torch.int64),
    )


def _sets(cands: Candidates | np.ndarray | None, n_nodes: int) -> np.ndarray:
    if cands is None:
        return np.zeros((0, n_nodes), dtype=bool)
    sets = cands.sets if isinstance(cands, Candidates) else np.asarray(cands, dtype=bool)
    if sets.ndim != 2 or sets.shape[1] != n_nodes:
        raise ValueError(f"candidate sets must be (K, {n_nodes}), got {sets.shape}")
    return np.ascontiguousarray(sets, dtype=bool)


def batch_tensors(items: Sequence[tuple[Observation, Candidates | np.ndarray | None,
                                        int | None]]) -> Batch:
    """Pad ``(observation, candidates or None, place_job or None)`` items into a :class:`Batch`.

    Raises:
        ValueError: On an empty list or candidate sets of the wrong width.
    """
    if not items:
        raise ValueError("batch_tensors needs at least one observation")
    b = len(items)
    jmax = max(o.n_jobs for o, _, _ in items)
    nmax = max(o.n_nodes for o, _, _ in items)
    sets = [_sets(c, o.n_nodes) for o, c, _ in items]
    kmax = max(s.shape[0] for s in sets)
    fj, fn, g = (items[0][0].jobs.shape[1], items[0][0].nodes.shape[1],
                 items[0][0].globals.shape[0])
    jobs = np.zeros((b, jmax, fj), dtype=np.float32)
    job_valid = np.zeros((b, jmax), dtype=bool)
    job_mask = np.zeros((b, jmax), dtype=bool)
    nodes = np.zeros((b, nmax, fn), dtype=np.float32)
    node_valid = np.zeros((b, nmax), dtype=bool)
    node_leaf = np.zeros((b, nmax), dtype=np.int64)
    glob = np.zeros((b, g), dtype=np.float32)
    cand = np.zeros((b, kmax, nmax), dtype=np.float32)
    cand_mask = np.zeros((b, kmax), dtype=bool)
    place = np.full(b, -1, dtype=np.int64)
    for i, ((o, _, pj), s) in enumerate(zip(items, sets, strict=True)):
        j, n, k = o.n_jobs, o.n_nodes, s.shape[0]
        jobs[i, :j] = o.jobs
        job_valid[i, :j] = True
        job_mask[i, :j] = o.job_mask
        nodes[i, :n] = o.nodes
        node_valid[i, :n] = True
        node_leaf[i, :n] = o.node_leaf
        glob[i] = o.globals
        cand[i, :k, :n] = s
        cand_mask[i, :k] = True
        if pj is not None:
            place[i] = pj
    t = torch.from_numpy
    return Batch(t(jobs), t(job_valid), t(job_mask), t(nodes), t(node_valid), t(node_leaf),
                 t(glob), t(cand), t(cand_mask), t(place))


# ---------------------------------------------------------------------------- network
def _no_fixed_priors(module: nn.Module, state: dict[str, Any], prefix: str,
                     *args: Any) -> None:
    """Weights saved without a fixed prior (before it existed, or at 0) load it as 0."""
    for name in FIXED_PRIORS:
        state.setdefault(prefix + name, torch.zeros(()))


class PolicyNet(nn.Module):
    """Scores pending jobs, a hold action and candidate node sets (module docstring)."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or PolicyConfig()
        h = cfg.hidden
        self.job_enc = _mlp(cfg.job_features, h)
        self.node_enc = _mlp(cfg.node_features, h)
        self.leaf_enc = _mlp(h + 1, h)
        self.ctx_enc = _mlp(cfg.global_features + 6 * h, h)
        self.job_head = _Head(h, h, h)
        self.hold_head = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
        self.value_head = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
        self.place_head = _Head(3 * h + 3, h, h)
        #: Weight of ``-log_est_run`` in every job's score (module docstring).
        self.est_prior = nn.Parameter(torch.zeros(()))
        #: Weight of ``-log_est_area`` in every job's score: set by imitating ``seaf``,
        #: not trained (a buffer: nets of every other teacher train exactly as before).
        self.register_buffer("area_prior", torch.zeros(()))
        self.area_prior: Tensor
        #: Weight of ``-log_amount`` in every job's score: set by imitating ``lrf`` with
        #: ``teacher_prior``, not trained either.
        self.register_buffer("amount_prior", torch.zeros(()))
        self.amount_prior: Tensor
        self.register_load_state_dict_pre_hook(_no_fixed_priors)  # type: ignore[no-untyped-call]

    @classmethod
    def from_config(cls, config: PolicyConfig | Mapping[str, Any] | None = None) -> PolicyNet:
        """A freshly initialised net (``torch.manual_seed`` first for repeatable weights)."""
        if config is not None and not isinstance(config, PolicyConfig):
            config = PolicyConfig.from_dict(config)
        return cls(config)

    def _minus_priors(self, scores: Tensor, jobs: Tensor, gpu: Tensor) -> Tensor:
        """The job head's ``scores`` less each prior's weight times what it weighs.

        Subtracted one at a time, in :data:`PRIORS` order, on both forward paths: a
        prior at 0 leaves every score bit for bit as it was without it.
        """
        for name in PRIORS:
            scores = scores - getattr(self, name) * prior_input(name, jobs, gpu)
        return scores

    # ------------------------------------------------------------------ deploy contract
    def forward(self, jobs: Tensor, job_mask: Tensor, nodes: Tensor, node_leaf: Tensor,
                globals: Tensor, cand_sets: Tensor, cand_mask: Tensor, place_job: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """Score one observation (the ONNX deploy contract).

        Args:
            jobs: ``[J, Fj]`` float32 job features.
            job_mask: ``[J]`` bool: jobs that may start now.
            nodes: ``[N, Fn]`` float32 node features (``N >= 1``).
            node_leaf: ``[N]`` int64 leaf switch of each node.
            globals: ``[G]`` float32 global features.
            cand_sets: ``[K, N]`` bool or float 0/1 candidate node sets.
            cand_mask: ``[K]`` bool: usable candidates.
            place_job: ``[]`` int64 row of the job to place; ``< 0`` or ``>= J``: none.

        Returns:
            ``job_logits [J + 1]`` (hold last; masked jobs ``-1e9``; hold never masked),
            ``place_logits [K]`` (masked sets ``-1e9``), ``value []``.
        """
        dt = jobs.dtype
        je = self.job_enc(jobs)                                   # [J, H]
        ne = self.node_enc(nodes)                                 # [N, H]
        zrow = torch.zeros_like(ne[:1])                           # [1, H]

        # per leaf: one-hot (N, L) pooling
        n_leaves = node_leaf.max() + 1  # a tensor: L stays dynamic in the ONNX graph
        leaves = torch.arange(n_leaves, device=node_leaf.device)  # type: ignore[call-overload]
        onehot = (node_leaf.unsqueeze(1) == leaves.unsqueeze(0)).to(dt)
        cnt = onehot.sum(0)                                       # [L]
        leaf_mean = onehot.t().matmul(ne) / cnt.clamp(min=1.0).unsqueeze(1)
        le = self.leaf_enc(torch.cat((leaf_mean, torch.log1p(cnt).unsqueeze(1)), 1))
        present = (cnt > 0).to(dt)
        leaf_pool = torch.cat((
            present.matmul(le) / present.sum().clamp(min=1.0),
            torch.cat((le * present.unsqueeze(1), zrow), 0).max(0).values,
        ))

        # jobs: mean, max, and mean, max over the jobs that fit now
        ones = torch.ones_like(jobs[:, 0])
        fit = job_mask.to(dt)
        job_pool = torch.cat((
            ones.matmul(je) / ones.sum().clamp(min=1.0),
            torch.cat((je, zrow), 0).max(0).values,
            fit.matmul(je) / fit.sum().clamp(min=1.0),
            torch.cat((je * fit.unsqueeze(1), zrow), 0).max(0).values,
        ))
        ctx = self.ctx_enc(torch.cat((globals, job_pool, leaf_pool)))   # [H]

        scores = self._minus_priors(self.job_head(je, ctx), jobs, gpu_cluster(nodes))  # [J]
        masked = torch.full_like(scores, MASKED)
        hold = self.hold_head(ctx)                                # [1]
        job_logits = torch.cat((torch.where(job_mask, scores, masked), hold))
        value = self.value_head(ctx).squeeze(0)

        # placement: candidate node sets for the job in row place_job
        c = cand_sets.to(dt)                                      # [K, N]
        size = c.sum(1)
        set_nodes = c.matmul(ne) / size.clamp(min=1.0).unsqueeze(1)
        touch = c.matmul(onehot)                                  # [K, L] nodes per leaf
        used = (touch > 0).to(dt)
        span = used.sum(1)
        set_leaves = used.matmul(le) / span.clamp(min=1.0).unsqueeze(1)
        fill = (touch / cnt.clamp(min=1.0)).sum(1) / span.clamp(min=1.0)
        n_jobs = ones.sum().to(torch.int64)
        pj = torch.where(place_job < 0, n_jobs, place_job.clamp(max=n_jobs))
        jv = torch.cat((je, zrow), 0).index_select(0, pj.reshape(1))    # [1, H]
        place_in = torch.cat((set_nodes, set_leaves, jv.expand_as(set_nodes),
                              torch.log1p(span).unsqueeze(1), torch.log1p(size).unsqueeze(1),
                              fill.unsqueeze(1)), 1)
        place = self.place_head(place_in, ctx)                    # [K]
        place_logits = torch.where(cand_mask, place, torch.full_like(place, MASKED))
        return job_logits, place_logits, value

    # ------------------------------------------------------------------ training path
    def forward_batch(self, b: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`forward` on a padded batch.

        Returns:
            ``job_logits [B, J + 1]`` (hold in column ``J``; padded and masked jobs
            ``-1e9``), ``place_logits [B, K]``, ``value [B]``.
        """
        dt, dev = b.jobs.dtype, b.jobs.device
        bsz, jmax = int(b.jobs.shape[0]), int(b.jobs.shape[1])
        h = self.config.hidden
        jv_f = b.job_valid.to(dt)
        nv_f = b.node_valid.to(dt)
        je = self.job_enc(b.jobs) * jv_f.unsqueeze(-1)            # [B, J, H]
        # per leaf: scatter-add into B * L slots (+1 dump slot for padding)
        n_leaves = int(b.node_leaf.max()) + 1 if b.node_leaf.numel() else 1
        slots = bsz * n_leaves
        flat = b.node_leaf + torch.arange(bsz, device=dev).unsqueeze(1) * n_leaves
        flat = torch.where(b.node_valid, flat, torch.full_like(flat, slots)).reshape(-1)
        cnt = torch.zeros(slots + 1, dtype=dt, device=dev).index_add(
            0, flat, nv_f.reshape(-1))[:slots]
        # A big cluster's node table repeats itself (every idle node of a whole-node
        # cluster, the nodes of one job): each distinct node row is encoded once, the
        # leaves are summed from (leaf, row, count) pairs, and the leaves made of the
        # same rows are encoded once (the same function of the weights: the gradients
        # are those of encoding every node and leaf). See _node_pairs and _leaf_groups.
        nodes = b.nodes.reshape(-1, int(b.nodes.shape[-1]))
        node_groups = _row_groups(nodes)
        pairs = None if node_groups is None else _node_pairs(flat, node_groups[1], slots)
        # what the node sets are summed from: every node's encoding, or the distinct
        # rows' with each node's row (then [B, N, H] is never built: _set_rows)
        set_src: Tensor | tuple[Tensor, Tensor]
        if node_groups is None or pairs is None:
            every = self.node_enc(b.nodes) * nv_f.unsqueeze(-1)          # [B, N, H]
            set_src = every
            leaf_sum = torch.zeros(slots + 1, h, dtype=dt, device=dev).index_add(
                0, flat, every.reshape(-1, h))[:slots]
            leaf_in = torch.cat((leaf_sum / cnt.clamp(min=1.0).unsqueeze(-1),
                                 torch.log1p(cnt).unsqueeze(-1)), -1)
            le = self.leaf_enc(leaf_in)
        else:
            first, inv = node_groups
            ne_u = self.node_enc(nodes.index_select(0, first))                # [U, H]
            set_src = (inv, ne_u)
            ps, pu, pc = pairs
            groups = _leaf_groups(ps, pu, pc, slots, int(first.shape[0]))
            if groups is None:  # every leaf
                rows, gs, gu, gc = slots, ps, pu, pc
            else:  # one leaf of each group
                slot_group, rep, rep_pair = groups
                rows = int(rep.shape[0])
                gs = slot_group.index_select(0, ps.index_select(0, rep_pair))
                gu, gc = pu.index_select(0, rep_pair), pc.index_select(0, rep_pair)
            leaf_sum = torch.zeros(rows, h, dtype=dt, device=dev).index_add(
                0, gs, ne_u.index_select(0, gu) * gc.to(dt).unsqueeze(-1))
            c_rows = cnt if groups is None else cnt.index_select(0, groups[1])
            leaf_in = torch.cat((leaf_sum / c_rows.clamp(min=1.0).unsqueeze(-1),
                                 torch.log1p(c_rows).unsqueeze(-1)), -1)
            le = self.leaf_enc(leaf_in)
            if groups is not None:
                le = le.index_select(0, groups[0])
        le = le.reshape(bsz, n_leaves, h)
        cnt = cnt.reshape(bsz, n_leaves)
        present = (cnt > 0).to(dt)
        zrow = torch.zeros(bsz, 1, h, dtype=dt, device=dev)
        leaf_pool = torch.cat((
            (present.unsqueeze(-1) * le).sum(1) / present.sum(1, keepdim=True).clamp(min=1.0),
            torch.cat((le * present.unsqueeze(-1), zrow), 1).max(1).values,
        ), -1)

        fit = b.job_mask.to(dt)
        job_pool = torch.cat((
            je.sum(1) / jv_f.sum(1, keepdim=True).clamp(min=1.0),
            torch.cat((je, zrow), 1).max(1).values,
            (fit.unsqueeze(-1) * je).sum(1) / fit.sum(1, keepdim=True).clamp(min=1.0),
            torch.cat((je * fit.unsqueeze(-1), zrow), 1).max(1).values,
        ), -1)
        ctx = self.ctx_enc(torch.cat((b.globals, job_pool, leaf_pool), -1))   # [B, H]

        scores = self._minus_priors(self.job_head(je, ctx), b.jobs,
                                    gpu_cluster(b.nodes, b.node_valid))
        scores = torch.where(b.job_mask, scores, torch.full_like(scores, MASKED))
        hold = self.hold_head(ctx)                                # [B, 1]
        job_logits = torch.cat((scores, hold), 1)
        value = self.value_head(ctx).squeeze(-1)

        if not bool(b.cand_mask.any()):  # no candidate set: every set is padding (masked)
            kmax = int(b.cand_sets.shape[1])
            return job_logits, torch.full((bsz, kmax), MASKED, dtype=dt, device=dev), value
        c = b.cand_sets.to(dt)                                    # [B, K, N]
        kmax = int(c.shape[1])
        size = c.sum(-1)
        if isinstance(set_src, Tensor):
            set_sum = torch.bmm(c, set_src)
        elif int(c.shape[2]) >= _SET_ROWS_NODES:
            set_sum = _set_rows(c * nv_f.unsqueeze(1), *set_src)
        else:
            inv, ne_u = set_src
            set_sum = torch.bmm(c, ne_u.index_select(0, inv).reshape(bsz, -1, h)
                                * nv_f.unsqueeze(-1))
        set_nodes = set_sum / size.clamp(min=1.0).unsqueeze(-1)
        touch = torch.zeros(slots + 1, kmax, dtype=dt, device=dev).index_add(
            0, flat, c.transpose(1, 2).reshape(bsz * int(c.shape[2]), kmax))[:slots]
        touch = touch.reshape(bsz, n_leaves, kmax).transpose(1, 2)    # [B, K, L]
        used = (touch > 0).to(dt)
        span = used.sum(-1)
        set_leaves = torch.bmm(used, le) / span.clamp(min=1.0).unsqueeze(-1)
        fill = (touch / cnt.clamp(min=1.0).unsqueeze(1)).sum(-1) / span.clamp(min=1.0)
        n_jobs = b.job_valid.sum(1)
        pj = torch.where(b.place_job < 0, torch.full_like(b.place_job, jmax),
                         torch.minimum(b.place_job, n_jobs))
        pj = torch.where(pj >= n_jobs, torch.full_like(pj, jmax), pj)
        jv = torch.cat((je, zrow), 1)[torch.arange(bsz, device=dev), pj]      # [B, H]
        place_in = torch.cat((set_nodes, set_leaves, jv.unsqueeze(1).expand_as(set_nodes),
                              torch.log1p(span).unsqueeze(-1), torch.log1p(size).unsqueeze(-1),
                              fill.unsqueeze(-1)), -1)
        place = self.place_head(place_in, ctx)                    # [B, K]
        place_logits = torch.where(b.cand_mask, place, torch.full_like(place, MASKED))
        return job_logits, place_logits, value



class PolicyEnsemble(nn.Module):
    """Several nets of one :class:`PolicyConfig` scoring as one: the mean of their outputs.

    ``rlsched train rl --ensemble K`` builds one from the ``K`` checkpoints of a run that
    validated best (:func:`trainer.rl.trainer.ensemble_members`), because the validation
    period ranks single checkpoints unreliably against the test period. The mean of the
    members' job logits ranks a queue as the product of their policies does (the
    softmax of a mean of logits is the normalised geometric mean of the members'
    probabilities); the placement logits and the value are averaged likewise. Masked
    entries stay :data:`MASKED` (the members mask the same entries: the mask is an
    input). It has :class:`PolicyNet`'s two entry points (``forward``, the deploy
    contract, which ONNX export traces into one graph, and ``forward_batch``) and costs
    ``K`` times one net's inference. It does not train: ``train rl --init`` refuses it.

    Raises:
        ValueError: With no member, or members of different configurations.
    """

    def __init__(self, members: Sequence[PolicyNet]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one net")
        self.config = members[0].config
        if any(m.config != self.config for m in members):
            raise ValueError("the nets of an ensemble must share one configuration (width"
                             " and feature counts): ensemble checkpoints of one run")
        self.members = nn.ModuleList(members)

    def __len__(self) -> int:
        return len(self.members)

    def forward(self, jobs: Tensor, job_mask: Tensor, nodes: Tensor, node_leaf: Tensor,
                globals: Tensor, cand_sets: Tensor, cand_mask: Tensor, place_job: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`PolicyNet.forward` of every member, averaged."""
        return _mean_outputs([m(jobs, job_mask, nodes, node_leaf, globals, cand_sets,
                                cand_mask, place_job) for m in self.nets])

    def forward_batch(self, b: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`PolicyNet.forward_batch` of every member, averaged."""
        return _mean_outputs([m.forward_batch(b) for m in self.nets])

    @property
    def nets(self) -> list[PolicyNet]:
        """The members."""
        return [m for m in self.members if isinstance(m, PolicyNet)]


def _mean_outputs(outs: Sequence[tuple[Tensor, Tensor, Tensor]]
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """The members' ``(job_logits, place_logits, value)`` averaged; masked stays masked."""
    first = outs[0]
    mean = [torch.stack([o[i] for o in outs]).mean(0) for i in range(3)]
    jl = torch.where(first[0] <= MASKED / 2, first[0], mean[0])
    pl = torch.where(first[1] <= MASKED / 2, first[1], mean[1])
    return jl, pl, mean[2]


#: What a checkpoint holds: one net or an ensemble of them.
Net = PolicyNet | PolicyEnsemble


# ---------------------------------------------------------------------------- checkpoints
@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns.

    Attributes:
        net: The net, in eval mode.
        config: Its config.
        norm: The normalisation constants its features were computed with.
        schema: The feature schema it was trained on.
        version: The rlsched version that saved it.
        extra: Whatever the caller saved with it (JSON-able).
    """

    net: Net
    config: PolicyConfig
    norm: Normalisation
    schema: dict[str, Any]
    version: str
    extra: dict[str, Any]


def save_checkpoint(path: str | os.PathLike[str], net: Net,
                    extra: Mapping[str, Any] | None = None,
                    norm: Normalisation | None = None) -> None:
    """Save weights, config, feature schema (+ hash) and the rlsched version.

    Args:
        path: File to write (``torch.save`` format).
        net: The net, or an ensemble of nets (saved with ``ensemble``: how many; its
            members' weights under ``members.I.``).
        extra: JSON-able metadata (training config, report...).
        norm: Normalisation the features were computed with (default constants if None).
    """
    state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    # amount_prior at 0 is left out (it loads as 0), so such a net reads as before it existed
    amount = [k for k in state if k.split(".")[-1] == "amount_prior"]
    unset = [k for k in amount if not bool(state[k].any())]
    for k in unset:
        del state[k]
    fmt = 3 if len(unset) < len(amount) else 2 if isinstance(net, PolicyEnsemble) else 1
    payload = {
        "format": fmt,
        "state_dict": state,
        "config": net.config.to_dict(),
        "schema": schema(norm),
        "schema_hash": schema_hash(norm),
        "rlsched_version": __version__,
        "extra": dict(extra or {}),
    }
    if isinstance(net, PolicyEnsemble):
        payload["ensemble"] = len(net)
    torch.save(payload, os.fspath(path))


def load_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Load a checkpoint saved by :func:`save_checkpoint` (its ``net`` an ensemble if saved so).

    Raises:
        SchemaMismatchError: If its feature schema does not hash like the installed one
            (features added, removed, reordered or computed differently since).
        ValueError: If the file is not an rlsched checkpoint, or has a layout newer than
            this version reads (:data:`CHECKPOINT_FORMAT`).
    """
    data = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or "schema_hash" not in data or "state_dict" not in data:
        raise ValueError(f"{os.fspath(path)}: not an rlsched policy checkpoint")
    fmt = data.get("format", 1)
    if not isinstance(fmt, int) or fmt > CHECKPOINT_FORMAT:
        raise ValueError(f"{os.fspath(path)}: checkpoint format {fmt!r}, saved by rlsched"
                         f" {data.get('rlsched_version')!r}; this rlsched reads formats up to"
                         f" {CHECKPOINT_FORMAT}: upgrade rlsched to load it")
    saved = data["schema"]
    try:
        norm = Normalisation(**saved["normalisation"])
    except (TypeError, KeyError):
        norm = None
    installed = schema_hash(norm) if norm is not None else None
    if installed != data["schema_hash"]:
        raise SchemaMismatchError(
            f"{os.fspath(path)}: trained on feature schema v{saved.get('version')} "
            f"(hash {str(data['schema_hash'])[:12]}), but the installed slurm_plugin.features "
            f"is schema v{SCHEMA_VERSION} (hash {schema_hash(norm)[:12] if norm else '?'}) "
            f"with different features; retrain the policy (or install the rlsched version "
            f"{data.get('rlsched_version')!r} it was trained with)")
    assert norm is not None
    config = PolicyConfig.from_dict(data["config"])
    k = int(data.get("ensemble") or 0)
    net: Net = (PolicyEnsemble([PolicyNet(config) for _ in range(k)]) if k > 0
                else PolicyNet(config))
    net.load_state_dict(data["state_dict"])
    net.eval()
    return Checkpoint(net, config, norm, saved, str(data.get("rlsched_version")),
                      dict(data.get("extra") or {}))


def load_ensemble(paths: Sequence[str | os.PathLike[str]]) -> Checkpoint:
    """The one-net checkpoints at ``paths`` as one :class:`PolicyEnsemble` checkpoint.

    Its ``norm``, ``schema``, ``version`` and ``extra`` are the first checkpoint's.

    Raises:
        SchemaMismatchError: As :func:`load_checkpoint`.
        ValueError: With no path, a file that is not a checkpoint or holds an ensemble
            already, or nets of other configurations or normalisation constants (nets
            not trained on one history with one width).
    """
    if not paths:
        raise ValueError("an ensemble needs at least one checkpoint")
    cks = [load_checkpoint(p) for p in paths]
    nets = []
    for p, ck in zip(paths, cks, strict=True):
        where = os.fspath(p)
        if not isinstance(ck.net, PolicyNet):
            raise ValueError(f"{where}: already an ensemble of {len(ck.net)} nets; give the"
                             " checkpoints of single nets (checkpoints/update-NNNNN.pt)")
        if ck.norm != cks[0].norm or ck.config != cks[0].config:
            raise ValueError(f"{where}: its net's width or feature normalisation differs from"
                             f" {os.fspath(paths[0])}'s; an ensemble takes nets trained on"
                             " one history with one --hidden")
        nets.append(ck.net)
    first = cks[0]
    return Checkpoint(PolicyEnsemble(nets).eval(), first.config, first.norm, first.schema,
                      first.version, first.extra)


# ---------------------------------------------------------------------------- simulator
#: Seconds between the helper's cycles by default (its ``interval``): how often a replay
#: re-scores the queue with a learned policy, as the helper re-ranks it every cycle.
HELPER_CYCLE = 15


class TorchPolicy(Policy):
    """A :class:`PolicyNet` behind the simulator's policy interface.

    ``score`` builds the observation of the rows it is given with
    :func:`trainer.sim.observe.observe` (re-scored every calc period: ``dynamic``) and
    returns the net's job scores (the hold score is ignored), as the helper ranks them
    (its ``rank_all`` setting): with ``rank_all`` every pending job by its raw score
    (the net runs with every job marked as startable; the order of the queue is a
    priority, not a feasibility test); without, the jobs that fit now by the net's score
    (the net runs with the true mask, as in training, where it only ever picks among
    the jobs that fit), above every other job, which keep Slurm's multifactor order
    (``settings``). ``place`` scores
    :func:`slurm_plugin.placement.candidates` restricted to the engine's usable nodes
    with the placement head and falls back to the default placement (``placement``)
    when there is no candidate.

    Limits of the current engine interface (see the report of this slice):

    - at an arrival the engine scores only the arriving jobs, so their context (pooled
      queue, pending count) is that of the arrivals alone until the next re-scoring,
      which sees the whole queue;
    - ``place`` is not told which job it places nor the time: the placement head sees a
      job row made from the request alone, and remaining times relative to the last
      ``score`` call;
    - the queue is re-scored every ``rescore_period`` seconds (the helper's cycle,
      ``interval``, 15 s by default: it ranks every pending job each cycle), not every
      Slurm ``priority_calc_period`` (5 minutes by default), at the first event after
      it elapsed;
    - the engine reports no completions: the :class:`UserHistory` is the one given
      (e.g. fed from the history before the replay) and grows during a replay only
      when the policy :meth:`follow` s it (:class:`~trainer.sim.observe.CompletionFeed`),
      as it grows in training and in production.

    Args:
        net: The net, or an ensemble (put in eval mode).
        history: Users' history for the run-time, usage and locality estimates.
        norm: Normalisation of the features (the checkpoint's).
        settings: Priority settings (the order of the jobs that do not fit now,
            without ``rank_all``).
        placement: Fallback placement name.
        max_sets: Candidate node sets per placement.
        rank_all: Rank every pending job by its raw score (the helper's default), or
            the jobs that fit now first (module docstring of the class).
        rescore_period: Seconds between re-scorings of the whole queue, rounded to whole
            seconds, at least 1 (default: the helper's default cycle,
            :data:`HELPER_CYCLE`; 0: the scheduler's ``priority_calc_period``).
    """

    name: ClassVar[str] = "torch"

    def __init__(self, net: Net, *, history: UserHistory | None = None,
                 norm: Normalisation | None = None, settings: PrioritySettings | None = None,
                 placement: str = "tree", max_sets: int = 8, rank_all: bool = True,
                 rescore_period: float | None = None) -> None:
        super().__init__(settings, placement)
        self.dynamic = True
        self.rescore_period = (HELPER_CYCLE if rescore_period is None else 0
                               if not rescore_period else max(1, round(rescore_period)))
        self.rank_all = rank_all
        self._slurm = Multifactor(self.settings, placement)
        self.uses_usage = not rank_all and self._slurm.uses_usage
        self.net = net.eval()
        self.norm = norm or Normalisation()
        self.history = history if history is not None else UserHistory(self.norm)
        self.max_sets = max_sets
        self._now = 0
        self._feed: CompletionFeed | None = None

    def follow(self, sim: Any) -> None:
        """Grow the user history with the completions of ``sim`` as it replays.

        ``sim`` is a :class:`~trainer.sim.engine.Simulator` replaying with this policy;
        its completions are read at each scoring. Call it before ``sim.run()``.
        """
        self._feed = CompletionFeed(self.history, sim.jobs, sim.cluster, sim.start,
                                    sim.end, sim.leaves)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], **kwargs: Any) -> TorchPolicy:
        """A policy from a checkpoint file (its normalisation is used)."""
        ck = load_checkpoint(path)
        return cls(ck.net, norm=ck.norm, **kwargs)

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """The net's scores of the pending rows ``idx`` (higher runs first)."""
        self._now = ctx.now
        if self._feed is not None:
            self._feed.advance(ctx.now)
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return np.zeros(0, dtype=np.float64)
        obs = observe(jobs, idx, ctx.cluster, ctx.state, ctx.now, self.history, self.norm)
        b = batch_tensors([(obs, None, None)])
        if self.rank_all:
            b.job_mask = b.job_valid.clone()  # raw scores: the queue order, not feasibility
        with torch.no_grad():
            logits = self.net.forward_batch(b)[0][0, :obs.n_jobs]
        out: np.ndarray = logits.double().numpy()
        if not self.rank_all:
            out = np.where(obs.job_mask, FITS_FIRST + out, self._slurm.score(jobs, idx, ctx))
        return out

    def place(self, cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
              leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
        """The candidate node set the placement head prefers (fallback: ``placement``)."""
        now = self._now
        nr = nodes_raw(cluster, state, now)
        allowed = dataclasses.replace(nr, up=nr.up & usable)
        cands = candidates(allowed, req.nodes, req.cpus, req.gpus, 0, req.exclusive,
                           self.max_sets)
        if len(cands) == 0:
            return super().place(cluster, state, usable, req, leaf_counts)
        if len(cands) == 1:
            return cands.nodes(0), int(cands.leaves[0])
        job = JobsRaw.build(job_id=[0], eligible=[now], limit=[0], nodes=[req.nodes],
                            cpus=[req.cpus], gpus=[req.gpus], mem=[0],
                            exclusive=[req.exclusive], user=[0],
                            est_run=[self.norm.default_ratio * self.norm.unknown_limit],
                            usage_share=[0.0], locality=[0.0])
        obs = featurize(now, job, nr, self.norm)
        with torch.no_grad():
            place = self.net.forward_batch(batch_tensors([(obs, cands, 0)]))[1][0]
        k = int(torch.argmax(place))
        return cands.nodes(k), int(cands.leaves[k])


@contextmanager
def deterministic_torch(threads: int | None) -> Iterator[None]:
    """Torch with deterministic algorithms (and ``threads`` threads) inside the block.

    What imitation and RL train under, so that a seed gives identical weights; the
    previous settings come back afterwards.
    """
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)
