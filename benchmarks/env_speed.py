"""Environment speed (a benchmark, not a test): env steps per second, side by side.

    python benchmarks/env_speed.py                  # default synthetic GPU and HPC workloads
    python benchmarks/env_speed.py --seconds 10 --kind gpu

Measured in this one process, each for ``--seconds`` of wall time, a random agent that
picks uniformly among the unmasked actions (seeded):

1. ``core``: the :class:`~trainer.sim.stepper.Stepper` alone (the decision core: masks,
   tree best fit, events, rewards), no observation;
2. ``env``: :class:`~trainer.env.SchedEnv` with ``place=False`` (observation built at
   every decision, padded Dict plus the unpadded Observation in ``info``);
3. ``env+place``: ``place=True`` (every start is two steps; candidates computed).

For the env rows, the share of the time spent building the feature observation
(``Stepper.observation``: :mod:`trainer.sim.observe` and
:func:`slurm_plugin.features.featurize`) is printed too, and the ratio to the core.
Workloads: :class:`~trainer.sim.workload.WorkloadConfig` defaults (1,000 jobs) of each
kind on :func:`~trainer.sim.workload.default_cluster`; the env's defaults (256-job
windows, 64 visible jobs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_plugin.features import Observation  # noqa: E402
from trainer.env import EnvConfig, from_workload  # noqa: E402
from trainer.sim import stepper as stepper_mod  # noqa: E402
from trainer.sim.stepper import Stepper, window  # noqa: E402
from trainer.sim.workload import WorkloadConfig  # noqa: E402

Kind = Literal["gpu", "hpc"]


class _Timer:
    """Accumulates the wall time spent in ``Stepper.observation``."""

    def __init__(self) -> None:
        self.total = 0.0
        self._orig = Stepper.observation

    def __enter__(self) -> _Timer:
        orig = self._orig
        timer = self

        def timed(st: Stepper, max_jobs: int | None = None) -> Observation:
            t0 = time.perf_counter()
            try:
                return orig(st, max_jobs)
            finally:
                timer.total += time.perf_counter() - t0

        Stepper.observation = timed  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        Stepper.observation = self._orig  # type: ignore[method-assign]


def run_core(kind: Kind, seconds: float, seed: int) -> tuple[float, int]:
    """Random decisions on the stepper alone: ``(decisions/s, episodes)``."""
    env = from_workload(WorkloadConfig(kind=kind), EnvConfig())
    jobs, cl = env.jobs, env.cluster
    size = env.config.episode_jobs or jobs.n
    rng = np.random.default_rng(seed)
    steps = eps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        lo = int(rng.integers(0, jobs.n - size + 1))
        st = Stepper(window(jobs, lo, lo + size), cl, reward=env.reward_fn,
                     samples=env.config.frag_samples)
        while not st.done:
            rows = st.visible(64)
            ok = rows[st.fits(rows)]
            k = int(rng.integers(ok.size + 1)) if ok.size else ok.size
            if k < ok.size:
                row = int(ok[k])
                nodes = st.best_fit(row)
                assert nodes is not None
                st.start(row, nodes)
            elif st.can_advance:
                st.advance()
            steps += 1
        eps += 1
    return steps / (time.perf_counter() - t0), eps


def run_env(kind: Kind, place: bool, seconds: float, seed: int
            ) -> tuple[float, int, float, float]:
    """Random legal actions in the env: ``(steps/s, episodes, steps/episode, obs share)``."""
    env = from_workload(WorkloadConfig(kind=kind), EnvConfig(place=place))
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    steps = eps = 0
    with _Timer() as timer:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, _, term, trunc, info = env.step(a)
            steps += 1
            if term or trunc:
                eps += 1
                _, info = env.reset()
        wall = time.perf_counter() - t0
    return steps / wall, eps, steps / max(1, eps), timer.total / wall


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="wall time per row")
    ap.add_argument("--kind", choices=["gpu", "hpc", "both"], default="both")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    kinds: list[Kind] = ["gpu", "hpc"] if args.kind == "both" else [args.kind]
    print(f"rewards: {sorted(stepper_mod.REWARDS)}; random agent over unmasked actions; "
          f"{args.seconds:.0f} s per row")
    print(f"{'kind':5s} {'mode':10s} {'steps/s':>9s} {'episodes':>9s} {'steps/ep':>9s} "
          f"{'obs share':>9s} {'core/x':>7s}")
    for kind in kinds:
        core, eps = run_core(kind, args.seconds, args.seed)
        print(f"{kind:5s} {'core':10s} {core:9,.0f} {eps:9d} {'':>9s} {'':>9s} {1.0:7.1f}")
        for mode, place in (("env", False), ("env+place", True)):
            sps, eps, per, share = run_env(kind, place, args.seconds, args.seed)
            print(f"{kind:5s} {mode:10s} {sps:9,.0f} {eps:9d} {per:9.0f} {share:9.0%} "
                  f"{core / sps:7.1f}")


if __name__ == "__main__":
    main()
