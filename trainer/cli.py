"""``rlsched simulate`` and ``rlsched compare``: replay history under a scheduling policy.

Both need only the runtime install (numpy, click, the store). PNG plots are drawn when
matplotlib is importable (the ``train`` extra); otherwise they are skipped with a note.

Configuration has one source of defaults, :class:`SimulateConfig`; click options left
unset keep its values, and the resolved configuration (with the scheduler options and
priority settings actually used) is written as ``config.json`` next to the outputs.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import click

from slurm_plugin.when import parse_span, parse_when

from . import numerics
from .sim.limits import MISSING_LIMITS
from .sim.placement import PLACEMENTS
from .sim.policies import BASELINES
from .sim.slurm import BF_PLANS
from .sim.speed import SPEED_MODELS

__all__ = ["SimulateConfig", "build_sim", "check_bf_plan", "compare", "load_input",
           "replay_baseline", "resolve", "run_baselines", "simulate"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SimulateConfig:
    """Configuration of ``rlsched simulate`` / ``rlsched compare`` (defaults live here).

    Attributes:
        trace: Trace file to replay (SWF, ANL SWF or Philly-style CSV); or ``db`` and
            ``cluster``.
        db: Store URL or SQLite file to read jobs from (with ``cluster``).
        cluster: Cluster name in the store.
        policy: Baseline to replay (``simulate``; see ``trainer.sim.policies.BASELINES``).
        config: Saved ``scontrol show config`` output: priority weights and scheduler
            parameters of "Slurm as configured" (Slurm's defaults without it).
        out: Directory for metrics JSON, the resolved config and plots (none: no files).
        json: Print the metrics as JSON instead of a table.
        since: Slice start: ISO date/time (UTC) or epoch seconds (default: first job).
        window: Slice length (``7d``, ``12h``...).
        limit: Replay at most this many jobs (the first by submit time).
        nodes: Nodes of a trace's synthetic cluster (default: from the header).
        gpus_per_node: GPUs per node of a trace's synthetic cluster.
        cpus_per_node: CPUs per node of a trace's synthetic cluster.
        nodes_per_leaf: Nodes per leaf switch of a synthetic cluster.
        default_time_limit: Time limit (s) of jobs whose record has none (default: their
            recorded run time, a perfect estimate).
        missing_limits: Time limits of a trace that records none (:mod:`trainer.sim.limits`):
            ``run`` (each job's run time) or ``users`` (modelled user requests, which the
            policy sees as limits).
        bf_interval: Seconds between backfill passes (0: every event); default from
            the config, else Slurm's 30.
        bf_resolution: Backfill time resolution, s (default: config, else 60).
        bf_window: Backfill planning window in minutes (default: config, else 1440).
        bf_max_job_test: Jobs tested per backfill pass (default: config, else 500).
        bf_plan: Which blocked jobs backfill protects (``SchedulerOptions.bf_plan``):
            ``easy`` (the first of each partition; default) or ``conservative`` (every
            job it tests, as Slurm's backfill plans; whole-node histories only).
        placement: Node selection (``trainer.sim.placement.PLACEMENTS``: ``tree``,
            topology/tree best fit; ``linear``; ``pack``; ``gandiva``; ``random``) of the
            baselines that do not name their own (``gandiva``, ``sched2-pack`` do).
        speed_model: How run times depend on placement (``trainer.sim.speed``):
            ``none`` (as recorded), ``locality`` (slower when spread over servers and
            leaf switches) or ``bandwidth`` (also slower on links shared with others).
        seed: Seed of the replay's random generator.
    """

    trace: str | None = None
    db: str | None = None
    cluster: str | None = None
    policy: str = "slurm"
    config: str | None = None
    out: str | None = None
    json: bool = False
    since: str | None = None
    window: str | None = None
    limit: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None
    nodes_per_leaf: int = 4
    default_time_limit: int | None = None
    missing_limits: str = "run"
    bf_interval: int | None = None
    bf_resolution: int | None = None
    bf_window: int | None = None
    bf_max_job_test: int | None = None
    bf_plan: str | None = None
    placement: str = "tree"
    speed_model: str = "none"
    seed: int = 0


def resolve(**overrides: Any) -> SimulateConfig:
    """The defaults of :class:`SimulateConfig` with the options that were given."""
    names = {f.name for f in fields(SimulateConfig)}
    return SimulateConfig(**{k: v for k, v in overrides.items() if k in names and v is not None})


# ---------------------------------------------------------------------------- options
#: ``--missing-limits`` (:mod:`trainer.sim.limits`), on every command that reads jobs.
missing_limits_option = click.option(
    "--missing-limits", type=click.Choice(MISSING_LIMITS),
    help="Time limits of a trace that records none: 'run', each job's run time (a perfect"
         " estimate the policy does not see; the default), or 'users', modelled user"
         " requests (overestimated, rounded to the usual steps) that backfill, the"
         " baselines and the policy all see.")


def _input_options(fn: F) -> F:
    opts = [
        click.option("--trace", type=click.Path(exists=True, dir_okay=False),
                     help="Trace file to replay: SWF, ANL SWF (Theta) or Philly-style CSV."),
        click.option("--db", envvar="RLSCHED_DB", default=None,
                     help="Store URL or SQLite file to read jobs from (with --cluster);"
                          " default $RLSCHED_DB."),
        click.option("--cluster", help="Cluster name in the store (with --db)."),
        click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
                     help="Saved 'scontrol show config' output: priority weights and"
                          " scheduler parameters (Slurm's defaults without it)."),
        click.option("--out", type=click.Path(file_okay=False),
                     help="Directory for metrics JSON, config.json and PNG plots."),
        click.option("--json", "json_", is_flag=True, default=None,
                     help="Print the metrics as JSON instead of a table."),
        click.option("--since", help="Slice start: ISO date/time (UTC) or epoch seconds"
                                     " (default: the first job)."),
        click.option("--window", help="Slice length from --since, e.g. 7d, 12h."),
        click.option("--limit", type=click.IntRange(min=0),
                     help="Replay at most this many jobs (the first by submit time)."),
        click.option("--nodes", type=click.IntRange(min=1),
                     help="Nodes of a trace's synthetic cluster (default: from the header)."),
        click.option("--gpus-per-node", type=click.IntRange(min=0),
                     help="GPUs per node of a trace's synthetic cluster (SWF 0, Philly 8)."),
        click.option("--cpus-per-node", type=click.IntRange(min=1),
                     help="CPUs per node of a trace's synthetic cluster (default: header)."),
        click.option("--nodes-per-leaf", type=click.IntRange(min=1),
                     help="Nodes per leaf switch of a synthetic cluster (default 4)."),
        click.option("--default-time-limit", type=click.IntRange(min=1),
                     help="Time limit (s) of jobs without one (default: their run time)."),
        missing_limits_option,
        click.option("--bf-interval", type=click.IntRange(min=0),
                     help="Seconds between backfill passes, 0: every event (default: config,"
                          " else 30)."),
        click.option("--bf-resolution", type=click.IntRange(min=1),
                     help="Backfill time resolution in s (default: config, else 60)."),
        click.option("--bf-window", type=click.IntRange(min=1),
                     help="Backfill window in minutes (default: config, else 1440)."),
        click.option("--bf-max-job-test", type=click.IntRange(min=1),
                     help="Pending jobs tested per backfill pass (default: config, else 500)."),
        click.option("--bf-plan", type=click.Choice(list(BF_PLANS)),
                     help="Which jobs backfill protects: easy (the first blocked job of"
                          " each partition, default) or conservative (every job it tests"
                          " that cannot start, as Slurm's sched/backfill plans; whole-node"
                          " histories only)."),
        click.option("--placement", type=click.Choice(list(PLACEMENTS)),
                     help="Node selection of baselines that name none: topology/tree best"
                          " fit (default), linear, pack, gandiva or random."),
        click.option("--speed-model", type=click.Choice(list(SPEED_MODELS)),
                     help="How run times depend on placement: none (as recorded, default),"
                          " locality (slower when spread over servers and leaf switches,"
                          " per job sensitivity) or bandwidth (locality, plus slower on"
                          " links shared with other jobs)."),
        click.option("--seed", type=int, help="Seed of the replay's random generator."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _items(text: str, example: str, hint: str | None = None) -> list[str]:
    """The non-empty items of a comma-separated option (click.BadParameter: none).

    ``hint``: the option the error names (``None``: the one click is parsing).
    """
    items = [t for t in (s.strip() for s in text.split(",")) if t]
    if not items:
        raise click.BadParameter(f"give at least one, e.g. {example}", param_hint=hint)
    return items


def _when(value: str) -> int:
    v = value.strip()
    if v.isdigit():
        return int(v)
    return int(parse_when(v).timestamp())


def _span(value: str) -> int:
    return int(parse_span(value).total_seconds())


# ---------------------------------------------------------------------------- running
@dataclass
class _Prepared:
    cfg: SimulateConfig
    source: str
    rejected: dict[str, int]
    cluster: Any
    jobs: Any
    options: Any
    priority: Any
    slurm_config: str | None


def load_input(src: Any) -> tuple[Any, Any, Any]:
    """The jobs and Slurm settings a command's input options name.

    ``src`` has the input options as attributes (``trace`` or ``db``/``cluster``,
    ``since``, ``window``, ``limit``, ``nodes``, ``gpus_per_node``, ``cpus_per_node``,
    ``nodes_per_leaf``, ``missing_limits``, ``config``): :class:`SimulateConfig` and
    ``rlsched train``'s options both do.

    Returns:
        ``(load.Input, SchedulerOptions, PrioritySettings)``; Slurm's defaults without
        ``config``.

    Raises:
        click.UsageError: If neither or both of a trace and a store cluster are given.
        click.ClickException: On a file, store or configuration error (one line).
    """
    from slurm_plugin.slurm.errors import SlurmError

    from .sim import load
    from .sim.slurm import PrioritySettings, SchedulerOptions, read_config

    if (src.trace is None) == (src.cluster is None):
        raise click.UsageError("give either --trace FILE or --db URL --cluster NAME")
    since = _when(src.since) if src.since else None
    window = _span(src.window) if src.window else None
    try:
        if src.trace is not None:
            inp = load.from_trace(src.trace, num_nodes=src.nodes,
                                  gpus_per_node=src.gpus_per_node,
                                  cpus_per_node=src.cpus_per_node,
                                  nodes_per_leaf=src.nodes_per_leaf, since=since,
                                  window=window, limit=src.limit,
                                  missing_limits=src.missing_limits)
        else:
            from db.session import StoreError

            try:
                inp = load.from_store(src.db, str(src.cluster), since=since, window=window,
                                      limit=src.limit, nodes_per_leaf=src.nodes_per_leaf,
                                      missing_limits=src.missing_limits)
            except StoreError as exc:
                raise click.ClickException(str(exc).splitlines()[0]) from None
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    opts: Any = SchedulerOptions()
    prio: Any = PrioritySettings()
    if src.config:
        try:
            opts, prio, _ = read_config(src.config)
        except (OSError, ValueError, SlurmError) as exc:
            raise click.ClickException(f"{src.config}: {exc}") from None
    return inp, opts, prio


def check_bf_plan(opts: Any, jobs: Any, cluster: Any) -> Any:
    """``opts`` (``SchedulerOptions``) when its backfill plan can replay ``jobs``.

    Raises:
        click.ClickException: ``--bf-plan conservative`` on jobs it does not model (jobs
            sharing nodes, partitions holding only some nodes), saying what to use.
    """
    if opts.bf_plan == "conservative":
        from .sim.engine import conservative_unfit

        why = conservative_unfit(jobs, cluster)
        if why:
            raise click.ClickException(f"--bf-plan conservative: {why};"
                                       " use --bf-plan easy (the default)")
    return opts


def _prepare(cfg: SimulateConfig) -> _Prepared:
    from .sim.state import Cluster, build_jobs

    inp, opts, prio = load_input(cfg)
    over: dict[str, Any] = {k: v for k, v in (("bf_interval", cfg.bf_interval),
                              ("bf_resolution", cfg.bf_resolution),
                              ("bf_max_job_test", cfg.bf_max_job_test),
                              ("bf_plan", cfg.bf_plan)) if v is not None}
    if cfg.bf_window is not None:
        over["bf_window"] = cfg.bf_window * 60
    opts = replace(opts, placement=cfg.placement, **over)
    cluster = Cluster.from_spec(inp.spec)
    jobs = build_jobs(inp.records, cluster, default_time_limit=cfg.default_time_limit)
    if jobs.n == 0:
        raise click.ClickException(f"{inp.source}: no job to replay"
                                   f" (skipped: {dict(jobs.skipped) or 'none'})")
    opts = check_bf_plan(opts, jobs, cluster)
    return _Prepared(cfg, inp.source, dict(inp.rejected), cluster, jobs, opts, prio,
                     cfg.config)


def replay_baseline(name: str, jobs: Any, cluster: Any, priority: Any, options: Any,
                    eng: Any, wrap: Callable[[Any], Any] | None = None) -> Any:
    """One baseline's replay of ``jobs``: a ``SimResult`` named after it.

    The baseline's policy, backfill setting and placement come from
    :meth:`trainer.sim.policies.Baseline.build`; ``wrap``, if given, returns the policy
    to replay in its place (e.g. behind the helper's starvation guard).
    """
    from .sim.engine import Simulator

    policy, opts = BASELINES[name].build(priority, options)
    if wrap is not None:
        policy = wrap(policy)
    r = Simulator(jobs, cluster, policy, opts, eng).run()
    r.policy = name
    return r


def run_baselines(prep: _Prepared, names: list[str], *, progress: bool = False
                  ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Replay each baseline; returns the results and their metrics by name."""
    from .sim import metrics
    from .sim.engine import EngineOptions

    results: dict[str, Any] = {}
    ms: dict[str, dict[str, Any]] = {}
    eng = EngineOptions(seed=prep.cfg.seed, speed_model=prep.cfg.speed_model)

    def one(name: str) -> None:
        r = replay_baseline(name, prep.jobs, prep.cluster, prep.priority, prep.options, eng)
        results[name] = r
        m = metrics.compute(r)
        m["rejected"] = prep.rejected
        m["source"] = prep.source
        ms[name] = m

    if progress:
        with click.progressbar(names, label="replaying", file=sys.stderr,
                               item_show_func=lambda n: n or "") as bar:
            for name in bar:
                one(name)
    else:
        for name in names:
            one(name)
    return results, ms


def _resolved(prep: _Prepared, names: list[str]) -> dict[str, Any]:
    from .sim.speed import make_speed_model

    c = prep.cluster
    return {
        "command": dataclasses.asdict(prep.cfg),
        "input": {"source": prep.source, "rejected": prep.rejected, "jobs": prep.jobs.n,
                  "skipped": dict(prep.jobs.skipped)},
        "cluster": {"name": c.name, "nodes": c.num_nodes, "cpus": c.total_cpus,
                    "gpus": c.total_gpus, "leaves": c.num_leaves, "has_tree": c.has_tree,
                    "partitions": list(c.part_names)},
        "scheduler": prep.options.to_dict(),
        "speed_model": make_speed_model(prep.cfg.speed_model).to_dict(),
        "priority": prep.priority.to_dict(),
        "baselines": {n: dataclasses.asdict(BASELINES[n]) for n in names},
        "numerics": numerics.describe(),
    }


def _write_outputs(prep: _Prepared, names: list[str], results: dict[str, Any],
                   ms: dict[str, dict[str, Any]], metrics_name: str) -> None:
    from .sim import metrics

    if not prep.cfg.out:
        return
    out = Path(prep.cfg.out)
    metrics.write_json(_resolved(prep, names), out / "config.json")
    data: Any = ms[names[0]] if len(names) == 1 else [ms[n] for n in names]
    metrics.write_json(data, out / metrics_name)
    paths = metrics.plot(results, out)
    if paths is None:
        click.echo("matplotlib not installed: no plots (pip install 'rlsched[train]')",
                   err=True)
    click.echo(f"wrote {out / metrics_name}, {out / 'config.json'}"
               + (f" and {len(paths)} plots" if paths else ""), err=True)


def _print_json(data: Any) -> None:
    from slurm_plugin.output import emit_json

    emit_json(data)


# ---------------------------------------------------------------------------- commands
@click.command("simulate")
@click.option("--policy", type=click.Choice(list(BASELINES)), default=None,
              help="Baseline to replay (default: slurm, Slurm as configured).")
@_input_options
def simulate(policy: str | None, json_: bool | None, **kwargs: Any) -> None:
    """Replay a trace or the store's history under one policy and print its metrics.

    Prints wait, JCT, bounded slowdown, utilisation, fragmentation, execution
    effectiveness, leaf locality and fairness; with --out also writes metrics.json,
    config.json and PNG plots (plots need matplotlib).
    """
    cfg = resolve(policy=policy, json=json_, **kwargs)
    prep = _prepare(cfg)
    results, ms = run_baselines(prep, [cfg.policy])
    m = ms[cfg.policy]
    _write_outputs(prep, [cfg.policy], results, ms, "metrics.json")
    if cfg.json:
        _print_json(m)
        return
    from slurm_plugin.output import table

    from .sim import metrics

    table(("metric", "value"), metrics.table_rows(m))


@click.command("compare")
@_input_options
def compare(json_: bool | None, **kwargs: Any) -> None:
    """Replay the same jobs under every baseline and print one comparison table.

    Baselines: slurm (as configured), fifo, sjf (with and without backfill), the seed
    heuristics sif, saf, dsif, lrf, spf, tetris, drf, random, the placements
    gandiva and sched2-pack, and sef (shortest run time estimated from the user's
    history, rlsched's own). With --out, writes compare.json (one metrics object per
    baseline), config.json and plots.
    """
    cfg = resolve(json=json_, **kwargs)
    prep = _prepare(cfg)
    names = list(BASELINES)
    results, ms = run_baselines(prep, names, progress=True)
    _write_outputs(prep, names, results, ms, "compare.json")
    if cfg.json:
        _print_json([ms[n] for n in names])
        return
    from slurm_plugin.output import table

    from .sim import metrics

    table(metrics.COMPARE_HEADERS, metrics.compare_rows([ms[n] for n in names]))


@click.command("build-sim")
@click.option("--force", is_flag=True, help="Rebuild even if a build matches the sources.")
@click.option("--check", is_flag=True,
              help="Only say which simulator this install runs (compiled or Python).")
def build_sim(force: bool, check: bool) -> None:
    """Compile the replay simulator with mypyc for faster replays (optional).

    The same sources, compiled to C extensions (about twice as fast on deep queues;
    the schedules are the same). Needs rlsched[native] (mypy, which brings mypyc) and a
    C compiler with the Python headers; takes about a minute. The build is cached by a
    hash of the sources and used only while it matches them; RLSCHED_SIM=python turns
    it off, RLSCHED_SIM=native requires it.
    """
    from .sim import native

    if check:
        st = native.status()
        where = f" ({st.path})" if st.path else ""
        click.echo(f"simulator: {'compiled' if st.active else 'Python'}{where};"
                   f" RLSCHED_SIM={st.mode}: {st.reason}")
        return
    click.echo(f"compiling {', '.join(native.MODULES)} with mypyc (about a minute)...",
               err=True)
    try:
        path = native.build(force=force)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"compiled simulator in {path}; new processes use it"
               " (check: rlsched build-sim --check)")
