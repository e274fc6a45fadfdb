"""Proof on a real Slurm: a Theta window on the test cluster, with and without the helper.

    sudo contrib/testcluster/up
    python benchmarks/replay_live.py                   # 300 theta jobs from job #4000, / 500
    python benchmarks/replay_live.py --dry-run         # workload, policy and forecast only
    python benchmarks/replay_live.py --first 1000 --jobs 200 --speedup 400

The full version of ``tests/integration/test_replay_live.py``: ``rlsched replay-live``
(:mod:`trainer.replay_live`) on ``--jobs`` jobs of ``theta.swf`` from the ``--first``-th
job (submit order; the default window offers the 16 nodes about 85 % of their time, so
queues form and drain), arrivals, run times and limits divided by ``--speedup``
(default 500: about 5 minutes of arrivals and 8 of schedule per run, both runs in
under 20 minutes), Theta's 4,392 nodes mapped onto the cluster's 16 (``ceil(nodes x
16 / 4392)``: Theta's 128-node minimum becomes 1 node, 4,096 nodes 15), runs clipped to
2-120 s, the trace's users onto 8 local users. The helper's policy is trained on the
``--train-jobs`` jobs before the window (budget ``--budget``, default ``small``).

Prints, for both runs, real (sacct) and simulated: mean and p99 wait, mean and p99
bounded slowdown, mean JCT, the share of multi-node jobs within one leaf switch, and
the gap real - simulated; then the helper's change against Slurm alone, measured and
forecast. Writes everything to ``--out``/results.json. Run as root on an empty queue.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.replay_live import ReplayLiveConfig, print_results, run_replay  # noqa: E402
from trainer.sim import load  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "theta.swf"


def change(res: dict[str, Any], key: str) -> str:
    """Helper minus Slurm of one figure: measured, and as the simulator forecast it."""
    runs, fc = res.get("runs", {}), res.get("forecast", {})

    def diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
        if a is None or b is None or a.get(key) is None or b.get(key) is None:
            return "-"
        return f"{a[key] - b[key]:+.3f}"

    real = diff(runs.get("helper", {}).get("real"), runs.get("slurm", {}).get("real"))
    return f"{key}: real {real}, forecast {diff(fc.get('helper'), fc.get('slurm'))}"


def main() -> None:
    """Run both live runs and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--first", type=int, default=4000,
                    help="index (submit order) of the window's first job")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--speedup", type=float, default=500.0)
    ap.add_argument("--train-jobs", type=int, default=1000)
    ap.add_argument("--budget", default="small", help="training budget (rlsched demo's)")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--steering", default="reqnodes", choices=["reqnodes", "switches", "none"])
    ap.add_argument("--switch-wait", type=float, default=1800.0,
                    help="with --steering switches: the wait for one leaf, trace seconds")
    ap.add_argument("--model", help="use this model.onnx instead of training one")
    ap.add_argument("--out", default="/tmp/rlsched-replay-live-bench")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if not args.trace.is_file():
        sys.exit(f"{args.trace} not found (the shared traces folder is needed)")
    recs = load.from_trace(args.trace).records
    since = recs[args.first].submit_time
    cfg = ReplayLiveConfig(
        trace=str(args.trace), since=str(since), jobs=args.jobs, speedup=args.speedup,
        train_jobs=args.train_jobs, budget=args.budget, users=args.users,
        create_users=args.users > 0, interval=args.interval, steering=args.steering,
        switch_wait=args.switch_wait, model=args.model, out=args.out,
        db=str(Path(args.out) / "store.db"),
        dry_run=args.dry_run, progress=False)
    res = run_replay(cfg, say=lambda m: print(m, flush=True))
    print()
    print_results(res)
    for key in ("wait_mean", "wait_p99", "bsld_mean", "jct_mean", "single_leaf_share"):
        print(f"helper - slurm, {change(res, key)}")
    print(f"results: {Path(args.out) / 'results.json'}")


if __name__ == "__main__":
    main()
