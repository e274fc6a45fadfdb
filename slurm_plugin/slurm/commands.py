"""``rlsched slurm ...``: read the cluster through the same boundary the helper uses.

These commands are how an admin checks, before anything else, that rlsched can see the
cluster: every one is read-only.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import click

from ..output import emit_json, table
from ..when import parse_when
from .client import DEFAULT_TIMEOUT, SlurmClient, make_client
from .hostlist import compress
from .types import PENDING, RUNNING
from .values import format_duration


def _client(ctx: click.Context) -> SlurmClient:
    obj: SlurmClient = ctx.obj
    return obj




def _limit(seconds: int | None) -> str:
    return "UNLIMITED" if seconds is None else format_duration(seconds)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


@click.group()
@click.option(
    "--backend",
    type=click.Choice(["cli", "pyslurm"]),
    default=None,
    help="Slurm backend (default: $RLSCHED_SLURM_BACKEND or 'cli').",
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds allowed for each Slurm call.",
)
@click.pass_context
def slurm(ctx: click.Context, backend: str | None, timeout: float) -> None:
    """Read the cluster through rlsched's Slurm boundary (read-only)."""
    ctx.obj = make_client(backend, timeout=timeout)


@slurm.command()
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([PENDING, RUNNING], case_sensitive=False),
    help="Job states to show (repeatable; default: pending and running).",
)
@json_option
@click.pass_context
def jobs(ctx: click.Context, states: tuple[str, ...], as_json: bool) -> None:
    """List pending and running jobs as rlsched sees them."""
    result = _client(ctx).jobs(tuple(s.upper() for s in states) or (PENDING, RUNNING))
    if as_json:
        emit_json(result)
        return
    rows = [
        (j.job_id, j.state, j.user, j.partition, j.num_nodes, j.num_cpus, j.num_gpus,
         _limit(j.time_limit), j.priority, "" if j.site_factor is None else j.site_factor,
         compress(j.nodes) or compress(j.required_nodes) or "-", j.name[:24])
        for j in result
    ]
    table(["JOBID", "STATE", "USER", "PARTITION", "NODES", "CPUS", "GPUS", "TIME_LIMIT",
            "PRIORITY", "SITE", "NODELIST/REQ", "NAME"], rows)


@slurm.command()
@json_option
@click.pass_context
def nodes(ctx: click.Context, as_json: bool) -> None:
    """List nodes with their CPU/GPU allocation and features."""
    result = _client(ctx).nodes()
    if as_json:
        emit_json(result)
        return
    rows = [
        (n.name, "+".join((n.state, *n.state_flags)), f"{n.alloc_cpus}/{n.cpus}",
         f"{n.alloc_gpus}/{n.gpus}", f"{n.alloc_memory_mb}/{n.real_memory_mb}",
         ",".join(n.features) or "-", ",".join(n.partitions))
        for n in result
    ]
    table(["NODE", "STATE", "CPUS", "GPUS", "MEM_MB", "FEATURES", "PARTITIONS"], rows)


@slurm.command()
@json_option
@click.pass_context
def topology(ctx: click.Context, as_json: bool) -> None:
    """Show the switch tree (topology/tree)."""
    tree = _client(ctx).topology()
    if as_json:
        emit_json(list(tree.switches.values()))
        return
    if not tree.switches:
        click.echo("no switch tree: this cluster does not use topology/tree")
        return
    rows = [
        (s.name, s.level, compress(s.switches) or "-", len(s.nodes), compress(s.nodes))
        for s in sorted(tree.switches.values(), key=lambda s: (-s.level, s.name))
    ]
    table(["SWITCH", "LEVEL", "CHILDREN", "NODES", "NODELIST"], rows)


@slurm.command()
@json_option
@click.pass_context
def config(ctx: click.Context, as_json: bool) -> None:
    """Show the scheduling configuration (priority weights, SchedulerParameters)."""
    cfg = _client(ctx).config()
    if as_json:
        emit_json({k: v for k, v in dataclasses.asdict(cfg).items() if k != "raw"})
        return
    click.echo(f"cluster {cfg.cluster_name}  Slurm {cfg.slurm_version}")
    click.echo(f"priority {cfg.priority_type}  max age {format_duration(cfg.priority_max_age)}"
               f"  decay half-life {format_duration(cfg.priority_decay_half_life)}")
    click.echo("weights  " + "  ".join(f"{k}={v}" for k, v in cfg.priority_weights.items()))
    click.echo(f"scheduler {cfg.scheduler_type}  select {cfg.select_type}"
               f"  topology {cfg.topology_plugin or '-'}")
    params = ",".join(f"{k}={v}" if v else k for k, v in cfg.scheduler_parameters.items())
    click.echo(f"SchedulerParameters {params or '-'}")


@slurm.command()
@click.option("--start", "-S", default="now-1d", show_default=True,
              help="Window start: ISO time (UTC), 'now', or 'now-Nd'/'now-Nh'/'now-Nm'.")
@click.option("--end", "-E", default="now", show_default=True, help="Window end, same forms.")
@click.option("--format", "fmt", type=click.Choice(["auto", "json", "parsable"]),
              default="auto", show_default=True,
              help="Read sacct --json, sacct -P, or JSON with a fallback to -P.")
@json_option
@click.pass_context
def sacct(ctx: click.Context, start: str, end: str, fmt: str, as_json: bool) -> None:
    """List jobs from accounting (sacct) in a time window."""
    client = _client(ctx)
    t0, t1 = parse_when(start), parse_when(end)
    kwargs: dict[str, Any] = {}
    if fmt != "auto":
        from .cli_backend import CliSlurmClient

        if not isinstance(client, CliSlurmClient):
            raise click.UsageError("--format applies to the cli backend only")
        kwargs["use_json"] = fmt == "json"
    result = client.accounting(t0, t1, **kwargs)
    if as_json:
        emit_json(result)
        return

    def ts(t: int | None) -> str:
        if t is None:
            return "-"
        return datetime.fromtimestamp(t, timezone.utc).strftime("%m-%d %H:%M:%S")

    rows = [
        (j.job_id, j.state, j.user, ts(j.submit_time), ts(j.start_time), ts(j.end_time),
         j.alloc.nodes or j.req.nodes or "-", j.alloc.gpus or j.req.gpus or 0,
         j.node_list or "-", j.name[:24])
        for j in result
    ]
    table(["JOBID", "STATE", "USER", "SUBMIT", "START", "END", "NODES", "GPUS", "NODELIST",
            "NAME"], rows)


@slurm.command()
@click.pass_context
def check(ctx: click.Context) -> None:
    """Check that every read rlsched needs works, and summarise the cluster."""
    client = _client(ctx)
    cfg = client.config()
    nodes_ = client.nodes()
    tree = client.topology()
    jobs_ = client.jobs()
    acct = client.accounting(datetime.now(timezone.utc) - timedelta(hours=1),
                             datetime.now(timezone.utc))
    gpus = sum(n.gpus for n in nodes_)
    up = sum(1 for n in nodes_ if n.available)
    click.echo(f"backend   {client.backend} (timeout {client.timeout:g} s)")
    click.echo(f"cluster   {cfg.cluster_name}, Slurm {cfg.slurm_version}, {cfg.priority_type},"
               f" {cfg.scheduler_type}, {cfg.select_type}")
    click.echo(f"nodes     {len(nodes_)} ({up} available), {sum(n.cpus for n in nodes_)} CPUs,"
               f" {gpus} GPUs ({sum(n.alloc_gpus for n in nodes_)} allocated)")
    leaves = tree.leaves
    click.echo(f"topology  {len(tree.switches)} switches, {len(leaves)} leaves"
               + (f", root {tree.root.name}" if tree.root else " (no topology/tree)"))
    pending = sum(1 for j in jobs_ if j.is_pending)
    click.echo(f"jobs      {pending} pending, {len(jobs_) - pending} running")
    click.echo(f"sacct     {len(acct)} jobs in the last hour")
    if cfg.priority_type != "priority/multifactor":
        click.echo("warning   PriorityType is not priority/multifactor: SiteFactor has no effect")
    click.echo("ok")
