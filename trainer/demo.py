"""``rlsched demo``: the whole product, end to end, on an embedded default (or a trace).

Stages (:data:`STAGES`, in order; each prints a header, its own progress bar, and its
wall time):

1. ``workload``: a seeded synthetic GPU workload (:mod:`trainer.sim.workload`) on its
   default cluster, 16 nodes x 8 GPUs in 4 leaf switches of 4 nodes
   (:func:`~trainer.sim.workload.default_cluster`), a little denser than the
   calibrated default (``mean_interarrival_s``) so that the queue matters.
2. ``history``: the "incumbent Slurm": the workload replayed under the ``slurm``
   baseline (multifactor priority, EASY backfill, topology/tree placement) with its
   placements kept; the records as that Slurm ran them
   (:func:`trainer.imitate.records_from_sim`) are written as a ``sacct -P`` dump
   (:func:`slurm_plugin.slurm.parse.format_sacct_row`), as a site would save one.
3. ``ingest``: ``rlsched db init`` and ``rlsched ingest sacct --file DUMP`` (the click
   commands themselves) into an SQLite store in the run directory. The cluster's
   layout is recorded first, as a live ``rlsched ingest sacct`` records it from
   ``scontrol``. With ``--trace FILE`` stages 1-2 are skipped and the trace goes
   through ``rlsched ingest swf`` or ``rlsched ingest philly``.
4. ``load``: the history read back from the store (:func:`trainer.sim.load.from_store`),
   the first ``jobs`` jobs by submit time.
5. ``imitation``: :func:`trainer.imitate.train_imitation` (DL²'s warm start): the net
   learns the history's decisions; agreement on held-out later decisions.
6. ``teacher``: RL's warm start (``teacher``, default ``best``). Every baseline that
   reads no recorded run time, and the incumbent's ``slurm``, replays the jobs before
   the test period (:func:`trainer.evaluate.pick_teacher`); when the best of them beats
   the incumbent there (:func:`warm_teacher`), a second net imitates a replay of it
   (``imitation/teacher.pt``) and RL starts from that one, else from the net of step 5.
   DL² warm-starts from the incumbent; a site's history often holds a better order
   than the one its Slurm ran, and RL's few minutes here rarely find it from the
   incumbent's copy (on seeds 0 to 4 of the default workload the exported model beat
   Slurm's mean bounded slowdown on 2 of 5 test periods from that copy, on 4 of 5 from
   the best order; see the admin guide, section 3).
7. ``rl``: :func:`trainer.rl.train` from the warm start (PPO by default) on windows of
   the training period (``rl/best.pt``: best on RL's validation window).
8. ``select``: the checkpoint to deploy, among the imitation net, the teacher's net and
   RL's best and last, is the one with the lowest geometric mean of the mean bounded
   slowdowns of the validation period and the three periods of as many jobs before it
   (``select_windows``; the guard stage's windows), each replayed in the simulator
   exactly as the test period is (warm-started, under Slurm's main loop and backfill;
   :func:`trainer.evaluate.evaluate` with that period as its "test"). The test period is
   still never looked at.
9. ``export``: :func:`exporter.onnx_export.export` of that checkpoint (parity with
   torch on simulator observations) and ``rlsched verify`` on the result.
10. ``guard``: the helper's starvation guard for that model, chosen on the validation
   period and the periods just before it as ``rlsched tune-guard`` chooses it
   (:func:`trainer.guard.sweep` over :func:`trainer.guard.default_windows` windows: each
   limit of :data:`trainer.guard.DEFAULT_LIMITS` in both orders, the lowest mean bounded
   slowdown within Slurm's p99-wait and utilisation bounds); printed as the
   ``helper.toml`` lines to set.
11. ``evaluate``: :func:`trainer.evaluate.evaluate`: the exported ONNX model
   (``policy``, behind the chosen guard, as it would be deployed), the imitation
   checkpoint (``imitation``) and the teacher's net (``teacher``, when one was trained),
   behind the same guard, against every baseline on the test period (the last 20% of
   the jobs, never seen in training), with the quality targets; the headline table
   goes into the model card. Then the same model and Slurm alone again, from the queue
   Slurm left at the test period's start (every earlier job replayed under Slurm, the
   model taking over at its first arrival, as on the day the helper is switched on:
   ``warmup_under="slurm"``): the test period's own warm-up (the validation period,
   replayed by each policy from an empty cluster) can start it far emptier than the
   history did, which moves the verdict on an overloaded history.
12. ``report``: :func:`trainer.report.build_report`: ``report.html``.

Run directory (``--out``, default ``./rlsched-demo``)::

    config.json              the resolved DemoConfig and budget (one source of defaults)
    run.json                 stage wall times, summary, where everything is
    history/cluster.json     the cluster (ClusterSpec snapshot)
    history/workload.json    the synthetic workload's statistics (synthetic only)
    history/sacct.txt        the incumbent Slurm's accounting, sacct -P (synthetic only)
    history/slurm.json       metrics of the incumbent Slurm over the whole history
    history/ingest.txt       what rlsched ingest printed
    store.db                 the SQLite job-history store
    imitation/imitation.pt   imitation checkpoint; report.json, curves.png; teacher.pt
                             (the teacher's net, when one was imitated)
    rl/                      best.pt (exported), last.pt, state.pt, curves.json/.png
    model.onnx               the compiled policy, with model.onnx.card.json and verify.txt
    guard/                   guard.json, guard.png: the starvation guard chosen
    eval/                    eval.json, wait_cdf.png, utilisation.png, fragmentation.png
    report.html              the self-contained report (rlsched report RUN_DIR rebuilds it)

Budgets (:data:`BUDGETS`): ``tiny`` (tests, seconds), ``small`` (the default, a few
minutes on 2 cores), ``medium``; a number is ``small`` with that many RL steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import click

from slurm_plugin.fsio import atomic_write

__all__ = ["BUDGETS", "STAGES", "TEACHER_MARGIN", "Budget", "Demo", "DemoConfig", "demo",
           "resolve_budget", "run_demo", "warm_teacher"]

#: Packages the demo needs (the ``train`` and ``export`` extras).
NEEDS = ("torch", "gymnasium", "matplotlib", "tqdm", "onnx", "onnxruntime")

#: What the demo writes in its run directory (removed first by ``--force``).
ARTIFACTS = ("config.json", "run.json", "history", "store.db", "imitation", "rl",
             "model.onnx", "model.onnx.card.json", "verify.txt", "guard", "eval",
             "report.html")


#: The targets the switch-on replay checks (``Demo._switch_on``: it replays only Slurm).
SWITCH_ON_CHECKS = ("bsld_vs_slurm", "p99_wait", "utilisation")

#: How much lower than the incumbent's a teacher's mean bounded slowdown must be (a
#: share of the incumbent's) for RL to start from it (:func:`warm_teacher`).
TEACHER_MARGIN = 0.01


def warm_teacher(scores: dict[str, float], incumbent: str = "slurm",
                 margin: float = TEACHER_MARGIN) -> str | None:
    """The order to imitate for RL's warm start, or ``None`` for the history's own net.

    ``scores`` are mean bounded slowdowns before the test period
    (:func:`trainer.evaluate.pick_teacher`), ``incumbent`` among them. The lowest
    (ties: the first name) when it is more than ``margin`` (a share) below the
    incumbent's; otherwise ``None``: no order does clearly better than what the site
    runs (on a lightly loaded history every order scores about 1), so RL starts from
    the net that imitates it.
    """
    best = min(scores, key=lambda n: (scores[n], n))
    if best == incumbent or scores[best] >= (1.0 - margin) * scores[incumbent]:
        return None
    return best


def _start_label(teacher: str | None) -> str:
    """How a net's training began, as its checkpoint says: ``imitation of NAME``.

    Plain ``imitation`` for the history's own decisions (``None`` or ``"history"``).
    """
    return "imitation" if teacher in (None, "history") else f"imitation of {teacher}"


# ---------------------------------------------------------------------------- config
@dataclass(frozen=True)
class Budget:
    """How much training a demo run does."""

    imitation_epochs: int
    """Passes over the imitation decisions."""
    imitation_decisions: int
    """At most this many decisions reconstructed from the history (every k-th start)."""
    rl_steps: int
    """RL env steps (decisions) in training episodes."""
    rl_episode_jobs: int
    """Jobs per RL training episode (a window of the training period)."""
    rl_episodes: int
    """Training episodes per RL update (PPO/A2C/DQN/CEM ``episodes``)."""
    rl_val_jobs: int | None
    """Jobs of the RL validation episode (``None``: the whole validation period)."""
    rl_eval_every: int
    """RL updates between validations."""
    parity_observations: int
    """Simulator observations of the export's parity check (1,000 for a deployable
    model; fewer only in ``tiny``)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return dataclasses.asdict(self)


#: Named budgets of ``--budget``.
BUDGETS: dict[str, Budget] = {
    "tiny": Budget(imitation_epochs=1, imitation_decisions=200, rl_steps=256,
                   rl_episode_jobs=48, rl_episodes=2, rl_val_jobs=60, rl_eval_every=1,
                   parity_observations=20),
    "small": Budget(imitation_epochs=8, imitation_decisions=3000, rl_steps=49_152,
                    rl_episode_jobs=256, rl_episodes=8, rl_val_jobs=None, rl_eval_every=4,
                    parity_observations=1000),
    "medium": Budget(imitation_epochs=10, imitation_decisions=10_000, rl_steps=100_000,
                     rl_episode_jobs=256, rl_episodes=8, rl_val_jobs=None, rl_eval_every=4,
                     parity_observations=1000),
}


def resolve_budget(name: str) -> Budget:
    """A budget by name, or ``small`` with ``name`` RL steps when it is a number.

    Raises:
        ValueError: On an unknown name or a non-positive number.
    """
    key = name.strip().lower()
    if key in BUDGETS:
        return BUDGETS[key]
    try:
        steps = int(key.replace("_", "").removesuffix("k")) * (1000 if key.endswith("k") else 1)
    except ValueError:
        raise ValueError(f"unknown budget {name!r}: {', '.join(BUDGETS)} or a number of RL"
                         " steps (e.g. 50000 or 50k)") from None
    if steps < 1:
        raise ValueError(f"budget {name!r}: the number of RL steps must be positive")
    return dataclasses.replace(BUDGETS["small"], rl_steps=steps)


@dataclass(frozen=True)
class DemoConfig:
    """Configuration of ``rlsched demo`` (the single source of its defaults)."""

    out: str = "rlsched-demo"
    """Run directory (created; see the module docstring for its layout)."""
    jobs: int = 3000
    """Jobs of the synthetic workload, or the first jobs of ``trace`` by submit time."""
    budget: str = "small"
    """Training budget: ``tiny``, ``small``, ``medium`` (:data:`BUDGETS`) or a number of
    RL steps (``small`` otherwise)."""
    seed: int = 0
    """Seed of the workload, the replays, the weights and the rollouts: the same config
    gives the same run."""
    trace: str | None = None
    """A trace file (SWF, ANL SWF, Philly CSV) to run the same pipeline on instead of
    the synthetic workload and its simulated Slurm history."""
    cluster: str | None = None
    """Cluster name in the store (default: ``demo``, or the trace file's stem)."""
    missing_limits: str = "run"
    """Time limits of a trace that records none (:mod:`trainer.sim.limits`): ``run``
    (each job's run time, a perfect estimate the policy does not see) or ``users``
    (modelled user requests that backfill, the baselines and the policy all see).
    The synthetic workload has its own limits."""
    mean_interarrival_s: float = 130.0
    """Mean seconds between synthetic submissions: denser than the calibrated 172 s, so
    that the queue and the order matter (3,000 jobs from a Monday offer about 110% of
    the GPUs over their 4 days, against 86% at 172 s)."""
    speed_model: str | None = None
    """Speed model of every replay and of training (``trainer.sim.speed``): default
    ``locality`` for the GPU workload and Philly traces (a job spread over leaf
    switches runs slower), ``none`` for SWF traces."""
    algo: str = "ppo"
    """RL algorithm (``trainer.rl.ALGORITHMS``)."""
    actions: str = "queue"
    """What RL's agent chooses among in the simulator (:attr:`trainer.env.EnvConfig.actions`):
    ``queue``, an order of the whole queue that Slurm walks with EASY backfill, as the
    helper deploys the net (its scores of the jobs that do not fit, which pick the
    reservation, are trained too); ``fits``, the jobs that fit now (or hold), as
    ``train rl`` by default."""
    teacher: str = "best"
    """RL's warm start (stage ``teacher``): ``history``, the net imitating the site's
    scheduler (DL²'s warm start); ``best``, the baseline that reads no recorded run time
    with the lowest mean bounded slowdown over the jobs before the test period
    (:func:`trainer.evaluate.pick_teacher`), imitated when it is more than
    :data:`TEACHER_MARGIN` below the incumbent's ``slurm`` replay there
    (:func:`warm_teacher`), else the history's net; or a baseline name (imitated)."""
    select_windows: int = 4
    """Periods the checkpoint to export is chosen on (stage ``select``): the validation
    period and, before it, as many periods of its length as make this many (fewer when
    fewer fit), each replayed on its own after as long a warm-up, as the ``guard``
    stage judges guards (:func:`trainer.guard.validation_windows`); the lowest
    geometric mean of their mean bounded slowdowns wins. 1: the validation period
    alone."""
    train: float = 0.7
    """Share of the jobs (first by arrival) that train imitation and RL."""
    val: float = 0.1
    """Share after them that validates (picks the checkpoint); the rest is the test."""
    parity_atol: float = 1e-4
    """Export parity tolerance (ONNX vs torch). Imitation pushes the job logits to tens,
    where float32 rounding alone differs by ~1e-5 between the two runtimes."""
    threads: int = 1
    """torch CPU threads (1: small per-decision passes run fastest on one)."""
    force: bool = False
    """Replace the artifacts of an earlier run in ``out`` (never other files)."""
    progress: bool | None = None
    """Show progress bars (``None``: when stderr is a terminal)."""

    def __post_init__(self) -> None:
        if self.jobs < 50:
            raise ValueError("DemoConfig.jobs must be at least 50 (the test period is 20%)")
        resolve_budget(self.budget)
        if self.mean_interarrival_s <= 0 or self.threads < 1:
            raise ValueError("mean_interarrival_s must be positive and threads >= 1")
        if not (0 < self.train < 1 and 0 < self.val < 1 and self.train + self.val < 1):
            raise ValueError("train and val must be shares with train + val < 1")
        from .sim.limits import check_missing_limits

        check_missing_limits(self.missing_limits)
        from .sim.policies import BASELINES

        if self.teacher not in ("history", "best") and self.teacher not in BASELINES:
            raise ValueError(f"unknown teacher {self.teacher!r}: history, best or one of"
                             f" {', '.join(sorted(BASELINES))}")
        if self.select_windows < 1:
            raise ValueError(f"select_windows must be at least 1, not {self.select_windows}")
        if self.actions not in ("fits", "queue"):  # trainer.env.ACTIONS (heavy import)
            raise ValueError(f"unknown actions {self.actions!r}: fits or queue")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def cluster_name(self) -> str:
        """The cluster's name in the store."""
        if self.cluster:
            return self.cluster
        return Path(self.trace).name.split(".")[0] if self.trace else "demo"

    @property
    def speed(self) -> str:
        """The resolved speed model."""
        if self.speed_model is not None:
            return self.speed_model
        if self.trace is None:
            return "locality"
        from .sim.load import trace_kind

        return "locality" if trace_kind(self.trace) == "philly" else "none"


def resolve(**overrides: Any) -> DemoConfig:
    """The defaults of :class:`DemoConfig` with the options that were given."""
    names = {f.name for f in fields(DemoConfig)}
    return DemoConfig(**{k: v for k, v in overrides.items() if k in names and v is not None})


# ---------------------------------------------------------------------------- helpers
def missing_packages() -> list[str]:
    """Packages of :data:`NEEDS` that are not installed."""
    return [p for p in NEEDS if importlib.util.find_spec(p) is None]


def _write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n",
                    encoding="utf-8")
    return path


def _write_card(path: Path, card: dict[str, Any]) -> None:
    """Rewrite a model card atomically, mode 0644 (the helper refuses world-writable)."""
    atomic_write(path, (json.dumps(card, indent=2, sort_keys=True, default=str) + "\n").encode())


def _invoke(cmd: click.Command, args: list[str], name: str) -> str:
    """Run a click command as ``rlsched`` would; its output is returned (and echoed).

    Raises:
        click.ClickException: If it fails (with its message).
    """
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            cmd.main(args=args, prog_name=f"rlsched {name}", standalone_mode=False)
    except click.ClickException as exc:
        raise click.ClickException(f"rlsched {name} {' '.join(args)}: "
                                   f"{exc.format_message()}") from None
    return buf.getvalue()


def plot_imitation(history: list[dict[str, float]], path: Path) -> Path | None:
    """Imitation training curve (loss and validation top-1 per epoch) as a PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not history:
        return None
    ep = [h["epoch"] for h in history]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(ep, [h["loss"] for h in history], marker="o", ms=3, color="tab:blue")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (cross-entropy)", color="tab:blue")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(ep, [h["val_top1"] for h in history], marker="s", ms=3, color="tab:red")
    ax2.set_ylabel("validation top-1 agreement", color="tab:red")
    ax2.set_ylim(0, 1)
    ax.set_title("imitation of the site's scheduler")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- the run
@dataclass
class StageTime:
    """Wall time of one stage."""

    name: str
    title: str
    seconds: float


@dataclass
class Demo:
    """One demo run: its config, what the stages produced, and their timings.

    Attributes:
        config: The configuration.
        budget: The resolved budget.
        out: The run directory.
        say: Where progress lines go.
        stages: Wall time per stage done.
        state: What the stages produced (spec, records, nets, results...).
        summary: JSON-able facts for ``run.json`` and the report.
    """

    config: DemoConfig
    budget: Budget
    out: Path
    say: Callable[[str], None]
    stages: list[StageTime] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def show(self) -> bool:
        """Whether to draw progress bars."""
        p = self.config.progress
        return sys.stderr.isatty() if p is None else p

    @property
    def db(self) -> str:
        """The store's path."""
        return str(self.out / "store.db")

    # ------------------------------------------------------------------ stages
    def workload(self) -> None:
        """Generate the synthetic workload and its cluster."""
        from .sim.workload import WorkloadConfig, default_cluster, describe, generate

        c = self.config
        if c.trace is not None:
            self.summary["workload"] = {"trace": c.trace}
            return
        wc = WorkloadConfig(num_jobs=c.jobs, seed=c.seed,
                            mean_interarrival_s=c.mean_interarrival_s)
        jobs = generate(wc)
        spec = default_cluster(wc, c.cluster_name)
        self.state.update(synthetic=jobs, spec=spec)
        d = describe(jobs, spec)
        _write_json(self.out / "history" / "workload.json",
                    {"config": dataclasses.asdict(wc), "describe": d})
        _write_json(self.out / "history" / "cluster.json", spec.to_dict())
        self.summary["workload"] = {
            "kind": "synthetic gpu", "jobs": len(jobs), "seed": c.seed,
            "mean_interarrival_s": c.mean_interarrival_s,
            "offered_load": d.get("offered_load"), "users": d.get("users"),
            "span_days": d["span_s"] / 86400,
        }
        self.say(f"  {len(jobs)} jobs from {d['users']} users over {d['span_s'] / 86400:.1f}"
                 f" days, offered load {d.get('offered_load', 0):.0%}; cluster"
                 f" {spec.name}: {spec.num_nodes} nodes, {spec.total_gpus} GPUs,"
                 f" {len(spec.switches.leaves)} leaf switches")

    def history(self) -> None:
        """Replay under the Slurm baseline and write the sacct dump."""
        from slurm_plugin.slurm.parse import format_sacct_row, sacct_header

        from .imitate import replay_history
        from .sim import metrics
        from .sim.policies import make_policy
        from .sim.slurm import SchedulerOptions
        from .sim.state import Cluster, build_jobs
        from .sim.workload import replay_records

        if self.config.trace is not None:
            return
        jobs, spec = self.state["synthetic"], self.state["spec"]
        records = replay_records(jobs, spec)
        cl = Cluster.from_spec(spec)
        table = build_jobs(records, cl,
                           locality={j.job_id: j.locality_sensitivity for j in jobs})
        hist, res = replay_history(records, table, cl, make_policy("multifactor"),
                                   SchedulerOptions(), seed=self.config.seed,
                                   speed_model=self.config.speed)
        m = metrics.compute(res)
        m.pop("series", None)
        _write_json(self.out / "history" / "slurm.json", m)
        dump = self.out / "history" / "sacct.txt"
        dump.write_text("\n".join([sacct_header(), *(format_sacct_row(r) for r in hist)])
                        + "\n", encoding="utf-8")
        self.state["dump"] = dump
        self.summary["incumbent"] = {"jobs": len(hist), "wait_mean_s": m["wait_s"]["mean"],
                                     "bsld_mean": m["bsld"]["mean"],
                                     "utilisation": m["utilisation"]}
        self.say(f"  incumbent Slurm (multifactor + EASY backfill, tree placement): mean wait"
                 f" {m['wait_s']['mean']:,.0f} s, mean bsld {m['bsld']['mean']:.2f}; wrote"
                 f" {dump.relative_to(self.out)} ({len(hist)} jobs)")

    def ingest(self) -> None:
        """``rlsched db init`` and ``rlsched ingest`` into the run's store."""
        from db.cli import db as db_group
        from db.ingest_cli import ingest as ingest_group
        from db.store import Store

        c = self.config
        log = _invoke(db_group, ["--db", self.db, "init"], "db")
        if c.trace is None:
            # what a live `rlsched ingest sacct` records from scontrol: the layout
            with Store.open(self.db) as store:
                store.cluster(c.cluster_name, self.state["spec"])
            args = ["sacct", "--db", self.db, "--file", str(self.state["dump"]),
                    "--cluster", c.cluster_name]
        else:
            from .sim.load import from_trace, trace_kind

            kind = trace_kind(c.trace)
            args = [kind, c.trace, "--db", self.db, "--cluster", c.cluster_name]
            if kind == "philly":  # no machine size in a Philly CSV: size it from the jobs
                size = from_trace(c.trace, limit=c.jobs).spec.num_nodes
                args += ["--nodes", str(size)]
        log += _invoke(ingest_group, args, "ingest")
        (self.out / "history").mkdir(parents=True, exist_ok=True)
        (self.out / "history" / "ingest.txt").write_text(
            f"$ rlsched ingest {' '.join(args)}\n{log}", encoding="utf-8")
        for line in log.strip().splitlines():
            self.say(f"  {line}")

    def load(self) -> None:
        """Read the history back from the store."""
        from .sim.load import from_store
        from .sim.state import Cluster, build_jobs

        c = self.config
        inp = from_store(self.db, c.cluster_name, limit=c.jobs,
                         missing_limits=c.missing_limits)
        cl = Cluster.from_spec(inp.spec)
        jobs = build_jobs(inp.records, cl)
        if jobs.n < 50:
            raise click.ClickException(f"{inp.source}: only {jobs.n} jobs can be replayed"
                                       f" (skipped: {dict(jobs.skipped)}); need 50 or more")
        self.state.update(spec=inp.spec, records=inp.records, cluster=cl, jobs=jobs)
        if c.trace is not None:
            _write_json(self.out / "history" / "cluster.json", inp.spec.to_dict())
        self.summary["store"] = {"source": inp.source, "records": len(inp.records),
                                 "replayed": jobs.n, "skipped": dict(jobs.skipped),
                                 "cluster": {"name": inp.spec.name,
                                             "nodes": inp.spec.num_nodes,
                                             "gpus": inp.spec.total_gpus,
                                             "cpus": inp.spec.total_cpus,
                                             "leaves": len(inp.spec.switches.leaves)}}
        self.say(f"  {len(inp.records)} records from {self.db} ({inp.source}), {jobs.n}"
                 " replayable")

    def imitation(self) -> None:
        """Imitate the history's decisions."""
        from .imitate import place_head_learned

        d = self.out / "imitation"
        net, rep, ck = self._imitate(self.state["records"], None, d / "imitation.pt")
        _write_json(d / "report.json", rep.to_dict())
        plot_imitation(rep.history, d / "curves.png")
        # RL starts from this net unless the teacher stage finds a better order (stages
        # may run without it: replay-live trains with imitation, rl, select, export)
        self.state.update(imitation_net=net, imitation_ck=ck,
                          place_trained=place_head_learned(rep.stats),
                          warm_net=net, warm_from="history", teacher_ck=None)
        test = rep.metrics.get("test") or rep.metrics.get("val") or {}
        net_m, fifo_m = test.get("net", {}), test.get("fifo", {})
        bf_m = test.get("fifo_backfill", {})
        self.summary["imitation"] = {"best_epoch": rep.best_epoch, "splits": rep.splits,
                                     "test_top1": net_m.get("top1"),
                                     "test_top5": net_m.get("top5"),
                                     "fifo_top1": fifo_m.get("top1"),
                                     "fifo_backfill_top1": bf_m.get("top1"),
                                     "prior_alone": rep.prior_alone}
        if net_m:
            self.say(f"  {rep.splits} decisions; held-out agreement with the site's"
                     f" scheduler: top-1 {net_m['top1']:.1%}, top-5 {net_m['top5']:.1%}"
                     f" (FIFO order: top-1 {fifo_m.get('top1', float('nan')):.1%}"
                     + (f"; FIFO with EASY backfill: {bf_m['top1']:.1%}" if bf_m else "")
                     + ")")
        if rep.prior_alone:
            self.say("  the fitted prior alone agreed at least as well as the trained"
                     " job head on the validation decisions: the net orders by it alone")

    def _nets(self) -> dict[str, Path]:
        """The imitation checkpoints by model name: ``imitation``, and ``teacher`` if any."""
        nets = {"imitation": self.state["imitation_ck"]}
        if self.state.get("teacher_ck") is not None:
            nets["teacher"] = self.state["teacher_ck"]
        return nets

    def _imitate(self, records: Any, teacher: str | None, ck: Path) -> tuple[Any, Any, Path]:
        """Imitate ``records``' starts and save the net as ``ck``: ``(net, report, ck)``.

        ``teacher``: the order the records come from (``None``: the history's own).
        """
        from .imitate import ImitationConfig, place_head_learned, train_imitation
        from .policy import PLACE_TRAINED, save_checkpoint

        c, b = self.config, self.budget
        icfg = ImitationConfig(epochs=b.imitation_epochs, max_decisions=b.imitation_decisions,
                               seed=c.seed, train=c.train, val=c.val, threads=c.threads,
                               progress=self.show, teacher=teacher)
        net, rep = train_imitation(records, self.state["spec"], icfg)
        ck.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(ck, net, extra={
            "cluster": self.state["spec"].to_dict(),
            "training": {"algorithm": _start_label(teacher), "config": icfg.to_dict(),
                         "window": self._window()},
            "imitation": rep.to_dict(), PLACE_TRAINED: place_head_learned(rep.stats)})
        return net, rep, ck

    def teacher(self) -> None:
        """Choose RL's warm start: the history's net, or a net imitating a better order."""
        from .evaluate import pick_teacher, teacher_candidates
        from .imitate import place_head_learned, replay_history
        from .sim.policies import BASELINES
        from .sim.slurm import SchedulerOptions

        c = self.config
        if c.teacher == "history":
            self.summary["teacher"] = {"choice": "history"}
            self.say("  RL starts from the net imitating the site's scheduler (--teacher"
                     " history)")
            return
        jobs, cl = self.state["jobs"], self.state["cluster"]
        scores: dict[str, float] = {}
        if c.teacher == "best":
            # (the candidates include the incumbent's slurm, which warm_teacher reads)
            _, scores = pick_teacher(jobs, cl, speed_model=c.speed, seed=c.seed,
                                     train=c.train, val=c.val,
                                     candidates=sorted(teacher_candidates()))
            ranked = sorted(scores, key=lambda n: (scores[n], n))
            self.say("  mean bsld of the jobs before the test period: "
                     + ", ".join(f"{n} {scores[n]:.3f}" for n in ranked[:5]) + ", ...")
            best = warm_teacher(scores)
            if best is None:
                self.summary["teacher"] = {"choice": "history", "bsld_mean": scores,
                                           "why": "no order beat the incumbent's"}
                self.say("  no order beats the incumbent Slurm there: RL starts from the"
                         " net imitating the site's scheduler")
                return
            name = best
        else:
            name = c.teacher
        policy, opts = BASELINES[name].build(None, SchedulerOptions())
        records, _ = replay_history(self.state["records"], jobs, cl, policy, opts,
                                    seed=c.seed, speed_model=c.speed)
        net, rep, ck = self._imitate(records, name, self.out / "imitation" / "teacher.pt")
        # RL's checkpoints carry the head they start from: the teacher's
        self.state.update(warm_net=net, warm_from=name, teacher_ck=ck,
                          place_trained=place_head_learned(rep.stats))
        test = (rep.metrics.get("test") or rep.metrics.get("val") or {}).get("net", {})
        self.summary["teacher"] = {"choice": name, "bsld_mean": scores,
                                   "test_top1": test.get("top1"),
                                   "prior_alone": rep.prior_alone}
        self.say(f"  RL starts from a net imitating {name} ({BASELINES[name].help}):"
                 f" held-out top-1 {test.get('top1', float('nan')):.1%}"
                 + (", by its prior alone" if rep.prior_alone else ""))

    def _window(self) -> dict[str, Any]:
        from .evaluate import time_split

        jobs = self.state.get("jobs")
        if jobs is None:
            return {}
        return time_split(jobs.n, self.config.train, self.config.val).to_dict(jobs)

    def rl(self) -> None:
        """Improve the imitation policy by RL in the simulator."""
        from . import rl
        from .policy import PLACE_TRAINED

        c, b = self.config, self.budget
        algo_cls = rl.ALGORITHMS[c.algo].config_cls
        names = {f.name for f in fields(algo_cls)}
        algo_cfg = algo_cls(**({"episodes": b.rl_episodes} if "episodes" in names else {}))
        tcfg = rl.TrainConfig(algo=c.algo, budget_steps=b.rl_steps, seed=c.seed,
                              train_share=c.train, val_share=c.val,
                              episode_jobs=b.rl_episode_jobs, val_jobs=b.rl_val_jobs,
                              speed_model=c.speed, eval_every=b.rl_eval_every,
                              actions=c.actions,
                              threads=c.threads, progress=self.show)
        spec = rl.make_spec(self.state["jobs"], self.state["cluster"], tcfg)
        d = self.out / "rl"
        d.mkdir(parents=True, exist_ok=True)
        meta = {"cluster": self.state["spec"].to_dict(),
                PLACE_TRAINED: self.state["place_trained"],  # (the head it starts from)
                "training": {"algorithm": f"{_start_label(self.state['warm_from'])}"
                                          f" + {c.algo}",
                             "config": {"train": tcfg.to_dict(), "algo": algo_cfg.to_dict()},
                             "window": self._window()}}
        res = rl.train(spec, tcfg, algo_cfg, init=self.state["warm_net"], out=d, meta=meta)
        self.state.update(rl_result=res)
        val = res.curves.get("val", [])
        first = val[0].get(tcfg.val_metric) if val else None
        self.summary["rl"] = {"algorithm": c.algo, "updates": res.updates, "steps": res.steps,
                              "best": res.best, "val_metric": tcfg.val_metric,
                              "val_start": first, "wall_s": res.wall_s}
        best = res.best.get(tcfg.val_metric)
        self.say(f"  {res.updates} updates, {res.steps:,} steps; validation {tcfg.val_metric}:"
                 f" {first if first is None else round(first, 3)} at the start"
                 f" ({'imitation' if self.state['warm_from'] == 'history' else 'teacher'}),"
                 f" best {best if best is None else round(best, 3)} at update"
                 f" {res.best.get('update')}")

    def select(self) -> None:
        """Pick the checkpoint to deploy by replaying the validation windows."""
        from .evaluate import EvalConfig, Split, evaluate, time_split
        from .guard import _geo, validation_windows, windows_that_fit
        from .sim.stepper import window

        c = self.config
        jobs = self.state["jobs"]
        sp = time_split(jobs.n, c.train, c.val)
        cands = self._nets()
        for name in ("best", "last"):
            p = self.out / "rl" / f"{name}.pt"
            if p.is_file():
                cands[f"rl-{name}"] = p
        cfg = EvalConfig(train=c.train, val=c.val, threads=c.threads, baselines=("slurm",),
                         resamples=0, windows=1, locality_targets=False)
        n_win = max(1, min(c.select_windows, windows_that_fit(jobs.n, cfg)))
        warm = sp.test_start - sp.val_start  # (as long as the period)
        per: dict[str, list[float]] = {n: [] for n in [*cands, "slurm"]}
        for a, b in validation_windows(jobs.n, cfg, n_win):
            val = window(jobs, 0, b, shift=False)
            res = evaluate(val, self.state["cluster"], cands, cfg, speed_model=c.speed,
                           seed=c.seed, progress=self.show, split=Split(val.n, a, a),
                           warmup_jobs=min(warm, a))
            for n in per:
                per[n].append(float(res.metrics[n]["bsld"]["mean"]))
        scores = {n: _geo(per[n]) for n in cands}
        chosen = min(cands, key=lambda n: (scores[n], list(cands).index(n)))
        self.state.update(selected=chosen, selected_ck=cands[chosen])
        self.summary["selection"] = {"chosen": chosen, "windows": n_win,
                                     "val_bsld_mean": scores,
                                     "slurm_val_bsld_mean": _geo(per["slurm"]),
                                     "per_window": per}
        shown = ", ".join(f"{n} {v:.3f}" for n, v in scores.items())
        where = (f"the validation period ({warm} jobs" if n_win == 1 else
                 f"{n_win} validation windows of {warm} jobs (geometric mean")
        self.say(f"  mean bsld on {where}, slurm {_geo(per['slurm']):.3f}): {shown};"
                 f" exporting {chosen}")

    def export(self) -> None:
        """Compile the chosen checkpoint to ONNX, then ``rlsched verify`` it."""
        from exporter.onnx_export import ExportConfig
        from exporter.onnx_export import export as run_export
        from exporter.verify import verify

        c, b = self.config, self.budget
        path = self.out / "model.onnx"
        res = run_export(self.state["selected_ck"], path,
                         config=ExportConfig(observations=b.parity_observations, seed=c.seed,
                                             atol=c.parity_atol),
                         progress=lambda s: self.say(f"  {s}"))
        text = _invoke(verify, [str(path)], "verify")
        (self.out / "verify.txt").write_text(f"$ rlsched verify {path.name}\n{text}",
                                             encoding="utf-8")
        self.say(f"  rlsched verify: {text.strip().splitlines()[-1]}")
        self.state.update(model=path, card_path=res.card_path)
        self.summary["model"] = {"path": str(path), "sha256": res.card["sha256"],
                                 "parity": res.parity.message()}

    def guard(self) -> None:
        """Choose the helper's starvation guard for the model on the validation period."""
        from .evaluate import EvalConfig
        from .guard import DEFAULT_UTIL_SLACK, default_windows, grid, sweep, write_sweep

        c = self.config
        cfg = EvalConfig(train=c.train, val=c.val, threads=c.threads)
        res = sweep(self.state["jobs"], self.state["cluster"], self.state["model"], grid(),
                    cfg, speed_model=c.speed, seed=c.seed, progress=self.show,
                    windows=default_windows(self.state["jobs"].n, cfg),
                    util_slack=DEFAULT_UTIL_SLACK)
        write_sweep(res, self.out / "guard", {"input": {"model": str(self.state["model"])}})
        v = res.toml_values()
        assert res.choice is not None  # (guarded settings were tried)
        row = res.rows[res.choice[0]]
        self.state["guard"] = v
        self.summary["guard"] = {**v, "why": res.choice[1], "windows": len(res.windows),
                                 "val_bsld_mean": row["bsld_mean"],
                                 "unguarded_val_bsld_mean": res.rows[0]["bsld_mean"],
                                 "slurm_val_bsld_mean": res.slurm["bsld_mean"]}
        where = ("on the validation period" if len(res.windows) == 1 else
                 f"on {len(res.windows)} validation windows (geometric mean)")
        self.say(f"  {where}: mean bsld {row['bsld_mean']:.3f} behind"
                 f" {row['setting'].label} ({res.rows[0]['bsld_mean']:.3f} without a guard,"
                 f" slurm {res.slurm['bsld_mean']:.3f}); helper.toml: starvation_limit ="
                 f" {v['starvation_limit']:.1f}, starvation_order = \"{v['starvation_order']}\"")

    def evaluate(self) -> None:
        """Evaluate the model and the imitation net against every baseline."""
        from .evaluate import TABLE_HEADERS, EvalConfig, evaluate, table_rows

        c = self.config
        g = self.state.get("guard") or {}
        ecfg = EvalConfig(train=c.train, val=c.val, threads=c.threads, **g)
        res = evaluate(self.state["jobs"], self.state["cluster"],
                       {"policy": self.state["model"], **self._nets()},
                       ecfg, speed_model=c.speed, seed=c.seed, out=self.out / "eval",
                       progress=self.show, extra={"input": self.summary.get("store", {}),
                                                  "selected": self.state.get("selected")})
        self.state["eval"] = res
        card_path: Path = self.state["card_path"]
        card = json.loads(card_path.read_text(encoding="utf-8"))
        names = res.plotted()
        card["evaluation"] = {
            "period": "test", "split": res.split.to_dict(self.state["jobs"]),
            "speed_model": c.speed, "headers": list(TABLE_HEADERS),
            "rows": [list(r) for r in table_rows(res.metrics, names)],
            "targets_passed": None if res.targets is None else res.targets["passed"],
        }
        _write_card(card_path, card)
        self.summary["evaluation"] = {
            "test_jobs": res.split.test[1] - res.split.test[0],
            "targets": res.targets,
            "bsld_mean": {n: res.metrics[n]["bsld"]["mean"] for n in res.metrics},
            "switch_on": self._switch_on(ecfg),
        }

    def _switch_on(self, ecfg: Any) -> dict[str, Any]:
        """The model and Slurm on the test period from the queue Slurm left there.

        Every job before the test period replayed under the ``slurm`` baseline, the model
        taking over at its first arrival (``warmup_under="slurm"``), as on the day the
        helper is switched on; the checks that read Slurm alone (:data:`SWITCH_ON_CHECKS`).
        """
        from .evaluate import SLURM, evaluate

        c = self.config
        cfg = dataclasses.replace(ecfg, baselines=(SLURM,), warmup=ecfg.train + ecfg.val,
                                  warmup_under=SLURM, locality_targets=False)
        on = evaluate(self.state["jobs"], self.state["cluster"],
                      {"policy": self.state["model"]}, cfg, speed_model=c.speed,
                      seed=c.seed)
        t = dict(on.targets or {})  # (the checks left out are n/a: ``passed`` stands)
        t["checks"] = [ch for ch in t.get("checks", []) if ch["name"] in SWITCH_ON_CHECKS]
        return {"warmup_jobs": on.warmup_jobs, "targets": t,
                "bsld_mean": {n: on.metrics[n]["bsld"]["mean"] for n in on.metrics}}

    def report(self) -> None:
        """Write ``report.html``."""
        from .report import build_report

        self._write_run()
        path = build_report(self.out)
        self.state["report"] = path
        self.say(f"  wrote {path} ({path.stat().st_size // 1024} KiB)")

    # ------------------------------------------------------------------ driver
    def _write_run(self) -> None:
        _write_json(self.out / "run.json", {
            "stages": [dataclasses.asdict(s) for s in self.stages],
            "total_s": sum(s.seconds for s in self.stages),
            "summary": self.summary,
        })

    def run(self) -> Demo:
        """Run every stage in order (:data:`STAGES`)."""
        active = [(n, t) for n, t in STAGES
                  if not (self.config.trace is not None and n in ("workload", "history"))]
        wall0 = time.perf_counter()
        for k, (name, title) in enumerate(active, 1):
            self.say(f"[{k}/{len(active)}] {title}")
            t0 = time.perf_counter()
            getattr(self, name)()
            dt = time.perf_counter() - t0
            self.stages.append(StageTime(name, title, dt))
            self.say(f"      {name} done in {dt:.1f} s")
        self.summary["total_s"] = time.perf_counter() - wall0
        self._write_run()
        if "report" in self.state:  # the report was built before its own timing: refresh
            from .report import build_report

            build_report(self.out)
        return self


#: The stages in order: ``(method of Demo, title)``.
STAGES: list[tuple[str, str]] = [
    ("workload", "synthetic GPU workload and cluster"),
    ("history", "incumbent Slurm history (simulated) as a sacct dump"),
    ("ingest", "ingest into the store (rlsched db init, rlsched ingest)"),
    ("load", "load the history back from the store"),
    ("imitation", "imitation of the site's scheduler"),
    ("teacher", "RL's warm start: the best order before the test period"),
    ("rl", "reinforcement learning in the simulator"),
    ("select", "choose the checkpoint on the validation windows"),
    ("export", "export to ONNX and verify"),
    ("guard", "choose the starvation guard on the validation period"),
    ("evaluate", "evaluation on the test period against every baseline"),
    ("report", "HTML report"),
]


def _prepare_out(cfg: DemoConfig) -> Path:
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise click.UsageError(f"--out {out} exists and is not a directory")
    present = [a for a in ARTIFACTS if (out / a).exists()]
    if present and not cfg.force:
        raise click.UsageError(f"{out} holds an earlier run ({', '.join(present[:4])}...):"
                               " give another --out, or --force to replace it")
    for a in present:
        p = out / a
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_demo(config: DemoConfig | None = None,
             say: Callable[[str], None] | None = None) -> Demo:
    """Run the demo (module docstring); returns the finished :class:`Demo`.

    Raises:
        click.ClickException: If a package is missing or a stage fails with a reason.
        click.UsageError: If ``out`` holds an earlier run and ``force`` is not set.
    """
    cfg = config or DemoConfig()
    missing = missing_packages()
    if missing:
        raise click.ClickException(
            f"rlsched demo needs {', '.join(missing)}: pip install torch==2.13.0 &&"
            " pip install 'rlsched[train,export]'")
    if cfg.trace is not None and not Path(cfg.trace).is_file():
        raise click.UsageError(f"--trace {cfg.trace}: no such file")
    out = _prepare_out(cfg)
    budget = resolve_budget(cfg.budget)
    _write_json(out / "config.json", {"demo": cfg.to_dict(), "budget": budget.to_dict(),
                                      "speed_model": cfg.speed,
                                      "cluster_name": cfg.cluster_name})
    return Demo(cfg, budget, out, say or click.echo).run()


def _final_table(d: Demo) -> None:
    from slurm_plugin.output import table

    from .evaluate import TABLE_HEADERS, print_pairs, print_targets

    res = d.state["eval"]
    lo, hi = res.split.test
    click.echo("")
    click.echo(f"test period: the last {hi - lo} jobs (never seen in training), speed model"
               f" {res.speed_model}")
    table(TABLE_HEADERS, res.table())
    print_targets(res.targets)
    print_pairs(res.pairs)
    on = ((d.summary.get("evaluation") or {}).get("switch_on") or {}).get("targets")
    if on:
        click.echo("from the queue the incumbent Slurm left at the test period's start (the"
                   " day the helper is switched on):")
        print_targets(on)
    total = sum(s.seconds for s in d.stages)
    click.echo(f"\ndone in {total / 60:.1f} min: open {d.out / 'report.html'}")


@click.command("demo")
@click.option("--jobs", type=click.IntRange(min=50),
              help="Jobs of the synthetic workload, or the first jobs of --trace (default 3000).")
@click.option("--budget", help="Training budget: tiny, small (default), medium, or a number of"
                               " RL steps (e.g. 50000).")
@click.option("--out", type=click.Path(file_okay=False),
              help="Run directory (default ./rlsched-demo).")
@click.option("--seed", type=int, help="Seed of everything (default 0).")
@click.option("--trace", type=click.Path(exists=True, dir_okay=False),
              help="Run the same pipeline on a trace (SWF, ANL SWF, Philly CSV): ingested"
                   " with rlsched ingest swf/philly, its logged starts imitated.")
@click.option("--speed-model", type=click.Choice(["none", "locality", "bandwidth"]),
              help="How run times depend on placement (default: locality; none for SWF).")
@click.option("--missing-limits", type=click.Choice(["run", "users"]),
              help="Time limits of a --trace that records none: run (each job's run time,"
                   " the default) or users (modelled user requests the policy sees too).")
@click.option("--algo", help="RL algorithm: ppo (default), a2c, dqn, reinforce, cem.")
@click.option("--actions", type=click.Choice(["fits", "queue"]),  # trainer.env.ACTIONS
              help="What RL's agent chooses among: queue (default), an order of the whole"
                   " queue Slurm walks with EASY backfill, as the helper deploys the net, or"
                   " fits, the jobs that fit now (train rl's default).")
@click.option("--teacher", help="RL's warm start: best (default: the order with the lowest"
                                " mean bsld before the test period, imitated when it beats"
                                " the incumbent Slurm there), history (the net imitating the"
                                " site's scheduler), or a baseline name.")
@click.option("--select-windows", type=click.IntRange(min=1),
              help="Periods the exported checkpoint is chosen on: the validation period and"
                   " as many of its length before it (default 4, fewer when fewer fit;"
                   " 1: the validation period alone), by the geometric mean of their mean"
                   " bounded slowdowns, as the guard is chosen.")
@click.option("--force", is_flag=True, default=None,
              help="Replace the artifacts of an earlier run in --out.")
def demo(**kwargs: Any) -> None:
    """Run the whole product end to end on a synthetic GPU cluster (or a trace).

    A seeded synthetic workload on 16 nodes x 8 GPUs in 4 leaf switches; its history
    under the incumbent Slurm (multifactor priority, EASY backfill) written as a sacct
    dump and ingested into an SQLite store with rlsched ingest; imitation of that
    Slurm; RL in the simulator from that net, or from a net imitating the best order
    before the test period when one beats Slurm there (--teacher); the checkpoint
    chosen on the validation windows; export to ONNX and verify; evaluation against
    every baseline on the last 20% of the jobs (never seen in training); and a
    self-contained HTML report. About 3 minutes on 2 cores with the default budget.
    """
    try:
        cfg = resolve(**kwargs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        d = run_demo(cfg)
    except (ValueError, KeyError, OSError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    _final_table(d)
