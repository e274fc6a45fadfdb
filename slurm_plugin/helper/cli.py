"""``rlsched helper ...``: run the compiled policy next to slurmctld, and look at what it did.

``run`` (the daemon: one cycle every ``interval`` seconds), ``once`` (one cycle, then a
summary), ``status``, ``log`` (the audit log), ``reset`` (put the helper's own site
factors back to 0 and clear its steering) and ``config`` (the documented example, or the
effective configuration). The configuration comes from ``--config`` (default
``/etc/rlsched/helper.toml``); every key is also an option of ``run``, ``once`` and
``config``, which overrides the file.
"""

from __future__ import annotations

import functools
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any

import click

from ..output import emit_json, table
from ..slurm.client import make_client
from ..slurm.errors import SlurmError
from ..slurm.types import PENDING, RUNNING
from ..when import parse_when
from .actuate import Actuator, StoreAudit, plan_reset
from .config import DEFAULT_PATH, ConfigError, HelperConfig, example_toml, load_config
from .cycle import CycleReport, Helper, run_forever
from .hint import HintServer
from .logs import EventLog
from .metrics import Metrics, MetricsServer
from .state import HelperState, LockedError, lock

__all__ = ["helper"]

_F = Callable[..., Any]


def _when(t: int | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _option(f: Any) -> Callable[[_F], _F]:
    name = "--" + f.name.replace("_", "-")
    help_text = f"{f.metadata['help']} [config: {f.name}]"
    typ = f.type if isinstance(f.type, str) else f.type.__name__
    choices = f.metadata.get("choices")
    if typ == "bool":
        return click.option(f"{name}/--no-{f.name.replace('_', '-')}", f.name, default=None,
                            help=help_text)
    if choices:
        return click.option(name, f.name, type=click.Choice(sorted(choices)), default=None,
                            help=help_text)
    if f.metadata.get("kind") == "duration":
        return click.option(name, f.name, type=str, default=None, metavar="SECONDS|SPAN",
                            help=help_text)
    ptype = {"int": int, "float": float, "str": str}[typ]
    return click.option(name, f.name, type=ptype, default=None, help=help_text)


def config_options(func: _F) -> _F:
    """Add one option per configuration key (overrides the file)."""
    for f in reversed(fields(HelperConfig)):
        func = _option(f)(func)
    return func


_CONFIG_HELP = (f"The helper's TOML configuration (default: $RLSCHED_HELPER_CONFIG, else"
                f" {DEFAULT_PATH} if it exists, else built-in defaults).")
config_path_option = click.option("--config", "config_path", default=None, metavar="PATH",
                                  help=_CONFIG_HELP + " Overrides the group's --config.")


def _config(ctx: click.Context, overrides: dict[str, Any]) -> HelperConfig:
    return _config_and_source(ctx, overrides)[0]


def _config_and_source(ctx: click.Context, overrides: dict[str, Any]
                       ) -> tuple[HelperConfig, str | None]:
    path = overrides.pop("config_path", None) or ctx.obj
    try:
        return load_config(path, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _guard(func: _F) -> _F:
    """Turn the helper's expected failures into one-line errors."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (LockedError, SlurmError) as exc:
            raise click.ClickException(str(exc)) from None
        except Exception as exc:
            from db.session import StoreError

            if isinstance(exc, StoreError):
                raise click.ClickException(str(exc)) from None
            raise

    return wrapper


def _make(cfg: HelperConfig, log: EventLog, metrics: Metrics | None = None
          ) -> tuple[Helper, StoreAudit]:
    client = make_client(cfg.slurm_backend, timeout=cfg.slurm_timeout)
    holder: dict[str, Helper] = {}
    audit = StoreAudit(cfg.store, cluster=lambda: holder["h"].cluster_name
                       if "h" in holder else (cfg.cluster or None), timeout=cfg.store_timeout)
    try:
        helper_ = Helper(cfg, client=client, audit=audit, log=log, metrics=metrics,
                         history_source=audit.history)
    except ValueError as exc:  # an unreadable state file: the message says what to do
        raise click.ClickException(str(exc)) from None
    holder["h"] = helper_
    return helper_, audit


@click.group()
@click.option("--config", "config_path", default=None, metavar="PATH",
              envvar="RLSCHED_HELPER_CONFIG", help=_CONFIG_HELP)
@click.pass_context
def helper(ctx: click.Context, config_path: str | None) -> None:
    """Run the compiled policy next to slurmctld, and see what it did.

    In 'shadow' mode (the default) it computes, logs and audits what it would change and
    changes nothing; in 'enforce' mode it sets SiteFactor values inside a band and steers
    the head of the queue with ReqNodeList. Any error leaves Slurm in charge.
    """
    ctx.obj = config_path


@helper.command()
@config_path_option
@config_options
@click.pass_context
@_guard
def run(ctx: click.Context, **overrides: Any) -> None:
    """Run the helper: one cycle every 'interval' seconds, until SIGTERM/SIGINT.

    Logs one JSON line per cycle on stderr. With a model that fails verification it
    refuses to enforce, says why, stays idle and re-checks when the model file changes.
    """
    cfg = _config(ctx, overrides)
    log = EventLog(level=cfg.log_level)
    metrics = Metrics()
    stop = threading.Event()
    with lock(cfg.state_file):
        helper_, audit = _make(cfg, log, metrics)
        log.info("started", mode=cfg.mode, model=cfg.model, interval=cfg.interval,
                 band=[cfg.band_lo, cfg.band_hi], mapping=cfg.mapping, steering=cfg.steering,
                 state=cfg.state_file, pid=os.getpid())
        if helper_.ensure_model() is None and cfg.enforce:
            log.error("enforce_refused", reason=helper_.model_error,
                      effect="idle until the model file is fixed; no change is made")
        servers: list[Any] = []
        try:
            if cfg.metrics_port:
                ms = MetricsServer(metrics, cfg.metrics_address, cfg.metrics_port)
                ms.start()
                servers.append(ms)
                log.info("metrics_serving", url=f"http://{cfg.metrics_address}:{ms.port}/metrics")
            if cfg.hint_socket:
                hs = HintServer(cfg.hint_socket, helper_.answer_hint, timeout=cfg.hint_timeout,
                                workers=cfg.hint_workers, mode=cfg.hint_socket_mode,
                                on_result=lambda r: metrics.inc("hints_total", result=r))
                hs.start()
                servers.append(hs)
                log.info("hint_serving", socket=cfg.hint_socket)
            handlers = {}
            for sig in (signal.SIGTERM, signal.SIGINT):
                handlers[sig] = signal.signal(sig, lambda *_: stop.set())
            try:
                run_forever(helper_, stop)
            finally:
                for sig, old in handlers.items():
                    signal.signal(sig, old)
        finally:
            for s in reversed(servers):
                s.stop()
            audit.close()
            log.info("stopped", cycles=helper_.state.cycles, errors=helper_.state.errors)


def _print_report(rep: CycleReport, as_json: bool) -> None:
    if as_json:
        out = rep.summary()
        out["change_list"] = [c.describe() for c in rep.changes]
        out["failed_list"] = [{**c.describe(), "error": e} for c, e in rep.failed]
        emit_json(out)
        return
    s = rep.summary()
    state = "ok" if rep.ok else f"FAILED: {rep.error}"
    click.echo(f"cycle at {_when(rep.at)} UTC, mode {rep.mode}, model"
               f" {(rep.model_sha or '-')[:12]}: {state}")
    done = f"applied {s['applied']}" if rep.mode == "enforce" else "would be made"
    click.echo(f"pending {s['pending']} (scored {s['scored']}), running {s['running']},"
               f" nodes {s['nodes']}; changes {s['changes']} ({done}), failed {s['failed']},"
               f" deferred {s['deferred']}")
    if rep.changes:
        table(["JOB", "FIELD", "OLD", "NEW", "REASON"],
              [[c.job_id, c.field, c.text(c.old) or "-", c.text(c.new) or "-", c.reason]
               for c in rep.changes[:200]])
        if len(rep.changes) > 200:
            click.echo(f"... and {len(rep.changes) - 200} more (use --json)")


@helper.command()
@config_path_option
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
@_guard
def once(ctx: click.Context, as_json: bool, **overrides: Any) -> None:
    """Run one cycle and print what it did (or, in shadow mode, would do).

    Exits with status 1 when the cycle failed (the error is printed; nothing was changed
    after the failure).
    """
    cfg = _config(ctx, overrides)
    log = EventLog(level=cfg.log_level)
    with lock(cfg.state_file):
        helper_, audit = _make(cfg, log)
        try:
            rep = helper_.run_once()
        finally:
            audit.close()
    _print_report(rep, as_json)
    if not rep.ok:
        ctx.exit(1)


def _running(state_file: str) -> bool:
    try:
        with lock(state_file):
            return False
    except LockedError:
        return True
    except OSError:
        return False


@helper.command()
@config_path_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
@_guard
def status(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """Show mode, model, last cycle, counts of changes and errors (from the state file)."""
    cfg = _config(ctx, {"config_path": config_path})
    try:
        st = HelperState.load(cfg.state_file)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    info = {
        "config_mode": cfg.mode, "last_mode": st.mode or None, "model": cfg.model,
        "model_sha256": st.model_sha, "model_status": st.model_status or None,
        "running": _running(cfg.state_file), "pid": st.pid,
        "last_cycle_at": st.last_cycle_at, "last_cycle_ok_at": st.last_cycle_ok_at,
        "last_cycle_seconds": st.last_cycle_seconds, "cycles": st.cycles,
        "errors": st.errors, "consecutive_errors": st.consecutive_errors,
        "last_error": st.last_error, "last_error_at": st.last_error_at,
        "changes": dict(sorted(st.changes.items())),
        "steered_now": sorted(st.enforced.steer), "site_factors_set": len(st.enforced.site),
        "waiting_for_one_leaf": sorted(st.enforced.switches),
        "last_cycle": st.last_cycle, "state_file": cfg.state_file,
    }
    if as_json:
        emit_json(info)
        return
    if st.last_cycle_at is None:
        click.echo(f"no cycle recorded yet in {cfg.state_file}")
    run_text = f"running (pid {st.pid})" if info["running"] else "not running"
    click.echo(f"helper: {run_text}; mode {cfg.mode} (last cycle: {st.mode or '-'})")
    click.echo(f"model: {cfg.model} sha256 {(st.model_sha or '-')[:16]}"
               f" status {st.model_status or '-'}")
    secs = "-" if st.last_cycle_seconds is None else f"{st.last_cycle_seconds:.3f} s"
    click.echo(f"last cycle: {_when(st.last_cycle_at)} UTC ({secs}); last good:"
               f" {_when(st.last_cycle_ok_at)} UTC; cycles {st.cycles}")
    click.echo(f"errors: {st.errors} ({st.consecutive_errors} in a row); last:"
               f" {st.last_error or '-'}")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(st.changes.items())) or "none"
    click.echo(f"changes: {counts}")
    click.echo(f"now: {len(st.enforced.site)} site factors set, {len(st.enforced.steer)}"
               f" jobs steered, {len(st.enforced.switches)} asked to wait for one leaf switch")


@helper.command(name="log")
@config_path_option
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=50, show_default=True,
              help="Show at most this many entries (the latest).")
@click.option("--since", default=None, metavar="WHEN",
              help="Only entries at or after WHEN (2026-01-31, now-1d, now-2h...).")
@click.option("--job", "job_id", type=int, default=None, help="Only entries of this job.")
@click.option("--field", type=click.Choice(["site_factor", "req_nodes", "switches"]),
              default=None,
              help="Only changes of this field.")
@click.option("--mode", type=click.Choice(["enforce", "shadow", "failed", "reset"]),
              default=None, help="Only entries of this mode (shadow: would-be changes).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
@_guard
def log_cmd(ctx: click.Context, config_path: str | None, limit: int, since: str | None,
            job_id: int | None, field: str | None, mode: str | None, as_json: bool) -> None:
    """Show the helper's audit log: every change (job, field, old, new, model, time, mode)."""
    cfg = _config(ctx, {"config_path": config_path})
    t = int(parse_when(since).timestamp()) if since else None
    audit = StoreAudit(cfg.store)
    try:
        entries = audit.store().audit_log(limit, t, job_id=job_id, field=field, mode=mode)
    finally:
        audit.close()
    if as_json:
        emit_json(entries)
        return
    if not entries:
        click.echo("no audit entries")
        return
    table(["TIME (UTC)", "JOB", "FIELD", "OLD", "NEW", "MODE", "MODEL"],
          [[_when(e.created_at), e.job_id, e.field, e.old_value or "-", e.new_value or "-",
            e.mode, (e.model_sha or "-")[:12]] for e in entries])


@helper.command()
@config_path_option
@click.option("--since", default="now-30d", show_default=True, metavar="WHEN",
              help="Consider the helper's changes recorded at or after WHEN.")
@click.option("--dry-run", is_flag=True, help="Only show what would be reset.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@_guard
def reset(ctx: click.Context, config_path: str | None, since: str, dry_run: bool,
          yes: bool) -> None:
    """Put the helper's own site factors back to 0 and clear its steering and switch counts.

    Only pending jobs whose value is still the one the helper set (per the audit log)
    are touched; each reset is audited (mode 'reset'). The helper must not be running.
    """
    cfg = _config(ctx, {"config_path": config_path})
    log = EventLog(level=cfg.log_level)
    t = int(parse_when(since).timestamp())
    with lock(cfg.state_file):
        client = make_client(cfg.slurm_backend, timeout=cfg.slurm_timeout)
        audit = StoreAudit(cfg.store)
        try:
            store = audit.store()
            rows = [(e.job_id, e.field, e.mode, e.old_value, e.new_value)
                    for e in store.audit_log(None, t)]
            jobs = {j.job_id: j for j in client.jobs((PENDING, RUNNING))}
            changes, notes = plan_reset(rows, jobs)
            for n in notes:
                click.echo(n)
            if not changes:
                click.echo("nothing to reset")
                return
            table(["JOB", "FIELD", "NOW", "BECOMES"],
                  [[c.job_id, c.field, c.text(c.old) or "-", c.text(c.new) or "(cleared)"]
                   for c in changes])
            if dry_run:
                click.echo(f"dry run: {len(changes)} change(s) not made")
                return
            if not yes:
                click.confirm(f"reset {len(changes)} value(s)?", abort=True)
            audit.record(changes, mode="reset", model_sha=None,
                         at=int(datetime.now(timezone.utc).timestamp()))
            act = Actuator(client, (cfg.band_lo, cfg.band_hi), budget=3600.0,
                           max_consecutive_failures=10)
            res = act.apply(changes)
            st = HelperState.load(cfg.state_file)
            for c in res.applied:
                if c.field == "site_factor":
                    st.enforced.site.pop(c.job_id, None)
                elif c.field == "switches":
                    st.enforced.switches.pop(c.job_id, None)
                else:
                    st.enforced.steer.pop(c.job_id, None)
            st.count("reset", len(res.applied))
            st.save(cfg.state_file)
            for c, why in res.failed:
                click.echo(f"job {c.job_id} {c.field}: not reset: {why}", err=True)
            log.info("reset", applied=len(res.applied), failed=len(res.failed))
            click.echo(f"reset {len(res.applied)} value(s), {len(res.failed)} failed")
        finally:
            audit.close()


@helper.command(name="config")
@config_path_option
@click.option("--example", is_flag=True,
              help="Print a documented example with every key at its default.")
@config_options
@click.pass_context
@_guard
def config_cmd(ctx: click.Context, example: bool, **overrides: Any) -> None:
    """Print the documented example configuration, or the effective configuration."""
    if example:
        click.echo(example_toml(), nl=False)
        return
    cfg, source = _config_and_source(ctx, overrides)
    click.echo(f"# effective configuration (file: {source or 'none, built-in defaults'})")
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif f.name == "hint_socket_mode":
            text = f"0o{value:o}"
        else:
            text = repr(value)
        click.echo(f"{f.name} = {text}")
