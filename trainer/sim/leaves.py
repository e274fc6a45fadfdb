"""Whole-node state on idle counts per leaf switch: the replay engine's fast path.

When every job takes whole nodes, every partition holds every node, the cluster is
homogeneous and the topology has no switch level that splits the leaves, Slurm's
topology/tree best fit (:func:`trainer.sim.placement.tree_best_fit`) depends on nothing
but how many nodes are idle on each leaf: which leaves a job gets is decided by those
counts, and within a leaf any idle node is as good as another. :class:`LeafState` keeps
exactly that, in plain Python (lists and ints, no numpy call per job): the idle count of
each leaf, and per count the sorted leaves that have it ("buckets"), so the best-fit
leaf or the cover of a big job is found by walking a few counts, and a job taking many
whole leaves takes them as one slice.

A job's allocation is a list of ``(nodes per leaf, leaves)`` groups, enough to give the
nodes back and to compute SCHED²'s fragmentation index; which node of a leaf a job has
is not kept (the engine uses the node arrays of :class:`~trainer.sim.state.NodeState`
when placements must be kept, a speed model reads them, or a policy reads the node
state). The schedules are the same either way (``tests/unit/test_sim_leaves.py``
replays both and compares them).
"""

from __future__ import annotations

import bisect
from operator import itemgetter

import numpy as np

from .state import Cluster

__all__ = ["Alloc", "LeafState", "eligible"]

#: One job's nodes: ``(nodes taken on each leaf, leaves)`` groups.
Alloc = list[tuple[int, list[int]]]


def eligible(cluster: Cluster) -> bool:
    """The cluster's shape allows the fast path (see the module docstring)."""
    every = cluster.num_leaves
    return (cluster.homogeneous and all(cluster.part_all)
            and all(int(ids.size) == every for _, _, ids in cluster.uppers))


class LeafState:
    """Idle nodes per leaf switch, for whole-node jobs only (see the module docstring).

    It answers the few questions the engine asks of a
    :class:`~trainer.sim.state.NodeState` on this path, with the same attribute names.

    Attributes:
        idle_count: Idle nodes per partition (every partition holds every node).
        busy_nodes, used_c, used_g: Non-idle nodes, allocated CPUs and GPUs.
        cpus_per_node, gpus_per_node: What each node has (``used_c`` is always
            ``busy_nodes * cpus_per_node``, ``used_g`` likewise).
        shared_rows: Always 0 (no shared-node job runs here).
        version: Bumped on every allocation or release.
    """

    def __init__(self, cluster: Cluster) -> None:
        if not eligible(cluster):
            raise ValueError("LeafState needs a homogeneous cluster whose partitions hold"
                             " every node and whose upper switches span every leaf")
        self.cluster = cluster
        sizes: list[int] = cluster.leaf_size.tolist()
        self._size = sizes
        self._max: int = cluster.max_leaf
        self._cnt: list[int] = list(sizes)
        self._buckets: list[list[int]] = [[] for _ in range(self._max + 1)]
        for leaf, s in enumerate(sizes):
            if s:
                self._buckets[s].append(leaf)
        self._total = cluster.num_nodes
        self._parts = len(cluster.part_all)
        self.idle_count: list[int] = [self._total] * self._parts
        self._idle = self._total
        self.cpus_per_node = int(cluster.cap_c[0]) if cluster.num_nodes else 0
        self.gpus_per_node = int(cluster.cap_g[0]) if cluster.num_nodes else 0
        self.busy_nodes = 0
        self.used_c = 0
        self.used_g = 0
        self.shared_rows = 0
        self.version = 0
        self.whole_only = True
        self._running: dict[int, tuple[int, Alloc]] = {}  # job -> (actual end, alloc)
        # leaf-major node order: leaf k's nodes are leaf_start[k]..+leaf_size[k]
        self._start: list[int] = cluster.leaf_start.tolist()

    # ------------------------------------------------------------------ placement
    def place(self, n: int) -> tuple[Alloc, int] | None:
        """Topology/tree best fit for ``n`` whole nodes: ``(alloc, leaves)`` or ``None``.

        The same choice as :func:`~trainer.sim.placement.tree_best_fit` on the idle
        nodes: the leaf with the fewest idle nodes that holds the job (ties: the lowest
        index); else leaves by decreasing idle count (ties: lowest index) taken whole,
        and the remainder from the leaf with the fewest idle nodes that covers it. The
        state is not changed (see :meth:`allocate`).
        """
        if n > self._idle or n <= 0:
            return None
        b = self._buckets
        mx = self._max
        if n <= mx:
            for c in range(n, mx + 1):
                if b[c]:
                    return [(n, [b[c][0]])], 1
        alloc: Alloc = []
        remaining = n
        for c in range(mx, 0, -1):
            ids = b[c]
            if not ids:
                continue
            k = len(ids)
            if c * k < remaining:
                alloc.append((c, ids[:]))
                remaining -= c * k
                continue
            q = -(-remaining // c) - 1  # leaves of this count taken whole
            rem = remaining - q * c  # 1..c nodes from the last leaf
            if q:
                alloc.append((c, ids[:q]))
            for c2 in range(rem, c + 1):  # best fit: the smallest count that covers rem
                if c2 < c:
                    if b[c2]:
                        alloc.append((rem, [b[c2][0]]))
                        break
                else:
                    alloc.append((rem, [ids[q]]))
                    break
            return alloc, sum(len(g[1]) for g in alloc)
        return None  # pragma: no cover - n <= idle nodes: the counts cover it

    # ------------------------------------------------------------------ changes
    def allocate(self, job: int, alloc: Alloc, aend: int) -> int:
        """Give ``alloc`` (from :meth:`place`, in this state) to ``job``; returns its nodes."""
        cnt = self._cnt
        b = self._buckets
        taken = 0
        for k, leaves in alloc:
            if len(leaves) > 1:  # whole leaves of one count: the lowest of its bucket
                bucket = b[k]
                del bucket[:len(leaves)]
                for leaf in leaves:
                    cnt[leaf] = 0
                taken += k * len(leaves)
                continue
            leaf = leaves[0]
            old = cnt[leaf]
            bucket = b[old]
            del bucket[bisect.bisect_left(bucket, leaf)]
            if old > k:
                bisect.insort(b[old - k], leaf)
            cnt[leaf] = old - k
            taken += k
        self._note(-taken)
        self._running[job] = (aend, alloc)
        return taken

    def release(self, job: int) -> None:
        """Give ``job``'s nodes back.

        Each leaf moves to the bucket of its new idle count; more than 8 whole leaves of
        one count, still empty (the common case for a large job), join their bucket in
        one merge instead.
        """
        _, alloc = self._running.pop(job)
        cnt = self._cnt
        b = self._buckets
        back: dict[int, list[int]] | None = None  # (made only when a merge is due)
        freed = 0
        for k, leaves in alloc:
            freed += k * len(leaves)
            if len(leaves) > 8 and not any(itemgetter(*leaves)(cnt)):
                for leaf in leaves:
                    cnt[leaf] = k
                if back is None:
                    back = {}
                lst = back.get(k)
                if lst is None:
                    back[k] = list(leaves)
                else:
                    lst.extend(leaves)
                continue
            for leaf in leaves:
                old = cnt[leaf]
                cnt[leaf] = old + k
                if old:
                    bucket = b[old]
                    del bucket[bisect.bisect_left(bucket, leaf)]
                bisect.insort(b[old + k], leaf)
        if back is not None:
            for c, merged in back.items():
                bucket = b[c]
                bucket.extend(merged)
                bucket.sort()
        self._note(freed)

    def _note(self, delta: int) -> None:
        self._idle += delta
        ic = self.idle_count
        for p in range(self._parts):
            ic[p] += delta
        self.busy_nodes -= delta
        self.used_c -= delta * self.cpus_per_node
        self.used_g -= delta * self.gpus_per_node
        self.version += 1

    # ------------------------------------------------------------------ queries
    def nodes_of(self, alloc: Alloc) -> np.ndarray:
        """Node indices of an allocation, as if the lowest idle nodes of each leaf.

        Only the count per leaf is tracked, so this is *a* node set with the right
        leaves, not necessarily the one :class:`~trainer.sim.state.NodeState` would pick.
        """
        start = self._start
        idx = [start[leaf] + i for k, leaves in alloc for leaf in leaves for i in range(k)]
        return np.array(sorted(idx), dtype=np.int64)

    def fragmentation(self, now: int) -> float:
        """SCHED²'s fragmentation index now, as :func:`trainer.sim.metrics.fragmentation`.

        Per leaf, the sum and the sum of squares of the busy nodes' remaining times are
        added up job by job, then turned into the index with the same float operations
        as the node-array version; the sums are of integers, exact in floats while they
        stay below 2**53, so the values agree bit for bit.
        """
        cl = self.cluster
        if cl.total_gpus > 0:
            # every busy node has one whole-node job: all its GPUs end together
            n = cl.num_nodes
            g = float(self.gpus_per_node)
            vals = []
            for aend, alloc in self._running.values():
                rem = float(max(aend - now, 0))
                gx = g * rem
                gxx = g * rem * rem
                f = 1.0 - gx ** 2 / (g * gxx) if gxx > 0 else 0.0
                for k, leaves in alloc:
                    vals.extend([f] * (k * len(leaves)))
            frag = np.zeros(n)
            frag[:len(vals)] = vals
            return float(frag.mean()) if self.gpus_per_node > 0 else 0.0
        nl = cl.num_leaves
        ids: list[int] = []
        w1: list[float] = []
        w2: list[float] = []
        for aend, alloc in self._running.values():
            rem = float(aend - now)
            if rem <= 0:
                continue
            r2 = rem * rem
            for k, leaves in alloc:
                ids += leaves
                w1 += [float(k * rem)] * len(leaves)
                w2 += [float(k * r2)] * len(leaves)
        sx = np.bincount(ids, weights=w1, minlength=nl) if ids else np.zeros(nl)
        sxx = np.bincount(ids, weights=w2, minlength=nl) if ids else np.zeros(nl)
        size = cl.leaf_size.astype(np.float64)
        frag = np.zeros(nl)
        ok = sxx > 0
        frag[ok] = 1.0 - sx[ok] ** 2 / (size[ok] * sxx[ok])
        return float(frag.mean())
