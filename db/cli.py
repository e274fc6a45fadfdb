"""``rlsched db ...``: create, upgrade and inspect the job-history store.

The store is named by ``--db`` (a URL or an SQLite file path), else ``$RLSCHED_DB``,
else the embedded SQLite file (see :mod:`db.session`). Every failure an admin can fix
(no database, not initialised, outdated, cannot connect, missing driver) ends in a
one-line message saying what to do next, never a traceback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import click

from slurm_plugin.output import emit_json, table
from slurm_plugin.slurm.values import format_duration

from .session import (
    ENV_VAR,
    StoreError,
    current_revision,
    display_url,
    init_db,
    resolve_url,
    upgrade_db,
)
from .store import Store

__all__ = ["db"]


def _url(ctx: click.Context) -> str:
    try:
        return resolve_url(ctx.obj)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def _open(ctx: click.Context) -> Iterator[Store]:
    try:
        store = Store.open(_url(ctx))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield store
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()


def _cluster_id(store: Store, name: str | None) -> tuple[int, str]:
    names = store.clusters()
    if not names:
        raise click.ClickException(
            f"no clusters in {store.url} yet: ingest some history first (rlsched ingest --help)"
        )
    if name is None:
        if len(names) > 1:
            raise click.ClickException(
                f"the store holds several clusters ({', '.join(names)}): choose one with --cluster"
            )
        name = names[0]
    cid = store.cluster_id(name)
    if cid is None:
        raise click.ClickException(
            f"no cluster {name!r} in {store.url} (it holds: {', '.join(names)})"
        )
    return cid, name


def _when(t: int | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _dur(seconds: int | float | None) -> str:
    if seconds is None:
        return "-"
    n = round(seconds)
    return "-" + format_duration(-n) if n < 0 else format_duration(n)




def _size_buckets(hist: list[list[int]]) -> list[tuple[str, int]]:
    """``[value, jobs]`` pairs grouped as 0, 1, 2-3, 4-7, 8-15... for a compact table."""
    buckets: dict[tuple[int, int], int] = {}
    for value, n in hist:
        lo = 0 if value <= 0 else 1 << (int(value).bit_length() - 1)
        hi = 0 if lo == 0 else 2 * lo - 1
        buckets[(lo, hi)] = buckets.get((lo, hi), 0) + n
    return [(str(lo) if lo == hi else f"{lo}-{hi}", n) for (lo, hi), n in sorted(buckets.items())]


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
cluster_option = click.option(
    "--cluster", default=None,
    help="Cluster name (default: the only cluster in the store).",
)


@click.group()
@click.option(
    "--db", "url", envvar=ENV_VAR, default=None, metavar="URL",
    help=f"Database URL or SQLite file path (default: ${ENV_VAR}, else"
         " $XDG_DATA_HOME/rlsched/rlsched.db, i.e. ~/.local/share/rlsched/rlsched.db).",
)
@click.pass_context
def db(ctx: click.Context, url: str | None) -> None:
    """Create, upgrade and inspect the job-history store (SQLite, PostgreSQL, MariaDB)."""
    ctx.obj = url


@db.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create the store's schema in a new database (does nothing if already current)."""
    url = _url(ctx)
    try:
        before = current_revision(url)
        rev = init_db(url)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if before == rev:
        click.echo(f"{display_url(url)}: already initialised (schema revision {rev})")
    else:
        click.echo(f"{display_url(url)}: initialised (schema revision {rev})")


@db.command()
@click.pass_context
def upgrade(ctx: click.Context) -> None:
    """Upgrade an initialised store to this rlsched's schema revision."""
    url = _url(ctx)
    try:
        before, after = upgrade_db(url)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if before == after:
        click.echo(f"{display_url(url)}: up to date (schema revision {after})")
    else:
        click.echo(f"{display_url(url)}: upgraded from revision {before} to {after}")


@db.command()
@json_option
@click.pass_context
def clusters(ctx: click.Context, as_json: bool) -> None:
    """List the clusters in the store with their job counts and last ingest."""
    with _open(ctx) as store:
        rows: list[dict[str, Any]] = []
        for name in store.clusters():
            cid = store.cluster_id(name)
            assert cid is not None
            runs = store.runs(cid)
            last = runs[-1] if runs else None
            spec = store.cluster_spec(name)
            rows.append({
                "cluster": name,
                "jobs": store.count_jobs(cid),
                "nodes": None if spec is None else spec.num_nodes,
                "gpus": None if spec is None else spec.total_gpus,
                "runs": len(runs),
                "last_ingest": None if last is None else last.started_at,
                "last_source": None if last is None else last.source,
            })
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no clusters in the store yet")
        return
    table(
        ["CLUSTER", "JOBS", "NODES", "GPUS", "RUNS", "LAST INGEST (UTC)", "SOURCE"],
        [[r["cluster"], r["jobs"], r["nodes"] if r["nodes"] is not None else "-",
          r["gpus"] if r["gpus"] is not None else "-", r["runs"], _when(r["last_ingest"]),
          r["last_source"] or "-"] for r in rows],
    )


@db.command()
@cluster_option
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="How many top users to list.")
@json_option
@click.pass_context
def stats(ctx: click.Context, cluster: str | None, top: int, as_json: bool) -> None:
    """Summarise a cluster's history: jobs, span, states, waits, sizes and top users."""
    with _open(ctx) as store:
        cid, name = _cluster_id(store, cluster)
        st = store.stats(cid, top=top)
    if as_json:
        emit_json(st)
        return
    click.echo(f"cluster {name}: {st['jobs']} jobs, {st['users']} users,"
               f" {st['gpu_hours']:,.1f} GPU-hours")
    if not st["jobs"]:
        return
    click.echo(f"  submitted  {_when(st['first_submit'])} .. {_when(st['last_submit'])} UTC"
               f" (span {_dur(st['span_s'])}); last end {_when(st['last_end'])}")
    click.echo("  states     " + ", ".join(f"{s} {n}" for s, n in st["states"].items()))
    click.echo()
    dists: list[tuple[str, dict[str, Any], Callable[[Any], str]]] = [
        ("wait (start - submit)", st["wait_s"], _dur),
        ("time limit", st["time_limit_s"], _dur),
        ("requested GPUs", st["req_gpus"], str),
        ("requested nodes", st["req_nodes"], str),
    ]
    table(
        ["", "JOBS", "P50", "P90", "P99", "MEAN", "MAX"],
        [[label, d["count"], *(fmt(d[k]) if d[k] is not None else "-"
                               for k in ("p50", "p90", "p99", "mean", "max"))]
         for label, d, fmt in dists],
    )
    click.echo(f"  ({st['time_limit_s']['unlimited']} jobs without a time limit,"
               f" {st['jobs'] - st['started']} never started)")
    click.echo()
    gpus = dict(_size_buckets(st["req_gpus"]["hist"]))
    nodes = dict(_size_buckets(st["req_nodes"]["hist"]))
    sizes = sorted(set(gpus) | set(nodes), key=lambda k: int(k.split("-")[0]))
    table(["SIZE", "JOBS BY GPUS", "JOBS BY NODES"],
           [[k, gpus.get(k, 0), nodes.get(k, 0)] for k in sizes])
    click.echo()
    table(["TOP USERS", "JOBS", "GPU-HOURS"],
           [[u["user"], u["jobs"], f"{u['gpu_hours']:,.1f}"] for u in st["top_users"]])
    if st["top_users_by_gpu_hours"]:
        click.echo()
        table(["TOP BY GPU-HOURS", "JOBS", "GPU-HOURS"],
               [[u["user"], u["jobs"], f"{u['gpu_hours']:,.1f}"]
                for u in st["top_users_by_gpu_hours"]])


@db.command()
@cluster_option
@json_option
@click.pass_context
def runs(ctx: click.Context, cluster: str | None, as_json: bool) -> None:
    """List a cluster's ingest runs: source, window, counts, watermark, status."""
    with _open(ctx) as store:
        cid, _ = _cluster_id(store, cluster)
        items = store.runs(cid)
    if as_json:
        emit_json([dataclasses.asdict(r) for r in items])
        return
    table(
        ["RUN", "STARTED (UTC)", "SOURCE", "READ", "INSERTED", "UPDATED", "UNCHANGED",
         "QUARANTINED", "WATERMARK (UTC)", "STATUS"],
        [[r.id, _when(r.started_at), r.source, r.read, r.inserted, r.updated, r.unchanged,
          r.quarantined, _when(r.watermark), r.status] for r in items],
    )


@db.command()
@cluster_option
@click.option("--run", "run_id", type=int, default=None,
              help="Only the rows of this ingest run (see 'rlsched db runs').")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True,
              help="Show at most this many rows.")
@json_option
@click.pass_context
def quarantine(
    ctx: click.Context, cluster: str | None, run_id: int | None, limit: int, as_json: bool
) -> None:
    """Show quarantined source rows with the reason and their raw text."""
    with _open(ctx) as store:
        cid, _ = _cluster_id(store, cluster)
        items = store.quarantined(cid, run_id, limit=limit)
    if as_json:
        emit_json([dataclasses.asdict(q) for q in items])
        return
    for q in items:
        where = f"{q.source}" + (f":{q.line}" if q.line is not None else "")
        click.echo(f"[run {q.run_id}] {where}: {q.reason}" + (f" ({q.detail})" if q.detail else ""))
        raw = q.raw if len(q.raw) <= 300 else q.raw[:300] + "..."
        click.echo(f"    {raw}")
