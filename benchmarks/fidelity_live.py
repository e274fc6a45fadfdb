"""Live fidelity: run jobs on the real Slurm test cluster, replay them, compare start times.

    sudo contrib/testcluster/up
    python benchmarks/fidelity_live.py                         # 100 lublin jobs, times / 60
    python benchmarks/fidelity_live.py --dry-run               # the workload and a forecast
    python benchmarks/fidelity_live.py --synthetic --jobs 40   # a seeded synthetic workload
    python benchmarks/fidelity_live.py --replay run.json        # re-replay a --json run
    python benchmarks/fidelity_live.py --synthetic --plans      # also compare the plans

Steps (see :mod:`trainer.fidelity_live`):

1. The workload: ``--jobs`` jobs of a trace from its ``--first`` job on (submit order),
   arrivals and run times divided by ``--scale``, runs clipped to ``[--min-run,
   --max-run]`` s (default 2 and 120: the 100 default jobs then take about 25 minutes),
   sizes mapped from the trace's machine onto the cluster's 16 nodes (``ceil(procs x 16
   / 256)`` whole nodes for ``lublin_256.swf``), time limits in whole minutes (at least
   1: Slurm's unit), never below the run plus 5 s (:func:`trainer.sim.fidelity.
   scale_jobs`); or ``--synthetic``: :func:`trainer.sim.fidelity.synthetic_jobs`.
2. They are submitted as ``sleep`` jobs at their arrival times, and ``sacct`` read back.
3. The same jobs are replayed with the cluster's configuration (``ClusterSpec.from_slurm``,
   scheduler options and priority weights of the real ``scontrol show config``), with
   Slurm's recorded submit/eligible/run times, in a few variants (:data:`VARIANTS`):
   as configured; backfill at every event instead of every ``bf_interval``; each job's
   nodes freed 1 s after its recorded end (Slurm's release latency); no backfill at all;
   conservative backfill (every blocked job of the window reserved, as Slurm plans;
   ``SchedulerOptions.bf_plan``), alone and with the release latency. Conservative
   backfill is not replayed for a run with GPU jobs (they share nodes): a line says so.
4. Per-job start deviation ``sim - real`` in the run's (scaled) seconds: mean, median,
   p95, max of its absolute value, its mean, the share within 1/2/5/10 s, the share of
   job pairs in the same start order, the share at the same position of the order, and
   how many jobs started ahead of an earlier arrival (replay / real).
5. With ``--plans``: the plans themselves. Every second of the run ``squeue`` is read
   for the expected start Slurm's backfill planned for each pending job; the
   conservative replays keep their plan at the same moments
   (``EngineOptions.plan_probes``), and :func:`trainer.sim.fidelity.plan_deviation`
   compares them: how many pending jobs each planned, and the planned starts' deviation.
   EASY plans only one job per partition and is not compared. The reads disturb Slurm
   on a deep queue (its backfill yields to them): on the default Lublin window the
   replays' start deviation was 17-18 s without them and 50-84 s with one a second.
   ``--plans-every S`` reads less often.

Refuses to run unless the cluster is named ``--cluster`` (default ``testcluster``) and
its queue is empty (other jobs would change the schedule). Run as root (the test
cluster's jobs run as root).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db.records import JobRecord  # noqa: E402
from slurm_plugin.cluster import ClusterSpec  # noqa: E402
from slurm_plugin.slurm.cli_backend import CliSlurmClient  # noqa: E402
from trainer import fidelity_live as live  # noqa: E402
from trainer.sim import fidelity, load  # noqa: E402
from trainer.sim.engine import EngineOptions  # noqa: E402
from trainer.sim.fidelity import LiveJob  # noqa: E402
from trainer.sim.slurm import PrioritySettings, SchedulerOptions  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
#: The default window: lublin_256.swf jobs from this one on (a busy stretch: queues form).
DEFAULT_FIRST = 4500
#: Replay variants: name -> (changes to the scheduler options, end latency s).
VARIANTS: dict[str, tuple[dict[str, Any], int]] = {
    "as-configured": ({}, 0),
    "bf-every-event": ({"bf_interval": 0}, 0),
    "release+1s": ({}, 1),
    "no-backfill": ({"backfill": False}, 0),
    "conservative": ({"bf_plan": "conservative"}, 0),
    "conservative+1s": ({"bf_plan": "conservative"}, 1),
}


def trace_jobs(args: argparse.Namespace, cluster_nodes: int
               ) -> tuple[list[LiveJob], dict[str, int]]:
    """The live workload from a trace window (see the module docstring)."""
    inp = load.from_trace(args.trace)
    recs: list[JobRecord] = inp.records[args.first:args.first + args.jobs]
    if len(recs) < args.jobs:
        sys.exit(f"{args.trace} has only {len(recs)} jobs from job {args.first}")
    trace_nodes = args.trace_nodes or len(inp.spec.nodes)
    return fidelity.scale_jobs(recs, args.scale, cluster_nodes=cluster_nodes,
                               trace_nodes=trace_nodes, min_run=args.min_run,
                               max_run=args.max_run or None)


def describe(jobs: list[LiveJob]) -> str:
    """One paragraph about a workload."""
    runs = np.array([j.run for j in jobs])
    arr = np.array([j.arrival for j in jobs])
    nodes = Counter(j.nodes for j in jobs)
    limits = Counter(j.limit_min for j in jobs)
    gpu = sum(1 for j in jobs if j.gpus)
    node_s = sum(j.run * j.nodes for j in jobs)
    return (f"{len(jobs)} jobs over {arr.max():.0f} s of arrivals; run s min/median/max"
            f" {runs.min()}/{np.median(runs):.0f}/{runs.max()};"
            f" nodes {dict(sorted(nodes.items()))};"
            f" limits (min) {dict(sorted(limits.items()))}; GPU jobs {gpu};"
            f" node-seconds {node_s}")


def _f(x: float, spec: str = ".1f") -> str:
    return "nan" if isinstance(x, float) and math.isnan(x) else format(x, spec)


def report(run: live.LiveRun, jobs: list[LiveJob], spec: ClusterSpec, opts: SchedulerOptions,
           prio: PrioritySettings) -> dict[str, Any]:
    """Replay a run under each variant, print the table; every figure as a dict."""
    print()
    print(f"{'variant':<20}{'mean|d|':>8}{'median':>7}{'p95':>6}{'max':>6}{'mean d':>8}"
          f"{'<=1s':>6}{'<=2s':>6}{'<=5s':>6}{'<=10s':>7}{'pairs':>7}{'rank':>6}"
          f"{'wait sim':>9}{'real':>6}{'jumped':>9}")
    out: dict[str, Any] = {"workload": [dataclasses.asdict(j) for j in jobs],
                           "job_ids": {str(k): v.index for k, v in run.submitted.items()},
                           "began": run.began,
                           "real_starts": {str(k): v for k, v in run.starts.items()},
                           "states": run.states, "variants": {},
                           "plans": [[t, {str(k): v for k, v in snap.items()}]
                                     for t, snap in run.plans]}
    probes = tuple(t for t, _ in run.plans)
    plans: dict[str, fidelity.PlanDeviation] = {}
    for name, (changes, latency) in VARIANTS.items():
        o: SchedulerOptions = dataclasses.replace(opts, **changes)
        if o.bf_plan == "conservative" and any(j.gpus for j in jobs):
            print(f"{name:<20}not replayed: conservative backfill is modelled for"
                  " whole-node jobs, and this run shares nodes (GPU jobs)")
            continue
        eng = EngineOptions(plan_probes=probes) if probes and o.bf_plan != "easy" else None
        res = live.replay_live(run, spec, o, prio, end_latency=latency, engine=eng)
        d = fidelity.start_deviation(res, run.starts)
        if eng is not None:
            plans[name] = fidelity.plan_deviation(res, run.plans, run.starts,
                                                  plan_tolerances(o.bf_resolution))
        w = dict(d.within)
        print(f"{name:<20}{_f(d.mean_abs, '.2f'):>8}{_f(d.median_abs):>7}{_f(d.p95_abs):>6}"
              f"{_f(d.max_abs, '.0f'):>6}{_f(d.mean_signed, '+.2f'):>8}{w[1]:>6.0%}{w[2]:>6.0%}"
              f"{w[5]:>6.0%}{w[10]:>7.0%}{d.order_pairs:>7.1%}{d.same_rank:>6.0%}"
              f"{d.mean_wait_sim:>9.1f}{d.mean_wait_real:>6.1f}"
              f"{d.jumped_sim:>5}/{d.jumped_real:<3}")
        out["variants"][name] = {**d.to_dict(), "sim_starts": {
            str(int(j)): int(s) for j, s in zip(res.jobs.job_id, res.start, strict=True)}}
        if name in plans:
            out["variants"][name]["plans"] = plans[name].to_dict()
    if plans:
        report_plans(plans)
    return out


def plan_tolerances(resolution: int) -> tuple[int, ...]:
    """Tolerances of the plan comparison: 1 and 10 s, one and two ``bf_resolution`` slots."""
    return tuple(sorted({1, 10, max(1, resolution), 2 * max(1, resolution)}))


def report_plans(plans: dict[str, fidelity.PlanDeviation]) -> None:
    """Print the plan comparison (:func:`trainer.sim.fidelity.plan_deviation`) per variant."""
    first = next(iter(plans.values()))
    tols = [t for t, _ in first.within]
    print()
    print(f"backfill plans against Slurm's ({first.moments} snapshots of squeue's expected"
          " starts; a pair: a job pending in both at a snapshot; deviation: replay's"
          " planned start - Slurm's, over the pairs both planned)")
    print(f"{'variant':<20}{'pairs':>7}{'slurm':>7}{'replay':>7}{'both':>6}{'mean|d|':>8}"
          f"{'median':>7}{'p95':>6}{'max':>6}{'mean d':>8}"
          + "".join(f"{f'<={t}s':>7}" for t in tols) + f"{'held':>7}")
    for name, p in plans.items():
        print(f"{name:<20}{p.pairs:>7}{p.slurm_planned:>7}{p.replay_planned:>7}{p.both:>6}"
              f"{_f(p.mean_abs, '.2f'):>8}{_f(p.median_abs):>7}{_f(p.p95_abs):>6}"
              f"{_f(p.max_abs, '.0f'):>6}{_f(p.mean_signed, '+.2f'):>8}"
              + "".join(f"{_f(w, '.0%'):>7}" for _, w in p.within)
              + f"{_f(p.slurm_held):>7}")
    print("(held: mean |Slurm's planned start - its real start| over the pairs Slurm"
          " planned: jobs ending before their limits move every plan)")


def main() -> None:
    """Build the workload, run it (unless --dry-run), replay it and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACES / "lublin_256.swf")
    ap.add_argument("--first", type=int, default=DEFAULT_FIRST,
                    help="index (submit order) of the window's first job")
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--scale", type=float, default=60.0,
                    help="divide arrivals and run times by this")
    ap.add_argument("--min-run", type=int, default=2)
    ap.add_argument("--max-run", type=int, default=120,
                    help="clip scaled run times to this (s); 0: no clip")
    ap.add_argument("--trace-nodes", type=int, default=None,
                    help="size of the trace's machine (default: its header's)")
    ap.add_argument("--synthetic", action="store_true", help="seeded synthetic workload")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu-share", type=float, default=0.0,
                    help="synthetic: share of one-node GPU jobs (shared nodes)")
    ap.add_argument("--mean-gap", type=float, default=3.0,
                    help="synthetic: mean seconds between arrivals")
    ap.add_argument("--run", type=int, nargs=2, default=(5, 40), metavar=("LO", "HI"),
                    help="synthetic: run times drawn from LO..HI s")
    ap.add_argument("--cluster", default="testcluster", help="refuse any other cluster")
    ap.add_argument("--jobdir", default="/tmp/rlsched-testcluster/jobs")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--dry-run", action="store_true", help="workload and forecast only")
    ap.add_argument("--plans", action="store_true",
                    help="snapshot Slurm's expected starts (squeue, every --plans-every s) and"
                         " compare the conservative replays' plans with them")
    ap.add_argument("--plans-every", type=float, default=1.0,
                    help="seconds between those snapshots (default 1; each disturbs Slurm a"
                         " little)")
    ap.add_argument("--json", type=Path, help="write the figures (and per-job starts) here")
    ap.add_argument("--replay", type=Path,
                    help="replay a past run (a --json file) from sacct instead of running")
    args = ap.parse_args()

    client = CliSlurmClient(timeout=30)
    spec, opts, prio, cfg = live.cluster_setup(client)
    if cfg.cluster_name != args.cluster:
        sys.exit(f"the running cluster is {cfg.cluster_name!r}, not {args.cluster!r}:"
                 " not touching it")
    print(f"cluster {cfg.cluster_name}: {len(spec.nodes)} nodes, Slurm {cfg.slurm_version},"
          f" {cfg.scheduler_type} {dict(cfg.scheduler_parameters)}")
    print(f"replay options: bf_interval {opts.bf_interval} s, bf_resolution"
          f" {opts.bf_resolution} s, bf_window {opts.bf_window} s, PriorityCalcPeriod"
          f" {opts.priority_calc_period} s; weights age {prio.weight_age}, partition"
          f" {prio.weight_partition}, max age {prio.max_age} s")
    if args.replay:
        saved = json.loads(args.replay.read_text(encoding="utf-8"))
        jobs = [LiveJob(**j) for j in saved["workload"]]
        submitted = {int(k): jobs[v] for k, v in saved["job_ids"].items()}
        began = saved.get("began") or min(saved["real_starts"].values()) - 300
        run = live.read_back(client, submitted, began)
        run.plans = [(int(t), {int(k): int(v) for k, v in snap.items()})
                     for t, snap in saved.get("plans", [])]
        print(f"workload: {args.replay} (read back from sacct); {describe(jobs)}")
        out = report(run, jobs, spec, opts, prio)
    else:
        if args.synthetic:
            jobs = fidelity.synthetic_jobs(
                args.jobs, seed=args.seed, cluster_nodes=len(spec.nodes),
                mean_gap=args.mean_gap, gpu_share=args.gpu_share, run=tuple(args.run))
            print(f"workload: synthetic seed {args.seed}; {describe(jobs)}")
        else:
            jobs, changed = trace_jobs(args, len(spec.nodes))
            print(f"workload: {args.trace.name} jobs {args.first}..{args.first + args.jobs - 1},"
                  f" times / {args.scale:g}; {describe(jobs)}; mapping changed {changed}")
        fc = live.predict(jobs, spec, opts, prio)
        span = int(fc.end.max() - fc.jobs.eligible.min())
        print(f"forecast (replay of the nominal workload): makespan {span} s, mean wait"
              f" {float((fc.start - fc.jobs.eligible).mean()):.1f} s")
        if args.dry_run:
            return
        if client.run(["squeue", "--noheader", "--format=%i"]).split():
            sys.exit("the queue is not empty: other jobs would change the schedule")
        run = live.run_live(jobs, client, jobdir=args.jobdir, timeout=args.timeout,
                            plans=args.plans, plans_every=args.plans_every,
                            progress=lambda m: print(f"  {m}", flush=True))
        states = Counter(run.states.values())
        print(f"live run: {len(run.submitted)} jobs in {run.wall_s:.0f} s; states"
              f" {dict(states)}; max submit lag {max(run.submit_lag_s):.2f} s")
        out = report(run, jobs, spec, opts, prio)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
