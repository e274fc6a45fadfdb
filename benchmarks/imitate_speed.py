"""Imitation steps on a big cluster (a benchmark, not a test): node sets over distinct rows.

The same imitation batches (forward, loss, backward, clipping, Adam step) timed two ways, side by
side and interleaved in one run:

- ``rows``: :meth:`trainer.policy.PolicyNet.forward_batch` sums each candidate node
  set over the distinct node rows (``trainer.policy._set_rows``), as it does by default
  from ``trainer.policy._SET_ROWS_NODES`` (1,024) nodes on;
- ``bmm``: the node encodings expanded to ``[B, N, H]`` and the sets summed with
  ``bmm``, as smaller clusters do.

The decisions are those ``rlsched train imitate --imitate-from sef`` trains on: the
trace's first ``--jobs`` jobs replayed under the ``sef`` baseline (placements kept), then
reconstructed. Printed: the fastest pass each way, its CPU time (user, system), the
ratio, and the largest difference between the trained weights (float rounding of the
summation order, amplified by the steps).

    python benchmarks/imitate_speed.py                      # theta.swf (4,392 nodes)
    python benchmarks/imitate_speed.py --trace ../shared/traces/lublin_256.swf
"""

from __future__ import annotations

import argparse
import copy
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trainer.policy as policy_mod  # noqa: E402
from trainer.imitate import (  # noqa: E402
    ImitationConfig,
    _loss,
    reconstruct,
    replay_history,
    split_decisions,
)
from trainer.policy import PolicyConfig, PolicyNet  # noqa: E402
from trainer.sim import load  # noqa: E402
from trainer.sim.policies import BASELINES  # noqa: E402
from trainer.sim.slurm import PrioritySettings, SchedulerOptions  # noqa: E402
from trainer.sim.state import Cluster, build_jobs  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "theta.swf"


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def main() -> None:
    """Run the benchmark (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--jobs", type=int, default=3000, help="jobs read from the trace")
    p.add_argument("--batches", type=int, default=40, help="imitation batches per pass")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    if not Path(args.trace).exists():
        sys.exit(f"{args.trace} not found: pass --trace")
    torch.set_num_threads(1)  # as `rlsched train imitate`
    inp = load.from_trace(args.trace, limit=args.jobs)
    cluster = Cluster.from_spec(inp.spec)
    jobs = build_jobs(inp.records, cluster)
    policy, opts = BASELINES["sef"].build(PrioritySettings(), SchedulerOptions())
    history, _ = replay_history(inp.records, jobs, cluster, policy, opts)
    cfg = ImitationConfig()
    rec = reconstruct(history, cluster,
                      max_visible=cfg.max_visible, max_decisions=cfg.max_decisions,
                      max_sets=cfg.max_sets, place_min_nodes=cfg.place_min_nodes)
    train = [rec.decisions[i] for i in
             split_decisions(rec.decisions, rec.jobs.submit, cfg.train, cfg.val)["train"]]
    order = np.random.default_rng(0).permutation(len(train))
    batches = [[train[i] for i in order[lo:lo + cfg.batch].tolist()]
               for lo in range(0, min(len(train), args.batches * cfg.batch), cfg.batch)]
    placed = sum(d.cand_match is not None for b in batches for d in b)
    print(f"{inp.source}: {cluster.num_nodes} nodes; {len(batches)} batches of {cfg.batch}"
          f" decisions ({placed} with a placement label); torch threads 1")
    torch.manual_seed(0)
    net = PolicyNet(PolicyConfig(hidden=cfg.hidden))
    default = policy_mod._SET_ROWS_NODES
    best: dict[str, tuple[float, float, float]] = {}
    weights = {}
    for _ in range(args.repeat):
        for label, limit in (("rows", 0), ("bmm", 10**12)):
            policy_mod._SET_ROWS_NODES = limit
            n2 = copy.deepcopy(net).train()
            opt = torch.optim.Adam(n2.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
            u0, s0 = _cpu()
            t0 = time.perf_counter()
            for items in batches:
                loss = _loss(n2, items, cfg.place_weight)
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                torch.nn.utils.clip_grad_norm_(n2.parameters(), 1.0)
                opt.step()
            wall = time.perf_counter() - t0
            u1, s1 = _cpu()
            if label not in best or wall < best[label][0]:
                best[label] = (wall, u1 - u0, s1 - s0)
            weights[label] = torch.cat([q.detach().reshape(-1) for q in n2.parameters()])
    policy_mod._SET_ROWS_NODES = default
    diff = float((weights["rows"] - weights["bmm"]).abs().max())
    for label in ("bmm", "rows"):
        w, u, s = best[label]
        print(f"  {label:<5} {w:7.2f} s wall ({u:.2f} s user, {s:.2f} s system)")
    print(f"  ratio bmm/rows: {best['bmm'][0] / best['rows'][0]:.2f}x; largest weight"
          f" difference after the steps: {diff:.2e}")


if __name__ == "__main__":
    main()
