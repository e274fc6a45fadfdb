"""``evaluate --draws`` side by side (a benchmark, not a test): wall time, 1 vs N workers.

    python benchmarks/eval_draws.py imit=run/imitation.pt        # Lublin, 6 draws, 1 vs 2
        [--trace FILE --missing-limits users --draws 6 --workers 1 2 --baselines lrf]

The same evaluation (the models behind the helper's default guard, ``--baselines``
behind the same guard, ``--draws`` replays of the test period with arrivals moved by up
to 60 s) runs once per worker count, one after the other in this process. Printed per
count: the wall time, its ratio to one worker, and whether the draws' figures are the
ones one worker gave (they must be: the jittered tables are drawn before the replays).
The recorded replay runs in this process whatever the count, so with K draws and N
workers the best ratio is K / (1 + ceil((K - 1) / N)). Compare rows of one run only.

Measured (stop 64, an AMD EPYC, family 25, model 1, 2 cores, nothing else running;
Lublin, ``--missing-limits users``, the ``lrf`` imitation net behind the 2-day guard,
``--baselines lrf``, ``--draws 5``): 175.6 s with 1 worker, 120.1 s with 2 (1.46x; at
most 5 / 3 = 1.67x here), the same figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_plugin.output import table  # noqa: E402
from trainer.cli import _prepare, resolve  # noqa: E402
from trainer.evaluate import EvalConfig, _model_args, evaluate  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "lublin_256.swf"


def main(argv: list[str] | None = None) -> int:
    """Time one evaluation with draws per worker count; print the times and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="NAME=PATH of a checkpoint or ONNX model")
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--missing-limits", choices=("run", "users"), default=None)
    ap.add_argument("--baselines", default="lrf", help="replayed beside slurm, comma-separated")
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"{args.trace} not found (the traces live in ../shared/traces)", file=sys.stderr)
        return 2
    models = _model_args(args.models)
    kw = {"missing_limits": args.missing_limits} if args.missing_limits else {}
    sim = resolve(trace=args.trace, **kw)
    prep = _prepare(sim)
    names = [b for b in args.baselines.split(",") if b and b != "slurm"]
    cfg = EvalConfig(baselines=("slurm", *names), resamples=0, windows=1,
                     guard_heuristics=True, draws=args.draws)
    rows, first = [], None
    for w in args.workers:
        t = time.perf_counter()
        res = evaluate(prep.jobs, prep.cluster, models, cfg, options=prep.options,
                       priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed,
                       workers=w)
        wall = time.perf_counter() - t
        figures = (res.draws or {}).get("figures")
        first = first or (wall, figures)
        rows.append([str(w), f"{wall:.1f}", f"{first[0] / wall:.2f}",
                     "yes" if figures == first[1] else "NO"])
        print(f"workers {w}: {wall:.1f} s", file=sys.stderr)
    print(f"{Path(args.trace).name}: evaluate with {args.draws} draws, {len(models)} models"
          f" and {len(names) + 1} baselines")
    table(["workers", "wall (s)", "vs the first", "same figures"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
