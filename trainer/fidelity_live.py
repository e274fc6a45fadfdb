"""Live fidelity run: the same jobs on a real Slurm cluster and in the simulator.

:func:`run_live` submits :class:`~trainer.sim.fidelity.LiveJob` items to a real cluster
as ``sleep`` jobs at their arrival times (``sbatch`` with an argument list: a fixed batch
script that sleeps for its first argument, so no shell string is built from job data),
waits until all have left the queue and reads their records back with
:meth:`~slurm_plugin.slurm.cli_backend.CliSlurmClient.accounting`. :func:`cluster_setup` reads
the cluster as the simulator needs it (``ClusterSpec.from_slurm`` and the scheduler
options and priority settings of the real ``scontrol show config``), and
:func:`replay_live` replays the run's jobs under "Slurm as configured" (multifactor
priority with the config's weights, backfill per ``SchedulerType``) with Slurm's own
submit, eligible and run times. :func:`~trainer.sim.fidelity.start_deviation` then
compares the start times. :func:`predict` forecasts a run before it happens (under
Slurm, or under a learned policy), and :func:`observed_result` turns what Slurm did
into a :class:`~trainer.sim.engine.SimResult`, so :func:`trainer.sim.metrics.compute`
measures a real run with the simulator's own code.

A job with a :attr:`~trainer.sim.fidelity.LiveJob.user` is submitted as that local
user (``runuser -u USER -- sbatch ...``, an argument list; the caller must be root).

What the replay does not model (so deviations of a second or a few are expected):
Slurm reacts to events within about a second (the test cluster's
``sched_interval=1,bf_interval=1``; a job's start, its end and the release of its
nodes each take some tenths of a second), ``sacct`` times are whole seconds, and
Slurm's backfill reserves resources for every job it tests that cannot start
(``bf_max_job_test`` of them) where the replay, by default, reserves only for the first
blocked job of each partition (EASY; ``SchedulerOptions.bf_plan="conservative"`` plans
as Slurm does, for whole-node jobs).

Only for a cluster where every job may be cancelled (the test cluster): the caller
checks that. This module never cancels jobs other than those it submitted.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from db.records import JobRecord
from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.slurm import parse
from slurm_plugin.slurm.cli_backend import CliSlurmClient
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.types import SchedulerConfig

from .sim import fidelity
from .sim.engine import EngineOptions, SimResult, Simulator
from .sim.fidelity import LiveJob
from .sim.policies import Policy, make_policy
from .sim.slurm import PrioritySettings, SchedulerOptions, from_config
from .sim.state import Cluster, build_jobs

__all__ = ["SLEEP_SCRIPT", "LiveRun", "LiveRunError", "cluster_setup", "observed_result",
           "predict", "read_back", "replay_live", "run_live", "submit_argv",
           "write_sleep_script"]

#: The batch script every job runs: sleep for the first argument's seconds.
SLEEP_SCRIPT = '#!/bin/sh\n# rlsched fidelity run: sleep for $1 seconds\nexec sleep "$1"\n'

#: Job states a finished job may have (anything else: not finished yet).
_FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                    "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"})


class LiveRunError(RuntimeError):
    """A live run could not complete (its jobs were cancelled)."""


@dataclass
class LiveRun:
    """What a live run submitted and what Slurm recorded.

    Attributes:
        name: Job name shared by the run's jobs.
        submitted: Slurm job id -> the job submitted under it.
        records: ``sacct`` records of those jobs.
        began: Epoch s when the first job was due.
        wall_s: Seconds from the first submission until sacct had every record.
        submit_lag_s: Per job, how late ``sbatch`` returned after the job was due.
        plans: With ``run_live(plans=True)``: Slurm's plan, snapshot by snapshot:
            ``(epoch s, {job id: expected start})`` for each of the run's jobs pending
            then (0: ``squeue`` showed no expected start), for
            :func:`~trainer.sim.fidelity.plan_deviation`.
    """

    name: str
    submitted: dict[int, LiveJob]
    records: list[JobRecord]
    began: float
    wall_s: float
    submit_lag_s: list[float] = field(default_factory=list)
    plans: list[tuple[int, dict[int, int]]] = field(default_factory=list)

    @property
    def starts(self) -> dict[int, int]:
        """Job id -> real start time (epoch s) of the run's jobs that started."""
        return fidelity.logged_starts(r for r in self.records if r.job_id in self.submitted)

    @property
    def states(self) -> dict[int, str]:
        """Job id -> final state as sacct recorded it."""
        return {r.job_id: r.state for r in self.records if r.job_id in self.submitted}


def write_sleep_script(directory: str | os.PathLike[str]) -> str:
    """Write :data:`SLEEP_SCRIPT` into ``directory`` (created if needed); its path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "rlsched-fidelity-sleep.sh"
    if not path.exists() or path.read_text(encoding="utf-8") != SLEEP_SCRIPT:
        path.write_text(SLEEP_SCRIPT, encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def submit_argv(job: LiveJob, script: str, *, name: str, chdir: str,
                partition: str | None = None) -> list[str]:
    """The argument list that submits ``job``: ``sbatch ...``, as ``job.user`` if set.

    A job with a user is submitted with ``runuser -u USER -- sbatch ...`` (root only; the
    user name is an argument, never part of a shell string).
    """
    argv = fidelity.sbatch_argv(job, script, name=name, chdir=chdir, partition=partition)
    return ["runuser", "-u", job.user, "--", *argv] if job.user else argv


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _cancel(client: CliSlurmClient, ids: Sequence[int]) -> None:
    if ids:
        try:
            client.run(["scancel", *[str(int(i)) for i in ids]])
        except SlurmError:
            pass


class _PlanWatch:
    """Snapshots of the expected starts ``squeue`` shows for pending jobs, every ``poll`` s.

    In a thread of its own while a run lasts (``squeue --json``: one read of slurmctld's
    job table per snapshot). A failed read skips that snapshot and is counted.
    """

    def __init__(self, client: CliSlurmClient, poll: float) -> None:
        self.client = client
        self.poll = poll
        self.snapshots: list[tuple[int, dict[int, int]]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="plan-watch", daemon=True)

    def __enter__(self) -> _PlanWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.time()
            try:
                out = self.client.run(["squeue", "--all", "--json"])
                jobs, _ = parse.parse_squeue_document(out, "squeue --all --json")
            except (SlurmError, ValueError):
                self.failed += 1
            else:
                at = int((t0 + time.time()) / 2)  # the read's middle, in whole seconds
                self.snapshots.append((at, {j.job_id: j.start_time or 0 for j in jobs
                                            if j.is_pending}))
            self._stop.wait(max(0.0, self.poll - (time.time() - t0)))


def run_live(
    jobs: Sequence[LiveJob],
    client: CliSlurmClient,
    *,
    jobdir: str | os.PathLike[str],
    name: str | None = None,
    partition: str | None = None,
    timeout: float = 600.0,
    poll: float = 1.0,
    plans: bool = False,
    plans_every: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> LiveRun:
    """Submit ``jobs`` at their arrival times, wait for them, read their records back.

    Args:
        jobs: The workload (arrivals in seconds from now).
        client: The CLI Slurm client (its ``run`` executes argument lists).
        jobdir: Directory for the batch script and the jobs' working directory (must
            exist on the compute nodes: on the test cluster it is the same machine).
        name: Job name of the run's jobs (default ``rlsched-fid-<pid>-<time>``); the
            queue is watched by this name.
        partition: Partition to submit to (default: the cluster's default).
        timeout: Seconds allowed from the first submission until every job has ended.
        poll: Seconds between queue checks while waiting (and between snapshots of
            Slurm's plan, with ``plans``).
        plans: Also snapshot the expected starts of the pending jobs all along
            (:attr:`LiveRun.plans`). Each snapshot is one more read of slurmctld's job
            table, which disturbs what it measures on a deep queue (backfill yields its
            locks to the reads): on a 100-job Lublin window, one read a second moved the
            replays' mean start deviation from 17-18 s to 50-84 s.
        plans_every: Seconds between those snapshots (default ``poll``).
        progress: Called with one line of news now and then.

    Raises:
        LiveRunError: On a timeout, or when sbatch fails (the run's jobs are cancelled).
    """
    say = progress or (lambda _msg: None)
    name = name or f"rlsched-fid-{os.getpid()}-{int(time.time())}"
    script = write_sleep_script(jobdir)
    order = sorted(jobs, key=lambda j: (j.arrival, j.index))
    submitted: dict[int, LiveJob] = {}
    lags: list[float] = []
    began = time.time()
    t0 = time.monotonic()
    watch = _PlanWatch(client, plans_every or poll) if plans else None
    stack = contextlib.ExitStack()
    if watch is not None:
        stack.enter_context(watch)
    try:
        for j in order:
            delay = t0 + j.arrival - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            argv = submit_argv(j, script, name=name, chdir=str(jobdir), partition=partition)
            out = client.run(argv)
            lags.append(time.monotonic() - t0 - j.arrival)
            submitted[int(out.strip().split(";")[0])] = j
        say(f"submitted {len(submitted)} jobs in {time.monotonic() - t0:.0f} s"
            f" (max lag {max(lags, default=0.0):.2f} s)")
        deadline = t0 + timeout
        while True:
            left = _in_queue(client, name)
            if not left:
                break
            if time.monotonic() > deadline:
                raise LiveRunError(f"{len(left)} jobs still queued after {timeout:.0f} s")
            time.sleep(poll)
        stack.close()
        say(f"all jobs ended after {time.monotonic() - t0:.0f} s; reading sacct")
        records = _accounted(client, set(submitted), began, deadline=time.monotonic() + 60)
    except (SlurmError, LiveRunError, ValueError) as exc:
        stack.close()
        _cancel(client, list(submitted))
        if isinstance(exc, LiveRunError):
            raise
        raise LiveRunError(f"live run failed: {exc}") from exc
    snaps: list[tuple[int, dict[int, int]]] = []
    if watch is not None:
        mine = set(submitted)  # (other users' jobs, and none of ours: not kept)
        snaps = [(t, {j: s for j, s in snap.items() if j in mine}) for t, snap in
                 watch.snapshots]
        snaps = [(t, snap) for t, snap in snaps if snap]
        say(f"{len(snaps)} snapshots of Slurm's plan ({watch.failed} reads failed)")
    return LiveRun(name, submitted, records, began, time.monotonic() - t0, lags, snaps)


def read_back(client: CliSlurmClient, submitted: dict[int, LiveJob], began: float,
              *, name: str = "") -> LiveRun:
    """A past run again, from ``sacct`` (to replay it anew without running it again).

    ``began`` is the run's :attr:`LiveRun.began` (or any time up to 5 minutes before
    its first submission).

    Raises:
        LiveRunError: If sacct lacks a finished record of one of the jobs.
    """
    records = _accounted(client, set(submitted), began, deadline=time.monotonic())
    return LiveRun(name, dict(submitted), records, began, 0.0)


def _in_queue(client: CliSlurmClient, name: str) -> list[int]:
    out = client.run(["squeue", "--noheader", "--format=%i", f"--name={name}"])
    return [int(x) for x in out.split()]


def _accounted(client: CliSlurmClient, ids: set[int], began: float, *, deadline: float
               ) -> list[JobRecord]:
    """The ``sacct`` records of ``ids``, once every one is there with a final state and end."""
    while True:
        recs = client.accounting(_utc(began - 300), _utc(time.time() + 60))
        mine = [r for r in recs if r.job_id in ids]
        done = {r.job_id for r in mine if r.state in _FINAL and r.end_time is not None}
        if done == ids:
            return mine
        if time.monotonic() > deadline:
            missing = sorted(ids - done)
            raise LiveRunError(f"sacct lacks {len(missing)} finished jobs: {missing[:10]}")
        time.sleep(1.0)


def cluster_setup(client: CliSlurmClient) -> tuple[ClusterSpec, SchedulerOptions,
                                                PrioritySettings, SchedulerConfig]:
    """The cluster, scheduler options and priority settings as Slurm reports them."""
    cfg = client.config()
    spec = ClusterSpec.from_slurm(cfg.cluster_name, client.nodes(), client.topology())
    opts, prio = from_config(cfg)
    return spec, opts, prio, cfg


def replay_live(run: LiveRun, spec: ClusterSpec, options: SchedulerOptions,
                priority: PrioritySettings, *, end_latency: int = 0,
                engine: EngineOptions | None = None) -> SimResult:
    """Replay a live run's jobs under "Slurm as configured" (see the module docstring).

    ``end_latency`` seconds are added to every run (see
    :func:`~trainer.sim.fidelity.live_records`).
    """
    records = fidelity.live_records(run.records, run.submitted, end_latency=end_latency)
    cluster = Cluster.from_spec(spec)
    jobs = build_jobs(records, cluster)
    policy = make_policy("multifactor", priority, options.placement)
    return Simulator(jobs, cluster, policy, options, engine).run()


def predict(jobs: Sequence[LiveJob], spec: ClusterSpec, options: SchedulerOptions,
            priority: PrioritySettings, *, policy: Policy | None = None,
            engine: EngineOptions | None = None) -> SimResult:
    """Replay ``jobs`` as submitted (each sleeping exactly its run): a run's forecast.

    Under Slurm as configured (multifactor priority with ``priority``), or under
    ``policy`` (e.g. the learned policy the helper runs).
    """
    t0 = 1_700_000_000
    cluster = Cluster.from_spec(spec)
    table = build_jobs(fidelity.nominal_records(jobs, t0), cluster)
    pol = policy or make_policy("multifactor", priority, options.placement)
    return Simulator(table, cluster, pol, options, engine).run()


def observed_result(run: LiveRun, spec: ClusterSpec, options: SchedulerOptions | None = None,
                    *, name: str = "live") -> SimResult:
    """What Slurm did in a live run, as a :class:`SimResult` (for the same metrics).

    The jobs are those :func:`replay_live` replays (sacct's times, the requests as
    submitted); starts and ends are sacct's; the leaf switches each job spanned come from
    its sacct node list; utilisation counts, after each start and end, the nodes with a
    job and the CPUs and GPUs sacct says were allocated. Not known for a real run, so
    left empty: the backfilled flags (all false) and the fragmentation series.

    Raises:
        ValueError: If a job of the run did not finish (see
            :func:`~trainer.sim.fidelity.live_records`) or ran on a node the cluster
            does not have.
    """
    cluster = Cluster.from_spec(spec)
    jobs = build_jobs(fidelity.live_records(run.records, run.submitted), cluster)
    by_id = {r.job_id: r for r in run.records}
    pos = {n: k for k, n in enumerate(cluster.node_names)}
    n = jobs.n
    start = np.zeros(n, dtype=np.int64)
    leaves = np.zeros(n, dtype=np.int32)
    events: list[tuple[int, int, int]] = []  # (time, +1 start / -1 end, row)
    node_rows: list[list[int]] = []
    for i, jid in enumerate(jobs.job_id.tolist()):
        r = by_id[jid]
        start[i] = int(r.start_time or 0)
        try:
            idx = [pos[x] for x in r.nodes]
        except KeyError as exc:
            raise ValueError(f"job {jid} ran on {exc.args[0]}, not a node of {spec.name}"
                             ) from None
        node_rows.append(idx)
        leaves[i] = len({int(cluster.leaf_of[k]) for k in idx}) if idx else 1
        events += [(start[i], 1, i), (start[i] + int(jobs.run[i]), -1, i)]
    end = start + jobs.run
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at one time
    per_node = np.zeros(cluster.num_nodes, dtype=np.int64)
    cpus = gpus = 0
    ut: list[int] = []
    un: list[int] = []
    uc: list[int] = []
    ug: list[int] = []
    for t, sign, i in events:
        r = by_id[int(jobs.job_id[i])]
        per_node[node_rows[i]] += sign
        cpus += sign * int(r.alloc.cpus or 0)
        gpus += sign * int(r.alloc.gpus or 0)
        if ut and ut[-1] == t:
            ut.pop(), un.pop(), uc.pop(), ug.pop()
        ut.append(t)
        un.append(int((per_node > 0).sum()))
        uc.append(cpus)
        ug.append(gpus)
    return SimResult(
        jobs=jobs, cluster=cluster, policy=name, options=options or SchedulerOptions(),
        engine=EngineOptions(), start=start, end=end, leaves=leaves,
        backfilled=np.zeros(n, dtype=bool), util_t=np.array(ut, dtype=np.int64),
        util_nodes=np.array(un, dtype=np.int64), util_cpus=np.array(uc, dtype=np.int64),
        util_gpus=np.array(ug, dtype=np.int64), frag_t=np.zeros(0, dtype=np.int64),
        frag=np.zeros(0), stats={"jobs": float(n)})
