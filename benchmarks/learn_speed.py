"""PPO's update on a big cluster (a benchmark, not a test): distinct rows encoded once.

Each distinct node row and leaf encoded once vs every one, side by side; and the node
sets summed over the distinct rows vs over every node's encoding.

    python benchmarks/learn_speed.py                      # theta.swf (4,392 nodes)
    python benchmarks/learn_speed.py --trace ../shared/traces/lublin_256.swf

One PPO rollout (``--episodes`` windows of ``--window`` jobs, from the trace's training
period, the net freshly initialised and seeded) is collected once; then the same PPO
update (``algo.learn``: the chunked forward pass, then ``epochs`` passes of minibatches
with backward) runs on copies of the same net, ``--repeat`` times each way,
interleaved: three ways: ``once``, :meth:`trainer.policy.PolicyNet.forward_batch` encoding each
distinct node row and each leaf of the same rows once and summing the candidate node
sets over the distinct rows (the default); ``once-bmm``, the same but the sets summed
over ``[B, N, H]`` with ``bmm`` (``trainer.policy._SET_ROWS_NODES`` set out of reach: what
clusters under 1,024 nodes do); and ``every``, every node and leaf encoded
(``trainer.policy._DEDUP_ROWS`` set out of reach). Printed: the fastest update each way,
the ratios, how many node rows and leaves the encoders saw each way, and the largest
difference between the updated weights (float rounding only: the same update).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trainer.policy as policy_mod  # noqa: E402
from trainer.policy import PolicyConfig, PolicyNet  # noqa: E402
from trainer.rl import PPOConfig, TrainConfig, make_spec  # noqa: E402
from trainer.rl.algorithms import PPO, TaskMaker  # noqa: E402
from trainer.rl.workers import make_pool  # noqa: E402
from trainer.sim import load  # noqa: E402
from trainer.sim.state import Cluster, build_jobs  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "theta.swf"


def main() -> None:
    """Run the benchmark (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--limit", type=int, default=6000, help="jobs read from the trace")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    inp = load.from_trace(args.trace, limit=args.limit)
    cluster = Cluster.from_spec(inp.spec)
    jobs = build_jobs(inp.records, cluster)
    cfg = TrainConfig(budget_steps=None, budget_updates=1, episode_jobs=args.window,
                      val_jobs=args.window, eval_every=10**6, references=(),
                      progress=False, hold=False)
    spec = make_spec(jobs, cluster, cfg)
    torch.manual_seed(0)
    net = PolicyNet(PolicyConfig())
    acfg = PPOConfig(episodes=args.episodes, epochs=args.epochs)
    rng = np.random.default_rng(0)
    tasks = PPO(net, acfg, rng).plan(TaskMaker(rng, spec.train_rows, args.window))
    with make_pool(spec, net.config, 1) as pool:
        t0 = time.perf_counter()
        trajs = [t for g in pool.run(net, [tasks[i:i + 4] for i in range(0, len(tasks), 4)])
                 for t in g]
        t_roll = time.perf_counter() - t0
    steps = sum(t.length for t in trajs)
    print(f"{inp.source}: {cluster.num_nodes} nodes, {cluster.num_leaves} leaves; {steps}"
          f" env steps collected in {t_roll:.1f} s; PPO epochs {args.epochs}, minibatch"
          f" {acfg.minibatch}; torch threads {torch.get_num_threads()}")
    seen = {"node": 0, "leaf": 0}

    def counter(name: str):  # type: ignore[no-untyped-def]
        def hook(m, i, o):  # type: ignore[no-untyped-def]
            seen[name] += i[0].shape[:-1].numel()
        return hook

    once, sets = policy_mod._DEDUP_ROWS, policy_mod._SET_ROWS_NODES
    ways = {"once": (once, sets), "once-bmm": (once, 10**12), "every": (10**12, sets)}
    best = {label: float("inf") for label in ways}
    rows = {}
    weights = {}
    for _ in range(args.repeat):
        for label, (limit, set_limit) in ways.items():
            policy_mod._DEDUP_ROWS, policy_mod._SET_ROWS_NODES = limit, set_limit
            n2 = copy.deepcopy(net)
            hs = [n2.node_enc.register_forward_hook(counter("node")),
                  n2.leaf_enc.register_forward_hook(counter("leaf"))]
            seen.update(node=0, leaf=0)
            algo = PPO(n2, acfg, np.random.default_rng(1))
            algo.reward_scale = 1e-3
            n2.train()
            t0 = time.perf_counter()
            algo.learn(trajs)
            best[label] = min(best[label], time.perf_counter() - t0)
            for h in hs:
                h.remove()
            rows[label] = dict(seen)
            weights[label] = torch.cat([p.detach().reshape(-1) for p in n2.parameters()])
    policy_mod._DEDUP_ROWS, policy_mod._SET_ROWS_NODES = once, sets
    for label in ("every", "once-bmm", "once"):
        print(f"  {label:<8} update {best[label]:7.2f} s   node rows encoded"
              f" {rows[label]['node']:>11,}   leaves encoded {rows[label]['leaf']:>10,}")
    for label in ("every", "once-bmm"):
        diff = float((weights["once"] - weights[label]).abs().max())
        print(f"  ratio {label}/once: {best[label] / best['once']:.2f}x; largest weight"
              f" difference after the update: {diff:.2e}")


if __name__ == "__main__":
    main()
