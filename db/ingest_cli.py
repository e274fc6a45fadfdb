"""``rlsched ingest ...``: load job history into the store from every supported source.

Each subcommand turns its source into a stream of records (or rejected rows) and hands
it to :meth:`db.store.Store.ingest`, which upserts on ``(job id, submit time)``, so
re-running an ingest adds nothing and jobs that were still pending or running are
updated later. Rows that cannot be read are quarantined with the reason and counted in
the summary; ``--strict`` makes any quarantined row an error (exit code 1).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from itertools import chain
from pathlib import Path
from typing import Any, TypeVar

import click

from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.when import epoch_s, parse_span, parse_when

from .records import JobRecord, Parsed

T = TypeVar("T")

@contextmanager
def _store(url: str | None) -> Iterator[Any]:
    from .session import StoreError
    from .store import Store

    try:
        store = Store.open(url)
    except StoreError as exc:  # says what to run (rlsched db init...), never a traceback
        raise click.ClickException(str(exc)) from None
    try:
        yield store
    finally:
        store.close()


def _counting(items: Iterable[T], bar: Any) -> Iterator[T]:
    for item in items:
        bar.update(1)
        yield item


def run_ingest(
    url: str | None,
    cluster: str,
    spec: ClusterSpec | None,
    source: str,
    items: Iterable[Parsed],
    *,
    strict: bool,
    window: tuple[int | None, int | None] = (None, None),
    watermark: int | None = None,
    label: str = "ingesting",
) -> None:
    """Store ``items`` for ``cluster`` and print the summary (shared by every subcommand).

    Raises:
        click.ClickException: On ``--strict`` with quarantined rows, or store errors.
    """
    with _store(url) as store:
        cluster_id = store.cluster(cluster, spec)
        with click.progressbar(length=0, label=label, show_pos=True, show_percent=False,
                               file=sys.stderr) as bar:
            try:
                summary = store.ingest(cluster_id, source, _counting(items, bar),
                                       window=window, watermark=watermark)
            except (ValueError, OSError) as exc:  # an unreadable source as a whole
                raise click.ClickException(
                    f"{source}: {exc} (rows stored before this point are kept)"
                ) from None
    print_summary(cluster, source, summary)
    bad = sum(summary.quarantined.values())
    if strict and bad:
        raise click.ClickException(
            f"{bad} rows quarantined (--strict); see them with `rlsched db quarantine`"
        )


def print_summary(cluster: str, source: str, summary: Any) -> None:
    """The one-screen summary of an ingest run."""
    bad = sum(summary.quarantined.values())
    click.echo(
        f"{source} -> cluster {cluster!r} (run {summary.run_id}): read {summary.read},"
        f" inserted {summary.inserted}, updated {summary.updated},"
        f" unchanged {summary.unchanged}, quarantined {bad}"
    )
    for reason, n in sorted(summary.quarantined.items(), key=lambda kv: -kv[1]):
        click.echo(f"  quarantined {n:>8}  {reason}")
    if summary.watermark is not None:
        when = datetime.fromtimestamp(summary.watermark, timezone.utc).isoformat()
        click.echo(f"  watermark {when}")




db_option = click.option(
    "--db", "url", envvar="RLSCHED_DB", default=None,
    help="Store URL or SQLite file (default: $RLSCHED_DB, else the embedded SQLite file).",
)
strict_option = click.option(
    "--strict", is_flag=True, help="Exit with an error if any row was quarantined."
)


@click.group()
def ingest() -> None:
    """Load job history into the store (sacct, the slurmdbd database, trace files)."""


@ingest.command("sacct")
@db_option
@click.option("--file", "dump", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read a saved sacct dump (-P with its header line, or --json) instead of"
                   " the live cluster.")
@click.option("--cluster", help="Cluster name (default: ClusterName of the live cluster; "
                                "required with --file unless the dump names it).")
@click.option("--since", default=None,
              help="Window start (ISO, 'now-30d'...). Default: where the last sacct ingest of"
                   " this cluster stopped, else now-30d.")
@click.option("--until", default="now", show_default=True, help="Window end.")
@click.option("--window", "step", default="1d", show_default=True,
              help="Ask sacct for this span at a time (1d, 12h...), never years at once.")
@click.option("--format", "fmt", type=click.Choice(["auto", "json", "parsable"]),
              default="auto", show_default=True,
              help="Live: sacct --json or -P (auto: -P on 22.05, JSON later).")
@click.option("--backend", type=click.Choice(["cli", "pyslurm"]), default=None,
              help="Slurm backend for live ingest (default: $RLSCHED_SLURM_BACKEND or cli).")
@strict_option
def ingest_sacct(url: str | None, dump: Path | None, cluster: str | None, since: str | None,
                 until: str, step: str, fmt: str, backend: str | None, strict: bool) -> None:
    """Ingest accounting from sacct: the live cluster in windows, or a saved dump."""
    from .ingest import sacct as src

    if dump is not None:
        items: Iterable[Parsed] = src.read_dump(dump)
        if cluster is None:
            cluster, items = _cluster_of(items)
        run_ingest(url, cluster, None, f"sacct-file:{dump.name}", items, strict=strict,
                   label=f"reading {dump.name}")
        return

    from slurm_plugin.slurm.client import make_client

    client = make_client(backend)
    cfg = client.config()
    name = cluster or cfg.cluster_name
    spec = ClusterSpec.from_slurm(name, client.nodes(), client.topology())
    t1 = parse_when(until)
    if since is not None:
        t0 = parse_when(since)
    else:
        t0 = _resume_point(url, name) or t1 - timedelta(days=30)
    use_json = {"auto": None, "json": True, "parsable": False}[fmt]
    n_windows = max(1, int((t1 - t0) / parse_span(step)) + 1)
    click.echo(f"sacct {t0:%Y-%m-%dT%H:%M:%S} .. {t1:%Y-%m-%dT%H:%M:%S} UTC in"
               f" {n_windows} window(s) of {step}", err=True)
    items = src.read_live(client, t0, t1, window=parse_span(step), use_json=use_json)
    run_ingest(url, name, spec, "sacct", items, strict=strict,
               window=(epoch_s(t0), epoch_s(t1)), watermark=epoch_s(t1),
               label="sacct")


def _cluster_of(items: Iterable[Parsed]) -> tuple[str, Iterator[Parsed]]:
    """The cluster a dump names (its first record's), and the items, nothing consumed.

    Raises:
        click.UsageError: If no record names a cluster (``--cluster`` is then needed).
    """
    head: list[Parsed] = []
    it = iter(items)
    for item in it:
        head.append(item)
        if isinstance(item, JobRecord) and item.cluster:
            return item.cluster, chain(head, it)
        if len(head) >= 1000:
            break
    raise click.UsageError("the dump does not name its cluster: give --cluster NAME")


def _resume_point(url: str | None, cluster: str, source: str = "sacct") -> datetime | None:
    """Where a live sacct ingest of ``cluster`` continues.

    That is the last watermark, pulled back to the oldest job still pending or running
    then (so it gets updated).
    """
    with _store(url) as store:
        if cluster not in store.clusters():
            return None
        cid = store.cluster(cluster)
        mark = store.watermark(cid, source)
        if mark is None:
            return None
        oldest = store.oldest_unfinished(cid)
        start = min(mark, oldest) if oldest is not None else mark
        return datetime.fromtimestamp(start, timezone.utc)


def _trace_options(fn: Any) -> Any:
    for opt in reversed([
        db_option,
        click.option("--cluster", help="Cluster name to store it as (default: the file's stem)."),
        click.option("--nodes", "num_nodes", type=int, default=None,
                     help="Nodes of the synthetic cluster (default: from the header, else the"
                          " largest job)."),
        click.option("--gpus-per-node", type=int, default=None,
                     help="GPUs per node of the synthetic cluster (SWF default 0, Philly 8)."),
        click.option("--cpus-per-node", type=int, default=None,
                     help="CPUs per node (default: from the header's MaxProcs/MaxNodes)."),
        click.option("--nodes-per-leaf", type=int, default=4, show_default=True,
                     help="Nodes per leaf switch of the synthetic switch tree."),
        strict_option,
    ]):
        fn = opt(fn)
    return fn


def _ingest_trace(url: str | None, path: Path, cluster: str | None, header: Any,
                  items: Iterable[Parsed], strict: bool, num_nodes: int | None,
                  gpus_per_node: int | None, cpus_per_node: int | None,
                  nodes_per_leaf: int) -> None:
    from .ingest import traces

    name = cluster or path.stem
    spec = traces.synthetic_spec(name, header, gpus_per_node=gpus_per_node,
                                 cpus_per_node=cpus_per_node, nodes_per_leaf=nodes_per_leaf,
                                 num_nodes=num_nodes)
    run_ingest(url, name, spec, f"trace:{path.name}", items, strict=strict,
               label=f"reading {path.name}")


@ingest.command("swf")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--variant", type=click.Choice(["auto", "standard", "anl"]), default="auto",
              show_default=True,
              help="Standard SWF, or ANL's variant (requested wall time in column 6).")
@click.option("--start", "start_epoch", type=int, default=None,
              help="Epoch seconds of time 0 (default: the header's UnixStartTime).")
@_trace_options
def ingest_swf(path: Path, variant: str, start_epoch: int | None, url: str | None,
               cluster: str | None, num_nodes: int | None, gpus_per_node: int | None,
               cpus_per_node: int | None, nodes_per_leaf: int, strict: bool) -> None:
    """Ingest a Standard Workload Format trace (Parallel Workloads Archive, ANL variant)."""
    from .ingest import traces

    header, items = traces.read_swf(
        path, variant=None if variant == "auto" else variant,  # type: ignore[arg-type]
        start_epoch=start_epoch, cpus_per_node=cpus_per_node, cluster=cluster or path.stem,
    )
    _ingest_trace(url, path, cluster, header, items, strict, num_nodes, gpus_per_node,
                  cpus_per_node, nodes_per_leaf)


@ingest.command("philly")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_trace_options
def ingest_philly(path: Path, url: str | None, cluster: str | None, num_nodes: int | None,
                  gpus_per_node: int | None, cpus_per_node: int | None, nodes_per_leaf: int,
                  strict: bool) -> None:
    """Ingest a Philly-style CSV trace (timestamp,duration,num_gpus,...)."""
    from .ingest import traces

    try:
        header, items = traces.read_philly_csv(path, gpus_per_node=gpus_per_node or 8,
                                               cluster=cluster or path.stem)
    except ValueError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    _ingest_trace(url, path, cluster, header, items, strict, num_nodes, gpus_per_node,
                  cpus_per_node, nodes_per_leaf)


@ingest.command("slurmdbd")
@click.argument("source_url", metavar="URL")
@db_option
@click.option("--cluster", required=True,
              help="Slurm cluster name (its tables are <cluster>_job_table...).")
@click.option("--since", default=None,
              help="Only jobs active after this (ISO, 'now-30d'...). Default: where the last"
                   " slurmdbd ingest of this cluster stopped, else everything.")
@click.option("--until", default="now", show_default=True, help="Only jobs submitted before.")
@strict_option
def ingest_slurmdbd(source_url: str, url: str | None, cluster: str, since: str | None,
                    until: str, strict: bool) -> None:
    """Ingest straight from slurmdbd's database, read-only (mysql+pymysql://user@host/db)."""
    from .ingest.slurmdbd import SlurmdbdError, read_slurmdbd

    t1 = parse_when(until)
    t0 = parse_when(since) if since is not None else _resume_point(url, cluster, "slurmdbd")
    # the query keeps jobs submitted strictly before ``until``, to the second: rounded up,
    # a job submitted in the same second as ``--until`` (or now) is not lost
    window = (None if t0 is None else epoch_s(t0), epoch_s(t1, ceil=True))
    try:
        items = read_slurmdbd(source_url, cluster, since=window[0], until=window[1])
        run_ingest(url, cluster, None, "slurmdbd", items, strict=strict, window=window,
                   watermark=window[1], label=f"{cluster}_job_table")
    except (SlurmdbdError, ValueError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
