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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .state import BIG, Cluster, NodeState

__all__ = ["PLACEMENTS", "Placement", "Request", "linear_best_fit", "tree_best_fit"]


class Request(NamedTuple):
    """One job's request as a placement sees it.

    Attributes:
        nodes: Nodes wanted.
        cpus: CPUs per node (0 for whole nodes).
        gpus: GPUs per node.
        exclusive: Whole-node request (every usable node is idle: no best fit needed).
    """

    nodes: int
    cpus: int
    gpus: int
    exclusive: bool


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
            ids = buckets[c] = np.flatnonzero(cnt == c)
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
        out: np.ndarray = np.flatnonzero(usable & take[cluster.leaf_of])
        return out
    leaves = np.sort(leaves)
    size = cluster.leaf_size[leaves]
    first = cluster.leaf_start[leaves]
    offset = np.cumsum(size) - size
    idx = np.arange(int(size.sum())) + np.repeat(first - offset, size)
    out = idx[usable[idx]]
    return out


def linear_best_fit(cluster: Cluster, state: NodeState, usable: np.ndarray, req: Request,
                    leaf_counts: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """Best fit over all usable nodes, ignoring the switch tree."""
    idx = np.flatnonzero(usable)
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
        idx = np.flatnonzero(usable)
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
            idx = lo + np.flatnonzero(usable[lo:lo + int(sizes[leaf])])
            return _best(state, idx, n, req), 1
    picked = (_cover_buckets(cnt, n, cluster.max_leaf) if cluster.max_leaf <= 64
              else _cover_sorted(cnt, n))
    if picked is None:
        return None
    full, choice, rem = picked
    k = int(full.size)
    whole = _leaf_nodes(cluster, usable, full)
    lo = int(starts[choice])
    idx = lo + np.flatnonzero(usable[lo:lo + int(sizes[choice])])
    part = _best(state, idx, rem, req)
    nodes = np.concatenate((whole, part))
    nodes.sort()
    return nodes, k + 1


#: Placements by name.
PLACEMENTS: dict[str, Placement] = {
    "tree": tree_best_fit,
    "linear": linear_best_fit,
}
