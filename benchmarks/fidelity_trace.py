"""Trace fidelity: replay a trace that logged its waits and compare job by job.

    python benchmarks/fidelity_trace.py --trace ../shared/traces/theta.swf
    python benchmarks/fidelity_trace.py --trace ../shared/traces/theta.swf --config fifo-easy
    python benchmarks/fidelity_trace.py --trace ../shared/traces/theta.swf --bf-plan both
    python benchmarks/fidelity_trace.py --trace ../shared/traces/lublin_256.swf  # no waits

Each configuration (:data:`CONFIGS`) replays every job of the trace on its synthetic
cluster; :func:`trainer.sim.fidelity.wait_fidelity` then compares the simulated waits
with the logged ones (SWF field 3): mean and median wait, per-job absolute error,
Pearson's and Spearman's correlation, share of jobs within +-10 min and +-1 h.

Configurations (none is known to be what the site ran; Theta ran Cobalt, not Slurm):

- ``slurm-default``: the Slurm baseline with Slurm's defaults: multifactor with every
  weight 0 (arrival order), EASY backfill every 30 s, ``bf_resolution`` 60 s.
- ``fifo-easy``: FIFO with EASY backfill at every event.
- ``age``: multifactor, age only (weight 1000, PriorityMaxAge 7 days), backfill 30 s.
- ``age-size``: age plus job size (weight 1000 each, larger jobs first), as ALCF's
  documented criteria ("larger jobs receive higher priority").
- ``wfp``: a Cobalt-like utility, ``(wait / time limit)^3 x nodes`` re-scored every
  60 s (ALCF: "larger jobs receive higher priority", "shorter duration jobs accumulate
  priority more quickly").
- ``+maint``: the same plus the outages of the logged schedule
  (:func:`~trainer.sim.fidelity.idle_gaps`: nothing running for >= 1 h while jobs
  waited, Theta's alternate-Monday maintenance and a 7-day outage), each replayed as a
  whole-machine job of top priority arriving when the gap began and lasting as long.
- ``+debug``: the same plus a separate debug partition (32 nodes, jobs of <= 8 nodes;
  the log never runs more than 32 nodes of such jobs at once, and almost no job asks
  for 9 to 127 nodes: Theta's default queue started at 128 nodes); the other jobs run
  on the other nodes, and a job larger than those on every node.

``--bf-plan conservative`` replays each configuration with Slurm's conservative backfill
plan (``SchedulerOptions.bf_plan``) instead of EASY, ``--bf-plan both`` each both ways
(the conservative rows are named ``...+cons``); ``+debug`` configurations have a
partition holding only some nodes, which the plan does not model: they are skipped
with the reason.

``--nodes N`` replays on N nodes instead of the header's ``MaxNodes`` (nodes down or
reserved on the real machine are not in the log: fewer nodes is a crude stand-in).

A trace without logged waits (``lublin_256.swf``: field 3 is -1 on every row, a model's
output; ``philly.csv``: no wait column) cannot be compared: the script says so and stops.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from db.ingest import traces  # noqa: E402
from db.records import JobRecord, TresCounts  # noqa: E402
from slurm_plugin.cluster import ClusterSpec  # noqa: E402
from trainer.sim import fidelity, load  # noqa: E402
from trainer.sim.engine import SimResult, Simulator  # noqa: E402
from trainer.sim.policies import Policy, ScoreContext, make_policy  # noqa: E402
from trainer.sim.slurm import BF_PLANS, PrioritySettings, SchedulerOptions  # noqa: E402
from trainer.sim.state import Cluster, JobTable, build_jobs  # noqa: E402

#: Site factor of an outage job: above any priority a configuration computes.
OUTAGE_PRIORITY = 1e15
#: Job ids of outage jobs start here (above any trace's ids).
OUTAGE_ID = 10**12
#: Minimum length of a logged gap taken as an outage, s.
MIN_GAP = 3600
#: Debug partition of ``+debug``: nodes, and the largest job it takes.
DEBUG_NODES = 32
DEBUG_MAX_JOB = 8


class Wfp(Policy):
    """Cobalt-like utility: ``(wait / time limit)^3 x nodes`` plus the site factor."""

    name = "wfp"

    def __init__(self, settings: PrioritySettings | None = None, placement: str = "tree"):
        super().__init__(settings, placement)
        self.dynamic = True

    def score(self, jobs: JobTable, idx: np.ndarray, ctx: ScoreContext) -> np.ndarray:
        """Grows with the cube of wait over the time limit, times the job's size."""
        wait = np.maximum(ctx.now - jobs.eligible[idx], 0).astype(np.float64)
        wall = np.maximum(jobs.limit[idx], 60).astype(np.float64)
        out: np.ndarray = (wait / wall) ** 3 * jobs.nodes[idx] + jobs.site_factor[idx]
        return out


@dataclass(frozen=True)
class Config:
    """One configuration to replay.

    Attributes:
        policy: Builds the policy.
        options: Scheduler options.
        maint: Replay the logged outages as whole-machine jobs.
        debug: Give jobs of at most :data:`DEBUG_MAX_JOB` nodes their own partition.
    """

    policy: Callable[[], Policy]
    options: SchedulerOptions
    maint: bool = False
    debug: bool = False


_BF30 = SchedulerOptions()
_AGE = PrioritySettings(weight_age=1000)
_AGE_SIZE = PrioritySettings(weight_age=1000, weight_job_size=1000)


def _configs() -> dict[str, Config]:
    base: dict[str, Config] = {
        "slurm-default": Config(lambda: make_policy("multifactor", PrioritySettings()), _BF30),
        "fifo-easy": Config(lambda: make_policy("fifo"), SchedulerOptions(bf_interval=0)),
        "age": Config(lambda: make_policy("multifactor", _AGE), _BF30),
        "age-size": Config(lambda: make_policy("multifactor", _AGE_SIZE), _BF30),
        "wfp": Config(Wfp, dataclasses.replace(_BF30, priority_calc_period=60)),
    }
    out = dict(base)
    for name in ("age", "age-size", "wfp"):  # FIFO ignores site factors: no outage jobs
        out[f"{name}+maint"] = dataclasses.replace(base[name], maint=True)
        out[f"{name}+maint+debug"] = dataclasses.replace(base[name], maint=True, debug=True)
    return out


#: Configurations by name (see the module docstring).
CONFIGS: dict[str, Config] = _configs()


def outage_records(gaps: list[tuple[int, int]], nodes: int) -> list[JobRecord]:
    """One whole-machine job per gap, arriving at its start and lasting as long."""
    out = []
    for k, (a, b) in enumerate(gaps):
        tres = TresCounts(nodes, None, None, None)
        out.append(JobRecord(
            job_id=OUTAGE_ID + k, name="outage", user="outage", account="", partition="",
            qos="", state="COMPLETED", submit_time=a, eligible_time=a, start_time=a,
            end_time=b, time_limit=b - a, req=tres, alloc=tres, node_list="", nodes=(),
            priority=None, exit_code=0))
    return out


def with_debug_partition(spec: ClusterSpec, records: list[JobRecord]
                         ) -> tuple[ClusterSpec, list[JobRecord]]:
    """The spec split into ``debug`` and ``default`` partitions, records routed by size."""
    names = [n.name for n in spec.nodes]
    parts = {"debug": tuple(names[:DEBUG_NODES]), "default": tuple(names[DEBUG_NODES:])}
    spec = dataclasses.replace(spec, partitions=parts)
    routed = []
    for r in records:
        if r.job_id >= OUTAGE_ID:
            routed.append(r)  # outages take every node (partition "": all of them)
            continue
        size = r.req.nodes or r.alloc.nodes or 1
        part = "debug" if size <= DEBUG_MAX_JOB else "default" if size <= len(
            parts["default"]) else ""  # larger than default: every node
        routed.append(dataclasses.replace(r, partition=part))
    return spec, routed


def run_config(cfg: Config, inp: load.ReplayInput, gaps: list[tuple[int, int]],
               bf_plan: str = "easy") -> tuple[SimResult, float]:
    """Replay one configuration (backfill planned as ``bf_plan``); the result and wall time.

    Raises:
        ValueError: When ``bf_plan`` is ``conservative`` and the configuration's jobs or
            partitions are ones it does not model (:func:`conservative_unfit`).
    """
    spec, records = inp.spec, list(inp.records)
    if cfg.maint:
        records += outage_records(gaps, len(spec.nodes))
    if cfg.debug:
        spec, records = with_debug_partition(spec, records)
    cluster = Cluster.from_spec(spec)
    jobs = build_jobs(records, cluster)
    jobs.site_factor[jobs.job_id >= OUTAGE_ID] = OUTAGE_PRIORITY
    options = dataclasses.replace(cfg.options, bf_plan=bf_plan)
    t0 = time.perf_counter()
    result = Simulator(jobs, cluster, cfg.policy(), options).run()
    return result, time.perf_counter() - t0


#: Job size classes (nodes) of the per-size breakdown.
SIZES = ((1, 8), (9, 127), (128, 255), (256, 801), (802, 2047), (2048, 10**9))


def by_size(result: SimResult, starts: dict[int, int]) -> dict[str, dict[str, float]]:
    """Per job size class: jobs, mean simulated and logged wait (s), mean abs error (s)."""
    a = fidelity.align(result, starts)
    nodes_of = dict(zip(result.jobs.job_id.tolist(), result.jobs.nodes.tolist(), strict=True))
    nodes = np.array([nodes_of[i] for i in a.job_id.tolist()], dtype=np.int64)
    sim_w, log_w = a.sim - a.eligible, a.real - a.eligible
    out = {}
    for lo, hi in SIZES:
        m = (nodes >= lo) & (nodes <= hi)
        if m.any():
            out[f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"] = {
                "jobs": int(m.sum()), "sim": float(sim_w[m].mean()),
                "log": float(log_w[m].mean()),
                "mae": float(np.abs(sim_w[m] - log_w[m]).mean())}
    return out


def logged(path: Path) -> dict[int, int]:
    """Job id -> logged start of the rows that logged a wait."""
    if load.trace_kind(path) == "philly":
        _, items = traces.read_philly_csv(path, assume_zero_wait=False)
    else:
        _, items = traces.read_swf(path, assume_zero_wait=False)
    return fidelity.logged_starts(r for r in items if isinstance(r, JobRecord))


def _h(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x / 3600:.2f}"


def main() -> None:
    """Replay the configurations asked for and print the fidelity table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, type=Path, help="SWF / ANL SWF / Philly CSV")
    ap.add_argument("--config", action="append", choices=list(CONFIGS),
                    help="configuration(s) to replay (default: all)")
    ap.add_argument("--nodes", type=int, help="replay on this many nodes (default: header)")
    ap.add_argument("--bf-plan", choices=(*BF_PLANS, "both"), default="easy",
                    help="backfill plan of the replays (default easy; both: each way)")
    ap.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = ap.parse_args()
    plans = BF_PLANS if args.bf_plan == "both" else (args.bf_plan,)
    names = [(n, p) for n in args.config or list(CONFIGS) for p in plans]
    inp = load.from_trace(args.trace, num_nodes=args.nodes)
    starts = logged(args.trace)
    print(f"{inp.source}: {len(inp.records)} jobs on {len(inp.spec.nodes)} nodes"
          f" (rejected rows: {sum(inp.rejected.values())}); logged waits: {len(starts)}")
    if not starts:
        print("no logged waits in this trace (SWF field 3 is -1, or a CSV without a wait"
              " column): simulated waits cannot be compared with logged ones")
        return
    el, st, en = [], [], []
    for r in inp.records:
        if r.job_id in starts and r.start_time is not None and r.end_time is not None:
            el.append(r.eligible_time or r.submit_time)
            st.append(starts[r.job_id])
            en.append(starts[r.job_id] + r.end_time - r.start_time)
    gaps = fidelity.idle_gaps(el, st, en, MIN_GAP)
    lost = sum(b - a for a, b in gaps)
    print(f"logged outages (nothing running >= {MIN_GAP // 3600} h while jobs waited):"
          f" {len(gaps)}, {lost / 3600:.0f} h in all")
    print()
    head = (f"{'config':<26}{'sim h':>7}{'log h':>7}{'sim med':>8}{'log med':>8}"
            f"{'MAE h':>7}{'medAE m':>8}{'r':>6}{'rho':>6}{'<=10m':>7}{'<=1h':>7}{'s':>6}")
    print("mean/median waits (h, median in min), per-job abs error, Pearson r, Spearman rho,"
          " share within +-10 min / +-1 h, replay wall s")
    print(head)
    out: dict[str, Any] = {"trace": str(args.trace), "jobs": len(inp.records),
                           "logged": len(starts), "outages": gaps, "configs": {}}
    sizes = {}
    for base, plan in names:
        name = base if plan == "easy" else f"{base}+cons"
        try:
            result, wall = run_config(CONFIGS[base], inp, gaps, plan)
        except ValueError as exc:
            if plan == "easy" or not CONFIGS[base].debug:
                raise
            print(f"{name:<26}skipped: {exc}")
            continue
        f = fidelity.wait_fidelity(result, starts)
        skipped = sum(result.jobs.skipped.values())
        w = dict(f.within)
        print(f"{name:<26}{_h(f.mean_wait_sim):>7}{_h(f.mean_wait_log):>7}"
              f"{f.median_wait_sim / 60:>8.1f}{f.median_wait_log / 60:>8.1f}"
              f"{_h(f.mean_abs_error):>7}{f.median_abs_error / 60:>8.1f}"
              f"{f.correlation:>6.2f}{f.rank_correlation:>6.2f}{w[600]:>7.1%}{w[3600]:>7.1%}"
              f"{wall:>6.1f}" + (f"  ({skipped} jobs skipped: too large)" if skipped else ""))
        sizes[name] = by_size(result, starts)
        out["configs"][name] = {**f.to_dict(), "wall_s": wall, "skipped": skipped,
                                "by_size": sizes[name]}
    print()
    print("mean wait sim/log (h) and mean abs error (h) by job size (nodes)")
    classes = list(next(iter(sizes.values())))
    print(f"{'config':<26}" + "".join(f"{c:>22}" for c in classes))
    for name, per in sizes.items():
        print(f"{name:<26}" + "".join(
            f"{_h(v['sim']):>7}/{_h(v['log']):<6} {_h(v['mae']):>7}" for v in per.values()))
    jobs_line = "".join(f"{v['jobs']:>22}" for v in next(iter(sizes.values())).values())
    print(f"{'(jobs)':<26}{jobs_line}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float), encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
