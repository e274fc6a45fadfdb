"""Compiled simulator vs Python (a benchmark, not a test): the same replays, both engines.

    rlsched build-sim                              # once: the compiled build
    python benchmarks/sim_native.py                # theta, lublin, the 400,000-job deep queue
    python benchmarks/sim_native.py --deep-jobs 100000 --repeat 1

Each replay of ``benchmarks/sim_speed.py`` (the Slurm baseline on theta and lublin; FIFO
with EASY backfill and the Slurm baseline on the deep queue, backfill at every event)
runs in child processes, one with ``RLSCHED_SIM=python`` and one with
``RLSCHED_SIM=native`` (the engine is chosen when a process imports it), alternated
``--repeat`` times; the fastest of each is kept and their ratio printed. The two must
produce the same metrics (else the benchmark stops). Times are the simulator's own
(``SimResult.stats["wall_s"]``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CASES = ("theta", "lublin", "deep-fifo", "deep-slurm")


def child(case: str, deep_jobs: int) -> None:
    """Run one replay in this process and print its wall time and metrics as JSON."""
    import sim_speed as b

    import trainer.sim
    from trainer.sim.slurm import SchedulerOptions, read_config
    from trainer.sim.state import build_jobs

    opts, prio, _ = read_config(b.GOLDEN)
    slurm_opts = dataclasses.replace(opts, bf_interval=0)
    name = "theta.swf" if case == "theta" else "lublin_256.swf"
    recs, cluster, _ = b.load(name)
    if case.startswith("deep"):
        recs = b.deep_queue(recs, -(-deep_jobs // len(recs)), 1.0)
    jobs = build_jobs(recs, cluster)
    if case == "deep-fifo":
        wall, m = b.replay(jobs, cluster, "fifo", SchedulerOptions(bf_interval=0))
    else:
        wall, m = b.replay(jobs, cluster, "multifactor", slurm_opts, prio)
    m = {k: v for k, v in m.items() if k != "sim"}  # (the counters hold wall times)
    print(json.dumps({"wall": wall, "jobs": int(jobs.n), "native": trainer.sim.NATIVE.active,
                      "metrics": m}, default=str))


def run_child(case: str, mode: str, deep_jobs: int) -> dict:
    """One replay in a child process under ``RLSCHED_SIM=mode``: its JSON answer."""
    env = dict(os.environ, RLSCHED_SIM=mode)
    out = subprocess.run([sys.executable, __file__, "--child", case, "--deep-jobs",
                          str(deep_jobs)], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        sys.exit(f"{case} ({mode}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure every case on both engines and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deep-jobs", type=int, default=400_000, help="jobs in the deep queue")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per engine and case, alternated, the fastest kept")
    ap.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.deep_jobs)
        return
    from trainer.sim import native

    if native._usable(native.build_dir(), native.source_hash()) is not None:
        sys.exit("no compiled build of these sources: run 'rlsched build-sim' first")
    print(f"python {sys.version.split()[0]}; compiled: {', '.join(native.MODULES)}")
    print(f"{'case':<12}{'jobs':>8}{'python s':>10}{'native s':>10}{'python j/s':>12}"
          f"{'native j/s':>12}{'speedup':>9}")
    for case in args.cases.split(","):
        best = {"python": float("inf"), "native": float("inf")}
        ms = {}
        n = 0
        for _ in range(args.repeat):
            for mode in ("python", "native"):
                r = run_child(case, mode, args.deep_jobs)
                if r["native"] != (mode == "native"):
                    sys.exit(f"{case}: RLSCHED_SIM={mode} did not run that engine")
                best[mode] = min(best[mode], r["wall"])
                ms[mode] = r["metrics"]
                n = r["jobs"]
        if ms["python"] != ms["native"]:
            sys.exit(f"{case}: the engines' metrics differ")
        p, c = best["python"], best["native"]
        print(f"{case:<12}{n:>8}{p:>10.2f}{c:>10.2f}{n / p:>12,.0f}{n / c:>12,.0f}"
              f"{p / c:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
