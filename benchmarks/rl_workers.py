"""RL rollout workers (a benchmark, not a test): wall time of one budget, 1 vs N workers.

    python benchmarks/rl_workers.py                          # Lublin-256, PPO, 1 vs 2
    python benchmarks/rl_workers.py --workers 1 2 4 --updates 3 --episodes 8

The same PPO training (same data, seed and budget: ``--updates`` rounds of
``--episodes`` windows of ``--window`` jobs, lockstep groups of ``--group``) runs
once per worker count, side by side in this process. Printed per count: the wall time
of the whole run, the time of the rollouts alone (the part workers parallelise), the
time to start the pool (spawning processes, importing torch there), and the ratios to
one worker. The final weights are compared too: they must be identical (results do
not depend on the number of workers). ``--workers 1`` runs the rollouts in this
process; N > 1 starts N local processes. On a machine shared with other work the
ratios move from run to run: compare rows of one run only. A control row first
measures how much parallelism the machine offers right now: the same pure-Python loop
twice in a row, then in 2 processes at once (2.0: two free cores; 1.0: one).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from trainer.rl import PPOConfig, TrainConfig, make_spec, train  # noqa: E402
from trainer.rl import workers as workers_mod  # noqa: E402
from trainer.sim import load  # noqa: E402
from trainer.sim.state import Cluster, build_jobs  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "lublin_256.swf"


class _Clock:
    """Accumulates the time spent in pool construction and in ``run``."""

    def __init__(self) -> None:
        self.start = 0.0
        self.rollouts = 0.0

    def install(self) -> None:
        make = workers_mod.make_pool
        clock = self

        def timed_make(*a, **k):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            pool = make(*a, **k)
            clock.start += time.perf_counter() - t
            run = pool.run

            def timed_run(*ra, **rk):  # type: ignore[no-untyped-def]
                t1 = time.perf_counter()
                try:
                    return run(*ra, **rk)
                finally:
                    clock.rollouts += time.perf_counter() - t1

            pool.run = timed_run  # type: ignore[method-assign]
            return pool

        import trainer.rl.trainer as trainer_mod

        setattr(trainer_mod, "make_pool", timed_make)  # noqa: B010 (patch for timing)


def _burn(n: int) -> int:
    s = 0
    for i in range(n):
        s += i
    return s


def parallelism(n: int = 10_000_000) -> float:
    """Speed-up of a CPU-bound loop run in 2 processes over running it twice here."""
    t = time.perf_counter()
    _burn(n)
    _burn(n)
    serial = time.perf_counter() - t
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_burn, [1000, 1000])  # processes started
        t = time.perf_counter()
        pool.map(_burn, [n, n])
        par = time.perf_counter() - t
    return serial / par


def main() -> None:
    """Run the benchmark (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--limit", type=int, default=3000, help="jobs read from the trace")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--updates", type=int, default=3)
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--group", type=int, default=2)
    p.add_argument("--hidden", type=int, default=32)
    args = p.parse_args()
    inp = load.from_trace(args.trace, limit=args.limit)
    cluster = Cluster.from_spec(inp.spec)
    jobs = build_jobs(inp.records, cluster)
    base = TrainConfig(budget_steps=None, budget_updates=args.updates, hidden=args.hidden,
                       episode_jobs=args.window, val_jobs=args.window, group=args.group,
                       eval_every=10**6, references=(), progress=False)
    spec = make_spec(jobs, cluster, base)
    acfg = PPOConfig(episodes=args.episodes, epochs=2)
    print(f"{inp.source}: {jobs.n} jobs on {cluster.num_nodes} nodes; PPO, {args.updates}"
          f" updates x {args.episodes} episodes of {args.window} jobs, groups of"
          f" {args.group}; torch threads in the trainer: 1")
    print(f"control: a CPU-bound loop runs {parallelism():.2f}x faster in 2 processes"
          " than twice in one (the parallelism available now)")
    rows = []
    ref_weights = None
    for w in args.workers:
        clock = _Clock()
        clock.install()
        cfg = TrainConfig(**{**base.to_dict(), "workers": w, "references": ()})
        t0 = time.perf_counter()
        res = train(spec, cfg, acfg)
        wall = time.perf_counter() - t0
        weights = {k: v.clone() for k, v in res.net.state_dict().items()}
        same = (ref_weights is None
                or all(torch.equal(weights[k], ref_weights[k]) for k in weights))
        ref_weights = ref_weights or weights
        rows.append((w, wall, clock.rollouts, clock.start, res.steps, same))
    w1 = rows[0]
    print(f"{'workers':>7} {'wall s':>8} {'rollouts s':>10} {'pool start s':>12} "
          f"{'steps':>6} {'wall/1':>7} {'rollouts/1':>10} {'same weights':>12}")
    for w, wall, roll, start, steps, same in rows:
        print(f"{w:>7} {wall:>8.1f} {roll:>10.1f} {start:>12.1f} {steps:>6} "
              f"{wall / w1[1]:>7.2f} {roll / w1[2]:>10.2f} {'yes' if same else 'NO':>12}")


if __name__ == "__main__":
    main()
