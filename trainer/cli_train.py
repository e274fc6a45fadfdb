"""``rlsched train imitate|rl|all|ensemble``: learn a policy from a site's history.

- ``imitate``: DL²'s warm start: reconstruct the site's decisions and train the policy
  network to imitate them (:mod:`trainer.imitate`); writes ``imitation.pt`` and
  ``imitation.json`` (agreement on the held-out later period).
- ``rl``: improve a policy in the simulator (:mod:`trainer.rl`), from ``--init
  CHECKPOINT`` or random weights; writes ``best.pt``, ``last.pt``, ``state.pt`` (for
  ``--resume``), ``curves.json``/``curves.png``, ``summary.json``, and prints the
  validation window's comparison with the Slurm baseline and the best heuristic.
- ``all``: ``imitate`` then ``rl`` from the imitation weights, in one output folder.
- ``ensemble``: one model from several ``rl`` runs validated alike (e.g. other seeds):
  the mean of the nets of their best validations (:mod:`trainer.ensemble`).

Input is a trace (``--trace``) or the store (``--db``/``--cluster``), sliced with
``--since``/``--window``/``--limit`` (:mod:`trainer.sim.load`). Each command has one
dataclass of defaults (:class:`ImitateCommand`, :class:`RLCommand`, :class:`AllCommand`;
the RL loop's own defaults live in :class:`trainer.rl.TrainConfig`, the algorithms' in
their configs); options left unset keep them, and the resolved configuration is
written as ``config.json`` next to the outputs.

Which decisions to imitate (``--imitate-from``): ``history`` imitates the records'
own starts; ``slurm`` imitates a replay of the Slurm baseline (as configured by
``--config``) on the same jobs, for a history without a real schedule; ``auto`` (the
default) takes ``slurm`` when no record waited (a trace without wait times, such as
the Lublin model, records every job as starting at its submit time), else ``history``.
Any other baseline name of :data:`trainer.sim.policies.BASELINES` imitates a replay of
that baseline: a stronger teacher than the incumbent (DL² warm-starts from the
incumbent). SIF, SAF, DSIF and SPF order by the recorded run time, which the net only
sees estimated: imitating them teaches the net to approximate an oracle from its
features. SEF orders by that very estimate (the user's history), so the net can
imitate it exactly; SEAF by that estimate times the job's GPUs (CPUs). ``best``
replays every baseline that reads no recorded run time on the jobs before the test
period (never the test period) and imitates the one with the lowest mean bounded
slowdown (:func:`trainer.evaluate.pick_teacher`; the scores go into
``imitation.json``): which order suits a site depends on its workload (``sef`` on
Theta, ``seaf`` on the Lublin model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from slurm_plugin.helper.decide import STARVATION_ORDERS
from slurm_plugin.when import parse_span

from . import numerics
from .cli import check_bf_plan, missing_limits_option
from .sim.slurm import BF_PLANS

if TYPE_CHECKING:
    from .rl import TrainConfig

__all__ = ["AllCommand", "ImitateCommand", "RLCommand", "parse_budget", "train"]

F = TypeVar("F", bound=Callable[..., Any])

def _imitate_from() -> tuple[str, ...]:
    from .sim.policies import BASELINES

    return ("auto", "best", "history", *BASELINES)


@dataclass(frozen=True)
class InputOptions:
    """Where the history comes from (shared by every ``train`` command).

    Attributes:
        trace: Trace file (SWF, ANL SWF or Philly-style CSV); or ``db`` and ``cluster``.
        db: Store URL or SQLite file (with ``cluster``).
        cluster: Cluster name in the store.
        since: Slice start: ISO date/time (UTC) or epoch seconds (default: the first job).
        window: Slice length (``30d``, ``12h``...).
        limit: At most this many jobs (the first by submit time).
        nodes: Nodes of a trace's synthetic cluster (default: from the header).
        gpus_per_node: GPUs per node of a trace's synthetic cluster.
        cpus_per_node: CPUs per node of a trace's synthetic cluster.
        nodes_per_leaf: Nodes per leaf switch of a synthetic cluster.
        default_time_limit: Time limit (s) of jobs whose record has none (default: the
            recorded run time, which the policy does not see as a limit).
        missing_limits: Time limits of a trace that records none (:mod:`trainer.sim.limits`):
            ``run`` (each job's run time) or ``users`` (modelled user requests, which the
            policy sees as limits).
        config: Saved ``scontrol show config``: the Slurm baseline's priority weights and
            scheduler parameters (Slurm's defaults without it).
        bf_plan: The backfill of every replay (``SchedulerOptions.bf_plan``: the teacher's,
            Slurm's for ``--warm-start`` and for the references, validation's): ``easy``
            (default) or ``conservative`` (every blocked job reserved, as Slurm plans;
            whole-node histories only). ``train rl --actions queue`` episodes reserve
            as it plans too (``EnvConfig.bf_plan``; ``fits`` reserves nothing).
        out: Output folder.
        seed: Seed of everything random (weights, windows, actions, replays).
        progress: Progress bars (default: when stderr is a terminal).
    """

    trace: str | None = None
    db: str | None = None
    cluster: str | None = None
    since: str | None = None
    window: str | None = None
    limit: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None
    nodes_per_leaf: int = 4
    default_time_limit: int | None = None
    missing_limits: str = "run"
    config: str | None = None
    bf_plan: str = "easy"
    out: str = "rlsched-train"
    seed: int = 0
    progress: bool | None = None


@dataclass(frozen=True)
class ImitateCommand(InputOptions):
    """``rlsched train imitate`` (:class:`trainer.imitate.ImitationConfig` fills the rest).

    Attributes:
        epochs: Passes over the training decisions (``None``: ImitationConfig's).
        hidden: Width of the network (``None``: ImitationConfig's).
        max_decisions: Decisions reconstructed at most (``None``: ImitationConfig's).
        imitate_from: ``auto``, ``best``, ``history`` or a baseline name (module
            docstring).
        teacher_prior: Which prior the teacher fits (``None``: the default;
            :attr:`trainer.imitate.ImitationConfig.teacher_prior`).
        speed_model: How run times depend on placement in the replay of a baseline
            (:data:`trainer.sim.speed.SPEED_MODELS`).
        starvation_limit: With ``imitate_from`` ``best``: the candidates replay behind
            the helper's starvation guard at this limit (seconds; 0, the default:
            unguarded), ``starvation_order`` and ``express_limit`` as the helper's.
    """

    epochs: int | None = None
    hidden: int | None = None
    max_decisions: int | None = None
    imitate_from: str = "auto"
    teacher_prior: bool | None = None
    speed_model: str = "none"
    starvation_limit: float = 0.0
    starvation_order: str = "age"
    express_limit: float = 0.0


@dataclass(frozen=True)
class RLCommand(InputOptions):
    """``rlsched train rl`` (the loop's defaults are :class:`trainer.rl.TrainConfig`'s).

    Attributes:
        algo: Algorithm (``trainer.rl.ALGORITHMS``).
        budget: ``N`` env steps, ``Nu`` updates, or a wall time (``10m``, ``1h``).
        init: Checkpoint to start from (default: random weights).
        resume: Continue the run saved in ``out`` exactly.
        workers: Rollout workers (local processes; Ray actors with ``ray_address``).
        ray_address: Ray cluster address (needs ``rlsched[dist]``).
        algo_opts: ``KEY=VALUE`` settings of the algorithm's config.
        train: Overrides of :class:`trainer.rl.TrainConfig` fields.
    """

    algo: str = "ppo"
    budget: str = "100000"
    init: str | None = None
    resume: bool = False
    workers: int = 1
    ray_address: str | None = None
    algo_opts: tuple[str, ...] = ()
    train: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class AllCommand(RLCommand):
    """``rlsched train all``: imitation, then RL from its weights.

    Attributes:
        epochs: Imitation epochs (``None``: ImitationConfig's).
        max_decisions: Imitation decisions at most (``None``: ImitationConfig's).
        imitate_from: ``auto``, ``best``, ``history`` or a baseline name.
        teacher_prior: Which prior the teacher fits (as :class:`ImitateCommand`).
        hidden: Width of the network (``None``: ImitationConfig's).
    """

    epochs: int | None = None
    max_decisions: int | None = None
    imitate_from: str = "auto"
    teacher_prior: bool | None = None
    hidden: int | None = None


def parse_budget(text: str) -> dict[str, Any]:
    """``"20000"`` (env steps), ``"50u"`` (updates) or a span (``"10m"``) as TrainConfig fields.

    Raises:
        click.BadParameter: On anything else.
    """
    v = text.strip().lower()
    if v.isdigit() and int(v) > 0:
        return {"budget_steps": int(v), "budget_updates": None, "max_seconds": None}
    if v.endswith("u") and v[:-1].isdigit() and int(v[:-1]) > 0:
        return {"budget_steps": None, "budget_updates": int(v[:-1]), "max_seconds": None}
    try:
        secs = parse_span(v).total_seconds()
    except click.BadParameter:
        raise click.BadParameter(
            f"{text!r}: give env steps (20000), updates (50u) or a wall time (10m, 1h)",
            param_hint="--budget") from None
    return {"budget_steps": None, "budget_updates": None, "max_seconds": float(secs)}


# ---------------------------------------------------------------------------- options
#: ``--speed-model`` (the names of :data:`trainer.sim.speed.SPEED_MODELS`, not imported here)
_SPEED_MODEL = click.Choice(["none", "locality", "bandwidth"])
#: ``--val-metric`` (the keys of :data:`trainer.rl.config.VAL_METRICS`, not imported here)
_VAL_METRIC = click.Choice(["bsld_mean", "wait_mean", "wait_p99", "jct_mean",
                            "effectiveness_mean", "jain_bsld", "reward_sum"])


def _warmup_jobs(value: Any) -> int | str:
    """``--val-warmup``: digits (a number of jobs), ``eval`` or ``auto``.

    (``TrainConfig`` checks the value.)
    """
    from .rl.config import AUTO_WARMUP, EVAL_WARMUP

    text = str(value).strip().lower()
    if text.isdigit():
        return int(text)
    if text in (EVAL_WARMUP, AUTO_WARMUP):
        return text
    raise ValueError(f"{value!r} is neither a number of jobs (0 or more) nor"
                     f" {EVAL_WARMUP!r} nor {AUTO_WARMUP!r}")


_warmup_jobs.__name__ = "n|eval|auto"  # click's metavar of a function type


_TRAIN_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    # (option, TrainConfig field, click type, help)
    ("--hidden", "hidden", click.IntRange(min=1),
     "Width of a randomly initialised network (default 64)."),
    ("--episode-jobs", "episode_jobs", click.IntRange(min=1),
     "Jobs per training episode window (default 256)."),
    ("--val-jobs", "val_jobs", click.IntRange(min=1),
     "Jobs of the validation window (default 1000, cut to the validation period)."),
    ("--val-warmup", "val_warmup", _warmup_jobs,
     "Jobs before the validation window replayed first, not counted, or 'eval': as many"
     " as evaluate replays before the test period and tune-guard before each validation"
     " window (10% of the jobs), so that the checkpoint is chosen on as full a queue as"
     " it is tested on. Default 'auto': 'eval' with --val-deployed, else 500."),
    ("--max-jobs", "max_jobs", click.IntRange(min=1),
     "Pending jobs the policy sees per decision (default 64)."),
    ("--reward", "reward", click.Choice(["bsld", "wait", "jct", "util", "effectiveness",
                                         "backlog", "stranding"]),
     "Reward (default bsld: minus the bounded slowdowns; backlog: minus the"
     " area-weighted wait; stranding: minus the capacity idle while jobs wait)."),
    ("--backlog", "backlog", click.FloatRange(min=0),
     "Weight of a backlog term added to the reward: minus the waiting jobs' areas (share"
     " of the machine x run time), 1 weighing waiting as much in total as bsld does."
     " It prices holding wide jobs back, which lowers utilisation on a finite history"
     " (default 0: none)."),
    ("--stranding", "stranding", click.FloatRange(min=0),
     "Weight of a stranding term added to the reward: minus the share of the machine"
     " idle while some job waits (GPUs, else nodes), 1 pricing idle capacity the size of"
     " an average job like one average job waiting. It prices the holes that serving"
     " small jobs first leaves on a saturated queue (default 0: none)."),
    ("--fairness", "fairness", click.FloatRange(min=0),
     "Weight of the end-of-episode fairness term, Jain's index of the users' bounded"
     " slowdowns (default 0; a history without user ids has one user, and it warns)."),
    ("--speed-model", "speed_model", _SPEED_MODEL,
     "How run times depend on placement (default none)."),
    ("--eval-every", "eval_every", click.IntRange(min=1),
     "Updates between validations (default 5)."),
    ("--checkpoint-every", "checkpoint_every", click.IntRange(min=1),
     "Updates between saves of the resumable state (default 10)."),
    ("--keep-checkpoints/--no-keep-checkpoints", "keep_checkpoints", None,
     "Also keep the net of every validation as checkpoints/update-NNNNN.pt, with its"
     " validation figures, to evaluate or choose any of them later (default: off; best.pt"
     " and last.pt are kept anyway)."),
    ("--ensemble", "ensemble", click.IntRange(min=0),
     "Also write ensemble.pt: the mean of the nets of the K checkpoints after the start"
     " that validated best, ranked as best.pt is chosen, which evaluates and exports like"
     " best.pt and costs K times one net's inference. Keeps the checkpoints. On Lublin"
     " behind the helper's guard, 4 kept every quality line in 5 of 8 runs, best.pt in 3"
     " (admin guide, section 3). Default 0: none."),
    ("--group", "group", click.IntRange(min=1),
     "Episodes a worker runs in lockstep with batched inference (default 4)."),
    ("--warm-start/--cold-start", "warm_start", None,
     "Start training episodes from the queue and running jobs the Slurm baseline's"
     " replay had at the window's first arrival (--warm-start), as a deployed policy"
     " meets them, or on an empty cluster (--cold-start, default)."),
    ("--actions", "actions", click.Choice(["fits", "queue"]),  # trainer.env.ACTIONS
     "What the agent chooses among in the simulator: fits (default), the jobs that fit"
     " now, or hold; queue, every pending job, as an order of the queue that Slurm walks"
     " with backfill as --bf-plan plans it (EASY: the first job picked that does not fit"
     " is reserved; conservative: every one that cannot start), as the helper deploys"
     " it, so that its scores of the jobs that do not fit are trained too."),
    ("--hold/--no-hold", "hold", None,
     "Let the agent hold while a job fits (default); --no-hold trains a work-conserving"
     " agent, as deployed (Slurm starts what fits in the policy's order)."),
    ("--take-forced/--no-take-forced", "take_forced", None,
     "Let the simulator take every pick that is the only legal one itself, so that the"
     " agent meets only real choices: the same schedules in fewer steps (about one in"
     " eight fewer in conservative queue order). Off by default: the discount counts"
     " steps, so training changes."),
    ("--val-deployed", "val_deployed", None,
     "Pick the best checkpoint by the net as deployed (ordering Slurm's queue, backfill"
     " as --bf-plan plans it, in the batch engine) instead of greedy in the env."),
    ("--val-metric", "val_metric", _VAL_METRIC,
     "The validation figure that picks the best checkpoint (default bsld_mean; with"
     " --val-bounds, among checkpoints keeping the same bounds). wait_p99 picks the"
     " lowest 99th percentile wait; reward_sum needs the greedy validation."),
    ("--val-bounds", "val_bounds", None,
     "With --val-deployed: a checkpoint that keeps Slurm's bounds on the validation window"
     " beats one that does not, in the order tune-guard keeps them: p99 wait at most 10%"
     " above Slurm's, then a mean bounded slowdown not above Slurm's, then utilisation"
     " not lower than Slurm's less --val-util-slack."),
    ("--val-util-slack", "val_util_slack", click.FloatRange(min=0, max=1, max_open=True),
     "With --val-bounds: a checkpoint up to this share below Slurm's utilisation on the"
     " validation window still keeps that bound (default 0.002, tune-guard's"
     " --util-slack; 0: not lower, as the quality target reads it)."),
    ("--rank-all/--no-rank-all", "rank_all", None,
     "With --val-deployed: rank every pending job by its raw score (default, as the"
     " helper's rank_all), or the jobs that fit now first."),
    ("--starvation-limit", "starvation_limit", click.FloatRange(min=0),
     "With --val-deployed or --train-guard: the helper's starvation guard, seconds of"
     " waiting after which a job goes first (default 172800, the helper's; 0: none)."),
    ("--starvation-order", "starvation_order", click.Choice(sorted(STARVATION_ORDERS)),
     "With --val-deployed or --train-guard: how that guard orders the starving jobs, as"
     " the helper's starvation_order: age (oldest first, default) or policy (the net's"
     " order)."),
    ("--express-limit", "express_limit", click.FloatRange(min=0),
     "With --val-deployed or --train-guard: the guard's express lane, as the helper's"
     " express_limit, seconds: a job whose time limit is at most this goes above every"
     " other, starving ones included (default 0: none; needs a guard)."),
    ("--score-resolution", "score_resolution", click.FloatRange(min=0),
     "With --val-deployed: round the net's scores to multiples of this, as the helper's"
     " score_resolution (jobs scored that close tie, the older first; default 0: exact)."),
    ("--rescore", "rescore", click.FloatRange(min=1),
     "With --val-deployed: seconds between the net's re-rankings of the whole queue, as"
     " the helper's interval (default 15, the helper's default)."),
    ("--train-guard/--no-train-guard", "train_guard", None,
     "Train behind that guard too: in the env, starving jobs start first and the others"
     " only around the oldest one's reservation, as the helper deploys the net (default:"
     " off)."),
    ("--place", "place", None,
     "Let the policy pick the node set of each job too (default: Slurm's tree best fit)."),
)


def _input_options(fn: F) -> F:
    opts = [
        click.option("--trace", type=click.Path(exists=True, dir_okay=False),
                     help="Trace file: SWF, ANL SWF (Theta) or Philly-style CSV."),
        click.option("--db", envvar="RLSCHED_DB", default=None,
                     help="Store URL or SQLite file (with --cluster); default $RLSCHED_DB."),
        click.option("--cluster", help="Cluster name in the store (with --db)."),
        click.option("--since", help="Slice start: ISO date/time (UTC) or epoch seconds."),
        click.option("--window", help="Slice length from --since, e.g. 30d, 12h."),
        click.option("--limit", type=click.IntRange(min=1),
                     help="Use at most this many jobs (the first by submit time)."),
        click.option("--nodes", type=click.IntRange(min=1),
                     help="Nodes of a trace's synthetic cluster (default: from the header)."),
        click.option("--gpus-per-node", type=click.IntRange(min=0),
                     help="GPUs per node of a trace's synthetic cluster."),
        click.option("--cpus-per-node", type=click.IntRange(min=1),
                     help="CPUs per node of a trace's synthetic cluster."),
        click.option("--nodes-per-leaf", type=click.IntRange(min=1),
                     help="Nodes per leaf switch of a synthetic cluster (default 4)."),
        click.option("--default-time-limit", type=click.IntRange(min=1),
                     help="Time limit (s) of jobs whose record has none."),
        missing_limits_option,
        click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
                     help="Saved 'scontrol show config': the Slurm baseline's settings."),
        click.option("--bf-plan", type=click.Choice(list(BF_PLANS)),
                     help="Backfill of every replay (teacher, warm start, validation,"
                          " Slurm) and of --actions queue episodes: easy (default) or"
                          " conservative (every blocked job reserved, as Slurm plans;"
                          " whole-node histories only)."),
        click.option("--out", type=click.Path(file_okay=False),
                     help="Output folder (default ./rlsched-train)."),
        click.option("--seed", type=int, help="Seed of everything random (default 0)."),
        click.option("--progress/--no-progress", default=None,
                     help="Progress bars (default: when stderr is a terminal)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _imitation_options(fn: F) -> F:
    opts = [
        click.option("--epochs", type=click.IntRange(min=0),
                     help="Imitation epochs (default 10)."),
        click.option("--max-decisions", type=click.IntRange(min=1),
                     help="Imitation decisions reconstructed at most (default 10,000)."),
        click.option("--imitate-from", type=click.Choice(_imitate_from()),
                     help="Decisions to imitate: the records' own starts (history), a"
                          " replay of the Slurm baseline (slurm) or of another baseline"
                          " (e.g. sjf; sif and spf read the recorded run time, which the"
                          " net only estimates; sef orders by the estimate the net"
                          " sees, seaf by that estimate times the job's GPUs or CPUs),"
                          " best (the baseline reading no recorded run time with the"
                          " lowest mean bsld before the test period), or auto"
                          " (default: slurm when no record waited, else history)."),
        click.option("--teacher-prior/--no-teacher-prior", default=None,
                     help="Fit the teacher's own order into one weight of the net before"
                          " training, kept alone when it agrees at least as well as the"
                          " trained head: seaf's (area_prior) and, with this flag, lrf's"
                          " (amount_prior: fewest GPUs or CPUs first; not the default,"
                          " as RL started worse from it on Lublin: admin guide, section"
                          " 3). Default: sef's and seaf's only. --no-teacher-prior: the"
                          " shortest-estimate weight (est_prior) for every teacher."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _rl_options(fn: F) -> F:
    from .rl import ALGORITHMS

    opts = [
        click.option("--algo", type=click.Choice(list(ALGORITHMS)),
                     help="RL algorithm (default ppo)."),
        click.option("--budget", help="RL budget: env steps (100000, the default), updates"
                                      " (50u) or a wall time (10m, 1h; not reproducible)."),
        click.option("--workers", type=click.IntRange(min=1),
                     help="Rollout workers: 1 (default) in this process, N local processes."),
        click.option("--ray-address", help="Run the workers as Ray actors on this Ray"
                                           " cluster (auto, ray://host:10001...);"
                                           " needs rlsched[dist]."),
        click.option("--resume", is_flag=True, default=None,
                     help="Continue the run saved in --out exactly (state.pt); only the"
                          " budget, --workers, --ray-address and --keep-checkpoints may"
                          " change, and the trace and input options must read the same jobs."),
        click.option("--algo-opt", "algo_opts", multiple=True, metavar="KEY=VALUE",
                     help="A setting of the algorithm's config, e.g. lr=1e-3, or lr_final=0"
                          " to anneal the learning rate linearly to 0 over the"
                          " --budget in updates or steps (repeatable)."),
    ]
    for name, _field, typ, help_ in _TRAIN_OPTIONS:
        if typ is None:
            opts.append(click.option(name, is_flag=True, default=None, help=help_))
        else:
            opts.append(click.option(name, type=typ, help=help_))
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


_C = TypeVar("_C")


def _resolve(cls: type[_C], kwargs: dict[str, Any]) -> _C:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    train = tuple((f, kwargs[f]) for _o, f, _t, _h in _TRAIN_OPTIONS
                  if f in kwargs and kwargs[f] is not None)
    vals = {k: v for k, v in kwargs.items() if k in names and v is not None}
    if "train" in names:
        vals["train"] = train
    if "algo_opts" in vals:
        vals["algo_opts"] = tuple(vals["algo_opts"])
    return cls(**vals)


# ---------------------------------------------------------------------------- running
@dataclass
class _Data:
    records: list[Any]
    spec: Any
    cluster: Any
    jobs: Any
    options: Any
    priority: Any
    source: str
    rejected: dict[str, int]


def _load(cmd: InputOptions) -> _Data:
    from .cli import load_input
    from .sim.state import Cluster, build_jobs

    inp, opts, prio = load_input(cmd)
    cluster = Cluster.from_spec(inp.spec)
    jobs = build_jobs(inp.records, cluster, default_time_limit=cmd.default_time_limit)
    if jobs.n == 0:
        raise click.ClickException(f"{inp.source}: no job to train on")
    opts = check_bf_plan(replace(opts, bf_plan=cmd.bf_plan), jobs, cluster)
    return _Data(inp.records, inp.spec, cluster, jobs, opts, prio, inp.source,
                 dict(inp.rejected))


def _show(cmd: InputOptions) -> bool:
    return sys.stderr.isatty() if cmd.progress is None else bool(cmd.progress)


def _write_json(data: Any, path: Path) -> None:
    from .rl.curves import write_curves

    write_curves(data, path)


@contextlib.contextmanager
def _echo_warnings(kind: type[Warning]) -> Iterator[None]:
    """Inside the block, warnings of ``kind`` print as one ``warning: ...`` line each."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, kind):
            click.echo(f"warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", kind)
        warnings.showwarning = show
        yield


def _imitation_source(data: _Data, choice: str, cmd: InputOptions | None = None,
                      speed_model: str = "none") -> tuple[str, dict[str, Any] | None]:
    """The decisions to imitate, and how ``best`` chose them (``None`` otherwise)."""
    if choice == "best":
        return _best_teacher(data, cmd or InputOptions(), speed_model)
    if choice != "auto":
        return choice, None
    waited = any(r.start_time is not None and r.start_time > (r.eligible_time or r.submit_time)
                 for r in data.records)
    return ("history" if waited else "slurm"), None


def _best_teacher(data: _Data, cmd: InputOptions, speed_model: str
                  ) -> tuple[str, dict[str, Any]]:
    """``--imitate-from best``: the baseline to imitate.

    The one with the lowest mean bsld over the jobs before the test period
    (:func:`trainer.evaluate.pick_teacher`), cut with RL's shares when given.
    """
    from .evaluate import pick_teacher
    from .rl import TrainConfig

    over = dict(getattr(cmd, "train", ()))
    train = over.get("train_share", TrainConfig.train_share)
    val = over.get("val_share", TrainConfig.val_share)
    limit, order, lane = _teacher_guard(cmd, over)
    click.echo("choosing the teacher: every baseline that reads no recorded run time"
               f" replays the jobs before the test period {_guard_words(limit, order, lane)}"
               "...", err=True)
    try:
        best, scores = pick_teacher(data.jobs, data.cluster, options=data.options,
                                    priority=data.priority, speed_model=speed_model,
                                    seed=cmd.seed, train=train, val=val,
                                    starvation_limit=limit, starvation_order=order,
                                    express_limit=lane)
    except ValueError as exc:
        raise click.ClickException(f"--imitate-from best: {exc}") from None
    ranked = sorted(scores, key=lambda n: (scores[n], n))
    click.echo("before the test period, mean bounded slowdown: "
               + ", ".join(f"{n} {scores[n]:.3g}" for n in ranked[:6])
               + (", ..." if len(ranked) > 6 else "") + f"; teacher: {best}", err=True)
    return best, {"criterion": "mean bsld of the jobs before the test period",
                  "train_share": train, "val_share": val, "speed_model": speed_model,
                  "guard": {"starvation_limit": limit, "starvation_order": order,
                            "express_limit": lane},
                  "bsld_mean": {n: scores[n] for n in ranked}}


def _guard_words(limit: float, order: str, lane: float) -> str:
    """"behind the 48 h guard (age order, express lane 15 min)", or "without a guard"."""
    if limit <= 0:
        return "without a guard"
    express = f", express lane {lane / 60:g} min" if lane else ""
    return f"behind the {limit / 3600:g} h guard ({order} order{express})"


def _teacher_guard(cmd: InputOptions, over: Mapping[str, Any]) -> tuple[float, str, float]:
    """The guard ``--imitate-from best`` replays the candidates behind (limit 0: none).

    ``train imitate``: its own ``--starvation-limit`` (default none). ``train all``: the
    RL run's guard when the net trains or validates behind it (``--train-guard`` or
    ``--val-deployed``), as it will be deployed; else none.
    """
    from .rl import TrainConfig

    if isinstance(cmd, ImitateCommand):
        return cmd.starvation_limit, cmd.starvation_order, cmd.express_limit
    if not (over.get("train_guard") or over.get("val_deployed")):
        return 0.0, TrainConfig.starvation_order, 0.0
    return (float(over.get("starvation_limit", TrainConfig.starvation_limit)),
            str(over.get("starvation_order", TrainConfig.starvation_order)),
            float(over.get("express_limit", TrainConfig.express_limit)))


def _imitate(data: _Data, cmd: ImitateCommand | AllCommand, out: Path, speed_model: str
             ) -> tuple[Any, dict[str, Any]]:
    from .imitate import (
        ImitationConfig,
        place_head_learned,
        replay_history,
        train_imitation,
    )
    from .policy import PLACE_TRAINED, save_checkpoint
    from .sim.policies import BASELINES

    over: dict[str, Any] = {k: v for k, v in (("epochs", cmd.epochs), ("hidden", cmd.hidden),
                                              ("max_decisions", cmd.max_decisions),
                                              ("teacher_prior", cmd.teacher_prior))
                            if v is not None}
    source, choice = _imitation_source(data, cmd.imitate_from, cmd, speed_model)
    icfg = ImitationConfig(seed=cmd.seed, progress=_show(cmd), threads=1,
                           teacher=None if source == "history" else source, **over)
    records = data.records
    if source != "history":
        what = ("the Slurm baseline" if source == "slurm" else
                f"the {source} baseline ({BASELINES[source].describe(data.options)})")
        click.echo(f"imitating a replay of {what} (the records hold no schedule of their"
                   " own)" if cmd.imitate_from == "auto" else
                   f"imitating a replay of {what}", err=True)
        policy, opts = BASELINES[source].build(data.priority, data.options)
        # the teacher runs in the simulator RL will train in: same speed model
        records, _ = replay_history(records, data.jobs, data.cluster, policy, opts,
                                    seed=cmd.seed, speed_model=speed_model)
    try:
        net, report = train_imitation(records, data.cluster, icfg)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    rep = {**report.to_dict(), "imitate_from": source}
    if choice is not None:
        rep["teacher_choice"] = choice
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out / "imitation.pt", net,
                    extra={"imitation": rep, PLACE_TRAINED: place_head_learned(report.stats)})
    _write_json(rep, out / "imitation.json")
    test = report.metrics.get("test", {})
    if test:
        bf = test.get("fifo_backfill")
        click.echo(f"imitation: test top-1 {test['net']['top1']:.3f} (FIFO"
                   f" {test['fifo']['top1']:.3f}"
                   + (f", FIFO with EASY backfill {bf['top1']:.3f}" if bf else "")
                   + f", random {test['random']['top1']:.3f}), top-5"
                   f" {test['net']['top5']:.3f}", err=True)
    if report.est_prior is not None:
        click.echo(f"imitation: est_prior (weight of shortest estimate first) fitted"
                   f" {report.est_prior:.2f}, trained {report.est_prior_final:.2f}", err=True)
    for name, fitted, what in (("area_prior", report.area_prior, "smallest estimated area"),
                               ("amount_prior", report.amount_prior, "fewest GPUs or CPUs")):
        if fitted is not None:
            click.echo(f"imitation: {name} (weight of {what} first) fitted {fitted:.2f},"
                       f" fixed; est_prior trained from 0 to {report.est_prior_final:.2f}",
                       err=True)
    if report.prior_alone:
        click.echo(f"imitation: the prior alone agrees with the teacher at least as well as"
                   f" the trained job head on the validation decisions (top-1"
                   f" {report.prior_top1:.3f} vs {report.head_top1:.3f}): the net orders"
                   " jobs by it alone (the job head's output is zeroed)", err=True)
    return net, {"imitation": icfg.to_dict(), "imitate_from": source}


def _rl(data: _Data, cmd: RLCommand, out: Path, init: Any, resolved: dict[str, Any]) -> None:
    from slurm_plugin.features import Normalisation
    from slurm_plugin.output import table

    from .policy import PLACE_TRAINED, PolicyEnsemble, load_checkpoint, place_head_trained
    from .rl import ALGORITHMS, FlatValidationWarning, TrainConfig, Trainer, make_spec
    from .rl.config import check_schedule, parse_overrides
    from .rl.report import HEADERS, summarize
    from .rl.trainer import NoEffectWarning

    fields_ = dict(cmd.train)
    try:
        cfg = TrainConfig(algo=cmd.algo, seed=cmd.seed, workers=cmd.workers,
                          ray_address=cmd.ray_address, progress=_show(cmd),
                          **parse_budget(cmd.budget), **fields_)
        acls = ALGORITHMS[cfg.algo].config_cls
        acfg = acls(**parse_overrides(acls, cmd.algo_opts))
        check_schedule(cfg, acfg)
    except (ValueError, TypeError) as exc:
        raise click.BadParameter(str(exc)) from None
    norm = Normalisation()
    meta: dict[str, Any] = {"source": data.source}
    if isinstance(init, str):
        try:
            ck = load_checkpoint(init)
        except (OSError, ValueError) as exc:
            raise click.ClickException(f"{init}: {exc}") from None
        if isinstance(ck.net, PolicyEnsemble):
            raise click.ClickException(
                f"{init}: an ensemble of {len(ck.net)} nets (train rl --ensemble), which"
                " does not train: give --init one net, e.g. the run's best.pt or one of"
                " its checkpoints/update-NNNNN.pt")
        norm = ck.norm
        # (also on --resume, where the trainer is not given the init)
        meta[PLACE_TRAINED] = place_head_trained(ck.extra)
    try:
        with _echo_warnings(NoEffectWarning):
            spec = make_spec(data.jobs, data.cluster, cfg, norm, options=data.options,
                             priority=data.priority)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    resolved.update({"train": cfg.to_dict(), "algo": acfg.to_dict(),
                     "env": {"train": spec.train.to_dict(), "eval": spec.eval.to_dict()},
                     "periods": {"train_jobs": spec.train_rows,
                                 "val_jobs": spec.jobs.n - spec.train_rows,
                                 "val_window_jobs": spec.eval.episode_jobs,
                                 "test_jobs": data.jobs.n - spec.jobs.n}})
    if cmd.resume:
        resolved = _resumed_config(resolved, out / "config.json")
    _write_json(resolved, out / "config.json")
    trainer = Trainer(spec, cfg, acfg, init=None if cmd.resume else init, out=out,
                      meta=meta, options=data.options, priority=data.priority)
    try:
        with _echo_warnings(FlatValidationWarning):
            res = trainer.run(resume=cmd.resume)
    except (FileNotFoundError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    summ = summarize(spec, res.best_net, options=data.options, priority=data.priority,
                     seed=cmd.seed, place=trainer.meta[PLACE_TRAINED])
    _write_json({**summ.to_dict(), "best": res.best, "updates": res.updates,
                 "steps": res.steps, "wall_s": res.wall_s,
                 **({"ensemble": res.members} if cfg.ensemble else {})},
                out / "summary.json")
    click.echo(f"{cfg.algo}: {res.updates} updates, {res.steps} env steps in "
               f"{res.wall_s:.0f} s; best validation {cfg.val_metric} "
               f"{res.best.get(cfg.val_metric, float('nan')):.4g} at update "
               f"{int(res.best.get('update', 0))}", err=True)
    if cfg.ensemble:
        click.echo(_ensemble_line(res.members, res.files.get("ensemble"), cfg.ensemble),
                   err=True)
    if "p99_ok" in res.best:
        click.echo(bounds_note(res.best), err=True)
        figures = choice_figures(res.best, res.curves, cfg, spec.eval.warmup_jobs)
        if figures:
            click.echo(figures, err=True)
    click.echo(f"validation window: {summ.jobs} jobs (after the {spec.train_rows} training"
               " jobs); outputs in " + str(out), err=True)
    table(HEADERS, summ.rows())


def _ensemble_line(members: Sequence[int], path: str | None, asked: int) -> str:
    """What ``--ensemble`` wrote, as one line."""
    if not members:
        return "ensemble: no validation after the start, so no ensemble.pt"
    n, where = len(members), path or "ensemble.pt"
    head = (f"{where}, the mean of the {n} nets that validated best" if n >= asked else
            f"only {n} validation{'s' if n > 1 else ''} after the start, so {where} holds"
            f" {n} of the {asked} nets asked")
    return (f"ensemble: {head}: update{'s' if n > 1 else ''} {', '.join(map(str, members))};"
            " evaluate or export it as best.pt")


def bounds_note(best: dict[str, Any]) -> str:
    """What the bounded choice (``--val-bounds``) says of its best checkpoint ``best``.

    The choice ranks the bounds in order (:data:`trainer.bounds.SLURM_BOUNDS`: p99 wait,
    mean bounded slowdown, utilisation), so the first bound the best checkpoint misses
    was missed by every checkpoint that kept the bounds before it. A best saved before
    the bsld bound existed (no ``bsld_ok``) is read on the bounds it carries.
    """
    from .bounds import SLURM_BOUNDS, listed

    bounds = [(k, name) for k, name in SLURM_BOUNDS if k in best]
    kept = [name for k, name in bounds if best[k]]
    first = next((i for i, (k, _) in enumerate(bounds) if not best[k]), None)
    if first is None:
        return f"it keeps {listed(kept)} within Slurm's bounds on the validation window"
    missed = listed([name for _, name in bounds[:first + 1]])
    note = (f"no checkpoint kept {missed} within Slurm's bounds"
            f"{' together' if first else ''} on the validation window")
    return note + (f"; this one keeps {listed(kept)} within them" if kept else
                   "; this one keeps none of them")


def choice_figures(best: Mapping[str, Any], curves: Mapping[str, Any],
                   cfg: TrainConfig, warmup_jobs: int) -> str | None:
    """The figures the bounded choice read for ``best``, against Slurm's, as one line.

    The choice replays the window as deployed (behind the guard, after the
    ``warmup_jobs`` warm-up jobs: the validation episode's); the table after it replays
    the window from an empty cluster without a guard, so its figures differ (on Lublin,
    Slurm's mean bounded slowdown 181 against 140) and the line says so. ``None`` when
    the curves lack the best's point or Slurm's figures (a run resumed from an older
    state).
    """
    slurm = curves.get("slurm_val") or {}
    point = next((p for p in reversed(curves.get("val", []))
                  if p.get("update") == best.get("update")), None)
    keys = ("bsld_mean", "wait_p99", "util")
    if point is None or any(k not in slurm or k not in point for k in keys):
        return None

    def fig(m: Mapping[str, Any]) -> str:
        return (f"mean bsld {m['bsld_mean']:.4g}, p99 wait {m['wait_p99']:,.0f} s,"
                f" utilisation {m['util']:.4f}")

    guard = _guard_words(cfg.starvation_limit, cfg.starvation_order, cfg.express_limit)
    from .rl.config import EVAL_WARMUP

    warm = f"{warmup_jobs:,} warm-up jobs" + (", as many as evaluate replays"
                                              if cfg.val_warmup_rule() == EVAL_WARMUP else "")
    return (f"as the choice read them ({guard}, after {warm}):"
            f" update {int(best['update'])} {fig(point)}; Slurm {fig(slurm)}. The table"
            " below replays the window from an empty cluster without a guard")


#: Sections of ``config.json`` that say which jobs, cluster and replay a run trains and
#: validates on: a resume must find them as they were (``input.source`` aside: the same
#: history may have moved).
RESUME_SAME = ("input", "cluster", "scheduler", "priority", "env", "periods")


def _resumed_config(now: dict[str, Any], path: Path) -> dict[str, Any]:
    """``now`` checked against the run's saved ``config.json``, for ``--resume``.

    The training state holds the loop's and the algorithm's settings (the trainer refuses
    other ones); this checks what the state does not hold: the jobs read (``--limit``,
    ``--missing-limits``, the rejected and skipped rows), the cluster, the scheduler's and
    the priority's options (``--bf-plan``, ...), the environments and the periods. A
    setting the saved file predates takes the value given now. Sections of the saved file
    that ``now`` lacks (the imitation's, when ``train all`` reuses its net) are kept. A
    different machine or library (``numerics``) is allowed, with a warning: the run goes on,
    but not necessarily as it would have there.

    Raises:
        click.ClickException: When a setting differs, naming each (nothing is written).
    """
    if not path.is_file():
        return now
    import json

    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"{path}: unreadable ({exc}); start a new --out") from None
    if not isinstance(saved, dict):
        raise click.ClickException(f"{path}: not a run's configuration; start a new --out")
    # (section.setting: a setting the saved file predates is not in it)
    old = {f"{k}.{f}": v for k in RESUME_SAME if isinstance(saved.get(k), Mapping)
           for f, v in saved[k].items()}
    new = {f"{k}.{f}": v for k in RESUME_SAME for f, v in now.get(k, {}).items()}
    old.pop("input.source", None)
    diff = sorted(k for k in old if k in new and old[k] != new[k])
    if diff:
        shown = "; ".join(f"{k}: {old[k]!r} then, {new[k]!r} now" for k in diff[:6])
        more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
        raise click.ClickException(
            f"{path.parent} was trained on other input ({shown}{more}); resume with the"
            " same trace and input options, or start a new --out")
    was, is_ = saved.get("numerics"), now.get("numerics")
    if isinstance(was, Mapping) and isinstance(is_, Mapping) and dict(was) != dict(is_):
        keys = ", ".join(sorted(k for k in set(was) | set(is_) if was.get(k) != is_.get(k)))
        click.echo(f"warning: {path.parent} was trained on another machine or library"
                   f" ({keys}); the resumed run may differ from one never stopped", err=True)
    return {**{k: v for k, v in saved.items() if k not in now}, **now}


def _resolved(cmd: InputOptions, data: _Data) -> dict[str, Any]:
    c = data.cluster
    d = asdict(cmd)
    return {"command": d, "input": {"source": data.source, "rejected": data.rejected,
                                    "jobs": data.jobs.n, "skipped": dict(data.jobs.skipped)},
            "cluster": {"name": c.name, "nodes": c.num_nodes, "leaves": c.num_leaves},
            "scheduler": data.options.to_dict(), "priority": data.priority.to_dict(),
            "numerics": numerics.describe()}


# ---------------------------------------------------------------------------- commands
@click.group("train")
def train() -> None:
    """Learn a scheduling policy: imitate the site's scheduler, then improve it with RL."""


@train.command("imitate")
@_input_options
@_imitation_options
@click.option("--hidden", type=click.IntRange(min=1), help="Width of the network (default 64).")
@click.option("--speed-model", type=_SPEED_MODEL,
              help="How run times depend on placement in the replay of a baseline that"
                   " --imitate-from names (default none; give the one RL will use).")
@click.option("--starvation-limit", type=click.FloatRange(min=0),
              help="With --imitate-from best: choose the teacher behind the helper's"
                   " starvation guard at this many seconds of waiting, as the policy will"
                   " be deployed (default 0: unguarded; train all takes RL's guard).")
@click.option("--starvation-order", type=click.Choice(sorted(STARVATION_ORDERS)),
              help="With --starvation-limit: how the guard orders the starving jobs, as"
                   " the helper's starvation_order (default age).")
@click.option("--express-limit", type=click.FloatRange(min=0),
              help="With --starvation-limit: the guard's express lane, seconds, as the"
                   " helper's express_limit (default 0: none).")
def imitate_cmd(**kwargs: Any) -> None:
    """Imitate the site's own scheduling decisions (DL²'s warm start).

    Writes imitation.pt (a policy checkpoint), imitation.json (top-1/top-5 agreement
    on the later, held-out period against FIFO, FIFO with EASY backfill, the recorded
    priority when the history has it, and random) and config.json.
    """
    cmd = _resolve(ImitateCommand, kwargs)
    if cmd.imitate_from != "best" and (cmd.starvation_limit or cmd.express_limit):
        raise click.UsageError("--starvation-limit and --express-limit choose the teacher"
                               " of --imitate-from best: add it, or leave them out")
    data = _load(cmd)
    out = Path(cmd.out)
    out.mkdir(parents=True, exist_ok=True)
    _, extra = _imitate(data, cmd, out, cmd.speed_model)
    _write_json({**_resolved(cmd, data), **extra}, out / "config.json")
    click.echo(f"wrote {out / 'imitation.pt'}, {out / 'imitation.json'}", err=True)


@train.command("rl")
@_input_options
@_rl_options
@click.option("--init", type=click.Path(exists=True, dir_okay=False),
              help="Checkpoint to start from (e.g. imitation.pt); default random weights.")
def rl_cmd(**kwargs: Any) -> None:
    """Improve a policy with reinforcement learning in the simulator.

    Episodes are windows of the first 70% of the jobs; the greedy policy is validated
    on the next 10% (the best checkpoint is kept); the last 20% are never used.
    Prints the validation window's comparison with the Slurm baseline and the best
    heuristic.
    """
    cmd = _resolve(RLCommand, kwargs)
    data = _load(cmd)
    out = Path(cmd.out)
    out.mkdir(parents=True, exist_ok=True)
    _rl(data, cmd, out, cmd.init, _resolved(cmd, data))


@train.command("all")
@_input_options
@_imitation_options
@_rl_options
def all_cmd(**kwargs: Any) -> None:
    """Imitation, then RL from the imitation weights (one output folder).

    With --resume, an existing imitation.pt is reused and the RL run continues.
    """
    cmd = _resolve(AllCommand, kwargs)
    data = _load(cmd)
    out = Path(cmd.out)
    out.mkdir(parents=True, exist_ok=True)
    resolved = _resolved(cmd, data)
    ck = out / "imitation.pt"
    if cmd.resume and ck.is_file():
        click.echo(f"reusing {ck}", err=True)
    else:
        _, extra = _imitate(data, cmd, out, dict(cmd.train).get("speed_model") or "none")
        resolved.update(extra)
    _rl(data, dataclasses.replace(cmd, init=str(ck)), out, str(ck), resolved)


@train.command("ensemble")
@click.argument("runs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False))
@click.option("--members", "k", type=click.IntRange(min=1), default=4, show_default=True,
              help="How many nets to average.")
@click.option("--per-run", type=click.IntRange(min=1),
              help="The most members from one run (default: --members shared out evenly,"
                   " rounded up).")
@click.option("--out", type=click.Path(dir_okay=False), required=True,
              help="The ensemble checkpoint to write (e.g. ensemble.pt).")
def ensemble_cmd(runs: tuple[str, ...], k: int, per_run: int | None, out: str) -> None:
    """Average the best validated checkpoints of several RL runs into one model.

    RUNS are 'train rl' output folders with their checkpoints kept (--keep-checkpoints
    or --ensemble), trained on one history and validated alike (the same validation
    period, guard, --val-metric and --val-bounds; it says which setting differs
    otherwise), typically the same command with other --seed values. Their validations
    rank in one list as best.pt is chosen; the first --members are taken, at most
    --per-run from any one run. Runs of other seeds err less alike than checkpoints of
    one run, which 'train rl --ensemble K' averages. The file is read by evaluate, export
    and the helper as one net; scoring costs one net's time per member.
    """
    from slurm_plugin.output import table

    from .ensemble import combine, read_run
    from .policy import save_checkpoint

    try:
        folders = [read_run(r) for r in runs]
        ck, members = combine(folders, k, per_run)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    metric = str(folders[0].config["train"].get("val_metric", "bsld_mean"))
    save_checkpoint(out, ck.net, extra=ck.extra, norm=ck.norm)
    rows = [[m["run"], "" if m["seed"] is None else m["seed"], m["update"],
             f"{float(m.get(metric, float('nan'))):.4g}",
             _kept_words(m)] for m in members]
    table(["run", "seed", "update", f"validation {metric}", "Slurm's bounds kept"], rows)
    cap = ck.extra["ensemble"]["per_run"]
    short = (f" ({len(members)} of the {k} asked: no more validations after the start"
             f" with their checkpoint, at most {cap} per run)") if len(members) < k else ""
    click.echo(f"wrote {out}: the mean of {len(members)} nets from"
               f" {len({m['run'] for m in members})} of {len(folders)} runs{short};"
               " evaluate or export it as best.pt", err=True)


def _kept_words(point: Mapping[str, Any]) -> str:
    """Which of Slurm's bounds a validation kept, in words ('' when not read)."""
    from .rl.trainer import BOUND_KEYS

    if "p99_ok" not in point:
        return ""
    kept = [k.removesuffix("_ok") for k in BOUND_KEYS if float(point.get(k, 0.0)) >= 1.0]
    return ", ".join(kept) if kept else "none"

