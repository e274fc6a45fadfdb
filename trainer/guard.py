"""Choose the helper's starvation guard from the site's own history (``rlsched tune-guard``).

The helper puts a job that has waited longer than ``starvation_limit`` above every job
that has not, in ``starvation_order`` (:mod:`slurm_plugin.helper.decide`). What that
costs depends on the site: on a cluster that rarely queues for days the guard seldom
acts; on an overloaded one it can undo most of what the policy gains, and not in
proportion to the limit. On the Lublin trace with modelled user limits, ``seaf``'s
order behind the guard (policy order among starving jobs) has mean bounded slowdown
285 at 2 days, 468 at 3 days and 346 at 6 days, against 28.8 unguarded: each promoted
whole-machine job holds a reservation while the small jobs pile up behind it, and one
such episode sets the mean. So one default cannot suit every site, and the limit is
chosen here on the site's own jobs.

:func:`sweep` replays the **validation period** (the jobs between the training and the
test period of :func:`trainer.evaluate.time_split`; the test period is never replayed,
so that ``rlsched evaluate`` still judges the chosen setting on unseen jobs) under the
model behind each guard setting, the model without a guard (what the guard costs), and
the Slurm baseline, with :func:`trainer.evaluate.evaluate` (same warm-up, scheduler,
speed model and user history as evaluation). Each setting is read against Slurm as
the quality targets read a model (issue 5): mean bounded slowdown, p99 wait (at most
``p99_slack`` above Slurm's, the bound the guard exists for) and utilisation (not
lower); the longest wait is shown too, and bounded as well with ``max_wait_slack``
(a share above Slurm's longest wait), and so is the busy share up to the last arrival
(``util_arrivals``; not a bound: the checked utilisation runs to each replay's own
last end, so a setting that drains the machine for a wide job at the end of the period
reads lower there and one that ends sooner reads higher, however busy each kept the
machine while jobs arrived).

:func:`choose` picks, among the guarded settings that keep every bound (p99 wait,
longest wait if bounded, utilisation), the one with the lowest mean bounded slowdown;
if none keeps them all, it drops bounds from the least important (utilisation first)
and says which; if none keeps even the p99 bound, the lowest p99 wait. The helper
always runs with a guard (``starvation_limit`` must be positive), so the unguarded run
is a reference, never a choice. The choice is printed as the two lines of
``helper.toml`` to set.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from slurm_plugin.helper.decide import (
    STARVATION_ORDERS,
    SiteFactorRule,
    check_score_resolution,
    check_starvation_order,
)
from slurm_plugin.when import parse_span

from .cli import _input_options, _prepare, resolve
from .evaluate import (
    SLURM,
    EvalConfig,
    Split,
    _util,
    _util_reading,
    evaluate,
    time_split,
    warmup_share,
)
from .sim import metrics
from .sim.slurm import PrioritySettings, SchedulerOptions
from .sim.state import Cluster, JobTable
from .sim.stepper import window

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_ORDERS",
    "GuardSetting",
    "GuardSweep",
    "choose",
    "grid",
    "parse_limits",
    "parse_resolutions",
    "sweep",
    "tune_guard",
    "write_sweep",
]

#: Limits tried by default, seconds (1, 2, 3, 4, 7 and 14 days; the helper's default is
#: 2). 14 days is there for sites where every guard that acts costs (Theta: on its
#: validation period the net had mean bsld 5.9 unguarded, 10.0 to 28.3 behind 1 to 7 days,
#: and no job waited 14 days): a loose bound is then the right one.
DEFAULT_LIMITS: tuple[float, ...] = tuple(d * 86400.0 for d in (1, 2, 3, 4, 7, 14))
#: Orders tried by default: every one the helper knows.
DEFAULT_ORDERS: tuple[str, ...] = tuple(STARVATION_ORDERS)


@dataclass(frozen=True)
class GuardSetting:
    """One guard: the helper's ``starvation_limit`` (seconds; 0: no guard) and order.

    ``resolution``: the model's scores rounded to multiples of it (the helper's
    ``score_resolution``; 0: exact).
    """

    limit: float
    order: str = "age"
    resolution: float = 0.0

    def __post_init__(self) -> None:
        if not (self.limit >= 0 and math.isfinite(self.limit)):
            raise ValueError(f"a starvation limit must be >= 0 seconds, not {self.limit}")
        check_starvation_order(self.order)
        check_score_resolution(self.resolution)

    @property
    def label(self) -> str:
        """``2d age``, ``36h policy``, ``none``; ``14d age, r=0.2`` with a resolution."""
        base = "none" if self.limit == 0 else f"{_span(self.limit)} {self.order}"
        return f"{base}, r={self.resolution:g}" if self.resolution else base


def _seconds(x: float) -> str:
    """Seconds as an admin types them: ``1209600``, not ``1.2096e+06``."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def grid(limits: Sequence[float] = DEFAULT_LIMITS,
         orders: Sequence[str] = DEFAULT_ORDERS,
         resolutions: Sequence[float] = (0.0,)) -> list[GuardSetting]:
    """The settings a sweep tries: every limit in every order (limit first), per resolution."""
    return [GuardSetting(x, o, r) for r in resolutions for x in limits for o in orders]


def _items(text: str, example: str) -> list[str]:
    """The non-empty items of a comma-separated option (click.BadParameter: none)."""
    items = [t for t in (s.strip() for s in text.split(",")) if t]
    if not items:
        raise click.BadParameter(f"give at least one, e.g. {example}")
    return items


def _resolution(t: str) -> float:
    try:
        r = float(t)
        check_score_resolution(r)
    except ValueError:
        raise click.BadParameter(f"{t!r}: a score resolution is a number >= 0 (0: exact"
                                 " scores)") from None
    return r


def parse_resolutions(text: str) -> tuple[float, ...]:
    """``0,0.2`` as score resolutions, in the order given (click.BadParameter: not ones)."""
    return tuple(dict.fromkeys(_resolution(t) for t in _items(text, "0,0.2")))


def parse_limits(text: str) -> tuple[float, ...]:
    """``1d,36h,4d`` as seconds, in the order given (each a positive span).

    Raises:
        click.BadParameter: On an empty list or a span that is not one.
    """
    out = []
    for t in _items(text, "1d,2d,4d"):
        try:
            out.append(float(t) if t.replace(".", "", 1).isdigit()
                       else parse_span(t).total_seconds())
        except click.BadParameter as exc:
            raise click.BadParameter(f"{exc.message} (seconds, or 1d, 36h...)") from None
        if out[-1] <= 0:
            raise click.BadParameter(f"{t!r}: a starvation limit must be positive")
    return tuple(dict.fromkeys(out))


@dataclass
class GuardSweep:
    """What :func:`sweep` measured.

    Attributes:
        period: Rows of the replayed (validation) period, ``(first, end)``.
        slurm: The Slurm baseline's figures (``bsld_mean``, ``wait_p99``, ``wait_max``,
            ``util``).
        rows: One per setting, the unguarded reference first: the setting, the same
            figures, ``p99_ok``, ``util_ok``, ``bsld_vs_slurm`` (ratio).
        p99_slack: The p99 bound's slack over Slurm's.
        max_wait_slack: The longest wait's bound's slack over Slurm's (``None``: not
            bounded; the rows then carry no ``max_ok``).
        choice: Index in ``rows`` of the chosen setting (:func:`choose`) and why.
    """

    period: tuple[int, int]
    slurm: dict[str, float]
    rows: list[dict[str, Any]]
    p99_slack: float
    max_wait_slack: float | None = None
    choice: tuple[int, str] | None = None

    @property
    def resolutions(self) -> tuple[float, ...]:
        """The score resolutions the guarded settings were tried with (in row order)."""
        out = dict.fromkeys(r["setting"].resolution for r in self.rows
                            if r["setting"].limit > 0)
        return tuple(out) or (0.0,)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        idx, why = self.choice if self.choice is not None else (None, "")
        return {"period": {"jobs": list(self.period), "kind": "validation"},
                "slurm": self.slurm, "p99_slack": self.p99_slack,
                "max_wait_slack": self.max_wait_slack,
                "resolutions": list(self.resolutions),
                "rows": [{**r, "setting": {"limit": r["setting"].limit,
                                           "order": r["setting"].order,
                                           "resolution": r["setting"].resolution,
                                           "label": r["setting"].label}}
                         for r in self.rows],
                "choice": None if idx is None else {"row": idx, "why": why,
                                                    **self.toml_values()}}

    def toml_values(self) -> dict[str, Any]:
        """``starvation_limit``, ``starvation_order`` of the choice (empty: none).

        With its ``score_resolution`` when a resolution other than 0 was tried.
        """
        if self.choice is None:
            return {}
        s: GuardSetting = self.rows[self.choice[0]]["setting"]
        out: dict[str, Any] = {"starvation_limit": s.limit, "starvation_order": s.order}
        if any(self.resolutions):
            out["score_resolution"] = s.resolution
        return out


def _figures(m: Mapping[str, Any]) -> dict[str, float]:
    """A row's figures; ``util`` is the checked utilisation.

    ``util_arrivals`` is the busy share up to the last arrival, shown beside it and not
    checked (``to_last_arrival`` of :func:`trainer.sim.metrics.compute`).
    """
    return {"bsld_mean": float(m["bsld"]["mean"]), "wait_p99": float(m["wait_s"]["p99"]),
            "wait_max": float(m["wait_s"]["max"]), "util": _util(m),
            "util_arrivals": float(_util_reading(m, "to_last_arrival") or 0.0)}


def _replay(table: JobTable, cluster: Cluster, model: str, cfg: EvalConfig,
            split: Split, options: SchedulerOptions | None,
            priority: PrioritySettings | None, speed_model: str,
            seed: int) -> tuple[dict[str, Any], dict[str, float]]:
    """One setting's replay: the model's figures and checks, and the Slurm baseline's.

    The model's ``p99_ok`` and ``util_ok`` are :func:`trainer.evaluate.check_targets`'
    own p99 wait and utilisation checks. (Each replays the Slurm baseline again, the
    same run: a fraction of a second beside the model's replay, and it keeps every
    replay exactly :func:`evaluate`'s.)
    """
    res = evaluate(table, cluster, {"model": model}, cfg, options=options, priority=priority,
                   speed_model=speed_model, seed=seed, split=split)
    assert res.targets is not None
    ok = {c["name"]: bool(c["ok"]) for c in res.targets["checks"]}
    return ({**_figures(res.metrics["model"]), "p99_ok": ok["p99_wait"],
             "util_ok": ok["utilisation"]}, _figures(res.metrics[SLURM]))


def sweep(jobs: JobTable, cluster: Cluster, model: str | os.PathLike[str],
          settings: Sequence[GuardSetting], config: EvalConfig | None = None, *,
          options: SchedulerOptions | None = None,
          priority: PrioritySettings | None = None, speed_model: str = "none",
          seed: int = 0, workers: int = 1, max_wait_slack: float | None = None,
          progress: bool = False) -> GuardSweep:
    """Replay the validation period under ``model`` behind each setting (module docstring).

    Args:
        jobs: The whole history, as for :func:`trainer.evaluate.evaluate`.
        cluster: The cluster.
        model: Checkpoint or ONNX path.
        settings: Guard settings to try (the unguarded run is added first if missing).
        config: Split, warm-up, placement and ``p99_slack`` (its guard fields are
            replaced by each setting's).
        options: Scheduler options (Slurm as configured).
        priority: Priority settings of the Slurm baseline.
        speed_model: Speed model name.
        seed: Seed of the replays.
        workers: Local processes replaying settings side by side (the same figures
            with any number: each replay is seeded and independent).
        max_wait_slack: Also bound the longest wait, this share above Slurm's
            (``max_ok``; ``None``: not bounded).
        progress: Show a progress bar.

    Raises:
        ValueError: On a split that leaves no validation period, ``workers`` < 1, or a
            model that cannot be loaded.
    """
    cfg = config or EvalConfig()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    if max_wait_slack is not None and not max_wait_slack >= 0:
        raise ValueError(f"max_wait_slack must be >= 0, not {max_wait_slack}")
    full = time_split(jobs.n, cfg.train, cfg.val)
    a, b = full.val
    if b <= a:
        raise ValueError("the validation period is empty (--val 0): the guard is chosen"
                         " on it, never on the test period; give --val a share")
    table = window(jobs, 0, b, shift=False)  # (the test period is not replayed)
    split = Split(table.n, a, a)
    todo = list(dict.fromkeys([GuardSetting(0.0), *settings]))
    # as many warm-up jobs before the validation period as evaluate replays before the
    # test period (its warm-up is a share of the whole history there)
    base = replace(cfg, baselines=(SLURM,), resamples=0, windows=1,
                   locality_targets=False,
                   warmup=warmup_share(int(cfg.warmup * jobs.n), table.n))
    args = [(table, cluster, str(model),
             replace(base, starvation_limit=s.limit, starvation_order=s.order,
                     score_resolution=s.resolution), split,
             options, priority, speed_model, seed) for s in todo]
    figures: list[tuple[dict[str, Any], dict[str, float]]] = []
    bar: Any = (click.progressbar(length=len(todo), label="replaying the validation period",
                                  file=sys.stderr)
                if progress else contextlib.nullcontext())
    with bar:
        if workers == 1:
            for x in args:
                figures.append(_replay(*x))
                if progress:
                    bar.update(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(workers, len(args)),
                                     mp_context=ctx) as ex:
                futures = [ex.submit(_replay, *x) for x in args]
                for fut in futures:
                    figures.append(fut.result())
                    if progress:
                        bar.update(1)
    slurm = figures[0][1]
    rows: list[dict[str, Any]] = []
    for s, (fig, _) in zip(todo, figures, strict=True):
        rows.append({"setting": s, **fig,
                     "bsld_vs_slurm": (fig["bsld_mean"] / slurm["bsld_mean"]
                                       if slurm["bsld_mean"] > 0 else float("nan"))})
        if max_wait_slack is not None:
            rows[-1]["max_ok"] = fig["wait_max"] <= (1 + max_wait_slack) * slurm["wait_max"]
    out = GuardSweep((a, b), slurm, rows, cfg.p99_slack, max_wait_slack)
    out.choice = choose(out.rows)
    return out


#: The bounds :func:`choose` keeps, most important first: (row key, what it bounds).
#: ``max_ok`` is in a row only when a bound on the longest wait was asked for.
BOUNDS: tuple[tuple[str, str], ...] = (("p99_ok", "the p99 wait"),
                                       ("max_ok", "the longest wait"),
                                       ("util_ok", "the utilisation"))


def _names(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


#: The helper's own default guard (:class:`slurm_plugin.helper.decide.SiteFactorRule`):
#: kept when it ties with the best setting.
DEFAULT = GuardSetting(SiteFactorRule.starvation_limit, SiteFactorRule.starvation_order)


def _lowest(rows: Sequence[Mapping[str, Any]], idx: Sequence[int]) -> tuple[int, str]:
    """The row of ``idx`` with the lowest mean bsld, and a note when several tie.

    Settings that replay the period identically (the guard acted the same, or never)
    tie; the helper's default is then kept when it is among them, else the first.
    """
    def figures(i: int) -> tuple[float, ...]:
        return tuple(float(rows[i][k]) for k in ("bsld_mean", "wait_p99", "wait_max",
                                                  "util"))

    best = min(idx, key=lambda i: (rows[i]["bsld_mean"], i))
    ties = [i for i in idx if figures(i) == figures(best)]
    if len(ties) == 1:
        return best, ""
    default = [i for i in ties if rows[i]["setting"] == DEFAULT]
    if default:
        return default[0], (f" ({len(ties)} settings replay it the same: the helper's"
                            " default kept)")
    return best, f" ({len(ties)} settings replay it the same: the first kept)"


def choose(rows: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
    """The row to deploy and why (module docstring); ``None`` without a guarded row.

    The lowest mean bounded slowdown among the guarded settings that keep every bound of
    :data:`BOUNDS` the rows carry; failing that, the most important bounds that some
    setting keeps (dropping from the end); failing even the p99 wait, the lowest p99 wait.
    Among settings that replay the period identically, the helper's default
    (:data:`DEFAULT`) is kept.
    """
    guarded = [i for i, r in enumerate(rows) if r["setting"].limit > 0]
    if not guarded:
        return None
    bounds = [(k, name) for k, name in BOUNDS if all(k in rows[i] for i in guarded)]
    for n in range(len(bounds), 0, -1):
        ok = [i for i in guarded if all(rows[i][k] for k, _ in bounds[:n])]
        if ok:
            best, tie = _lowest(rows, ok)
            kept = _names([name for _, name in bounds[:n]])
            if n == len(bounds):
                return best, ("the lowest mean bounded slowdown among the settings that"
                              f" keep {kept} within Slurm's bounds{tie}")
            missed = _names([name for _, name in bounds[n:]])
            return best, (f"no setting also keeps {missed} within Slurm's bounds: the"
                          f" lowest mean bounded slowdown among those that keep"
                          f" {kept}{tie}")
    return (min(guarded, key=lambda i: (rows[i]["wait_p99"], i)),
            "no setting keeps the p99 wait within its bound: the lowest p99 wait (try"
            " shorter limits, or the 'age' order)")


def _days(s: float) -> str:
    return f"{s / 86400:.2f} d"


def print_sweep(res: GuardSweep) -> None:
    """The table, the choice and the ``helper.toml`` lines."""
    from slurm_plugin.output import table

    sl = res.slurm
    bound_max = res.max_wait_slack is not None
    heads = ["guard", "bsld mean", "vs slurm", "p99 wait", "max wait", "util",
             "to last arrival", "p99", *(["max"] if bound_max else []), "util ok"]
    body = [["slurm", f"{sl['bsld_mean']:,.1f}", "", _days(sl["wait_p99"]),
             _days(sl["wait_max"]), f"{sl['util']:.3f}", f"{sl['util_arrivals']:.3f}", "",
             *([""] if bound_max else []), ""]]
    for i, r in enumerate(res.rows):
        mark = " *" if res.choice is not None and res.choice[0] == i else ""
        body.append([r["setting"].label + mark, f"{r['bsld_mean']:,.1f}",
                     f"{r['bsld_vs_slurm'] - 1:+.1%}", _days(r["wait_p99"]),
                     _days(r["wait_max"]), f"{r['util']:.3f}", f"{r['util_arrivals']:.3f}",
                     "ok" if r["p99_ok"] else "over",
                     *(["ok" if r["max_ok"] else "over"] if bound_max else []),
                     "ok" if r["util_ok"] else "lower"])
    a, b = res.period
    bound = (f"; longest-wait bound: Slurm's + {res.max_wait_slack:.0%}" if bound_max
             else "")
    click.echo(f"validation period: jobs {a}..{b - 1} ({b - a} jobs); p99 bound: Slurm's"
               f" p99 wait + {res.p99_slack:.0%}{bound}")
    table(heads, body)
    if res.choice is None:
        click.echo("no guarded setting was tried: give --limits")
        return
    v = res.toml_values()
    click.echo(f"chosen (*): {res.choice[1]}. In /etc/rlsched/helper.toml:")
    click.echo(f"  starvation_limit = {v['starvation_limit']:.1f}")
    click.echo(f"  starvation_order = \"{v['starvation_order']}\"")
    res_opt = ""
    if "score_resolution" in v:
        click.echo(f"  score_resolution = {v['score_resolution']:g}")
        if v["score_resolution"]:
            res_opt = f" --score-resolution {v['score_resolution']:g}"
    r = res.rows[res.choice[0]]
    if not r["bsld_vs_slurm"] < 1:
        click.echo(f"warning: behind this guard the model's mean bounded slowdown is"
                   f" {r['bsld_vs_slurm'] - 1:+.1%} against Slurm's on this period: do not"
                   " enforce it (keep the helper in shadow mode, retrain on more history)")
    click.echo("then judge it on the test period: rlsched evaluate MODEL"
               f" --starvation-limit {_seconds(v['starvation_limit'])}"
               f" --starvation-order {v['starvation_order']}{res_opt} (same input options)")


def plot_sweep(res: GuardSweep, path: Path) -> Path | None:
    """Mean bounded slowdown against p99 wait, one point per setting (``None``: no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    sl = res.slurm
    ax.scatter([sl["wait_p99"] / 86400], [sl["bsld_mean"]], marker="s", color="black",
               label="slurm", zorder=3)
    ax.axvline((1 + res.p99_slack) * sl["wait_p99"] / 86400, color="grey", ls="--", lw=1,
               label=f"p99 bound (slurm +{res.p99_slack:.0%})")
    for order, colour in (("age", "tab:blue"), ("policy", "tab:orange"), ("", "tab:red")):
        pts = [r for r in res.rows if (r["setting"].order if r["setting"].limit else "")
               == order]
        if not pts:
            continue
        ax.scatter([r["wait_p99"] / 86400 for r in pts], [r["bsld_mean"] for r in pts],
                   color=colour, label=f"guard, {order} order" if order else "no guard",
                   zorder=3)
        for r in pts:
            g = r["setting"]
            ax.annotate((_span(g.limit) if g.limit else "none")
                        + (f" r={g.resolution:g}" if g.resolution else ""),
                        (r["wait_p99"] / 86400, r["bsld_mean"]), fontsize=8,
                        xytext=(4, 3), textcoords="offset points")
    if res.choice is not None:
        r = res.rows[res.choice[0]]
        ax.scatter([r["wait_p99"] / 86400], [r["bsld_mean"]], s=180, facecolors="none",
                   edgecolors="green", lw=2, label="chosen", zorder=4)
    ax.set_yscale("log")
    ax.set_xlabel("p99 wait (days)")
    ax.set_ylabel("mean bounded slowdown (log)")
    ax.set_title("starvation guard on the validation period")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_sweep(res: GuardSweep, out: Path, extra: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """Write ``guard.json`` (with ``extra`` entries and ``files``) and ``guard.png`` in ``out``.

    Returns:
        What ``guard.json`` holds.
    """
    out.mkdir(parents=True, exist_ok=True)
    png = plot_sweep(res, out / "guard.png")
    data = {**res.to_dict(), **dict(extra or {}),
            "files": {"guard": str(out / "guard.json"), **({"plot": str(png)} if png else {})}}
    metrics.write_json(data, out / "guard.json")
    return data


@click.command("tune-guard")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--limits", default=",".join(_span(x) for x in DEFAULT_LIMITS),
              show_default=True,
              help="Starvation limits to try, comma-separated (seconds, or 1d, 36h...).")
@click.option("--orders", default=",".join(DEFAULT_ORDERS), show_default=True,
              help="Starvation orders to try, comma-separated: age, policy.")
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True,
              help="Local processes replaying settings side by side (same figures).")
@click.option("--p99-slack", type=click.FloatRange(0), default=0.10, show_default=True,
              help="How far above Slurm's p99 wait a setting may go.")
@click.option("--max-wait-slack", type=click.FloatRange(0),
              help="Also keep the longest wait within this share above Slurm's (e.g."
                   " 0.5; default: not bounded).")
@click.option("--resolutions", default="0", show_default=True,
              help="Score resolutions to try with every guard, comma-separated (e.g."
                   " 0,0.2): the model's scores rounded to multiples of each, as the"
                   " helper's score_resolution rounds them (0: exact scores).")
@click.option("--train", "train_share", type=click.FloatRange(0, 1, min_open=True,
                                                              max_open=True),
              help="Share of the jobs (first by arrival) that trained (default 0.7).")
@click.option("--val", "val_share", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Share after them, the validation period replayed (default 0.1).")
@click.option("--warmup", type=click.FloatRange(0, 1),
              help="Share of the jobs before the test period replayed first, just before"
                   " the validation period, not counted (default 0.1).")
@_input_options
def tune_guard(model: str, limits: str, orders: str, workers: int, p99_slack: float,
               max_wait_slack: float | None, resolutions: str,
               train_share: float | None,
               val_share: float | None, warmup: float | None, json_: bool | None,
               **kwargs: Any) -> None:
    """Choose the helper's starvation guard on your own history.

    Replays the validation period (the jobs between the training and the test
    period, as 'rlsched evaluate' splits them; the test period is never replayed)
    under MODEL (checkpoint or ONNX) behind each --limits x --orders guard, without a
    guard, and under the Slurm baseline. Prints mean bounded slowdown, p99 and longest
    wait and utilisation per setting, picks the lowest mean bounded slowdown among
    the settings whose p99 wait stays within --p99-slack of Slurm's (and the longest
    wait within --max-wait-slack, if given) and whose utilisation is not lower, and
    prints the helper.toml lines to set. With --out, writes guard.json and guard.png.
    """
    lim = parse_limits(limits)
    rs = parse_resolutions(resolutions)
    ords = [o.strip() for o in orders.split(",") if o.strip()]
    bad = [o for o in ords if o not in STARVATION_ORDERS]
    if not ords or bad:
        raise click.BadParameter(f"{', '.join(bad) or 'none given'}: use age and/or policy",
                                 param_hint="--orders")
    sim = resolve(json=json_, **kwargs)
    over: dict[str, Any] = {"train": train_share, "val": val_share, "warmup": warmup}
    try:
        cfg = EvalConfig(p99_slack=p99_slack, **{k: v for k, v in over.items()
                                                 if v is not None})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    prep = _prepare(sim)
    settings = grid(lim, ords, rs)
    try:
        res = sweep(prep.jobs, prep.cluster, model, settings, cfg, options=prep.options,
                    priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed,
                    workers=workers, max_wait_slack=max_wait_slack,
                    progress=not sim.json)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    data = res.to_dict()
    if sim.out:
        data = write_sweep(res, Path(sim.out), {"input": {"source": prep.source,
                                                          "jobs": prep.jobs.n,
                                                          "model": model}})
        png = data["files"].get("plot")
        click.echo(f"wrote {data['files']['guard']}" + (f" and {Path(png).name}" if png else ""),
                   err=True)
    if sim.json:
        from slurm_plugin.output import emit_json

        emit_json(data)
        return
    print_sweep(res)
