"""The test period replayed under jittered arrivals (``rlsched evaluate --draws K``).

One replay of the test period decides a quality line by whatever timing the history
happened to have: which of two jobs arrived first, whether a wide job arrived a minute
before a backfill hole closed. On Lublin behind the helper's 2-day guard, moving every
arrival by up to 60 s moves ``lrf``'s mean bounded slowdown between 124.7 and 180.7
(admin guide, section 3), so a model 20 points below it on the recorded timing may not be
below it on the next weeks.

With ``EvalConfig.draws`` K > 1, :func:`trainer.evaluate.evaluate` replays the test period
K - 1 more times, each with every job arriving up to ``EvalConfig.jitter`` seconds earlier
or later (:func:`jittered`: uniform, seeded by the replay's seed; the arrival order and
each job's submit-to-eligible gap are kept), every model and every baseline on the same
jittered jobs, and reports (:func:`summarize`):

- per run, its headline figures in each draw (draw 1 as recorded): mean bounded
  slowdown, p99 wait, utilisation, mean JCT (``figures``);
- per model, in how many draws each quality line passes, read as on the recorded replay
  (:func:`~trainer.evaluate.check_targets` on each draw's figures; ``passes``);
- per model, the lines read on the mean figures over the draws (``expected``: the best
  heuristic is the one whose mean over the draws is lowest).

The pass/fail of the targets stays the issue's: the point values on the recorded replay.
The draws say whether that verdict is the model's or the timing's.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import multiprocessing
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import click
import numpy as np

from trainer.evaluate import EvalConfig, _locality, _util, check_targets, evaluate, print_checks
from trainer.sim.policies import Policy
from trainer.sim.state import Cluster, JobTable

__all__ = ["DRAW_FIGURES", "deployable_name", "figures_of", "jittered", "mean_metrics",
           "print_draws", "pristine", "replay_draws", "summarize"]

#: The figures recorded per run and draw: name -> how to read it from
#: :func:`trainer.sim.metrics.compute`'s metrics (``None``: not measured).
DRAW_FIGURES: dict[str, Callable[[Mapping[str, Any]], float | None]] = {
    "bsld": lambda m: float(m["bsld"]["mean"]),
    "p99": lambda m: float(m["wait_s"]["p99"]),
    "util": _util,
    "jct": lambda m: float(m["jct_s"]["mean"]),
    "single_leaf_share": lambda m: (None if m.get("single_leaf_share") is None
                                    else float(m["single_leaf_share"])),
}


def jittered(jobs: JobTable, jitter: float, rng: np.random.Generator) -> JobTable:
    """``jobs`` with every arrival moved by up to ``jitter`` s, the arrival order kept.

    Each job's eligible time moves by a whole number of seconds drawn uniformly from
    ``[-jitter, jitter]``; no job arrives before the one recorded before it (a running
    maximum), so the rows stay in arrival order and the user histories in the same
    order; the submit time moves with the eligible time (the gap between them is kept).
    ``jitter`` <= 0: ``jobs`` itself.
    """
    if jitter <= 0:
        return jobs
    delta = rng.integers(-int(jitter), int(jitter) + 1, size=jobs.n)
    eligible = np.maximum.accumulate(jobs.eligible + delta).astype(jobs.eligible.dtype)
    submit = (jobs.submit + (eligible - jobs.eligible)).astype(jobs.submit.dtype)
    return dataclasses.replace(jobs, eligible=eligible, submit=submit)


def pristine(models: Mapping[str, Any]) -> dict[str, Any]:
    """The models as given, each policy object copied so every draw starts it afresh.

    Paths are loaded anew by each replay; a policy object keeps state while it replays
    (a user history, a bound simulator), so each draw replays a copy taken before the
    first.
    """
    return {n: copy.deepcopy(m) if isinstance(m, Policy) else m for n, m in models.items()}


def figures_of(ms: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """:data:`DRAW_FIGURES` of every run of one replay."""
    return {n: {k: read(m) for k, read in DRAW_FIGURES.items()} for n, m in ms.items()}


def mean_metrics(draws: Sequence[Mapping[str, Mapping[str, float | None]]]
                 ) -> dict[str, dict[str, Any]]:
    """Metrics dicts of the runs' mean figures over the draws, as ``check_targets`` reads.

    A figure missing (``None``) in any draw is missing from the mean. The utilisation
    is given as ``nodes`` (``gpus`` unset): whichever the draws read.
    """
    out: dict[str, dict[str, Any]] = {}
    for n in draws[0]:
        mean: dict[str, float | None] = {}
        for k in DRAW_FIGURES:
            xs = [d[n][k] for d in draws]
            vals = [x for x in xs if x is not None]
            mean[k] = float(np.mean(vals)) if len(vals) == len(xs) else None
        out[n] = {"bsld": {"mean": mean["bsld"]}, "wait_s": {"p99": mean["p99"]},
                  "jct_s": {"mean": mean["jct"]},
                  "utilisation": {"gpus": None, "nodes": mean["util"]},
                  "single_leaf_share": mean["single_leaf_share"]}
    return out


def deployable_name(check: str) -> str:
    """The name under which a best-heuristic check is counted against the best deployable.

    That is the best heuristic reading no recorded run time (the check's ``deployable``):
    ``bsld_vs_best_heuristic`` -> ``bsld_vs_best_deployable``.
    """
    return check.replace("_heuristic", "") + "_deployable"


def summarize(draws: Sequence[Mapping[str, Mapping[str, float | None]]],
              checks: Mapping[str, Sequence[Mapping[str, Any]]],
              expected: Mapping[str, Mapping[str, Any]], *, jitter: float,
              seed: int) -> dict[str, Any]:
    """The JSON-able summary of the draws (``eval.json``'s ``draws``).

    Args:
        draws: Per draw, :func:`figures_of` its replay (draw 1 as recorded).
        checks: Per model, its :func:`~trainer.evaluate.check_targets` in each draw.
        expected: Per model, ``check_targets`` on :func:`mean_metrics` of the draws.
        jitter: Seconds each arrival moved by at most.
        seed: The jitter's seed.

    Returns:
        ``{"draws", "jitter", "seed", "figures": {run: {figure: [per draw]}},
        "passes": {model: {check: passed in how many draws (None: not applicable),
        ..., "all": every line}}, "expected": {model: check_targets' dict}}``; a
        best-heuristic check whose best reads the recorded run time in some draw (an
        oracle) is also counted against the best that does not
        (:func:`deployable_name`), as the recorded replay reports it.
    """
    figures = {n: {k: [d[n][k] for d in draws] for k in DRAW_FIGURES} for n in draws[0]}
    passes: dict[str, dict[str, int | None]] = {}
    for model, per_draw in checks.items():
        counts: dict[str, int | None] = {}
        for c in per_draw[0]["checks"]:
            rows = [next(x for x in t["checks"] if x["name"] == c["name"]) for t in per_draw]
            oks = [x["ok"] for x in rows]
            counts[c["name"]] = (None if all(ok is None for ok in oks)
                                 else sum(ok is True for ok in oks))
            if any(x.get("deployable") for x in rows):  # against the best that reads no
                # recorded run time: where that is the best itself, the check's own verdict
                dep = [x["deployable"]["ok"] if x.get("deployable") else x["ok"] for x in rows]
                counts[deployable_name(c["name"])] = sum(ok is True for ok in dep)
        counts["all"] = sum(bool(t["passed"]) for t in per_draw)
        passes[model] = counts
    return {"draws": len(draws), "jitter": jitter, "seed": seed, "figures": figures,
            "passes": passes, "expected": dict(expected)}


def _draw(jobs: JobTable, cluster: Cluster, models: Mapping[str, Any], cfg: EvalConfig,
          kw: Mapping[str, Any], progress: bool, label: str
          ) -> tuple[dict[str, dict[str, float | None]], dict[str, dict[str, Any]]]:
    """One draw's replay (a worker's task): its :func:`figures_of` and each model's lines."""
    r = evaluate(jobs, cluster, models, dataclasses.replace(cfg, draws=1, resamples=0,
                                                            windows=1),
                 progress=progress, label=label, **kw)
    locality = _locality(cfg, kw["speed_model"])
    return figures_of(r.metrics), {m: check_targets(r.metrics, m, cfg, locality=locality)
                                   for m in models}


def replay_draws(jobs: JobTable, cluster: Cluster, models: Mapping[str, Any],
                 cfg: EvalConfig, recorded: Mapping[str, Mapping[str, Any]], *,
                 progress: bool, workers: int, **kw: Any) -> dict[str, Any]:
    """:func:`~trainer.evaluate.evaluate`'s draws after the recorded one (:func:`summarize`).

    ``recorded``: the metrics of the recorded replay (draw 1); ``models`` as given,
    before any replay; ``kw``: ``evaluate``'s replay settings (``options``,
    ``priority``, ``speed_model``, ``seed``, ``split``, ``warmup_jobs``). The jittered
    tables are drawn here, in order, so ``workers`` side by side replay the same draws.
    """
    rng = np.random.default_rng(kw["seed"])
    tables = [jittered(jobs, cfg.jitter, rng) for _ in range(1, cfg.draws)]
    locality = _locality(cfg, kw["speed_model"])
    outs = [(figures_of(recorded),
             {m: check_targets(recorded, m, cfg, locality=locality) for m in models})]
    if workers == 1:
        outs += [_draw(t, cluster, pristine(models), cfg, kw, progress,
                       f"draw {d + 2}/{cfg.draws}") for d, t in enumerate(tables)]
    else:
        ctx = multiprocessing.get_context("spawn")
        bar: Any = (click.progressbar(length=len(tables), file=sys.stderr,
                                      label=f"replaying {len(tables)} more draws,"
                                            f" {min(workers, len(tables))} side by side")
                    if progress else contextlib.nullcontext())
        with bar, ProcessPoolExecutor(max_workers=min(workers, len(tables)),
                                      mp_context=ctx) as ex:
            futures = [ex.submit(_draw, t, cluster, pristine(models), cfg, kw, False, "")
                       for t in tables]
            for fut in futures:
                outs.append(fut.result())
                if progress:
                    bar.update(1)
    figures = [f for f, _ in outs]
    checks = {m: [c[m] for _, c in outs] for m in models}
    mean = mean_metrics(figures)
    expected = {m: check_targets(mean, m, cfg, locality=locality) for m in models}
    return summarize(figures, checks, expected, jitter=cfg.jitter, seed=kw["seed"])


def _spread(xs: Sequence[float | None], fmt: str) -> list[str]:
    if any(x is None for x in xs):
        return ["-", "-", "-"]
    a = np.array(xs, dtype=float)
    return [format(a[0], fmt), format(a.mean(), fmt),
            f"{format(a.min(), fmt)}-{format(a.max(), fmt)}"]


def print_draws(summary: Mapping[str, Any] | None) -> None:
    """Print the draws: each run's figures over them, then each model's lines."""
    if not summary:
        return
    from slurm_plugin.output import table

    k = summary["draws"]
    click.echo(f"the test period in {k} draws (draw 1 as recorded, the others with every"
               f" arrival moved by up to {summary['jitter']:g} s, order kept):")
    fig = summary["figures"]
    table(["run", "bsld recorded", "bsld mean", "bsld range", "p99 mean (s)", "p99 range",
           "util mean", "util range"],
          [[n, *_spread(f["bsld"], ".3f"), *_spread(f["p99"], ",.0f")[1:],
            *_spread(f["util"], ".4f")[1:]] for n, f in fig.items()])
    passes = summary["passes"]
    if not passes:
        return
    names = [c for c in next(iter(passes.values())) if c != "all"]
    click.echo(f"quality lines passed, in draws of {k} (each draw read as the recorded"
               " replay is):")
    table(["model", *names, "all"],
          [[m, *("-" if p[c] is None else str(p[c]) for c in names), str(p["all"])]
           for m, p in passes.items()])
    first = next(iter(summary["expected"]), None)
    if first is not None:
        t = summary["expected"][first]
        click.echo(f"quality lines of {first} on the mean figures over the {k} draws:"
                   f" {'PASSED' if t['passed'] else 'NOT MET'}")
        print_checks(t["checks"])
