"""Replay input: job records and a cluster, from a trace file or from the store.

- :func:`from_trace`: an SWF (standard or ANL variant) or Philly-style CSV file, read by
  :mod:`db.ingest.traces`, on the synthetic cluster :func:`~db.ingest.traces.synthetic_spec`
  sizes for it (``num_nodes``, ``gpus_per_node``... override). Rows the reader rejects
  are counted per reason, never replayed.
- :func:`from_store`: the jobs of one cluster in the store (:meth:`db.store.Store.jobs`)
  on the cluster's stored :class:`~slurm_plugin.cluster.ClusterSpec` (a synthetic one
  sized from the jobs when the store has none).

Both take a slice: jobs submitted in ``[since, since + window)`` (``since`` defaults to
the first submit time), then the first ``limit`` of those in submit order.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from db.ingest import traces
from db.records import JobRecord, Parsed, Rejected
from slurm_plugin.cluster import ClusterSpec

__all__ = ["ReplayInput", "from_store", "from_trace", "take_slice", "trace_kind"]


@dataclass
class ReplayInput:
    """Records to replay and the cluster they ran on.

    Attributes:
        spec: The cluster.
        records: Job records in submit order (the slice asked for).
        source: Where they came from (``trace:NAME`` or ``store:CLUSTER``).
        rejected: Rows the reader could not read, per reason.
        synthetic: True when the cluster was synthesised (no recorded layout).
    """

    spec: ClusterSpec
    records: list[JobRecord]
    source: str
    rejected: Counter[str] = field(default_factory=Counter)
    synthetic: bool = True


def trace_kind(path: str | os.PathLike[str]) -> str:
    """``"philly"`` for ``.csv``/``.csv.gz`` files, else ``"swf"``."""
    name = os.fspath(path).lower()
    return "philly" if name.endswith((".csv", ".csv.gz")) else "swf"


def take_slice(records: Iterable[JobRecord], *, since: int | None = None,
               window: int | None = None, limit: int | None = None) -> list[JobRecord]:
    """Records submitted in ``[since, since + window)``, the first ``limit`` by submit time.

    ``since`` defaults to the earliest submit time.

    Raises:
        ValueError: On a negative ``limit`` or non-positive ``window``.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if window is not None and window <= 0:
        raise ValueError("window must be positive")
    recs = sorted(records, key=lambda r: (r.submit_time, r.job_id))
    if recs and (since is not None or window is not None):
        lo = recs[0].submit_time if since is None else since
        hi = lo + window if window is not None else None
        recs = [r for r in recs if r.submit_time >= lo and (hi is None or r.submit_time < hi)]
    if limit is not None:
        recs = recs[:limit]
    return recs


def _split(items: Iterable[Parsed], rejected: Counter[str]) -> Iterator[JobRecord]:
    for item in items:
        if isinstance(item, Rejected):
            rejected[item.reason] += 1
        else:
            yield item


def from_trace(
    path: str | os.PathLike[str],
    *,
    num_nodes: int | None = None,
    gpus_per_node: int | None = None,
    cpus_per_node: int | None = None,
    nodes_per_leaf: int = 4,
    since: int | None = None,
    window: int | None = None,
    limit: int | None = None,
    name: str | None = None,
    missing_limits: str = "run",
) -> ReplayInput:
    """Read a trace file and the synthetic cluster for it.

    Args:
        path: SWF (``.swf``, ``.swf.gz``; standard or ANL, detected) or Philly CSV.
        num_nodes: Nodes of the cluster (default: the header's ``MaxNodes``; for a CSV,
            enough for the largest job).
        gpus_per_node: GPUs per node (SWF default 0, CSV 8).
        cpus_per_node: CPUs per node (default: the header's, else 1 for SWF, 64 for CSV).
        nodes_per_leaf: Nodes per leaf switch of the synthetic tree.
        since: Slice start, epoch s (default: the first submit time).
        window: Slice length, s.
        limit: At most this many jobs (the first by submit time).
        name: Cluster name (default: the file name without extensions).
        missing_limits: How to fill in the time limits the trace does not record:
            ``run`` (each job's run time, by :func:`~trainer.sim.state.build_jobs`) or
            ``users`` (modelled requests, :mod:`trainer.sim.limits`).

    Raises:
        OSError: If the file cannot be read.
        ValueError: On a malformed header, an impossible size or an unknown
            ``missing_limits``.
    """
    from .limits import apply_missing_limits, check_missing_limits

    check_missing_limits(missing_limits)
    p = Path(path)
    cluster = name or p.name.split(".")[0]
    rejected: Counter[str] = Counter()
    if trace_kind(p) == "philly":
        header, items = traces.read_philly_csv(
            p, gpus_per_node=gpus_per_node or traces.DEFAULT_GPUS_PER_NODE, cluster=cluster)
    else:
        header, items = traces.read_swf(p, cpus_per_node=cpus_per_node, cluster=cluster)
    records = take_slice(_split(items, rejected), since=since, window=window, limit=limit)
    records = apply_missing_limits(records, missing_limits)
    size_from: traces.TraceHeader | list[JobRecord] = header
    if header.variant == "philly" and num_nodes is None:
        size_from = records
    if isinstance(size_from, list) and not size_from:
        raise ValueError(f"{p}: no job records to size the cluster; pass num_nodes")
    spec = traces.synthetic_spec(cluster, size_from, gpus_per_node=gpus_per_node,
                                 cpus_per_node=cpus_per_node, nodes_per_leaf=nodes_per_leaf,
                                 num_nodes=num_nodes)
    return ReplayInput(spec, records, f"trace:{p.name}", rejected, True)


def from_store(
    url: str | None,
    cluster: str,
    *,
    since: int | None = None,
    window: int | None = None,
    limit: int | None = None,
    nodes_per_leaf: int = 4,
    missing_limits: str = "run",
) -> ReplayInput:
    """Read one cluster's jobs and spec from the store.

    ``missing_limits`` fills in the limits jobs lack, as in :func:`from_trace` (e.g. a
    trace ingested into the store; on a Slurm cluster, jobs under an ``UNLIMITED``
    partition limit).

    Raises:
        db.store.UnknownClusterError: If the store has no such cluster.
        db.session.StoreError: If the store cannot be opened.
        ValueError: If the cluster has neither a stored spec nor jobs to size one, or on
            an unknown ``missing_limits``.
    """
    from db.store import Store, UnknownClusterError

    from .limits import apply_missing_limits, check_missing_limits

    check_missing_limits(missing_limits)

    with Store.open(url) as store:
        cid = store.cluster_id(cluster)
        if cid is None:
            raise UnknownClusterError(
                f"no cluster named {cluster!r} in {store.url}; known: {store.clusters()}")
        spec = store.cluster_spec(cluster)
        until = since + window if since is not None and window is not None else None
        records = take_slice(store.jobs(cid, since=since, until=until), since=since,
                             window=window, limit=limit)
    records = apply_missing_limits(records, missing_limits)
    synthetic = spec is None
    if spec is None:
        if not records:
            raise ValueError(f"cluster {cluster!r}: no stored spec and no jobs to size one")
        spec = traces.synthetic_spec(cluster, records, nodes_per_leaf=nodes_per_leaf)
    return ReplayInput(spec, records, f"store:{cluster}", Counter(), synthetic)
