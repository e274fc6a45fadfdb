"""``rlsched replay-live``: a window of a trace on a real Slurm, with and without the helper.

The end-to-end check of the product, and of the simulator's fidelity:

1. **Workload.** The trace's window (``--since``/``--window``/``--jobs``) becomes sleep
   jobs (:func:`trainer.sim.fidelity.scale_jobs`): arrivals, run times and time limits
   divided by ``--speedup``; node requests mapped from the trace's machine onto the
   cluster (``ceil(nodes x cluster nodes / trace nodes)``, at least 1, at most the
   cluster); GPU requests (Philly-style traces) kept as they are; runs clipped to
   ``[--min-run, --max-run]`` s; time limits rounded up to whole minutes (Slurm's
   unit), never below the run plus 5 s, so no job is killed. The trace's users are
   mapped round-robin, in order of first appearance, onto ``--users`` local users
   (``rlschedu0``...; ``--create-users`` adds the missing ones with ``useradd``), and
   each job is submitted as its user (``runuser -u USER -- sbatch ...``).
2. **Policy.** ``--model``, or one trained here on the trace's earlier period (the
   ``--train-jobs`` jobs before the window, mapped the same way): their history as
   Slurm, configured as the live cluster is, would run them on it (a replay), then
   imitation, RL, the choice of checkpoint on the validation period and the export to
   ONNX, with the budgets of ``rlsched demo`` (:mod:`trainer.demo`).
3. **Forecast.** The simulator replays the window as submitted under "Slurm as
   configured" (priority weights and scheduler options of the live ``scontrol show
   config``) and under the policy as the helper of run 2 deploys it: re-ranked every
   ``--interval`` s, behind its starvation guard (:func:`forecast_policy`,
   :func:`trainer.fidelity_live.predict`).
4. **Run 1, Slurm alone**, then **run 2, Slurm with ``rlsched helper run --mode
   enforce``** (a subprocess with a configuration file written here; cycle
   ``--interval`` s; starvation limit 2 days / speedup), each submitting the jobs at
   their arrival times, waiting until every job has left the queue and reading them
   back from ``sacct`` (:func:`trainer.fidelity_live.run_live`); the records go into
   the store (``rlsched ingest``'s :meth:`db.store.Store.ingest`, source
   ``replay-live:<job name>``), where the helper writes its audit too. During run 2 the
   queue is sampled (``squeue`` + ``sprio``) every ``--interval`` s.
5. **Checks and figures.** Every job accounted for (completed, none lost, none
   stuck); the helper's audit against what Slurm recorded (:func:`check_audit`); from
   sacct, with the simulator's own metric code (:func:`trainer.fidelity_live.
   observed_result`, :func:`trainer.sim.metrics.compute`): mean and p99 wait, bounded
   slowdown (tau 10 s), JCT, the share of multi-node jobs within one leaf switch, for
   both runs, next to the simulator's forecast: the gap is the fidelity figure.

"Not worse" (:func:`not_worse`): the helper run's mean bounded slowdown and mean wait
may exceed Slurm's by at most :data:`TOLERANCE` (10 % plus 0.25 of bsld or 3 s of
wait): two live runs of the same jobs under the same scheduler already differ by
that much, each start moving by Slurm's 1-2 s of reaction time on runs of a few
seconds.

Output (``--out``): ``results.json`` (configuration, workload, every figure, per-job
starts), ``workload.json``, ``train/`` (the policy trained here), ``helper/`` (its
configuration, state and log). Refuses to run on a cluster not named ``--cluster``
(default ``testcluster``) or with jobs in the queue.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import click

from slurm_plugin.helper.config import STEERING

__all__ = ["RUNS", "TOLERANCE", "AuditCheck", "HelperProcess", "QueueSampler",
           "ReplayLiveConfig", "Workload", "build_workload", "check_audit", "headline",
           "not_worse", "replay_live", "run_replay"]

#: The runs, in order: Slurm alone, then Slurm with the helper.
RUNS = ("slurm", "helper")
#: Helper steerings a live replay can run: every one the helper knows.
STEERINGS = tuple(STEERING)

#: How much worse than Slurm alone the helper run may be: (relative, bsld, wait s).
TOLERANCE = (0.10, 0.25, 3.0)

#: Epoch of the simulated clock of the training period and the forecasts.
T0 = 1_700_000_000


# ---------------------------------------------------------------------------- config
@dataclass(frozen=True)
class ReplayLiveConfig:
    """Configuration of ``rlsched replay-live`` (the single source of its defaults)."""

    trace: str = ""
    """Trace file (SWF, ANL SWF such as Theta's, Philly-style CSV)."""
    since: str | None = None
    """Start of the window: ISO date/time (UTC) or epoch s (default: the first job)."""
    window: str | None = None
    """Length of the window in trace time (``12h``, ``2d``...; default: open)."""
    jobs: int = 300
    """Jobs of the window (the first from ``since`` by submit time)."""
    speedup: float = 500.0
    """Arrivals, run times and time limits are divided by this."""
    train_jobs: int = 1000
    """Jobs before the window that the policy is trained on (without ``model``)."""
    model: str | None = None
    """An exported policy (``model.onnx`` with its card) instead of training one."""
    budget: str = "tiny"
    """Training budget (``rlsched demo``'s: tiny, small, medium, or RL steps)."""
    runs: str = "both"
    """``both`` (Slurm alone, then with the helper), ``slurm`` or ``helper``."""
    users: int = 8
    """Local users the trace's users are mapped onto (0: submit as the caller)."""
    user_prefix: str = "rlschedu"
    """Their names: ``<prefix>0``, ``<prefix>1``..."""
    create_users: bool = False
    """Create missing users with ``useradd --system`` (a test cluster)."""
    interval: float = 2.0
    """Seconds between the helper's cycles (and between queue samples)."""
    steering: str = "reqnodes"
    """Helper steering: ``reqnodes`` (multi-node jobs to the chosen node set),
    ``switches`` (they wait up to ``switch_wait`` for one leaf switch) or ``none``."""
    switch_wait: float = 1800.0
    """With ``switches``: the wait for one leaf switch, in the trace's seconds (divided by
    ``speedup`` like every time of the run; at least 1 s)."""
    min_run: int = 2
    """Shortest scaled run, s."""
    max_run: int = 120
    """Longest scaled run, s (0: no clip)."""
    trace_nodes: int | None = None
    """Nodes of the trace's machine (default: its header's, or sized from its jobs)."""
    cluster: str = "testcluster"
    """Refuse to run unless Slurm's ClusterName is this."""
    partition: str | None = None
    """Partition to submit to (default: the cluster's default)."""
    jobdir: str = "/tmp/rlsched-testcluster/jobs"
    """Working directory of the jobs (must exist on the compute nodes)."""
    db: str | None = None
    """Store URL or SQLite file for the records and the audit ($RLSCHED_DB, else the
    default file)."""
    out: str = "rlsched-replay-live"
    """Output directory."""
    timeout: float = 1800.0
    """Seconds a run may take from its first submission until every job has ended."""
    seed: int = 0
    """Seed of the training and the replays."""
    dry_run: bool = False
    """Workload, policy and forecasts only: submit nothing."""
    progress: bool | None = None
    """Training progress bars (default: when stderr is a terminal)."""

    def __post_init__(self) -> None:
        if self.speedup <= 0 or self.interval <= 0 or self.timeout <= 0:
            raise ValueError("speedup, interval and timeout must be positive")
        if self.jobs < 1 or self.train_jobs < 0 or self.users < 0:
            raise ValueError("jobs must be >= 1, train_jobs and users >= 0")
        if self.runs not in ("both", *RUNS):
            raise ValueError(f"runs must be both, slurm or helper (got {self.runs!r})")
        if self.steering not in STEERINGS:
            raise ValueError(f"steering must be one of {', '.join(STEERINGS)} (got"
                             f" {self.steering!r})")
        if self.switch_wait <= 0:
            raise ValueError("switch_wait must be positive")
        if not self.user_prefix.isidentifier() or not self.user_prefix.islower():
            raise ValueError(f"user_prefix {self.user_prefix!r}: lower-case letters and _")

    @property
    def run_names(self) -> tuple[str, ...]:
        """The runs to make, in order."""
        return RUNS if self.runs == "both" else (self.runs,)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# ---------------------------------------------------------------------------- workload
@dataclass
class Workload:
    """The live jobs of the window and of the period before it.

    Attributes:
        jobs: The window's jobs (arrivals from 0).
        earlier: The training period's jobs (arrivals from 0 at its own first job).
        users: Trace user -> local user.
        changed: What the mapping changed in the window (see ``scale_jobs``).
        source: Trace, machine size, window bounds (trace epoch s).
    """

    jobs: list[Any]
    earlier: list[Any]
    users: dict[str, str]
    changed: dict[str, int]
    source: dict[str, Any]


def build_workload(cfg: ReplayLiveConfig, cluster_nodes: int, gpus_per_node: int
                   ) -> Workload:
    """The window and its earlier period from the trace (module docstring, step 1).

    Raises:
        ValueError: If the window is empty or a record cannot be mapped.
        OSError: If the trace cannot be read.
    """
    from .cli import _span, _when
    from .sim import fidelity, load

    inp = load.from_trace(cfg.trace)
    since = _when(cfg.since) if cfg.since else None
    window = _span(cfg.window) if cfg.window else None
    recs = load.take_slice(inp.records, since=since, window=window, limit=cfg.jobs)
    if not recs:
        raise ValueError(f"{cfg.trace}: no job in the window (since {cfg.since},"
                         f" window {cfg.window})")
    first = recs[0].submit_time
    before = [r for r in inp.records if r.submit_time < first]
    before = before[len(before) - cfg.train_jobs:] if cfg.train_jobs else []
    pool = [f"{cfg.user_prefix}{k}" for k in range(cfg.users)]
    users = fidelity.map_users([*before, *recs], pool)
    trace_nodes = cfg.trace_nodes or inp.spec.num_nodes
    kw: dict[str, Any] = dict(cluster_nodes=cluster_nodes, trace_nodes=trace_nodes,
                              min_run=cfg.min_run, max_run=cfg.max_run or None,
                              gpus_per_node=gpus_per_node, users=users)
    jobs, changed = fidelity.scale_jobs(recs, cfg.speedup, **kw)
    earlier = fidelity.scale_jobs(before, cfg.speedup, **kw)[0] if before else []
    source = {"trace": str(cfg.trace), "trace_nodes": trace_nodes, "first_submit": first,
              "last_submit": recs[-1].submit_time, "jobs": len(recs),
              "first_job_id": recs[0].job_id, "train_jobs": len(before),
              "rejected": dict(inp.rejected)}
    return Workload(jobs, earlier, users, changed, source)


def workload_summary(jobs: Sequence[Any]) -> dict[str, Any]:
    """Counts that describe a live workload (sizes, runs, limits, users, span)."""
    runs = sorted(j.run for j in jobs)
    return {
        "jobs": len(jobs),
        "arrival_span_s": max((j.arrival for j in jobs), default=0.0),
        "run_s": {"min": runs[0], "median": runs[len(runs) // 2], "max": runs[-1]}
        if runs else {},
        "nodes": dict(sorted(Counter(j.nodes for j in jobs).items())),
        "gpu_jobs": sum(1 for j in jobs if j.gpus),
        "limits_min": dict(sorted(Counter(j.limit_min for j in jobs).items())),
        "users": dict(sorted(Counter(j.user or "(caller)" for j in jobs).items())),
        "node_seconds": sum(j.run * j.nodes for j in jobs),
    }


def ensure_users(names: Iterable[str], create: bool) -> list[str]:
    """Check the local users exist; create the missing ones when ``create``.

    Returns:
        The users created.

    Raises:
        click.ClickException: If one is missing and ``create`` is off, or useradd fails.
    """
    import pwd

    created = []
    for name in sorted(set(names)):
        try:
            pwd.getpwnam(name)
            continue
        except KeyError:
            pass
        if not create:
            raise click.ClickException(
                f"local user {name!r} does not exist: add --create-users (root: useradd"
                " --system), create it yourself, or use --users 0 to submit as yourself")
        argv = ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                "--shell", "/usr/sbin/nologin", "--comment", "rlsched replay-live", name]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if proc.returncode != 0:
            raise click.ClickException(f"useradd {name} failed: {proc.stderr.strip()}")
        created.append(name)
    return created


# ---------------------------------------------------------------------------- policy
def train_policy(earlier: Sequence[Any], spec: Any, options: Any, priority: Any,
                 cfg: ReplayLiveConfig, out: Path, say: Callable[[str], None]) -> Path:
    """Train and export a policy on the earlier period (module docstring, step 2).

    The period's history is what Slurm as configured would do with its jobs on this
    cluster (a replay with the live cluster's settings); ``rlsched demo``'s stages then
    imitate it, improve it with RL, pick the checkpoint on the validation period and
    export it (``out/model.onnx``).

    Raises:
        click.ClickException: If the period is too short to train on.
    """
    from .demo import Demo, DemoConfig, resolve_budget
    from .imitate import replay_history
    from .sim import fidelity
    from .sim.policies import make_policy
    from .sim.state import Cluster, build_jobs

    if len(earlier) < 50:
        raise click.ClickException(
            f"only {len(earlier)} jobs before the window to train on (50 at least): move"
            " the window later (--since), raise --train-jobs, or give --model")
    cluster = Cluster.from_spec(spec)
    records = fidelity.nominal_records(earlier, T0, cluster=spec.name)
    table = build_jobs(records, cluster)
    history, _ = replay_history(records, table, cluster,
                                make_policy("multifactor", priority, options.placement),
                                options, seed=cfg.seed)
    demo = Demo(DemoConfig(out=str(out), budget=cfg.budget, seed=cfg.seed,
                           speed_model="none", cluster=spec.name, progress=cfg.progress),
                resolve_budget(cfg.budget), out, say)
    demo.state.update(records=history, spec=spec, cluster=cluster,
                      jobs=build_jobs(history, cluster))
    for stage in ("imitation", "rl", "select", "export"):
        t = time.perf_counter()
        say(f"  training: {stage}")
        getattr(demo, stage)()
        say(f"  training: {stage} done in {time.perf_counter() - t:.0f} s")
    return Path(demo.state["model"])


def live_switch_wait(cfg: ReplayLiveConfig) -> float:
    """The helper's ``switch_wait`` in the sped-up run: the trace's, over the speedup."""
    return max(1.0, cfg.switch_wait / cfg.speedup)


def live_starvation_limit(cfg: ReplayLiveConfig) -> float:
    """The helper's starvation limit in the sped-up run: 2 days over the speedup.

    At least one cycle (``interval``).
    """
    return max(cfg.interval, 2 * 86400 / cfg.speedup)


def forecast_policy(model: Path, steering: str, placement: str, switch_wait: float = 0.0,
                    *, rescore: float | None = None, starvation_limit: float = 0.0) -> Any:
    """The policy the helper runs, as a simulator policy.

    Its placement when it steers node lists, Slurm's otherwise; with ``switches``, its
    wait for one leaf switch; re-ranked every ``rescore`` seconds (its cycle) behind its
    starvation guard (``starvation_limit``, oldest first; 0: none).
    """
    from .evaluate import load_policy

    wait = switch_wait if steering == "switches" else 0.0
    return load_policy(model, placement="policy" if steering == "reqnodes" else placement,
                       switch_wait=wait, rescore=rescore, starvation_limit=starvation_limit)


# ---------------------------------------------------------------------------- helper
class HelperProcess:
    """``rlsched helper run --mode enforce`` as a subprocess, for the length of a run.

    Writes its configuration (``helper.toml``, mode 0600) into ``directory``; its JSON
    log goes to ``helper.log`` there. :meth:`start` waits for the first cycle;
    :meth:`stop` sends SIGTERM (SIGKILL after 30 s).
    """

    def __init__(self, directory: Path, settings: Mapping[str, Any]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "helper.toml"
        self.state_file = self.dir / "state.json"
        self.log = self.dir / "helper.log"
        lines = [f"{k} = {_toml(v)}" for k, v in settings.items()]
        lines.append(f"state_file = {_toml(str(self.state_file))}")
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.config.chmod(0o600)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> None:
        """Start the helper; return after its first cycle.

        Raises:
            RuntimeError: If it exits or records no cycle within ``timeout`` s.
        """
        if self.state_file.exists():
            self.state_file.unlink()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - an argument list, no shell
                [sys.executable, "-m", "slurm_plugin", "helper", "run", "--config",
                 str(self.config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while self.cycles() < 1:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the helper exited with {self.proc.returncode}; see"
                                   f" {self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the helper made no cycle in {timeout:.0f} s; see"
                                   f" {self.log}")
            time.sleep(0.2)

    def cycles(self) -> int:
        """Cycles recorded in the state file so far."""
        try:
            return int(json.loads(self.state_file.read_text(encoding="utf-8"))["cycles"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def stop(self) -> int | None:
        """Stop the helper (SIGTERM, SIGKILL after 30 s); its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


class QueueSampler(threading.Thread):
    """Samples the run's pending jobs (``squeue`` + ``sprio``) every ``interval`` s.

    Attributes:
        samples: ``(epoch s, job id, site factor, required nodes)`` per pending job of
            the run per sample.
        errors: Samples that failed (Slurm busy): skipped.
    """

    def __init__(self, client: Any, name: str, interval: float) -> None:
        super().__init__(daemon=True, name="rlsched-queue-sampler")
        self.client = client
        self.name_ = name
        self.interval = interval
        self.samples: list[tuple[float, int, int, tuple[str, ...]]] = []
        self.errors = 0
        self._halt = threading.Event()

    def run(self) -> None:
        """Sample until :meth:`stop`."""
        from slurm_plugin.slurm.errors import SlurmError
        from slurm_plugin.slurm.types import PENDING

        while not self._halt.is_set():
            try:
                jobs = self.client.jobs((PENDING,))
                t = time.time()
                self.samples += [(t, j.job_id, int(j.site_factor or 0), j.required_nodes)
                                 for j in jobs if j.name == self.name_ and j.is_pending]
            except SlurmError:
                self.errors += 1
            self._halt.wait(self.interval)

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._halt.set()
        self.join(timeout=60)


# ---------------------------------------------------------------------------- checks
@dataclass
class AuditCheck:
    """The helper's audit log against what Slurm recorded (see :func:`check_audit`).

    Attributes:
        entries: Audit entries of the run, per mode.
        changes: Changes in effect (``enforce`` entries without a ``failed`` twin) per
            field.
        foreign: Audited job ids that are not the run's.
        after_start: Jobs with a change in effect recorded after their start that no
            race explains: a node list (the client checks the job is pending first), or
            a site factor more than one cycle (``interval`` + 1 s) after the start.
        raced: Jobs whose site factor was set in the cycle during which they started
            (read pending, started before the write; Slurm accepts a site factor on a
            running job, where it changes nothing): counted, not a failure.
        steered: Jobs whose last steering was in effect when they started.
        off_steer: Of them, jobs that ran on a node outside their steered set.
        samples: Queue samples compared.
        shown: Of them, samples showing a non-zero site factor.
        unexplained: Samples showing a site factor the audit log never set on that job
            by then: ``(job, site factor)``.
        settled: Share of samples of jobs the helper had set, at least one cycle
            earlier, whose site factor equals the last value the audit log set (a
            figure, not a check: a cycle that changes many jobs applies them one
            ``scontrol update`` at a time, seconds after the audit under load).
        left_behind: What ``rlsched helper reset`` would still undo after the run.
    """

    entries: dict[str, int]
    changes: dict[str, int]
    foreign: list[int]
    after_start: list[int]
    raced: list[int]
    steered: int
    off_steer: list[int]
    samples: int
    shown: int
    unexplained: list[tuple[int, int]]
    settled: float | None
    left_behind: int

    @property
    def ok(self) -> bool:
        """Every check passed."""
        return not (self.foreign or self.after_start or self.off_steer or self.unexplained
                    or self.left_behind)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (with ``ok``)."""
        return {**dataclasses.asdict(self), "ok": self.ok}


def check_audit(entries: Sequence[Any], records: Sequence[Any], run_ids: Iterable[int],
                samples: Sequence[tuple[float, int, int, tuple[str, ...]]], *,
                interval: float, left_behind: int = 0) -> AuditCheck:
    """Compare the helper's audit log of a run with sacct and with queue samples.

    Args:
        entries: The run's audit entries (:class:`db.store.AuditRecord`), oldest first.
        records: sacct records of the run's jobs.
        run_ids: The run's job ids.
        samples: :attr:`QueueSampler.samples`.
        interval: The helper's cycle, s (a sample is "settled" one cycle after a change).
        left_behind: Changes ``rlsched helper reset`` would still make (computed by the
            caller with :func:`slurm_plugin.helper.actuate.plan_reset`).

    A change counts as in effect unless a ``failed`` entry of the same job, field and
    value follows it (Slurm refused it). Audit times and sacct times are whole seconds,
    so "after the start" means a later second. A cycle reads the queue, then decides,
    audits and applies: a job that starts in between gets its site factor after its
    start (``raced``); a later change would mean the helper changed a job it saw
    running (``after_start``).
    """
    from slurm_plugin.helper.actuate import parse_nodes

    ids = set(run_ids)
    by_id = {r.job_id: r for r in records}
    failed = Counter((e.job_id, e.field, e.new_value) for e in entries if e.mode == "failed")
    live: list[Any] = []
    for e in entries:
        if e.mode != "enforce":
            continue
        key = (e.job_id, e.field, e.new_value)
        if failed[key]:
            failed[key] -= 1
            continue
        live.append(e)
    after: set[int] = set()
    raced: set[int] = set()
    for e in live:
        start = by_id[e.job_id].start_time if e.job_id in by_id else None
        if start is None or e.created_at <= start:
            continue
        if e.field == "site_factor" and e.created_at <= start + interval + 1:
            raced.add(e.job_id)
        else:
            after.add(e.job_id)
    steer: dict[int, tuple[str, ...] | None] = {}
    set_values: dict[int, list[tuple[int, int]]] = {}
    for e in live:
        if e.field == "req_nodes":
            steer[e.job_id] = parse_nodes(e.new_value)
        elif e.field == "site_factor" and e.new_value is not None:
            set_values.setdefault(e.job_id, []).append((e.created_at, int(e.new_value)))
    steered = [j for j, nodes in steer.items() if nodes and j in by_id]
    off = sorted(j for j in steered if not set(by_id[j].nodes) <= set(steer[j] or ()))
    unexplained: list[tuple[int, int]] = []
    agree = total = 0
    for t, job, sf, _req in samples:
        hist = set_values.get(job, [])
        if sf and sf not in {v for at, v in hist if at <= t + 1}:
            unexplained.append((job, sf))
        prior = [v for at, v in hist if at <= t - interval]
        if prior and not any(t - interval < at <= t + 1 for at, _ in hist):
            total += 1
            agree += int(sf == prior[-1])
    return AuditCheck(
        entries=dict(Counter(e.mode for e in entries)),
        changes=dict(Counter(e.field for e in live)),
        foreign=sorted({e.job_id for e in entries} - ids), after_start=sorted(after),
        raced=sorted(raced), steered=len(steered), off_steer=off, samples=len(samples),
        shown=sum(1 for x in samples if x[2]), unexplained=sorted(set(unexplained)),
        settled=agree / total if total else None, left_behind=left_behind)


def headline(m: Mapping[str, Any]) -> dict[str, Any]:
    """The figures the issue asks for, from :func:`trainer.sim.metrics.compute`'s dict."""
    return {"jobs": m["jobs"], "wait_mean": m["wait_s"]["mean"], "wait_p99": m["wait_s"]["p99"],
            "bsld_mean": m["bsld"]["mean"], "bsld_p99": m["bsld"]["p99"],
            "jct_mean": m["jct_s"]["mean"], "jct_p99": m["jct_s"]["p99"],
            "single_leaf_share": m["single_leaf_share"], "multi_node_jobs": m["multi_node_jobs"],
            "makespan": m["makespan_s"], "util_nodes": m["utilisation"]["nodes"]}


def not_worse(helper: Mapping[str, Any], slurm: Mapping[str, Any],
              tolerance: tuple[float, float, float] = TOLERANCE) -> dict[str, Any]:
    """Whether the helper run's mean bsld and wait are within the tolerance of Slurm's.

    ``helper <= slurm x (1 + rel) + abs`` for mean bounded slowdown (``abs`` in bsld
    units) and mean wait (``abs`` in seconds); see :data:`TOLERANCE`.
    """
    rel, a_bsld, a_wait = tolerance
    lim_b = slurm["bsld_mean"] * (1 + rel) + a_bsld
    lim_w = slurm["wait_mean"] * (1 + rel) + a_wait
    return {"bsld_limit": lim_b, "wait_limit": lim_w,
            "ok": bool(helper["bsld_mean"] <= lim_b and helper["wait_mean"] <= lim_w),
            "tolerance": {"relative": rel, "bsld": a_bsld, "wait_s": a_wait}}


# ---------------------------------------------------------------------------- running
@dataclass
class _Context:
    cfg: ReplayLiveConfig
    out: Path
    say: Callable[[str], None]
    client: Any
    spec: Any
    options: Any
    priority: Any
    url: str
    tag: str
    results: dict[str, Any] = field(default_factory=dict)


def _check_cluster(ctx: _Context) -> None:
    if ctx.client.run(["squeue", "--noheader", "--format=%i"]).split():
        raise click.ClickException("the queue is not empty: other jobs would change the"
                                   " schedule; wait for them or cancel them first")


def _ingest(ctx: _Context, name: str, records: Sequence[Any]) -> dict[str, Any]:
    from db.store import Store

    with Store.open(ctx.url) as store:
        cid = store.cluster(ctx.spec.name, ctx.spec)
        s = store.ingest(cid, f"replay-live:{name}", records)
    return {"inserted": s.inserted, "updated": s.updated, "quarantined": s.quarantined}


def _live_run(ctx: _Context, which: str, jobs: Sequence[Any], model: Path | None
              ) -> dict[str, Any]:
    """One live run (Slurm alone, or with the helper) and its checks."""
    from slurm_plugin.helper.actuate import plan_reset
    from slurm_plugin.slurm.types import PENDING, RUNNING

    from . import fidelity_live as live
    from .sim import metrics

    cfg = ctx.cfg
    name = f"rlsched-rl-{ctx.tag}-{which}"
    _check_cluster(ctx)
    helper: HelperProcess | None = None
    sampler: QueueSampler | None = None
    began = time.time()
    if which == "helper":
        assert model is not None
        settings = {"mode": "enforce", "model": str(model), "store": ctx.url,
                    "cluster": ctx.spec.name, "interval": cfg.interval,
                    "steering": cfg.steering, "steer_min_nodes": 2, "history_days": 0,
                    "switch_wait": live_switch_wait(cfg),
                    "starvation_limit": live_starvation_limit(cfg),
                    "backoff_max": max(cfg.interval, 30.0), "slurm_timeout": 30.0}
        helper = HelperProcess(ctx.out / "helper", settings)
        ctx.say(f"  starting rlsched helper run --mode enforce (interval {cfg.interval:g} s,"
                f" steering {cfg.steering}); log {helper.log}")
        helper.start()
        sampler = QueueSampler(ctx.client, name, cfg.interval)
        sampler.start()
    try:
        run = live.run_live(jobs, ctx.client, jobdir=cfg.jobdir, name=name,
                            partition=cfg.partition, timeout=cfg.timeout,
                            progress=lambda m: ctx.say(f"  {m}"))
    finally:
        try:
            if sampler is not None:
                sampler.stop()
        finally:
            if helper is not None:
                rc = helper.stop()
                ctx.say(f"  helper stopped (exit {rc}) after {helper.cycles()} cycles")
    states = Counter(run.states.values())
    ctx.say(f"  {len(run.submitted)} jobs in {run.wall_s:.0f} s; states {dict(states)};"
            f" max submit lag {max(run.submit_lag_s, default=0.0):.2f} s")
    real = metrics.compute(live.observed_result(run, ctx.spec, ctx.options, name=which))
    out: dict[str, Any] = {
        "name": name, "began": run.began, "wall_s": run.wall_s,
        "max_submit_lag_s": max(run.submit_lag_s, default=0.0),
        "submitted": len(run.submitted), "states": dict(states),
        "accounted": len(run.states),
        "lost": len(set(run.submitted) - set(run.states)),
        "job_ids": {str(k): v.index for k, v in sorted(run.submitted.items())},
        "starts": {str(k): v for k, v in sorted(run.starts.items())},
        "real": headline(real), "store": _ingest(ctx, name, run.records)}
    if helper is not None and sampler is not None:
        from db.store import Store

        with Store.open(ctx.url) as store:
            entries = store.audit_log(None, int(began) - 1)
        rows = [(e.job_id, e.field, e.mode, e.old_value, e.new_value) for e in entries]
        now_jobs = {j.job_id: j for j in ctx.client.jobs((PENDING, RUNNING))}
        left = len(plan_reset(rows, now_jobs)[0])
        chk = check_audit(entries, run.records, run.submitted, sampler.samples,
                          interval=cfg.interval, left_behind=left)
        out["audit"] = chk.to_dict()
        out["sample_errors"] = sampler.errors
        out["helper_cycles"] = helper.cycles()
        ctx.say(f"  audit: {chk.entries} entries, in effect {chk.changes};"
                f" {chk.samples} queue samples; checks {'passed' if chk.ok else 'FAILED'}")
    return out


def _forecasts(ctx: _Context, jobs: Sequence[Any], model: Path | None) -> dict[str, Any]:
    from . import fidelity_live as live
    from .sim import metrics

    out = {"slurm": headline(metrics.compute(live.predict(jobs, ctx.spec, ctx.options,
                                                          ctx.priority)))}
    if model is not None:
        pol = forecast_policy(model, ctx.cfg.steering, ctx.options.placement,
                              live_switch_wait(ctx.cfg), rescore=ctx.cfg.interval,
                              starvation_limit=live_starvation_limit(ctx.cfg))
        out["helper"] = headline(metrics.compute(live.predict(
            jobs, ctx.spec, ctx.options, ctx.priority, policy=pol)))
    return out


#: Rows of the printed table: (label, key, format).
_COLUMNS = (("wait mean", "wait_mean", ".1f"), ("wait p99", "wait_p99", ".0f"),
            ("bsld mean", "bsld_mean", ".3f"), ("bsld p99", "bsld_p99", ".2f"),
            ("JCT mean", "jct_mean", ".1f"), ("1-leaf", "single_leaf_share", ".2f"))


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table_rows(results: Mapping[str, Any]) -> list[list[str]]:
    """The results table: each run, real and simulated, and the gap (real - sim)."""
    rows: list[list[str]] = []
    for which in RUNS:
        run = results.get("runs", {}).get(which)
        sim = results.get("forecast", {}).get(which)
        if run is not None:
            rows.append([which, "real (sacct)", *[_fmt(run["real"][k], f)
                                                   for _, k, f in _COLUMNS]])
        if sim is not None:
            rows.append([which, "simulated", *[_fmt(sim[k], f) for _, k, f in _COLUMNS]])
        if run is not None and sim is not None:
            rows.append([which, "gap real-sim", *[
                "-" if run["real"][k] is None or sim[k] is None
                else format(run["real"][k] - sim[k], "+" + f) for _, k, f in _COLUMNS]])
    return rows


def run_replay(cfg: ReplayLiveConfig, say: Callable[[str], None] = click.echo
               ) -> dict[str, Any]:
    """Everything of the module docstring; returns the results (also in results.json).

    Raises:
        click.ClickException: On a wrong cluster, a busy queue, a missing user, a failed
            run (its jobs are cancelled), with what to do next.
    """
    from db.session import init_db, resolve_url
    from slurm_plugin.slurm.cli_backend import CliSlurmClient

    from . import fidelity_live as live

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    client = CliSlurmClient(timeout=30)
    say("[1/5] cluster and workload")
    spec, opts, prio, scfg = live.cluster_setup(client)
    if scfg.cluster_name != cfg.cluster:
        raise click.ClickException(f"the running cluster is {scfg.cluster_name!r}, not"
                                   f" {cfg.cluster!r}: not touching it (see --cluster)")
    gpn = max((n.gpus for n in spec.nodes), default=0)
    try:
        wl = build_workload(cfg, len(spec.nodes), gpn)
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    summary = workload_summary(wl.jobs)
    say(f"  cluster {spec.name}: {len(spec.nodes)} nodes, {len(spec.switches.leaves)} leaf"
        f" switches, Slurm {scfg.slurm_version}; {wl.source['jobs']} jobs of"
        f" {Path(cfg.trace).name} from job {wl.source['first_job_id']}, times /"
        f" {cfg.speedup:g}: arrivals over {summary['arrival_span_s']:.0f} s, runs"
        f" {summary['run_s']}, nodes {summary['nodes']}, limits (min)"
        f" {summary['limits_min']}; mapping changed {wl.changed}")
    url = resolve_url(cfg.db)
    init_db(url)
    tag = f"{os.getpid()}-{int(time.time())}"
    ctx = _Context(cfg, out, say, client, spec, opts, prio, url, tag)
    res = ctx.results
    res.update(config=cfg.to_dict(), cluster={"name": spec.name, "nodes": len(spec.nodes),
                                              "leaves": len(spec.switches.leaves),
                                              "slurm": scfg.slurm_version},
               source=wl.source, workload=summary, mapping_changed=wl.changed,
               users=wl.users, tolerance=TOLERANCE, runs={})
    (out / "workload.json").write_text(json.dumps(
        {"window": [dataclasses.asdict(j) for j in wl.jobs],
         "earlier": [dataclasses.asdict(j) for j in wl.earlier]}, indent=1), encoding="utf-8")
    if cfg.users and not cfg.dry_run:
        if os.geteuid() != 0:
            raise click.ClickException("submitting as the trace's users needs root"
                                       " (runuser): run as root, or use --users 0")
        made = ensure_users({j.user for j in wl.jobs}, cfg.create_users)
        if made:
            say(f"  created local users {', '.join(made)}")
    say("[2/5] policy")
    model: Path | None = None
    if "helper" in cfg.run_names:
        if cfg.model:
            model = Path(cfg.model)
            say(f"  using {model}")
        else:
            t = time.perf_counter()
            say(f"  training on the {len(wl.earlier)} jobs before the window (budget"
                f" {cfg.budget})")
            model = train_policy(wl.earlier, spec, opts, prio, cfg, out / "train", say)
            say(f"  trained and exported {model} in {time.perf_counter() - t:.0f} s")
        res["model"] = {"path": str(model)}
    say("[3/5] simulator forecast")
    res["forecast"] = _forecasts(ctx, wl.jobs, model)
    for which, m in res["forecast"].items():
        say(f"  {which}: mean wait {m['wait_mean']:.1f} s, mean bsld {m['bsld_mean']:.3f},"
            f" makespan {m['makespan']} s")
    if cfg.dry_run:
        _write(out, res)
        return res
    for k, which in enumerate(cfg.run_names, 1):
        title = "Slurm alone" if which == "slurm" else "Slurm with the helper (enforce)"
        say(f"[4/5] live run {k}/{len(cfg.run_names)}: {title}")
        try:
            res["runs"][which] = _live_run(ctx, which, wl.jobs, model)
        except (live.LiveRunError, RuntimeError) as exc:
            _write(out, res)
            raise click.ClickException(f"{which} run failed: {exc}") from None
        _write(out, res)
    say("[5/5] figures")
    runs = res["runs"]
    if "slurm" in runs and "helper" in runs:
        res["not_worse"] = not_worse(runs["helper"]["real"], runs["slurm"]["real"])
    _write(out, res)
    return res


def _write(out: Path, res: Mapping[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(res, indent=1, sort_keys=True, default=str)
                                      + "\n", encoding="utf-8")


def print_results(res: Mapping[str, Any]) -> None:
    """The results table, then the checks, on stdout."""
    from slurm_plugin.output import table

    table(["run", "source", *[c for c, _, _ in _COLUMNS]], table_rows(res))
    for which, run in res.get("runs", {}).items():
        line = (f"{which}: {run['submitted']} submitted, {run['accounted']} accounted,"
                f" states {run['states']}")
        if "audit" in run:
            a = run["audit"]
            line += (f"; audit {'ok' if a['ok'] else 'FAILED'} ({a['changes']} in effect,"
                     f" {a['steered']} steered, {a['samples']} samples)")
        click.echo(line)
    nw = res.get("not_worse")
    if nw is not None:
        click.echo(f"helper not worse than Slurm alone (mean bsld <= {nw['bsld_limit']:.3f},"
                   f" mean wait <= {nw['wait_limit']:.1f} s): {'yes' if nw['ok'] else 'NO'}")


# ---------------------------------------------------------------------------- command
@click.command("replay-live")
@click.option("--trace", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Trace file: SWF, ANL SWF (Theta) or Philly-style CSV.")
@click.option("--since", help="Window start: ISO date/time (UTC) or epoch s (default: the"
                              " trace's first job).")
@click.option("--window", help="Window length in trace time, e.g. 2d, 12h (default: open).")
@click.option("--jobs", type=click.IntRange(min=1), help="Jobs of the window (default 300).")
@click.option("--speedup", type=click.FloatRange(min=0, min_open=True),
              help="Divide arrivals, run times and time limits by this (default 500).")
@click.option("--train-jobs", type=click.IntRange(min=0),
              help="Jobs before the window the policy is trained on (default 1000).")
@click.option("--model", type=click.Path(exists=True, dir_okay=False),
              help="An exported policy (model.onnx) for the helper instead of training one.")
@click.option("--budget", help="Training budget: tiny (default), small, medium or RL steps.")
@click.option("--runs", type=click.Choice(["both", *RUNS]),
              help="Both runs (default), or only 'slurm' (alone) or 'helper'.")
@click.option("--users", type=click.IntRange(min=0),
              help="Local users the trace's users map onto (default 8; 0: submit as"
                   " yourself).")
@click.option("--create-users", is_flag=True, default=None,
              help="Create missing local users (useradd --system; test clusters).")
@click.option("--interval", type=click.FloatRange(min=0, min_open=True),
              help="Seconds between the helper's cycles (default 2).")
@click.option("--steering", type=click.Choice(list(STEERINGS)),
              help="Helper steering of multi-node jobs: reqnodes (default; to the node"
                   " set the model picks), switches (they wait for one leaf switch) or"
                   " none.")
@click.option("--switch-wait", type=click.FloatRange(min=0, min_open=True),
              help="With --steering switches: the wait for one leaf switch, in the"
                   " trace's seconds (default 1800; divided by --speedup).")
@click.option("--min-run", type=click.IntRange(min=1), help="Shortest scaled run, s (2).")
@click.option("--max-run", type=click.IntRange(min=0),
              help="Longest scaled run, s (default 120; 0: no clip).")
@click.option("--trace-nodes", type=click.IntRange(min=1),
              help="Nodes of the trace's machine (default: from the trace).")
@click.option("--cluster", help="Refuse any cluster but this one (default testcluster).")
@click.option("--partition", help="Partition to submit to (default: the cluster's default).")
@click.option("--jobdir", help="Working directory of the jobs, on the compute nodes"
                               " (default /tmp/rlsched-testcluster/jobs).")
@click.option("--db", envvar="RLSCHED_DB", default=None,
              help="Store URL or SQLite file for the records and the audit (default"
                   " $RLSCHED_DB, else the default file).")
@click.option("--out", type=click.Path(file_okay=False),
              help="Output directory (default ./rlsched-replay-live).")
@click.option("--timeout", type=click.FloatRange(min=1),
              help="Seconds one run may take (default 1800).")
@click.option("--seed", type=int, help="Seed of training and replays (default 0).")
@click.option("--dry-run", is_flag=True, default=None,
              help="Workload, policy and forecast only: submit nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def replay_live(as_json: bool, **kwargs: Any) -> None:
    """Replay a window of a trace on the real cluster, with and without the helper.

    Submits the window's jobs as sleep jobs (times divided by --speedup, node
    requests mapped onto the cluster, as the trace's users mapped onto local users)
    twice: under Slurm alone, then with 'rlsched helper run --mode enforce' and a
    policy trained on the trace's earlier period (or --model). Reads both runs back
    from sacct into the store and reports mean and p99 wait, bounded slowdown, JCT
    and the share of multi-node jobs within one leaf switch, next to the simulator's
    forecast of both runs (the gap is the simulator's fidelity), with the checks of
    the helper's audit log against what Slurm recorded. Needs root and an empty queue.
    """
    names = {f.name for f in fields(ReplayLiveConfig)}
    try:
        cfg = ReplayLiveConfig(**{k: v for k, v in kwargs.items()
                                  if k in names and v is not None})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    res = run_replay(cfg, say=lambda m: click.echo(m, err=as_json))
    if as_json:
        from slurm_plugin.output import emit_json

        emit_json(res)
        return
    print_results(res)
    click.echo(f"results: {Path(cfg.out) / 'results.json'}")
