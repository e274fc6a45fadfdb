"""Training with and without keeping freed memory (trainer.alloc), side by side.

Runs the same short ``rlsched train rl`` (default: Theta, 3 PPO updates from random
weights, one worker) in fresh processes, alternately with ``RLSCHED_KEEP_FREED_MEMORY=0``
(glibc's own malloc settings) and without it (rlsched's), ``--repeat`` times each, and
prints per run the wall time, user and system CPU time, minor page faults and peak
resident memory, then the ratios of the medians. The two ways must give the same
weights (``last.pt`` compared byte for byte): only time and memory may differ.

    python benchmarks/malloc_speed.py [--trace PATH] [--updates 3] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "theta.swf"


def run_once(trace: str, updates: int, out: Path, keep: bool) -> dict[str, float]:
    """One training run in a fresh process; its resource usage."""
    env = dict(os.environ)
    env["RLSCHED_KEEP_FREED_MEMORY"] = "1" if keep else "0"
    cmd = [sys.executable, "-c", "from slurm_plugin.cli import main; main()", "train", "rl",
           "--trace", trace, "--budget", f"{updates}u", "--out", str(out), "--no-progress"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"training failed:\n{err[-2000:]}")
    return {"wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
            "minflt": float(ru.ru_minflt), "maxrss_mib": ru.ru_maxrss / 1024}


def main() -> None:
    """Run the benchmark (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--updates", type=int, default=3, help="PPO updates per run")
    p.add_argument("--repeat", type=int, default=2, help="runs each way")
    args = p.parse_args()
    if not Path(args.trace).exists():
        sys.exit(f"{args.trace} not found: pass --trace")
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        weights: dict[bool, bytes] = {}
        for i in range(args.repeat):
            for keep in ((False, True) if i % 2 == 0 else (True, False)):
                out = Path(tmp) / f"{'keep' if keep else 'glibc'}-{i}"
                r = run_once(args.trace, args.updates, out, keep)
                runs[keep].append(r)
                weights.setdefault(keep, (out / "last.pt").read_bytes())
                print(f"{'rlsched' if keep else 'glibc  '} run {i}: {r['wall_s']:7.1f} s wall,"
                      f" {r['user_s']:6.1f} s user, {r['sys_s']:6.1f} s system,"
                      f" {r['minflt'] / 1e6:6.1f} M minor faults,"
                      f" peak {r['maxrss_mib']:6.0f} MiB", flush=True)
        same = weights[False] == weights[True]
    print(f"trace {Path(args.trace).name}, {args.updates} updates; medians of {args.repeat}:")
    for key, label in (("wall_s", "wall time"), ("sys_s", "system time"),
                       ("minflt", "minor faults"), ("maxrss_mib", "peak memory")):
        a = statistics.median(r[key] for r in runs[False])
        b = statistics.median(r[key] for r in runs[True])
        print(f"  {label:13s} glibc {a:12.1f}  rlsched {b:12.1f}  ratio glibc/rlsched"
              f" {a / b if b else float('nan'):.2f}x")
    print(f"  weights identical: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
