"""Imitation of a scheduler on the shared traces: agreement on held-out decisions, wall time.

- ``lublin``: ``lublin_256.swf`` records no wait (every job "starts" at submit), so its
  history to imitate is made by the simulator: the first ``--jobs`` jobs replayed under
  Slurm's multifactor priority with EASY backfill (default weights: FIFO order;
  ``--age``/``--size``: multifactor weights), starts and nodes kept.
- ``theta``: ``theta.swf`` logs its starts (submit + wait); no node lists, so no
  placement labels.

Prints per split the top-1/top-5 agreement of the net and of the references (FIFO,
random) and the reconstruction and training wall times, and writes the report as JSON.

    python3 benchmarks/imitate_traces.py lublin --jobs 3000 --epochs 20
    python3 benchmarks/imitate_traces.py theta --jobs 4000 --epochs 10

The traces are read in place from ``../shared/traces`` (``--traces`` to change).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from trainer.imitate import ImitationConfig, reconstruct, replay_history, train_imitation
from trainer.sim.load import from_trace
from trainer.sim.policies import make_policy
from trainer.sim.slurm import PrioritySettings, SchedulerOptions
from trainer.sim.state import Cluster, build_jobs

FILES = {"lublin": "lublin_256.swf", "theta": "theta.swf"}


def main() -> int:
    """Run one trace and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", choices=sorted(FILES))
    ap.add_argument("--jobs", type=int, default=3000, help="first N jobs by submit time")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--age", type=int, default=0, help="lublin: PriorityWeightAge")
    ap.add_argument("--size", type=int, default=0, help="lublin: PriorityWeightJobSize")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--traces", type=Path,
                    default=Path(__file__).resolve().parents[1].parent / "shared" / "traces")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    args = ap.parse_args()
    path = args.traces / FILES[args.trace]
    if not path.exists():
        print(f"{path} not found: pass --traces", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    inp = from_trace(path, limit=args.jobs)
    recs = inp.records
    if args.trace == "lublin":
        settings = PrioritySettings(weight_age=args.age, weight_job_size=args.size)
        cluster = Cluster.from_spec(inp.spec)
        recs, _ = replay_history(recs, build_jobs(recs, cluster), cluster,
                                 make_policy("multifactor", settings),
                                 SchedulerOptions(backfill=True))
    cfg = ImitationConfig(epochs=args.epochs, lr=3e-3, threads=args.threads)
    t0 = time.perf_counter()
    rec = reconstruct(recs, inp.spec, max_visible=cfg.max_visible,
                      max_decisions=cfg.max_decisions, place_min_nodes=cfg.place_min_nodes)
    print(f"{args.trace}: {len(recs)} jobs, {rec.cluster.num_nodes} nodes, "
          f"{rec.cluster.num_leaves} leaves; reconstruction {time.perf_counter() - t0:.1f} s; "
          f"{dict(rec.stats)}")
    _, rep = train_imitation(rec, config=cfg)
    for split, m in rep.metrics.items():
        row = "  ".join(f"{k} {v['top1']:.3f}/{v['top5']:.3f}" for k, v in m.items()
                        if k != "placement")
        p = m["placement"]
        print(f"{split:5s} top-1/top-5: {row}  | placement top-1 net {p['net_top1']:.3f} "
              f"first {p['first_candidate_top1']:.3f} ({int(p['decisions'])} labelled)")
    print(f"best epoch {rep.best_epoch}/{args.epochs}; training {rep.train_s:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(rep.to_dict(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
