"""Placement: which nodes a job gets, among the nodes that can take it.

A placement function receives the cluster, the node state, a boolean mask of the nodes
that can take one node's share of the job (computed once per request shape and shared
by every job of that shape), the node count and the per-node request, and returns the
chosen node indices (sorted) or ``None``. It never checks feasibility again: the mask
says which nodes are usable.

Registered placements (:data:`PLACEMENTS`):

- ``"tree"``: Slurm's topology/tree with best fit. Among the switches above the
  leaves, the lowest-level one that has enough usable nodes, with the fewest of them,
  bounds the search. Then the smallest set of leaf switches that fits: the leaf with
  the fewest usable nodes that still fits the whole job; if none does, leaves in
  decreasing order of usable nodes, and for the remainder the leaf with the fewest
  usable nodes that covers it. Within a leaf, best fit: nodes with the fewest free
  GPUs, then CPUs, then the lowest index (packing: a 1-GPU job goes where GPUs are
  already in use). Ties go to the lowest leaf/node index, so a replay is repeatable.
- ``"linear"``: no topology: best fit over all usable nodes as within a leaf above.
- ``"pack"``: SCHED²'s *packing* (§II-B: "allocate as few servers as possible with as
  few free GPUs as possible": the server with the fewest free GPUs that satisfies the
  demand, else the one with the most free GPUs and the rest by the same rule), lifted to
  this cluster model, where a request fixes its node count and per-node amounts. The
  job goes to one leaf switch when one has enough usable nodes; among those, the leaf
  where it strands the fewest resources: first the least capacity opened on idle nodes
  (an idle node it takes is left with free GPUs no whole-node job can use), then the
  fewest free GPUs left on the nodes it takes (the tightest fit), then the fullest leaf
  (fewest free GPUs on its usable nodes), then the lowest index. Within the leaf, best
  fit as ``"tree"``. A job no leaf holds takes leaves by decreasing usable count and
  the remainder from the leaf that fits it best (SCHED²'s "most free GPUs first", as
  ``"tree"`` does, without its upper-switch bound). "GPUs" read "CPUs" for a request
  without GPUs; a whole-node request picks the leaf with the fewest idle nodes.
- ``"gandiva"``: Gandiva's ``getNodes`` (Algorithm 1), mapped onto this model: a
  server is a node, and a node's *affinity* is the per-node GPU count of the shared-node
  jobs running on it (Gandiva: "the type of jobs (based on GPUs required) assigned to
  that server"; a job of ``n`` nodes x ``g`` GPUs has affinity ``g``; without GPUs, the
  per-node CPU count of GPU-less jobs). A node hosting several kinds of jobs (after the
  relaxed case below) has each of their affinities; an idle node has affinity 0. Steps:
  (1) the usable nodes of the job's affinity, least loaded first (load: the share of the
  node's GPUs in use, Gandiva's *height*; ties to the lowest index), when there are
  enough of them; (2) else idle (un-affinitised) usable nodes, chosen by ``"tree"``
  best fit so the job keeps its leaf locality; (3) else any usable nodes, least loaded
  first ("relax affinity constraint"). Over-subscription (suspend/resume, Gandiva's
  lines 11-12) is not modelled: with fewer usable nodes than asked the job waits, as
  in Gandiva's line 14. Whole-node requests have no affinity (every usable node is
  idle): ``"tree"``.
- ``"random"``: ``nodes`` usable nodes drawn uniformly without replacement. The draw
  is a pure function of the replay seed, the node state's version and the job
  (:attr:`Request.seed`, :attr:`NodeState.version`, :attr:`Request.job`), so a replay
  repeats exactly however often the engine asks, and a different seed draws differently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .state import BIG, Cluster, NodeState

__all__ = [
    "PLACEMENTS",
    "Placement",
    "Request",
    "best_leaf_span",
    "gandiva_affinity",
    "linear_best_fit",
    "pack",
    "random_nodes",
    "tree_best_fit",
]


class Request(NamedTuple):
    """One job's request as a placement sees it.

    Attributes:
        nodes: Nodes wanted.
        cpus: CPUs per node (0 for whole nodes).
        gpus: GPUs per node.
        exclusive: Whole-node request (every usable node is idle: no best fit needed).
        job: The job's row in the job table (-1: not known, e.g. a what-if placement).
        now: Time of the decision, epoch s (a reservation's placement is still asked
            now, for its shadow time).
        seed: The replay's seed (:attr:`~trainer.sim.engine.EngineOptions.seed`), for
            placements that draw at random.
    """

    nodes: int
    cpus: int
    gpus: int
    exclusive: bool
    job: int = -1
    now: int = 0
    seed: int = 0


#: ``(cluster, state, usable mask, request, usable per leaf or None) -> (sorted node
#: indices, leaves spanned)`` or ``None``.
Placement = Callable[[Cluster, NodeState, np.ndarray, Request, "np.ndarray | None"],
                     "tuple[np.ndarray, int] | None"]


def _best(state: NodeState, idx: np.ndarray, k: int, req: Request) -> np.ndarray:
    """The ``k`` best-fit nodes among the usable ``idx`` (sorted by index)."""
    if k >= idx.size:
        return idx
    if req.exclusive:
        return idx[:k]
    if req.gpus:
        order = np.lexsort((idx, state.free_c[idx], state.free_g[idx]))
    else:
        order = np.lexsort((idx, state.free_c[idx]))
    return np.sort(idx[order[:k]])


def _cover_sorted(cnt: np.ndarray, n: int) -> tuple[np.ndarray, int, int] | None:
    """Fewest leaves covering ``n``: ``(leaves taken whole, last leaf, nodes from it)``.

    Leaves by decreasing usable count (ties: lowest index) until ``n`` is covered; the
    last, partly used leaf is the best fit for the remainder among the leaves left: the
    fewest usable nodes that still cover it, ties to the lowest index.
    """
    order = np.argsort(-cnt, kind="stable")
    cs = np.cumsum(cnt[order])
    if cs[-1] < n:
        return None
    k = int(np.searchsorted(cs, n))  # leaves order[:k+1] cover n; order[:k] are taken whole
    rem = n - (int(cs[k - 1]) if k else 0)
    rest = order[k:]
    neg = -cnt[rest]  # non-decreasing
    q = int(np.searchsorted(neg, -rem, side="right"))
    choice = int(rest[int(np.searchsorted(neg, neg[q - 1], side="left"))])
    return order[:k], choice, rem


def _cover_buckets(cnt: np.ndarray, n: int, max_leaf: int
                   ) -> tuple[np.ndarray, int, int] | None:
    """:func:`_cover_sorted` for small leaves, walking counts down instead of sorting."""
    buckets: dict[int, np.ndarray] = {}

    def bucket(c: int) -> np.ndarray:
        ids = buckets.get(c)
        if ids is None:
            ids = buckets[c] = (cnt == c).nonzero()[0]
        return ids

    full: list[np.ndarray] = []
    remaining = n
    for c in range(max_leaf, 0, -1):
        ids = bucket(c)
        if not ids.size:
            continue
        if c * ids.size < remaining:
            full.append(ids)
            remaining -= c * int(ids.size)
            continue
        q = -(-remaining // c) - 1  # leaves of this count taken whole
        rem = remaining - q * c  # 1..c nodes from the last leaf
        full.append(ids[:q])
        for c2 in range(rem, c + 1):  # best fit: the smallest count that covers rem
            cand = bucket(c2) if c2 < c else ids[q:]
            if cand.size:
                return (np.concatenate(full) if len(full) > 1 else full[0]), int(cand[0]), rem
    return None


def _leaf_nodes(cluster: Cluster, usable: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """The usable nodes of ``leaves`` (leaf-major node order: each leaf is a range)."""
    if leaves.size * 8 > cluster.num_leaves:  # many leaves: one pass over the nodes
        take = np.zeros(cluster.num_leaves, dtype=bool)
        take[leaves] = True
        out: np.ndarray = (usable & take[cluster.leaf_of]).nonzero()[0]
        return out
    leaves = np.sort(leaves)
    s = cluster.max_leaf
    if s * cluster.num_leaves == cluster.num_nodes:  # leaves of one size: leaf k is k*s..
        idx = ((leaves * s)[:, None] + np.arange(s)).reshape(-1)
    else:
        size = cluster.leaf_size[leaves]
        first = cluster.leaf_start[leaves]
        offset = np.cumsum(size) - size
        idx = np.arange(int(size.sum())) + np.repeat(first - offset, size)
    out = idx[usable[idx]]
    return out


def _merge(whole: np.ndarray, part: np.ndarray) -> np.ndarray:
    """The sorted union of the nodes of whole leaves and those of one more leaf.

    Both are sorted and the other leaf's nodes are contiguous in index order and in no
    leaf of ``whole``, so they go in as one block (no sort needed).
    """
    k = int(whole.searchsorted(part[0])) if part.size else whole.size
    return np.concatenate((whole[:k], part, whole[k:]))


def linear_best_fit(cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
                    leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """Best fit over all usable nodes, ignoring the switch tree."""
    idx = usable.nonzero()[0]
    if idx.size < req.nodes:
        return None
    nodes = _best(state, idx, req.nodes, req)
    return nodes, int(np.unique(cluster.leaf_of[nodes]).size)


def tree_best_fit(cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
                  leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """Slurm's topology/tree best fit (see the module docstring).

    ``leaf_counts``, when given, are the usable nodes per leaf (saves a pass over nodes).
    """
    n = req.nodes
    starts = cluster.leaf_start
    if starts.size == 1:
        idx = usable.nonzero()[0]
        if idx.size < n:
            return None
        return _best(state, idx, n, req), 1
    cnt = (leaf_counts if leaf_counts is not None
           else np.add.reduceat(usable.view(np.int8), starts, dtype=np.int64))
    if cluster.uppers:
        best: tuple[int, int, int] | None = None  # (level, count, position)
        for k, (_, level, leaf_ids) in enumerate(cluster.uppers):
            if best is not None and level > best[0]:
                break
            total = int(cnt[leaf_ids].sum())
            if total >= n and (best is None or total < best[1]):
                best = (level, total, k)
        if best is not None:
            keep = np.zeros(cnt.size, dtype=bool)
            keep[cluster.uppers[best[2]][2]] = True
            cnt = np.where(keep, cnt, 0)
    sizes = cluster.leaf_size
    if n <= cluster.max_leaf:
        fit = np.where(cnt >= n, cnt, BIG)
        leaf = int(fit.argmin())
        if fit[leaf] < BIG:  # one leaf holds the job: the one with the fewest usable nodes
            lo = int(starts[leaf])
            idx = lo + usable[lo:lo + int(sizes[leaf])].nonzero()[0]
            return _best(state, idx, n, req), 1
    picked = (_cover_buckets(cnt, n, cluster.max_leaf) if cluster.max_leaf <= 64
              else _cover_sorted(cnt, n))
    if picked is None:
        return None
    full, choice, rem = picked
    k = int(full.size)
    whole = _leaf_nodes(cluster, usable, full)
    lo = int(starts[choice])
    idx = lo + usable[lo:lo + int(sizes[choice])].nonzero()[0]
    return _merge(whole, _best(state, idx, rem, req)), k + 1


def _span(cluster: Cluster, nodes: np.ndarray) -> int:
    """Leaf switches ``nodes`` span."""
    return int(np.unique(cluster.leaf_of[nodes]).size)


def best_leaf_span(cluster: Cluster, n: int) -> int:
    """The fewest leaf switches any ``n`` nodes of the cluster can span (best locality)."""
    cs = np.cumsum(np.sort(cluster.leaf_size)[::-1])
    return int(min(int(np.searchsorted(cs, n)) + 1, cs.size))


def _key(cluster: Cluster, state: NodeState, req: Request) -> tuple[np.ndarray, np.ndarray]:
    """Free amount and capacity per node of the resource a request is packed by.

    GPUs for a request with GPUs, else CPUs (SCHED² and Gandiva count GPUs).
    """
    if req.gpus:
        return state.free_g, cluster.cap_g
    return state.free_c, cluster.cap_c


def pack(cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
         leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """SCHED²'s packing placement (see the module docstring)."""
    n = req.nodes
    starts = cluster.leaf_start
    if starts.size == 1:
        idx = usable.nonzero()[0]
        if idx.size < n:
            return None
        return _best(state, idx, n, req), 1
    cnt = (leaf_counts if leaf_counts is not None
           else np.add.reduceat(usable.view(np.int8), starts, dtype=np.int64))
    fits = cnt >= n
    if fits.any():
        if req.exclusive:  # every usable node is idle: the leaf with the fewest of them
            leaf = int(np.where(fits, cnt, BIG).argmin())
            lo = int(starts[leaf])
            idx = lo + usable[lo:lo + int(cluster.leaf_size[leaf])].nonzero()[0]
            return idx[:n], 1
        free, cap = _key(cluster, state, req)
        idx = usable.nonzero()[0]
        lf = cluster.leaf_of[idx]
        keep = fits[lf]
        idx, lf = idx[keep], lf[keep]
        # best fit within each leaf, as _best orders nodes (leaf-major)
        if req.gpus:
            order = np.lexsort((idx, state.free_c[idx], state.free_g[idx], lf))
        else:
            order = np.lexsort((idx, state.free_c[idx], lf))
        idx, lf = idx[order], lf[order]
        rank = np.arange(idx.size) - np.searchsorted(lf, lf, side="left")
        take = rank < n
        ci, cl = idx[take], lf[take]
        nl = cluster.num_leaves
        opened = np.bincount(cl, weights=np.where(state.idle[ci], cap[ci], 0), minlength=nl)
        tight = np.bincount(cl, weights=free[ci], minlength=nl)
        fuller = np.bincount(lf, weights=free[idx], minlength=nl)
        cand = fits.nonzero()[0]
        o = np.lexsort((cand, fuller[cand], tight[cand], opened[cand]))
        leaf = int(cand[o[0]])
        return np.sort(ci[cl == leaf]), 1
    picked = _cover_sorted(cnt, n)
    if picked is None:
        return None
    full, choice, rem = picked
    whole = _leaf_nodes(cluster, usable, full)
    lo = int(starts[choice])
    idx = lo + usable[lo:lo + int(cluster.leaf_size[choice])].nonzero()[0]
    return _merge(whole, _best(state, idx, rem, req)), int(full.size) + 1


def _least_loaded(cluster: Cluster, state: NodeState, idx: np.ndarray, n: int,
                  req: Request) -> np.ndarray:
    """The ``n`` nodes of ``idx`` with the smallest share of their GPUs (CPUs) in use."""
    free, cap = _key(cluster, state, req)
    c = cap[idx].astype(np.float64)
    load = (c - free[idx]) / np.maximum(c, 1.0)
    order = np.lexsort((idx, load))
    return np.sort(idx[order[:n]])


def gandiva_affinity(cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
                     leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """Gandiva's affinity placement, ``getNodes`` (see the module docstring)."""
    n = req.nodes
    if req.exclusive:
        return tree_best_fit(cluster, state, usable, req, leaf_counts)
    idx = usable.nonzero()[0]
    if idx.size < n:
        return None
    rows = state.live_rows()
    if req.gpus:
        same = rows[state.row_g[rows] == req.gpus]
    else:
        same = rows[(state.row_g[rows] == 0) & (state.row_c[rows] == req.cpus)]
    affine = np.zeros(cluster.num_nodes, dtype=bool)
    affine[state.row_node[same]] = True
    cand = idx[affine[idx]]
    if cand.size >= n:  # same affinity, least loaded (lines 1-2, 5-6)
        nodes = _least_loaded(cluster, state, cand, n, req)
        return nodes, _span(cluster, nodes)
    if int(np.count_nonzero(state.idle[idx])) >= n:  # unallocated servers (lines 3, 7-8)
        return tree_best_fit(cluster, state, usable & state.idle, req)
    nodes = _least_loaded(cluster, state, idx, n, req)  # relax affinity (lines 4, 9-10)
    return nodes, _span(cluster, nodes)


def random_nodes(cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
                 leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """``req.nodes`` usable nodes at random (see the module docstring)."""
    idx = usable.nonzero()[0]
    if idx.size < req.nodes:
        return None
    rng = np.random.default_rng([req.seed % 2**63, state.version, req.job + 1])
    nodes = np.sort(rng.choice(idx, size=req.nodes, replace=False))
    return nodes, _span(cluster, nodes)


#: Placements by name.
PLACEMENTS: dict[str, Placement] = {
    "tree": tree_best_fit,
    "linear": linear_best_fit,
    "pack": pack,
    "gandiva": gandiva_affinity,
    "random": random_nodes,
}
