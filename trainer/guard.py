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
machine while jobs arrived), and the share of the machine idle while jobs waited
(``idle_waiting``, shown, not a bound: capacity stranded while work queued).

With ``windows`` > 1 (``tune-guard`` uses :data:`DEFAULT_WINDOWS`, or as many as fit;
``--windows``), each setting is judged on the validation period and the ``windows - 1``
periods of as many jobs just before it (late in the training period), each replayed on
its own after the same warm-up, by its figures pooled over them (:func:`pooled`:
geometric means of the mean bsld and of the waits, so every period weighs the same
against Slurm's; mean utilisation). One validation period of an overloaded cluster can
pick a guard by chance: on Lublin (1,000-job periods) the validation period alone picks
4 d ``age``, +2.2% against Slurm on the test period; four periods pick 1 d ``policy``,
-57.6%. The model has seen the earlier periods' jobs in training; the guard has not,
and only the guard is chosen here.

:func:`choose` picks, among the guarded settings that keep every bound (p99 wait,
longest wait if bounded, a mean bounded slowdown not above Slurm's, utilisation), the
one with the lowest mean bounded slowdown; if none keeps them all, it drops bounds from
the least important (utilisation first) and says which; if none keeps even the p99
bound, the lowest p99 wait. The bsld bound keeps the utilisation bound, read on
differences of a few thousandths, from picking a guard that leaves the model worse
than Slurm (on Lublin with ``util_slack`` 0.004, 1 d ``age``: +42.5%, the only setting
that kept the utilisation); when no setting is at or below Slurm's bsld, it is not a
bound (and ``tune-guard`` warns). ``util_slack`` lets the utilisation be that share
below Slurm's and still keep its bound (:data:`DEFAULT_UTIL_SLACK` in ``tune-guard`` and
the demo; 0, not lower, as the quality target reads it, in :func:`sweep`). The helper
always runs with a guard (``starvation_limit`` must be positive), so the unguarded run
is a reference, never a choice. The choice is printed as the two lines of
``helper.toml`` to set.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import pickle
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from slurm_plugin.helper.decide import (
    STARVATION_ORDERS,
    SiteFactorRule,
    check_express_limit,
    check_score_resolution,
    check_starvation_order,
)
from slurm_plugin.when import parse_span

from .bounds import DEFAULT_UTIL_SLACK, SLURM_BOUNDS, listed, slurm_bounds
from .cli import _input_options, _items, _prepare, resolve
from .evaluate import (
    SLURM,
    EvalConfig,
    Split,
    _util,
    _util_reading,
    config_from_options,
    evaluate,
    time_split,
)
from .sim import metrics
from .sim.slurm import PrioritySettings, SchedulerOptions
from .sim.state import Cluster, JobTable
from .sim.stepper import window

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_ORDERS",
    "DEFAULT_UTIL_SLACK",
    "DEFAULT_WINDOWS",
    "GuardSetting",
    "GuardSweep",
    "choose",
    "default_windows",
    "grid",
    "parse_limits",
    "parse_resolutions",
    "pooled",
    "sweep",
    "trained_guard",
    "tune_guard",
    "validation_windows",
    "windows_that_fit",
    "write_sweep",
]

#: Limits tried by default, seconds (1, 2, 3, 4, 7 and 14 days; the helper's default is
#: 2). 14 days is there for sites where every guard that acts costs (Theta: on its
#: validation period the net had mean bsld 5.9 unguarded, 10.0 to 28.3 behind 1 to 7 days,
#: and no job waited 14 days): a loose bound is then the right one.
DEFAULT_LIMITS: tuple[float, ...] = tuple(d * 86400.0 for d in (1, 2, 3, 4, 7, 14))
#: Orders tried by default: every one the helper knows.
DEFAULT_ORDERS: tuple[str, ...] = tuple(STARVATION_ORDERS)
#: Periods each setting is judged on by default (``tune-guard --windows``; fewer when
#: fewer fit): the validation period and the three of as many jobs before it. On the
#: three traces' imitation nets (1,000, 2,338 and 8,224-job periods), one period picked
#: a guard that failed Lublin's test period (4 d ``age``, +2.2% against Slurm); four
#: picked guards that keep the bsld, p99 and utilisation lines on all three test periods
#: (Theta 1 d ``age`` -39.5%, Lublin 1 d ``policy`` -57.6%, Philly 3 h ``policy``
#: -51.1%).
DEFAULT_WINDOWS = 4


@dataclass(frozen=True)
class GuardSetting:
    """One guard: the helper's ``starvation_limit`` (seconds; 0: no guard) and order.

    ``resolution``: the model's scores rounded to multiples of it (the helper's
    ``score_resolution``; 0: exact). ``express``: the guard's express lane (the
    helper's ``express_limit``, seconds; 0: none; either order).
    """

    limit: float
    order: str = "age"
    resolution: float = 0.0
    express: float = 0.0

    def __post_init__(self) -> None:
        if not (self.limit >= 0 and math.isfinite(self.limit)):
            raise ValueError(f"a starvation limit must be >= 0 seconds, not {self.limit}")
        check_starvation_order(self.order)
        check_score_resolution(self.resolution)
        check_express_limit(self.express, self.order, self.limit)

    @property
    def label(self) -> str:
        """``2d age``, ``36h policy``, ``none``; with a resolution or an express lane.

        E.g. ``14d age, r=0.2``, ``2d policy, x=15m``.
        """
        base = "none" if self.limit == 0 else f"{_span(self.limit)} {self.order}"
        if self.resolution:
            base += f", r={self.resolution:g}"
        return f"{base}, x={_span(self.express)}" if self.express else base


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
         resolutions: Sequence[float] = (0.0,),
         expresses: Sequence[float] = (0.0,)) -> list[GuardSetting]:
    """The settings a sweep tries: every limit in every order (limit first).

    Per resolution and per express lane.
    """
    return [GuardSetting(x, o, r, e) for e in expresses for r in resolutions for x in limits
            for o in orders]


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


def _spans(text: str, example: str, hint: str) -> list[tuple[str, float]]:
    """Each item of ``text`` with its seconds (a number, or a span such as ``36h``).

    Raises:
        click.BadParameter: On an empty list or an item that is no span (``hint`` says
            what is allowed).
    """
    out = []
    for t in _items(text, example):
        try:
            out.append((t, float(t) if t.replace(".", "", 1).isdigit()
                        else parse_span(t).total_seconds()))
        except click.BadParameter as exc:
            raise click.BadParameter(f"{exc.message} ({hint})") from None
    return out


def parse_expresses(text: str) -> tuple[float, ...]:
    """``0,15m,1800`` as express lanes in seconds (0: none), in the order given.

    Raises:
        click.BadParameter: On an empty list or an item that is no span.
    """
    spans = _spans(text, "0,15m", "seconds, or 15m, 1h...; 0: no lane")
    return tuple(dict.fromkeys(x for _, x in spans))


def parse_limits(text: str) -> tuple[float, ...]:
    """``1d,36h,4d`` as seconds, in the order given (each a positive span).

    Raises:
        click.BadParameter: On an empty list or a span that is not one.
    """
    out = []
    for t, x in _spans(text, "1d,2d,4d", "seconds, or 1d, 36h..."):
        if x <= 0:
            raise click.BadParameter(f"{t!r}: a starvation limit must be positive")
        out.append(x)
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
        windows: Every period replayed, ``(first, end)`` in arrival order; the last is
            ``period``. With more than one, ``slurm`` and each row's figures are
            :func:`pooled` over them, and each row carries its per-period figures and
            bounds as ``windows``.
        switch_wait: The helper's leaf-switch wait the model was replayed with
            (seconds; 0: none).
        rescore: Seconds between the model's re-rankings of the queue (the helper's
            ``interval`` it was replayed with).
        util_slack: The share of Slurm's utilisation a setting could be below and
            still keep the utilisation bound (0: not lower).
        trained_behind: The guard the model was trained behind (:func:`trained_guard`;
            ``None``: none, or not known).
    """

    period: tuple[int, int]
    slurm: dict[str, float]
    rows: list[dict[str, Any]]
    p99_slack: float
    max_wait_slack: float | None = None
    choice: tuple[int, str] | None = None
    windows: list[tuple[int, int]] = field(default_factory=list)
    switch_wait: float = 0.0
    util_slack: float = 0.0
    trained_behind: GuardSetting | None = None
    rescore: float = EvalConfig.rescore

    def __post_init__(self) -> None:
        if not self.windows:
            self.windows = [self.period]

    @property
    def resolutions(self) -> tuple[float, ...]:
        """The score resolutions the guarded settings were tried with (in row order)."""
        out = dict.fromkeys(r["setting"].resolution for r in self.rows
                            if r["setting"].limit > 0)
        return tuple(out) or (0.0,)

    @property
    def expresses(self) -> tuple[float, ...]:
        """The express lanes the guarded settings were tried with (in row order)."""
        out = dict.fromkeys(r["setting"].express for r in self.rows
                            if r["setting"].limit > 0)
        return tuple(out) or (0.0,)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        idx, why = self.choice if self.choice is not None else (None, "")
        period: dict[str, Any] = {"jobs": list(self.period), "kind": "validation"}
        if len(self.windows) > 1:
            period["windows"] = [list(w) for w in self.windows]
        return {"period": period,
                "slurm": self.slurm, "p99_slack": self.p99_slack,
                "switch_wait": self.switch_wait, "rescore": self.rescore,
                "max_wait_slack": self.max_wait_slack, "util_slack": self.util_slack,
                "resolutions": list(self.resolutions),
                "express_limits": list(self.expresses),
                "trained_behind": (None if self.trained_behind is None else
                                   {"limit": self.trained_behind.limit,
                                    "order": self.trained_behind.order,
                                    "label": self.trained_behind.label}),
                "rows": [{**r, "setting": {"limit": r["setting"].limit,
                                           "order": r["setting"].order,
                                           "resolution": r["setting"].resolution,
                                           "express": r["setting"].express,
                                           "label": r["setting"].label}}
                         for r in self.rows],
                "choice": None if idx is None else {"row": idx, "why": why,
                                                    **self.toml_values()}}

    def toml_values(self) -> dict[str, Any]:
        """``starvation_limit``, ``starvation_order`` of the choice (empty: none).

        With its ``score_resolution`` when a resolution other than 0 was tried, and its
        ``express_limit`` when an express lane was.
        """
        if self.choice is None:
            return {}
        s: GuardSetting = self.rows[self.choice[0]]["setting"]
        out: dict[str, Any] = {"starvation_limit": s.limit, "starvation_order": s.order}
        if any(self.resolutions):
            out["score_resolution"] = s.resolution
        if any(self.expresses):
            out["express_limit"] = s.express
        return out


def _figures(m: Mapping[str, Any]) -> dict[str, float]:
    """A row's figures; ``util`` is the checked utilisation.

    ``util_arrivals`` is the busy share up to the last arrival and ``idle_waiting`` the
    share idle while jobs waited, shown beside it and not checked (``to_last_arrival``
    and ``idle_waiting`` of :func:`trainer.sim.metrics.compute`).
    """
    return {"bsld_mean": float(m["bsld"]["mean"]), "wait_p99": float(m["wait_s"]["p99"]),
            "wait_max": float(m["wait_s"]["max"]), "util": _util(m),
            "util_arrivals": float(_util_reading(m, "to_last_arrival") or 0.0),
            "idle_waiting": float(_util_reading(m, "idle_waiting") or 0.0)}


def _replay(table: JobTable, cluster: Cluster, model: str, cfg: EvalConfig,
            split: Split, warmup_jobs: int, options: SchedulerOptions | None,
            priority: PrioritySettings | None, speed_model: str,
            seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """One setting's replay of one window: the model's figures, and the Slurm baseline's.

    (Each replays the Slurm baseline again, the same run: a fraction of a second beside
    the model's replay, and it keeps every replay exactly :func:`evaluate`'s.)
    """
    res = evaluate(table, cluster, {"model": model}, cfg, options=options, priority=priority,
                   speed_model=speed_model, seed=seed, split=split, warmup_jobs=warmup_jobs)
    return _figures(res.metrics["model"]), _figures(res.metrics[SLURM])


def _geo(xs: Sequence[float]) -> float:
    """Geometric mean (of one value: the value itself, exactly)."""
    return float(math.prod(xs) ** (1.0 / len(xs)))


def pooled(figures: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One run's figures over several windows, as one row shows them.

    Geometric means of the mean bsld and of the p99 and longest waits (so the ratio of
    two pooled figures is the geometric mean of the per-window ratios: every window
    weighs the same, however loaded), arithmetic means of the utilisation readings. Of
    one window: its figures, exactly.
    """
    out = {k: _geo([f[k] for f in figures]) for k in ("bsld_mean", "wait_p99", "wait_max")}
    for k in ("util", "util_arrivals", "idle_waiting"):
        out[k] = math.fsum(f[k] for f in figures) / len(figures)
    return out


def _bounds(fig: Mapping[str, float], slurm: Mapping[str, float], p99_slack: float,
            max_wait_slack: float | None, util_slack: float = 0.0) -> dict[str, Any]:
    """``p99_ok``, ``bsld_ok``, ``util_ok`` (and ``max_ok``) of figures against Slurm's.

    The rules of :mod:`trainer.bounds` (:func:`~trainer.bounds.slurm_bounds`), which
    :func:`trainer.evaluate.check_targets` checks too (with ``util_slack``: that share
    below Slurm's utilisation still keeps the bound; the target has none).
    """
    out: dict[str, Any] = dict(slurm_bounds(fig, slurm, p99_slack, util_slack))
    if max_wait_slack is not None:
        out["max_ok"] = fig["wait_max"] <= (1 + max_wait_slack) * slurm["wait_max"]
    return out


def _ratio(x: float, y: float) -> float:
    return x / y if y > 0 else float("nan")


def windows_that_fit(n: int, config: EvalConfig) -> int:
    """How many validation windows :func:`validation_windows` can cut from ``n`` jobs.

    Each as long as the validation period, the last being it, and each after a full
    warm-up (at least 1; 0 when the validation period is empty).
    """
    a, b = time_split(n, config.train, config.val).val
    if b <= a:
        return 0
    return 1 + max(0, a - config.warmup_count(n)) // (b - a)


def default_windows(n: int, config: EvalConfig) -> int:
    """:data:`DEFAULT_WINDOWS`, or as many as fit when fewer do (at least 1)."""
    return max(1, min(DEFAULT_WINDOWS, windows_that_fit(n, config)))


def validation_windows(n: int, config: EvalConfig, windows: int = 1
                       ) -> list[tuple[int, int]]:
    """The periods :func:`sweep` replays, rows ``(first, end)`` in arrival order.

    The validation period and, with ``windows`` > 1, the ``windows - 1`` periods of as
    many jobs just before it. Each is replayed after as many warm-up jobs as
    :func:`trainer.evaluate.evaluate` replays before the test period, so the first must
    start at least that far in.

    Raises:
        ValueError: On an empty validation period, ``windows`` < 1, or more windows than
            fit before the validation period with their warm-up.
    """
    if windows < 1:
        raise ValueError(f"windows must be >= 1, not {windows}")
    a, b = time_split(n, config.train, config.val).val
    if b <= a:
        raise ValueError("the validation period is empty (--val 0): the guard is chosen"
                         " on it, never on the test period; give --val a share")
    size, warm = b - a, config.warmup_count(n)
    fit = windows_that_fit(n, config)
    if windows > fit:
        raise ValueError(f"{windows} windows of {size} jobs do not fit before the test"
                         f" period with {warm} warm-up jobs each: at most {fit}")
    return [(a - k * size, b - k * size) for k in range(windows - 1, -1, -1)]


def trained_guard(model: str | os.PathLike[str]) -> GuardSetting | None:
    """The guard a checkpoint was trained behind (``train rl --train-guard``), if any.

    Read from the training settings the checkpoint carries (its ``starvation_limit``
    and ``starvation_order``); ``None`` for a model trained without one (imitation, RL
    without ``--train-guard``) and for an ONNX model or a file that is no checkpoint
    (the sweep itself says what is wrong with those).
    """
    path = os.fspath(model)
    if not path.endswith(".pt"):
        return None
    from .policy import load_checkpoint

    try:
        extra = load_checkpoint(path).extra
    except (OSError, ValueError, RuntimeError, pickle.UnpicklingError):
        return None  # (the sweep says what is wrong with the file when it loads it)
    train = (extra.get("config") or {}).get("train") or {}
    limit = float(train.get("starvation_limit") or 0.0)
    if not train.get("train_guard") or limit <= 0:
        return None
    return GuardSetting(limit, str(train.get("starvation_order", "age")),
                        express=float(train.get("express_limit") or 0.0))


def _same_guard(a: GuardSetting, b: GuardSetting | None) -> bool:
    return b is not None and (a.limit, a.order, a.express) == (b.limit, b.order, b.express)


def sweep(jobs: JobTable, cluster: Cluster, model: str | os.PathLike[str],
          settings: Sequence[GuardSetting], config: EvalConfig | None = None, *,
          options: SchedulerOptions | None = None,
          priority: PrioritySettings | None = None, speed_model: str = "none",
          seed: int = 0, workers: int = 1, max_wait_slack: float | None = None,
          util_slack: float = 0.0, windows: int = 1, progress: bool = False) -> GuardSweep:
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
        util_slack: A share of Slurm's utilisation a setting may be below and still
            keep the utilisation bound (default 0: not lower, as the quality target).
        windows: Periods read (:func:`validation_windows`): the validation period, and
            as many of its length just before it as make ``windows``; each is replayed
            on its own and the rows show their :func:`pooled` figures, so the bounds
            and the choice weigh every period the same.
        progress: Show a progress bar.

    Raises:
        ValueError: On a split that leaves no validation period, ``workers`` < 1, more
            ``windows`` than fit, or a model that cannot be loaded.
    """
    cfg = config or EvalConfig()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    if max_wait_slack is not None and not max_wait_slack >= 0:
        raise ValueError(f"max_wait_slack must be >= 0, not {max_wait_slack}")
    if not 0 <= util_slack < 1:
        raise ValueError(f"util_slack must lie in [0, 1), not {util_slack}")
    periods = validation_windows(jobs.n, cfg, windows)
    todo = list(dict.fromkeys([GuardSetting(0.0), *settings]))
    warm = cfg.warmup_count(jobs.n)  # as many as evaluate replays before the test period
    base = replace(cfg, baselines=(SLURM,), resamples=0, windows=1, locality_targets=False)
    args = []
    for a, b in periods:
        table = window(jobs, 0, b, shift=False)  # (nothing after the period is replayed)
        args += [(table, cluster, str(model),
                  replace(base, starvation_limit=s.limit, starvation_order=s.order,
                          score_resolution=s.resolution, express_limit=s.express),
                  Split(table.n, a, a), warm,
                  options, priority, speed_model, seed) for s in todo]
    figures: list[tuple[dict[str, float], dict[str, float]]] = []
    label = ("replaying the validation period" if windows == 1
             else f"replaying {windows} validation windows")
    bar: Any = (click.progressbar(length=len(args), label=label, file=sys.stderr)
                if progress else contextlib.nullcontext())
    with bar:
        if workers == 1:
            for x in args:
                figures.append(_replay(*x))
                if progress:
                    bar.update(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(workers, len(args)), mp_context=ctx) as ex:
                futures = [ex.submit(_replay, *x) for x in args]
                for fut in futures:
                    figures.append(fut.result())
                    if progress:
                        bar.update(1)
    per = len(todo)  # figures[w * per + i]: setting i in period w
    slurm_w = [figures[w * per][1] for w in range(len(periods))]
    slurm = pooled(slurm_w)
    rows: list[dict[str, Any]] = []
    for i, s in enumerate(todo):
        mine = [figures[w * per + i][0] for w in range(len(periods))]
        fig = pooled(mine)
        rows.append({"setting": s, **fig,
                     **_bounds(fig, slurm, cfg.p99_slack, max_wait_slack, util_slack),
                     "bsld_vs_slurm": _ratio(fig["bsld_mean"], slurm["bsld_mean"])})
        if len(periods) > 1:
            rows[-1]["windows"] = [
                {**m, **_bounds(m, sl, cfg.p99_slack, max_wait_slack, util_slack),
                 "bsld_vs_slurm": _ratio(m["bsld_mean"], sl["bsld_mean"])}
                for m, sl in zip(mine, slurm_w, strict=True)]
    out = GuardSweep(periods[-1], slurm, rows, cfg.p99_slack, max_wait_slack,
                     windows=periods, switch_wait=cfg.switch_wait, util_slack=util_slack,
                     trained_behind=trained_guard(model), rescore=cfg.rescore)
    out.choice = choose(out.rows)
    return out


#: The bounds :func:`choose` keeps, most important first: (row key, what it bounds).
#: ``max_ok`` is in a row only when a bound on the longest wait was asked for;
#: ``bsld_ok`` (the mean bsld not above Slurm's) counts only when some setting keeps it.
#: (:data:`trainer.bounds.SLURM_BOUNDS`, with the longest wait after the p99 wait.)
BOUNDS: tuple[tuple[str, str], ...] = (SLURM_BOUNDS[0], ("max_ok", "the longest wait"),
                                       *SLURM_BOUNDS[1:])


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
    keys = [k for k, _ in bounds]
    if "bsld_ok" in keys:  # (a model no better than Slurm behind any guard: not a bound)
        upto = keys[:keys.index("bsld_ok") + 1]
        if not any(all(rows[i][k] for k in upto) for i in guarded):
            bounds = [b for b in bounds if b[0] != "bsld_ok"]
    for n in range(len(bounds), 0, -1):
        ok = [i for i in guarded if all(rows[i][k] for k, _ in bounds[:n])]
        if ok:
            best, tie = _lowest(rows, ok)
            kept = listed([name for _, name in bounds[:n]])
            if n == len(bounds):
                return best, ("the lowest mean bounded slowdown among the settings that"
                              f" keep {kept} within Slurm's bounds{tie}")
            missed = listed([name for _, name in bounds[n:]])
            return best, (f"no setting also keeps {missed} within Slurm's bounds: the"
                          f" lowest mean bounded slowdown among those that keep"
                          f" {kept}{tie}")
    return (min(guarded, key=lambda i: (rows[i]["wait_p99"], i)),
            "no setting keeps the p99 wait within its bound: the lowest p99 wait (try"
            " shorter limits, or the 'age' order)")


def _days(s: float) -> str:
    return f"{s / 86400:.2f} d"


def print_sweep(res: GuardSweep, also: str = "") -> None:
    """The table, the choice and the ``helper.toml`` lines."""
    from slurm_plugin.output import table

    sl = res.slurm
    bound_max = res.max_wait_slack is not None
    many = len(res.windows) > 1
    heads = ["guard", "bsld mean", "vs slurm", *(["lower in"] if many else []), "p99 wait",
             "max wait", "util", "to last arrival", "idle waiting", "p99",
             *(["max"] if bound_max else []), "util ok"]
    body = [["slurm", f"{sl['bsld_mean']:,.1f}", "", *([""] if many else []),
             _days(sl["wait_p99"]), _days(sl["wait_max"]), f"{sl['util']:.3f}",
             f"{sl['util_arrivals']:.3f}", f"{sl['idle_waiting']:.3f}", "",
             *([""] if bound_max else []), ""]]
    for i, r in enumerate(res.rows):
        mark = " *" if res.choice is not None and res.choice[0] == i else ""
        if _same_guard(r["setting"], res.trained_behind):
            mark += " (trained)"
        lower = (f"{sum(w['bsld_vs_slurm'] < 1 for w in r['windows'])} of"
                 f" {len(r['windows'])}" if many else "")
        body.append([r["setting"].label + mark, f"{r['bsld_mean']:,.1f}",
                     f"{r['bsld_vs_slurm'] - 1:+.1%}", *([lower] if many else []),
                     _days(r["wait_p99"]), _days(r["wait_max"]), f"{r['util']:.3f}",
                     f"{r['util_arrivals']:.3f}", f"{r['idle_waiting']:.3f}",
                     "ok" if r["p99_ok"] else "over",
                     *(["ok" if r["max_ok"] else "over"] if bound_max else []),
                     "ok" if r["util_ok"] else "lower"])
    a, b = res.period
    bound = (f"; longest-wait bound: Slurm's + {res.max_wait_slack:.0%}" if bound_max
             else "")
    if res.util_slack:
        bound += f"; utilisation bound: Slurm's - {res.util_slack:.2%}"
    if many:
        first = res.windows[0][0]
        click.echo(f"validation: {len(res.windows)} windows of {b - a} jobs (jobs {first}.."
                   f"{b - 1}, the last the validation period), each replayed on its own;"
                   " shown: geometric means of the bsld and the waits, mean utilisation;"
                   f" 'lower in': windows where the bsld is below Slurm's; p99 bound:"
                   f" Slurm's p99 wait + {res.p99_slack:.0%}{bound}")
    else:
        click.echo(f"validation period: jobs {a}..{b - 1} ({b - a} jobs); p99 bound:"
                   f" Slurm's p99 wait + {res.p99_slack:.0%}{bound}")
    if res.switch_wait:
        click.echo('the model replayed as steering = "switches" deploys it: multi-node jobs'
                   f" wait up to {_span(res.switch_wait)} for one leaf switch")
    if res.rescore != EvalConfig.rescore:
        click.echo(f"the model re-ranks the queue every {res.rescore:g} s (the helper's"
                   " interval)")
    table(heads, body)
    tb = res.trained_behind
    if tb is not None:
        chosen = res.rows[res.choice[0]]["setting"] if res.choice is not None else None
        differs = chosen is not None and not _same_guard(chosen, tb)
        click.echo(f"the model was trained behind {tb.label} (train rl --train-guard; marked"
                   " 'trained')" + (": the choice is another guard, so the net would meet"
                                    " queues it did not train on; judge both on the test"
                                    " period (rlsched evaluate --starvation-limit"
                                    f" {_seconds(tb.limit)} --starvation-order {tb.order})"
                                    if differs else ""))
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
    if "express_limit" in v:
        click.echo(f"  express_limit = {v['express_limit']:.1f}")
        if v["express_limit"]:
            res_opt += f" --express-limit {_seconds(v['express_limit'])}"
    if res.switch_wait:
        res_opt += f" --switch-wait {_seconds(res.switch_wait)}"
    if res.rescore != EvalConfig.rescore:
        res_opt += f" --rescore {res.rescore:g}"
    res_opt += also
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
                        + (f" r={g.resolution:g}" if g.resolution else "")
                        + (f" x={_span(g.express)}" if g.express else ""),
                        (r["wait_p99"] / 86400, r["bsld_mean"]), fontsize=8,
                        xytext=(4, 3), textcoords="offset points")
    if res.choice is not None:
        r = res.rows[res.choice[0]]
        ax.scatter([r["wait_p99"] / 86400], [r["bsld_mean"]], s=180, facecolors="none",
                   edgecolors="green", lw=2, label="chosen", zorder=4)
    ax.set_yscale("log")
    many = len(res.windows) > 1
    ax.set_xlabel("p99 wait (days)" + (", geometric mean" if many else ""))
    ax.set_ylabel("mean bounded slowdown (log)" + (", geometric mean" if many else ""))
    ax.set_title("starvation guard on the validation period"
                 + (f" and {len(res.windows) - 1} before it" if many else ""))
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
@click.option("--util-slack", type=click.FloatRange(0, 1, max_open=True),
              default=DEFAULT_UTIL_SLACK, show_default=True,
              help="A share of Slurm's utilisation a setting may be below and still keep"
                   " the utilisation bound (0: not lower, as the quality target reads"
                   " it): differences of a few thousandths change sign from one period"
                   " to the next, and would decide the choice without a slack.")
@click.option("--resolutions", default="0", show_default=True,
              help="Score resolutions to try with every guard, comma-separated (e.g."
                   " 0,0.2): the model's scores rounded to multiples of each, as the"
                   " helper's score_resolution rounds them (0: exact scores).")
@click.option("--express-limits", default="0", show_default=True,
              help="Express lanes to try with every guard, comma-separated"
                   " (seconds, or 15m, 1h...; e.g. 0,10m,15m): jobs whose time limit is at"
                   " most this go above every other, starving ones included, as the"
                   " helper's express_limit (0: none).")
@click.option("--train", "train_share", type=click.FloatRange(0, 1, min_open=True,
                                                              max_open=True),
              help="Share of the jobs (first by arrival) that trained (default 0.7).")
@click.option("--val", "val_share", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Share after them, the validation period replayed (default 0.1).")
@click.option("--warmup", type=click.FloatRange(0, 1),
              help="Share of the jobs before the test period replayed first, just before"
                   " the validation period, not counted (default 0.1).")
@click.option("--windows", type=click.IntRange(1, 16),
              help=f"Judge each setting on this many periods: the validation period and"
                   f" the ones of as many jobs just before it (late in the training"
                   f" period), each replayed on its own after its warm-up, pooled"
                   f" (geometric means against Slurm's). Default {DEFAULT_WINDOWS}, or as"
                   f" many as fit; 1: the validation period alone (faster, but on an"
                   f" overloaded cluster one period can pick a guard by chance).")
@click.option("--switch-wait", type=click.FloatRange(0),
              help="Replay the model with the helper's leaf-switch wait, in seconds (its"
                   " switch_wait with steering = \"switches\"), as it will be deployed:"
                   " the guard is then chosen for that mode (default 0: no wait).")
@click.option("--rescore", type=click.FloatRange(1),
              help="Seconds between the model's re-rankings of the whole queue, as the"
                   " helper's interval (default 15, the helper's default).")
@click.option("--helper-config", type=click.Path(dir_okay=False), metavar="FILE",
              help="Replay the model as this helper.toml deploys it: its interval, rank_all"
                   " and steering (switches: its switch_wait; none: the scheduler places);"
                   " the guard settings are what this command tries. Options given here"
                   " override it.")
@_input_options
def tune_guard(model: str, limits: str, orders: str, workers: int, p99_slack: float,
               max_wait_slack: float | None, util_slack: float, resolutions: str,
               express_limits: str, train_share: float | None,
               val_share: float | None, warmup: float | None, windows: int | None,
               switch_wait: float | None, json_: bool | None, rescore: float | None = None,
               helper_config: str | None = None, **kwargs: Any) -> None:
    """Choose the helper's starvation guard on your own history.

    Replays the validation period (the jobs between the training and the test
    period, as 'rlsched evaluate' splits them; the test period is never replayed)
    under MODEL (checkpoint or ONNX) behind each --limits x --orders guard, without a
    guard, and under the Slurm baseline. Prints mean bounded slowdown, p99 and longest
    wait and utilisation per setting, picks the lowest mean bounded slowdown among
    the settings whose p99 wait stays within --p99-slack of Slurm's (and the longest
    wait within --max-wait-slack, if given), whose mean bounded slowdown is not
    above Slurm's, and whose utilisation is not lower (or not more than --util-slack
    below), dropping the last bounds first when none keeps them all, and
    prints the helper.toml lines to set. Each setting is judged on the validation
    period and, by default, the three periods of as many jobs before it (--windows),
    each replayed on its own, by its geometric-mean figures over them. With --out,
    writes guard.json and guard.png.
    """
    lim = parse_limits(limits)
    rs = parse_resolutions(resolutions)
    xs = parse_expresses(express_limits)
    ords = [o.strip() for o in orders.split(",") if o.strip()]
    bad = [o for o in ords if o not in STARVATION_ORDERS]
    if not ords or bad:
        raise click.BadParameter(f"{', '.join(bad) or 'none given'}: use age and/or policy",
                                 param_hint="--orders")
    sim = resolve(json=json_, **kwargs)
    over: dict[str, Any] = {"train": train_share, "val": val_share, "warmup": warmup,
                            "switch_wait": switch_wait, "rescore": rescore}
    cfg = config_from_options(over, helper_config, p99_slack=p99_slack)
    prep = _prepare(sim)
    settings = grid(lim, ords, rs, xs)
    if windows is None:
        windows = default_windows(prep.jobs.n, cfg)
        if windows < DEFAULT_WINDOWS and not sim.json:
            click.echo(f"note: only {windows} validation window(s) fit before the test"
                       f" period with their warm-up; judging on {windows}", err=True)
    try:
        res = sweep(prep.jobs, prep.cluster, model, settings, cfg, options=prep.options,
                    priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed,
                    workers=workers, max_wait_slack=max_wait_slack,
                    util_slack=util_slack, windows=windows,
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
    print_sweep(res, f" --helper-config {helper_config}" if helper_config else "")
