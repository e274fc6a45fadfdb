"""Replays for the native-parity test, run in a child process (``RLSCHED_SIM`` set).

Prints one JSON object: which engine ran (``engine_file``, ``native``) and, per case, a
digest of everything the replay produced (starts, ends, leaves, backfill flags, the
utilisation and fragmentation series, placements, counters but wall times) and the
run's mean bounded slowdown (to show a mismatch in words). The parent runs it with the
Python modules and with the compiled build and compares.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import trainer.sim  # noqa: E402
from db.records import JobRecord, TresCounts  # noqa: E402
from trainer.sim import engine, metrics, workload  # noqa: E402
from trainer.sim.engine import EngineOptions, Simulator  # noqa: E402
from trainer.sim.policies import BASELINES, make_policy  # noqa: E402
from trainer.sim.slurm import PrioritySettings, SchedulerOptions  # noqa: E402
from trainer.sim.state import Cluster, build_jobs  # noqa: E402

PRIO = PrioritySettings(weight_age=1000, weight_fairshare=2000, weight_job_size=500,
                        weight_partition=1000, max_age=7200)


def digest(r: Any) -> str:
    h = hashlib.sha256()
    for name in ("start", "end", "leaves", "backfilled", "util_t", "util_nodes", "util_cpus",
                 "util_gpus", "frag_t", "frag"):
        a = np.ascontiguousarray(getattr(r, name))
        h.update(name.encode() + str(a.dtype).encode() + a.tobytes())
    stats = {k: v for k, v in r.stats.items() if not k.endswith("wall_s")}
    h.update(json.dumps(stats, sort_keys=True, default=str).encode())
    if r.placements is not None:
        h.update(json.dumps({str(k): [str(x) for x in v] for k, v in
                             sorted(r.placements.items())}).encode())
    return h.hexdigest()


def replay(jobs: Any, cl: Cluster, baseline: str, opts: SchedulerOptions, speed: str,
           fast: bool, probes: int = 0) -> dict[str, Any]:
    b = BASELINES[baseline]
    o = opts if b.backfill is None else dataclasses.replace(opts, backfill=b.backfill)
    at = np.linspace(int(jobs.eligible.min()), int(jobs.eligible.max()), probes)
    sim = Simulator(jobs, cl, make_policy(b.policy, PRIO, b.placement or "tree"), o,
                    EngineOptions(seed=3, speed_model=speed, keep_placements=not fast,
                                  fast_path=fast, plan_probes=tuple(int(x) for x in at)))
    r = sim.run()
    out = {"digest": digest(r), "bsld": float(metrics.compute(r)["bsld"]["mean"]),
           "leafy": bool(sim.leafy)}
    if probes:  # the plans kept at the probes (conservative backfill)
        plans = json.dumps([(p, sorted(d.items())) for p, d in r.plans or []])
        out["plans"] = hashlib.sha256(plans.encode()).hexdigest()
        out["planned"] = sum(len(d) for _, d in r.plans or [])
    return out


def whole_nodes(recs: list[JobRecord], squeeze: int) -> list[JobRecord]:
    t0 = min(r.submit_time for r in recs)
    out = []
    for r in recs:
        t = t0 + (r.submit_time - t0) // squeeze
        tres = TresCounts(r.req.nodes, None, None, None)
        out.append(dataclasses.replace(r, submit_time=t, eligible_time=t, req=tres, alloc=tres))
    return out


def main() -> None:
    cases: dict[str, Any] = {}
    opts = SchedulerOptions(bf_interval=0, bf_resolution=60, priority_calc_period=60)
    # shared-node GPU jobs on the node arrays, every baseline and speed model
    cfg = workload.WorkloadConfig(kind="gpu", num_jobs=400, seed=4, mean_interarrival_s=15)
    spec = workload.default_cluster(cfg)
    cl = Cluster.from_spec(spec)
    jobs = build_jobs(workload.replay_records(workload.generate(cfg), spec), cl)
    for name in BASELINES:
        cases[f"gpu/{name}"] = replay(jobs, cl, name, opts, "none", False)
    for speed in ("locality", "bandwidth"):
        for name in ("slurm", "gandiva", "sched2-pack", "dsif"):
            cases[f"gpu/{speed}/{name}"] = replay(jobs, cl, name, opts, speed, False)
    # whole nodes, squeezed to a deep queue: the leaf-count fast path and the deep walk
    cfg = workload.WorkloadConfig(kind="hpc", num_jobs=3000, seed=5)
    spec = workload.default_cluster(cfg)
    cl = Cluster.from_spec(spec)
    recs = whole_nodes(workload.replay_records(workload.generate(cfg), spec), 8)
    recs = [dataclasses.replace(r, partition=next(iter(spec.partitions))) for r in recs]
    jobs = build_jobs(recs, cl)
    for bf in (0, 30):
        for name in ("slurm", "fifo", "sjf", "fifo-nobf"):
            o = dataclasses.replace(opts, bf_interval=bf, bf_max_job_test=200)
            cases[f"hpc/bf{bf}/{name}"] = replay(jobs, cl, name, o, "none", True)
    cases["hpc/arrays/slurm"] = replay(jobs, cl, "slurm", opts, "none", False)
    cons = dataclasses.replace(opts, bf_interval=30, bf_plan="conservative")
    for name in ("slurm", "sjf"):  # conservative backfill, on the leaf counts and arrays
        cases[f"hpc/conservative/{name}"] = replay(jobs, cl, name, cons, "none", True, 40)
    cases["hpc/conservative/arrays/slurm"] = replay(jobs, cl, "slurm", cons, "none", False,
                                                    40)
    trace = os.environ.get("PARITY_TRACE")
    if trace:
        from db.ingest import traces

        header, items = traces.read_swf(Path(trace))
        recs = [r for r in items if isinstance(r, JobRecord)]
        cl = Cluster.from_spec(traces.synthetic_spec(Path(trace).stem, header))
        jobs = build_jobs(recs, cl)
        cases["trace/slurm"] = replay(jobs, cl, "slurm", opts, "none", True)
    print(json.dumps({"engine_file": engine.__file__, "native": trainer.sim.NATIVE.active,
                      "cases": cases}))


if __name__ == "__main__":
    main()
