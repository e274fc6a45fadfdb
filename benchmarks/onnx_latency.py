"""ONNX scoring latency (a benchmark, not a test): the exported policy on one core.

    python benchmarks/onnx_latency.py                       # a fresh default-size net
    python benchmarks/onnx_latency.py --checkpoint policy.pt --repeats 500

Scores 100, 1,000 and 10,000 pending jobs on a 1,000-node cluster (63 leaf switches)
with onnxruntime restricted to one thread (``intra_op_num_threads = 1``, sequential),
measured in this one process, side by side with the torch net's ``forward`` on one
thread. Each row times ``session.run`` alone on a prepared feed (featurizing the same
observation with :func:`slurm_plugin.features.featurize` is timed apart, for scale):

- ``jobs``: job scores only (``K = 0`` candidate sets), what the helper does every
  cycle;
- ``jobs+place``: the same with the 8 candidate node sets of one job scored too.

Prints p50/p99 latency in ms, the torch/onnx ratio of the medians, the model file size,
and whether the target holds (10,000 jobs under 10 ms median).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from exporter.contract import OUTPUTS  # noqa: E402
from exporter.onnx_export import export_net  # noqa: E402
from exporter.synthetic import Case, synthetic_case, synthetic_raw  # noqa: E402
from exporter.verify import session_for  # noqa: E402
from slurm_plugin.features import featurize  # noqa: E402
from trainer.policy import PolicyConfig, PolicyNet, load_checkpoint  # noqa: E402

TARGET_MS = 10.0


def _times(fn: Callable[[], object], repeats: int, warmup: int = 10) -> np.ndarray:
    """Milliseconds per call of ``fn`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    out = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out * 1e3


def main() -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="policy checkpoint (default: a fresh net)")
    ap.add_argument("--hidden", type=int, default=PolicyConfig().hidden,
                    help="hidden size of the fresh net")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()

    torch.set_num_threads(1)
    if args.checkpoint:
        net = load_checkpoint(args.checkpoint).net
    else:
        torch.manual_seed(0)
        net = PolicyNet(PolicyConfig(hidden=args.hidden)).eval()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.onnx"
        export_net(net, path)
        size = path.stat().st_size
        session = session_for(path, threads=1)
    names = frozenset(i.name for i in session.get_inputs())

    print(f"model: hidden={net.config.hidden}, {size:,} bytes; cluster: {args.nodes} nodes,"
          f" 63 leaves; onnxruntime and torch on 1 thread; {args.repeats} runs each")
    head = (f"{'pending':>8} {'what':<11} {'onnx min':>9} {'onnx p50':>9} {'onnx p99':>9}"
            f" {'torch p50':>10}"
            f" {'torch/onnx':>10} {'featurize p50':>14}")
    print(head)
    print("-" * len(head))
    p50_10k = float("nan")
    for jobs in (100, 1000, 10_000):
        full: Case = synthetic_case(f"{jobs}", jobs, args.nodes, 63, seed=jobs, busy=0.7)
        for what, case in (("jobs", Case(full.name, full.obs)), ("jobs+place", full)):
            feed = case.feed(names)
            targs = [torch.from_numpy(case.feed()[k]) for k in (
                "jobs", "job_mask", "nodes", "node_leaf", "globals", "cand_sets",
                "cand_mask", "place_job")]
            reps = args.repeats

            def run_ort(feed: dict[str, np.ndarray] = feed) -> None:
                session.run(list(OUTPUTS), feed)

            def run_torch(targs: list[torch.Tensor] = targs) -> None:
                with torch.no_grad():
                    net(*targs)

            t_ort = _times(run_ort, reps)
            t_torch = _times(run_torch, max(20, reps // 4))
            feat = ""
            if what == "jobs":
                jr, nr = synthetic_raw(jobs, args.nodes, 63, busy=0.7,
                                       rng=np.random.default_rng(jobs))
                t_feat = _times(lambda jr=jr, nr=nr: featurize(20_000, jr, nr),
                                max(20, reps // 4))
                feat = f"{np.percentile(t_feat, 50):.3f}ms"
            p50, p99 = np.percentile(t_ort, 50), np.percentile(t_ort, 99)
            if jobs == 10_000 and what == "jobs":
                p50_10k = float(p50)
            print(f"{jobs:>8,} {what:<11} {t_ort.min():>7.3f}ms {p50:>7.3f}ms {p99:>7.3f}ms"
                  f" {np.percentile(t_torch, 50):>8.3f}ms"
                  f" {np.percentile(t_torch, 50) / p50:>9.2f}x {feat:>14}")
    ok = p50_10k < TARGET_MS
    print(f"target: 10,000 jobs under {TARGET_MS:g} ms median on one core:"
          f" {p50_10k:.3f} ms -> {'met' if ok else 'NOT met'}")
    try:
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} CPUs (a busy machine inflates"
              " every figure; min is the least disturbed run)")
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
