"""How much of the oracles' lead is knowing run times no scheduler knows (a measurement).

    python benchmarks/oracle_gap.py                              # Theta, 16 windows
    python benchmarks/oracle_gap.py --trace ../shared/traces/lublin_256.swf
        --missing-limits users --limit 2d --order policy         # (one command line)

Issue 5 asks for a policy below "the best seed heuristic", and on Theta that is ``spf``,
which orders by the *recorded* run time. A policy sees only what a live scheduler sees,
and orders by an estimate (:class:`~slurm_plugin.features.UserHistory`: the user's
recent run/limit ratio times the job's limit; ``sef`` orders by it alone). This script
measures where the gap between the two comes from, on many stretches of the history
rather than one test period:

- **orders**, each replayed behind the same starvation guard (``--limit``, ``--order``;
  as the helper deploys them) on ``--windows`` consecutive windows of the jobs after the
  first 15% (each window after a warm-up of the ``--warmup-jobs`` jobs before it):
  ``sef``; ``sef+short``, the same estimate except that a job that ran under ``--short``
  seconds is known exactly (perfect knowledge of the short jobs only); ``srf``, the
  recorded run time of every job (``sef`` with a perfect estimate); ``spf`` (the
  recorded run time times the job's size, the oracle of the seed heuristics); and the
  Slurm baseline. Printed: the mean bounded slowdown per window and the geometric mean
  of each order's ratio to ``sef`` over the windows.
- **how predictable the short jobs are**: the area under the ROC curve with which each
  of two history estimates, made at the job's submission from the jobs that had ended
  by then, tells the jobs that ran under ``--short`` seconds from the others: the
  features' estimate (lower first), and the share of short jobs among the same user's
  last 16 jobs with the same time limit and size (falling back to the same limit, then
  to the user). 1.0 would be perfect, 0.5 chance.

Measured on theta.swf (16 windows, behind the 14-day ``age`` guard the imitation net
is deployed with): ``sef+short`` 0.60 of ``sef`` (geometric mean), ``srf`` 0.55, ``spf``
0.57, Slurm 3.03; 36% of the jobs ran under 10 minutes, and the estimates tell them
apart with an AUC of 0.80 (the features') and 0.85 (per-(user, limit, size) history; a
small MLP over 20 history features did no better, 0.86). Ordering by that better
short-job estimate moved the geometric mean by -7% to +1% depending on how it was
weighed against the run-time estimate. So most of ``spf``'s lead comes from knowing
which jobs will end within minutes, which the trace's fields (user, size, limit,
submit time) predict poorly.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_plugin.output import table  # noqa: E402
from slurm_plugin.when import parse_span  # noqa: E402
from trainer.cli import _prepare, resolve  # noqa: E402
from trainer.evaluate import (  # noqa: E402
    EvalConfig,
    Split,
    StarvationGuard,
    evaluate,
    user_history,
)
from trainer.sim.policies import Policy, Sef  # noqa: E402
from trainer.sim.stepper import window  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "theta.swf"


class KnownShort(Sef):
    """``sef``, except that a job that ran under ``short`` seconds is known exactly."""

    name = "sef+short"
    short = 600.0

    def score(self, jobs: Any, idx: np.ndarray, ctx: Any) -> np.ndarray:
        """Minus the run time: recorded if under ``short`` seconds, else estimated."""
        est = -super().score(jobs, idx, ctx)
        run = jobs.run[np.asarray(idx, dtype=np.int64)].astype(np.float64)
        out: np.ndarray = -np.where(run < self.short, run, est)
        return out


class Srf(Sef):
    """Shortest recorded run first: ``sef`` with a perfect estimate (an oracle)."""

    name = "srf"

    def score(self, jobs: Any, idx: np.ndarray, ctx: Any) -> np.ndarray:
        """Minus the recorded run time."""
        super().score(jobs, idx, ctx)  # (keeps the history fed, as sef's)
        out: np.ndarray = -jobs.run[np.asarray(idx, dtype=np.int64)].astype(np.float64)
        return out


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``score`` (higher: more likely ``positive``)."""
    ranks = np.empty(score.size)
    order = np.argsort(score, kind="stable")
    s = score[order]
    # average ranks over ties
    bounds = np.flatnonzero(np.diff(s)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [s.size]))
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        ranks[order[a:b]] = (a + b - 1) / 2.0
    pos = positive.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return math.nan
    return float((ranks[pos].sum() - n_pos * (n_pos - 1) / 2.0) / (n_pos * n_neg))


def predictability(jobs: Any, cluster: Any, short: float, first: int) -> tuple[float, ...]:
    """Short-job share and the two AUCs (module docstring) over the jobs from ``first``."""
    from slurm_plugin.features import UserHistory

    n = jobs.n
    cap = int(cluster.cap_c.max())
    size = np.where(jobs.exclusive, cap, jobs.cpus) * jobs.nodes
    limit = np.where(jobs.limit_known, jobs.limit, 0)
    names = [jobs.users[u] for u in jobs.user.tolist()] if jobs.users else [""] * n
    end = jobs.eligible + jobs.run
    by_end = np.argsort(end, kind="stable")
    hist = UserHistory()
    levels: list[dict[Any, deque[float]]] = [defaultdict(lambda: deque(maxlen=16))
                                             for _ in range(3)]
    est = np.zeros(n)
    share = np.zeros(n)
    k = 0
    for i in range(n):
        while k < n and end[by_end[k]] <= jobs.eligible[i]:
            j = int(by_end[k])
            k += 1
            hist.record(names[j], int(end[j]), int(jobs.run[j]), int(limit[j]), int(size[j]))
            keys = (names[j], (names[j], limit[j]), (names[j], limit[j], size[j]))
            for lv, key in zip(levels, keys, strict=True):
                lv[key].append(float(jobs.run[j] < short))
        est[i] = hist.estimates([names[i]], [int(limit[i])], int(jobs.eligible[i]))[0][0]
        keys = ((names[i], limit[i], size[i]), (names[i], limit[i]), names[i])
        got = next((lv[key] for lv, key in zip(levels[::-1], keys, strict=True)
                    if lv.get(key)), None)
        share[i] = sum(got) / len(got) if got else 0.0
    y = jobs.run[first:] < short
    return float(y.mean()), auc(-est[first:], y), auc(share[first:], y)


def main(argv: list[str] | None = None) -> int:
    """Replay the orders on the windows, then measure the short jobs' predictability."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--missing-limits", choices=("run", "users"), default=None)
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--warmup-jobs", type=int, default=1500)
    ap.add_argument("--limit", default="14d", help="starvation limit (0: no guard)")
    ap.add_argument("--order", choices=("age", "policy"), default="age")
    ap.add_argument("--short", type=float, default=600.0, help="a short job, seconds")
    args = ap.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"{args.trace} not found (the traces live in ../shared/traces)", file=sys.stderr)
        return 2
    kw = {"missing_limits": args.missing_limits} if args.missing_limits else {}
    sim = resolve(trace=args.trace, **kw)
    prep = _prepare(sim)
    jobs, cluster = prep.jobs, prep.cluster
    limit = parse_span(args.limit).total_seconds() if args.limit not in ("0", "") else 0.0
    first = int(0.15 * jobs.n)
    edges = np.linspace(first, jobs.n, args.windows + 1).astype(int)
    names = ["sef", "sef+short", "srf", "spf", "slurm"]
    rows: list[dict[str, float]] = []
    for w in range(args.windows):
        lo, hi = int(edges[w]), int(edges[w + 1])
        cut = window(jobs, 0, hi, shift=False)
        cfg = EvalConfig(baselines=("slurm", "sef", "spf"), resamples=0, windows=1,
                         guard_heuristics=True,
                         starvation_limit=limit, starvation_order=args.order)
        start = max(0, lo - args.warmup_jobs)  # (where evaluate starts the replays)
        models: dict[str, Policy] = {}
        for cls in (KnownShort, Srf):
            pol = cls(prep.priority, "tree")
            if isinstance(pol, KnownShort):
                pol.short = args.short
            pol.history = user_history(cut, cluster, start, pol.norm)
            models[cls.name] = StarvationGuard(pol, limit, args.order) if limit else pol
        res = evaluate(cut, cluster, models, cfg, options=prep.options,
                       priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed,
                       split=Split(hi, lo, lo), warmup_jobs=args.warmup_jobs)
        rows.append({n: float(res.metrics[n]["bsld"]["mean"]) for n in names})
        print(f"window {w + 1}/{args.windows}: jobs {lo}..{hi - 1}", file=sys.stderr)
    guard = f"behind {args.limit} {args.order}" if limit else "unguarded"
    print(f"{Path(args.trace).name}: mean bounded slowdown per window ({guard})")
    table(["window", *names], [[str(w + 1), *(f"{r[n]:.2f}" for n in names)]
                               for w, r in enumerate(rows)])
    geo = {n: math.exp(float(np.mean([math.log(r[n] / r["sef"]) for r in rows])))
           for n in names}
    print("geometric mean of the ratio to sef: "
          + ", ".join(f"{n} {geo[n]:.3f}" for n in names))
    share, a_est, a_hist = predictability(jobs, cluster, args.short, first)
    print(f"jobs that ran under {args.short:.0f} s: {share:.1%}; AUC telling them apart at"
          f" submission: the features' estimate {a_est:.3f}, per-(user, limit, size)"
          f" history {a_hist:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
