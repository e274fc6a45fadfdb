"""Which checkpoint of an RL run to deploy: each kept one on validation and on test (a measurement).

    python benchmarks/checkpoint_choice.py RUN [RUN ...] [--heuristics spf,lrf]

RUN is the ``--out`` folder of ``rlsched train rl --keep-checkpoints``: its
``config.json`` says which history and settings it trained on, ``curves.json`` holds
every validation's figures and ``checkpoints/update-NNNNN.pt`` the net of each. The
script replays every kept checkpoint on the run's test period as ``rlsched evaluate``
does (the same warm-up, behind the guard the run validated with; Slurm and the
``--heuristics`` behind that same guard, as ``evaluate --guard-heuristics``), and prints
per run:

- each checkpoint's validation figures (mean bounded slowdown, p99 wait, utilisation and
  which of Slurm's bounds it kept there, as the run read them) beside its test figures
  and the issue-5 lines it passes on the test period (``evaluate``'s own reading: bsld
  30% below Slurm's, below the best heuristic replayed, p99 wait at most 10% above
  Slurm's, utilisation not lower), with the share of the machine idle while jobs waited
  on the test period (``evaluate``'s "idle while jobs waited");
- the rank correlation (Spearman) of the checkpoints' validation bsld with their test
  bsld: near +1, the validation window orders them as the test does; near 0 or below,
  the choice among them is luck;
- what each rule chooses and what that scores on the test period: the run's own choice
  (``best.pt``), the lowest validation bsld or p99 wait (alone, or among the checkpoints
  keeping the most of Slurm's bounds, as ``--val-bounds`` orders them with
  ``--val-metric bsld_mean`` or ``wait_p99``), and in hindsight the lowest test bsld and
  the lowest test bsld among the checkpoints passing every line (none: no choice among
  these weights meets the targets, and only another training can).

and, for several runs, one line each, and a table of each rule over all runs (mean test
bsld, and in how many runs utilisation was kept and every line passed). ``--json FILE``
writes every figure.

``--val-windows K`` also replays every checkpoint on the K validation windows the
demo's ``select`` stage reads (the guard's ``validation_windows``: the validation period
and the K-1 windows of its size before it, each after its own warm-up, behind the run's
guard; Slurm and the ``--heuristics`` too, behind the same guard), prints the baselines'
figures per window, and adds rules that choose on them: the lowest geometric mean of
the windows' bsld; the most of Slurm's bounds (p99, bsld, utilisation) kept across the
windows, then that geometric mean; Slurm's utilisation kept in the most windows, then
that mean; and two that read the test's line against the best heuristic on each window
(the lowest bsld of those replayed there): the most windows with the p99 wait within
10% of Slurm's, then with a bsld below the best heuristic's, then with a utilisation not
below that heuristic's own, then the geometric mean; and that heuristic's utilisation
kept in the most windows, then the geometric mean. Those two read the utilisation bound
against an order that reaches it on the window: on Lublin's validation period Slurm's
utilisation (0.935) is above ``lrf``'s (0.902) and nearly every checkpoint's, while on
the test period ``lrf`` keeps Slurm's (0.882 against 0.876).

``--ensembles K[,K...]`` also replays, for each K, the ensemble ``train rl --ensemble K``
writes from these checkpoints (:func:`trainer.rl.trainer.ensemble_members`: the K
checkpoints after the start that rank first by the run's own ``--val-metric`` and
bounds; its nets' scores averaged, :class:`trainer.policy.PolicyEnsemble`) and prints
its test figures and lines beside the rules' picks (over all runs, a row per K).

It reads a run's own settings; ``--trace FILE`` replaces the trace path it recorded
(a run trained elsewhere). Nothing here is timed; a run of nine checkpoints on Lublin
(``lublin_256.swf``) takes about 4 minutes beside two others on 2 cores.

Measured (stop 39) on Lublin, the admin guide's command (``--init`` a net imitating
``seaf``, ``--budget 40u --val-deployed --val-bounds --val-util-slack 0 --warm-start
--train-guard``, 2 d ``policy``), seeds 0 to 2: the runs' choices scored 224.9, 469.8
and 234.5 on the test period (rank correlations +0.28, -0.37, +0.43); with
``--algo-opt lr=1e-4`` 475.4, 446.8, 474.1 (-0.50, -0.43, -0.25); with ``--backlog 1``
237.6, 222.1, 382.3 (+0.10, +0.55, -0.33). Of each setting's 24 later checkpoints 1, 1
and 2 passed every line on the test period, and no choice did (the admin guide, section
3, has the table). Seeds 6 to 17 of the first command with ``--val-metric wait_p99``:
the lowest validation p99 wait chose 248.3 on average (utilisation kept in 4 of 12,
every line in 2), the lowest validation bsld 255.0 (6 and 4 of 12).

Measured (stop 47) on Lublin with ``--val-windows 4``, seed 10 of the same command with
``--missing-limits users --starvation-limit 172800 --starvation-order policy
--express-limit 900 --actions queue --keep-checkpoints``: the run's choice (update 30)
scored 97.3 on the test period (-85.6% against Slurm; p99 and utilisation kept), the
three window rules all chose update 15 (98.3, utilisation kept), the lowest test bsld in
hindsight was update 25 (56.5, utilisation lost); rank correlation +0.68.

Measured (stop 61, an Intel Xeon) with ``--heuristics spf,lrf,sef --ensembles 4
--val-windows 3`` on eight runs of the admin guide's current command (``--init`` a net
imitating ``lrf``, ``--val-metric wait_p99 --actions fits``, 2 d ``age`` with a 15-min
lane; seeds 10 to 17): 30 of the 64 later checkpoints pass every line on the test
period, yet every rule here, the two reading the best heuristic's line included, chose
one in at most 4 of 8 runs (the one-window rules with the bounds read against ``lrf``'s
figures no more); the rank correlations average -0.01 (validation bsld against test
bsld), +0.02 (the windows' geometric mean), +0.04 and +0.19 (validation and the windows'
utilisation against test utilisation). The table is in the admin guide, section 3.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_plugin.output import table  # noqa: E402
from trainer.sim.slurm import BF_PLANS  # noqa: E402

#: The run's own ``train`` settings the test replay takes (as the run validated).
GUARD_KEYS = ("starvation_limit", "starvation_order", "express_limit", "score_resolution",
              "rank_all")
#: The test lines, as :func:`trainer.evaluate.check_targets` names them, and their heads.
LINES = {"bsld_vs_slurm": "-30%", "bsld_vs_best_heuristic": "<best",
         "p99_wait": "p99", "utilisation": "util"}
#: Keys of the run's recorded command that are not the history's (:func:`resolve`).
_NOT_SIM = ("seed", "out", "json", "policy", "speed_model")
_UPDATE = re.compile(r"update-(\d+)\.pt$")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank); NaN under 3 pairs."""
    if len(x) != len(y):
        raise ValueError("spearman needs two sequences of one length")
    if len(x) < 3:
        return math.nan

    def ranks(v: Sequence[float]) -> np.ndarray:
        a = np.asarray(v, dtype=np.float64)
        order = np.argsort(a, kind="stable")
        r = np.empty(a.size, dtype=np.float64)
        r[order] = np.arange(a.size, dtype=np.float64)
        for val in np.unique(a):  # ties: their mean rank
            tie = a == val
            r[tie] = r[tie].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclass
class Point:
    """One kept checkpoint: its validation figures (as stored) and its test figures."""

    update: int
    path: Path
    val: dict[str, float]
    test: dict[str, float] = field(default_factory=dict)
    lines: dict[str, bool | None] = field(default_factory=dict)
    windows: list[dict[str, float]] = field(default_factory=list)
    """Its figures on each ``--val-windows`` window (oldest first; empty without)."""
    members: list[int] = field(default_factory=list)
    """An ensemble's members' updates, best first (empty: one checkpoint)."""

    @property
    def passes_all(self) -> bool:
        """Every applicable test line passed."""
        return bool(self.lines) and all(v is not False for v in self.lines.values())


@dataclass
class Run:
    """A ``train rl --keep-checkpoints`` folder, read."""

    path: Path
    command: dict[str, Any]
    train: dict[str, Any]
    points: list[Point]
    chosen: int | None
    slurm_val: dict[str, float]
    ensembles: dict[int, Point] = field(default_factory=dict)
    """With ``--ensembles``: per K, the ensemble's test figures (``update``: -K; ``path``:
    its file; ``members``: its members' updates; no validation figures)."""


def read_run(path: Path) -> Run:
    """The run's settings, validation figures and kept checkpoints.

    Raises:
        SystemExit: With what to do, when the folder is not such a run.
    """
    cfg_file, curves_file = path / "config.json", path / "curves.json"
    for f in (cfg_file, curves_file):
        if not f.is_file():
            raise SystemExit(f"{path}: no {f.name}; give the --out folder of a finished"
                             " 'rlsched train rl' run")
    cfg = json.loads(cfg_file.read_text())
    curves = json.loads(curves_file.read_text())
    val = {int(p["update"]): p for p in curves.get("val", [])}
    points = []
    for f in sorted((path / "checkpoints").glob("update-*.pt")):
        m = _UPDATE.search(f.name)
        if m and int(m.group(1)) in val:
            u = int(m.group(1))
            points.append(Point(u, f, {k: float(v) for k, v in val[u].items()
                                       if isinstance(v, (int, float))}))
    if not points:
        raise SystemExit(f"{path}: no kept checkpoints; train with --keep-checkpoints")
    best = curves.get("best") or {}
    return Run(path, cfg.get("command", {}), cfg.get("train", {}), points,
               int(best["update"]) if "update" in best else None,
               dict(curves.get("slurm_val") or {}))


def sim_config(run: Run, trace: str | None = None, bf_plan: str | None = None) -> Any:
    """The replays' input settings (``trainer.cli.SimulateConfig``): the run's own history.

    ``trace``: where the run's trace is now (``None``: where it was). ``bf_plan``: the
    replays' backfill plan (``SchedulerOptions.bf_plan``; ``None``: the run's own,
    ``train rl --bf-plan``, as it validated).
    """
    from trainer.cli import resolve

    cmd = {k: v for k, v in run.command.items() if k not in _NOT_SIM}
    if trace is not None:
        cmd["trace"] = trace
    if bf_plan is not None:
        cmd["bf_plan"] = bf_plan
    if cmd.get("trace") and not Path(cmd["trace"]).is_file():
        raise SystemExit(f"{cmd['trace']}: the run's trace is not there; give --trace FILE")
    # (the run's seed is RL's; the replay takes evaluate's default, as the CLI does)
    return resolve(**cmd, speed_model=run.train.get("speed_model", "none"))


def make_ensembles(run: Run, sizes: Sequence[int], where: Path) -> None:
    """Write, for each K of ``sizes``, the run's ``train rl --ensemble K`` into ``where``.

    Fills ``run.ensembles`` (their figures come with :func:`replay_test`).
    """
    from trainer.policy import load_ensemble, save_checkpoint
    from trainer.rl.config import VAL_METRICS
    from trainer.rl.trainer import ensemble_members

    metric = str(run.train.get("val_metric", "bsld_mean"))
    by_update = {p.update: p for p in run.points}
    for k in sizes:
        members = ensemble_members([{"update": p.update, **p.val} for p in run.points], k,
                                   metric, VAL_METRICS[metric])
        if not members:
            continue
        ck = load_ensemble([by_update[u].path for u in members])
        path = where / f"{run.path.name}-ensemble-{k}.pt"
        save_checkpoint(path, ck.net, norm=ck.norm, extra=ck.extra)
        run.ensembles[k] = Point(-k, path, {}, members=list(members))


def replay_test(run: Run, heuristics: Sequence[str], trace: str | None,
                bf_plan: str | None = None) -> dict[str, Any]:
    """Replay every checkpoint (and ensemble) of ``run`` on its test period; fill them in.

    ``trace``, ``bf_plan``: as :func:`sim_config` reads them.
    """
    from trainer.cli import _prepare
    from trainer.evaluate import EvalConfig, check_targets, evaluate

    sim = sim_config(run, trace, bf_plan)
    prep = _prepare(sim)
    guard = {k: run.train[k] for k in GUARD_KEYS if k in run.train}
    cfg = EvalConfig(baselines=("slurm", *heuristics), resamples=0, windows=1,
                     guard_heuristics=True, **guard)
    every = {f"u{p.update}": p for p in run.points}
    every.update({f"ensemble{k}": p for k, p in run.ensembles.items()})
    models = {name: str(p.path) for name, p in every.items()}
    res = evaluate(prep.jobs, prep.cluster, models, cfg, options=prep.options,
                   priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed)
    for name, p in every.items():
        p.test = _figures(res.metrics[name])
        t = check_targets(res.metrics, name, cfg, locality=False,
                          heuristics=list(heuristics))
        p.lines = {c["name"]: c["ok"] for c in t["checks"] if c["name"] in LINES}
    others = {n: _figures(res.metrics[n]) for n in ("slurm", *heuristics)}
    return {"guard": guard, "baselines": others, "warmup_jobs": res.warmup_jobs,
            "prep": prep, "sim": sim, "cfg": cfg, "models": models}


def replay_windows(run: Run, test: Mapping[str, Any], k: int
                   ) -> list[dict[str, dict[str, float]]]:
    """Replay every checkpoint and the baselines on ``k`` validation windows; fill them in.

    The windows are the guard's (:func:`trainer.guard.validation_windows`): the
    validation period and the ``k - 1`` periods of as many jobs before it, each replayed
    on its own after as long a warm-up, behind the run's guard (as the demo's ``select``
    stage judges its candidates). The baselines are the test's (Slurm, and the
    heuristics behind the same guard). Returns, per window, each baseline's figures.
    """
    from dataclasses import replace

    from trainer.evaluate import Split, evaluate, time_split
    from trainer.guard import validation_windows
    from trainer.sim.stepper import window

    prep, sim = test["prep"], test["sim"]
    cfg = replace(test["cfg"], baselines=tuple(test["baselines"]))
    jobs = prep.jobs
    sp = time_split(jobs.n, cfg.train, cfg.val)
    warm = sp.test_start - sp.val_start
    baselines = []
    for a, b in validation_windows(jobs.n, cfg, k):
        val = window(jobs, 0, b, shift=False)
        res = evaluate(val, prep.cluster, {f"u{p.update}": str(p.path) for p in run.points},
                       cfg, options=prep.options,
                       priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed,
                       split=Split(val.n, a, a), warmup_jobs=min(warm, a))
        base = {n: _figures(res.metrics[n]) for n in cfg.baselines}
        baselines.append(base)
        for p in run.points:
            f = _figures(res.metrics[f"u{p.update}"])
            f.update(_kept_against(f, base))
            p.windows.append(f)
    return baselines


def best_heuristic(base: Mapping[str, Mapping[str, float]]) -> str | None:
    """The heuristic of ``base`` (every baseline's figures) with the lowest mean bsld.

    The one the test's "below the best heuristic" line reads
    (:func:`trainer.evaluate.check_targets`: the lowest among those replayed, a tie to
    the first name in alphabetical order); ``None`` when only Slurm was replayed.
    """
    names = [n for n in base if n != "slurm"]
    return min(names, key=lambda n: (base[n]["bsld_mean"], n)) if names else None


def _kept_against(f: Mapping[str, float], base: Mapping[str, Mapping[str, float]]
                  ) -> dict[str, float]:
    """Which of the baselines' bounds ``f`` keeps on one window (1.0: kept).

    Slurm's, as ``--val-bounds`` reads them with 0 slack (``p99_ok``, ``bsld_ok``,
    ``util_ok``); with a heuristic replayed, the best one's (:func:`best_heuristic`):
    ``best_ok``, a mean bsld below it (the test's line), and ``best_util_ok``, a
    utilisation not lower than its own on that window (the utilisation bound read
    against an order that reaches it, where Slurm's may be out of every order's reach).
    """
    from trainer.bounds import slurm_bounds, util_not_lower

    kept = {k: float(ok) for k, ok in slurm_bounds(f, base["slurm"], 0.10, 0.0).items()}
    best = best_heuristic(base)
    if best is not None:
        h = base[best]
        kept["best_ok"] = float(f["bsld_mean"] < h["bsld_mean"])
        kept["best_util_ok"] = float(util_not_lower(f["util"], h["util"]))
    return kept


def _figures(m: Mapping[str, Any]) -> dict[str, float]:
    """A policy's replay figures under the keys RL validation uses.

    With them, the share of the machine idle while jobs waited (``idle_waiting``:
    ``evaluate``'s reading beside the utilisation line; NaN when the replay has none).
    """
    from trainer.evaluate import _util, _util_reading

    idle = _util_reading(m, "idle_waiting")
    return {"bsld_mean": float(m["bsld"]["mean"]), "wait_p99": float(m["wait_s"]["p99"]),
            "util": _util(m), "idle_waiting": math.nan if idle is None else idle}


def choices(run: Run) -> dict[str, Point | None]:
    """What each rule picks among the run's kept checkpoints."""
    pts = run.points
    by_update = {p.update: p for p in pts}
    passing = [p for p in pts if p.passes_all]

    def low(ps: Sequence[Point], key: str, where: str) -> Point | None:
        return min(ps, key=lambda p: (getattr(p, where)[key], p.update)) if ps else None

    def kept_then_low(key: str) -> Point | None:
        # --val-bounds' order (Trainer._beats): more of Slurm's bounds kept first, in
        # BOUND_KEYS' order, then the lower figure, then the earlier update
        from trainer.rl.trainer import _kept

        return min(pts, key=lambda p: (tuple(-k for k in _kept(p.val) or ()),
                                       p.val[key], p.update)) if pts else None

    multi: dict[str, Point | None] = {}
    if pts and pts[0].windows:
        from trainer.guard import _geo as guard_geo  # (the demo's select stage's mean)

        k = len(pts[0].windows)

        def geo(p: Point) -> float:
            return guard_geo([w["bsld_mean"] for w in p.windows])

        def kept_in(p: Point, key: str) -> int:
            return sum(int(w[key]) for w in p.windows)

        multi = {
            f"{k} windows: lowest geometric-mean bsld": min(pts, key=lambda p: (geo(p),
                                                                                 p.update)),
            f"{k} windows: most bounds kept (p99, bsld, util), then lowest geometric mean":
                min(pts, key=lambda p: (-kept_in(p, "p99_ok"), -kept_in(p, "bsld_ok"),
                                        -kept_in(p, "util_ok"), geo(p), p.update)),
            f"{k} windows: utilisation kept in most, then lowest geometric mean":
                min(pts, key=lambda p: (-kept_in(p, "util_ok"), geo(p), p.update)),
        }
        if "best_ok" in pts[0].windows[0]:  # (a heuristic replayed on the windows)
            multi.update({
                f"{k} windows: the best heuristic's lines kept in most (p99 within 10% of"
                " Slurm's, bsld below it, utilisation not below its own), then lowest"
                " geometric mean":
                    min(pts, key=lambda p: (-kept_in(p, "p99_ok"), -kept_in(p, "best_ok"),
                                            -kept_in(p, "best_util_ok"), geo(p), p.update)),
                f"{k} windows: utilisation not below the best heuristic's in most, then"
                " lowest geometric mean":
                    min(pts, key=lambda p: (-kept_in(p, "best_util_ok"), geo(p),
                                            p.update)),
            })
    return {"the run's choice (best.pt)": by_update.get(run.chosen) if run.chosen is not None
            else None, **multi,
            "lowest validation bsld": low(pts, "bsld_mean", "val"),
            "bounds kept, then lowest validation bsld": kept_then_low("bsld_mean"),
            "lowest validation p99 wait": low(pts, "wait_p99", "val"),
            "bounds kept, then lowest validation p99 wait": kept_then_low("wait_p99"),
            "lowest test bsld (hindsight)": low(pts, "bsld_mean", "test"),
            "lowest test bsld passing every line (hindsight)":
                low(passing, "bsld_mean", "test")}


def _window_kept(points: Sequence[Point], i: int, name: str,
                 base: Mapping[str, Mapping[str, float]]) -> str:
    """How many ``points`` kept baseline ``name``'s bounds on window ``i`` (its row's note)."""
    def n(key: str) -> int:
        return sum(int(p.windows[i].get(key, 0)) for p in points)

    if name == "slurm":
        return f"{n('p99_ok')}/{n('bsld_ok')}/{n('util_ok')} of {len(points)}"
    if name == best_heuristic(base):
        return f"{n('best_ok')}, {n('best_util_ok')} of {len(points)}"
    return ""


def _mark(ok: float | bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "no")


def _idle(f: Mapping[str, float]) -> str:
    """The share idle while jobs waited, for a table ('-' when the figures have none)."""
    v = f.get("idle_waiting", math.nan)
    return "-" if math.isnan(v) else f"{v:.3f}"


def report(run: Run, test: Mapping[str, Any]) -> dict[str, Any]:
    """Print one run's tables; return its summary."""
    heur = [n for n in test["baselines"] if n != "slurm"]
    sl = test["baselines"]["slurm"]
    print(f"\n{run.path}: {len(run.points)} kept checkpoints; test period after"
          f" {test['warmup_jobs']:,} warm-up jobs, behind"
          f" {test['guard'].get('starvation_limit', 0) / 86400:g} d"
          f" {test['guard'].get('starvation_order', 'age')}"
          + (f", express lane {test['guard']['express_limit'] / 60:g} min"
             if test["guard"].get("express_limit") else ""))
    base_rows = [[n, "", "", "", "", f"{f['bsld_mean']:.1f}", f"{f['wait_p99']:,.0f}",
                  f"{f['util']:.4f}", _idle(f), "", "", "", ""]
                 for n, f in test["baselines"].items()]
    if run.slurm_val:
        sv = run.slurm_val
        base_rows[0][1:4] = [f"{sv['bsld_mean']:.1f}", f"{sv['wait_p99']:,.0f}",
                             f"{sv['util']:.4f}"]
    rows = []
    for p in run.points:
        kept = "".join(k[0] if p.val.get(f"{k}_ok") else "." for k in ("p99", "bsld", "util"))
        tag = " *" if p.update == run.chosen else ""
        rows.append([f"u{p.update}{tag}", f"{p.val.get('bsld_mean', math.nan):.1f}",
                     f"{p.val.get('wait_p99', math.nan):,.0f}",
                     f"{p.val.get('util', math.nan):.4f}",
                     kept if any(f"{k}_ok" in p.val for k in ("p99", "bsld", "util")) else "-",
                     f"{p.test['bsld_mean']:.1f}", f"{p.test['wait_p99']:,.0f}",
                     f"{p.test['util']:.4f}", _idle(p.test),
                     *(_mark(p.lines.get(k)) for k in LINES)])
    table(["checkpoint", "val bsld", "val p99 (s)", "val util", "val kept", "test bsld",
           "test p99 (s)", "test util", "idle waiting", *LINES.values()], rows + base_rows)
    print("(* the run's choice; 'val kept': p = p99, b = bsld, u = utilisation bound of"
          f" Slurm's kept on validation; lines against Slurm and the best of"
          f" {', '.join(heur) or 'no heuristic'})")
    if test.get("baseline_windows"):
        table(["window", "baseline", "bsld", "p99 (s)", "util", "checkpoints kept (p/b/u;"
               " below it, its util)"],
              [[f"{i + 1}", n, f"{f['bsld_mean']:.1f}", f"{f['wait_p99']:,.0f}",
                f"{f['util']:.4f}", _window_kept(run.points, i, n, base)]
               for i, base in enumerate(test["baseline_windows"]) for n, f in base.items()])
        print("(the validation windows, oldest first, the last the validation period;"
              " per Slurm: how many checkpoints kept its p99, bsld and utilisation bounds;"
              " per the best heuristic: how many were below its bsld and kept its"
              " utilisation)")
    rho = spearman([p.val["bsld_mean"] for p in run.points],
                   [p.test["bsld_mean"] for p in run.points])
    print("rank correlation of validation bsld with test bsld: "
          + ("n/a (under 3 checkpoints, or their figures all alike)" if math.isnan(rho)
             else f"{rho:+.2f}"))
    picks = choices(run)
    summary_rows = [[f"ensemble of the {k} best validated (train rl --ensemble {k})",
                     "+".join(f"u{u}" for u in e.members),
                     f"{e.test['bsld_mean']:.1f}", f"{e.test['wait_p99']:,.0f}",
                     f"{e.test['util']:.4f}", "yes" if e.passes_all else "no"]
                    for k, e in run.ensembles.items()]
    for rule, pick in picks.items():
        if pick is None:
            summary_rows.append([rule, "none", "", "", "", ""])
            continue
        summary_rows.append([rule, f"u{pick.update}", f"{pick.test['bsld_mean']:.1f}",
                             f"{pick.test['wait_p99']:,.0f}", f"{pick.test['util']:.4f}",
                             "yes" if pick.passes_all else "no"])
    table(["rule", "checkpoint", "test bsld", "test p99 (s)", "test util", "every line"],
          summary_rows)
    return {"run": str(run.path), "rank_corr": None if math.isnan(rho) else rho,
            "slurm_test": sl,
            "baselines_test": test["baselines"], "guard": test["guard"],
            "warmup_jobs": test["warmup_jobs"],
            "passing": [p.update for p in run.points if p.passes_all],
            "choices": {r: None if q is None else q.update for r, q in picks.items()},
            "slurm_windows": [w["slurm"] for w in test.get("baseline_windows", [])],
            "baseline_windows": test.get("baseline_windows", []),
            "points": [{"update": p.update, "val": p.val, "test": p.test, "lines": p.lines,
                        "windows": p.windows} for p in run.points],
            "ensembles": {str(k): {"members": e.members,
                                   "test": e.test, "lines": e.lines, "passes": e.passes_all}
                          for k, e in run.ensembles.items()}}


def main(argv: list[str] | None = None) -> int:
    """Replay every kept checkpoint of each run on its test period; print the choices."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="--out folders of train rl runs")
    ap.add_argument("--heuristics", default="spf,lrf",
                    help="baselines replayed behind the same guard, comma-separated")
    ap.add_argument("--trace", default=None, help="the trace, if it moved since training")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--bf-plan", choices=BF_PLANS, default=None,
                    help="the replays' backfill: easy or conservative (as Slurm plans;"
                         " whole nodes only); default: the run's own, as it validated")
    ap.add_argument("--ensembles", default="", metavar="K[,K...]",
                    help="also replay the ensemble train rl --ensemble K writes from the"
                         " kept checkpoints, for each K")
    ap.add_argument("--val-windows", type=int, default=0, metavar="K",
                    help="also replay every checkpoint on K validation windows (the"
                         " validation period and the K-1 before it, as the demo's select"
                         " stage) and print what choosing on them would deploy")
    args = ap.parse_args(argv)
    heuristics = [h for h in args.heuristics.split(",") if h and h != "slurm"]
    try:
        sizes = [int(k) for k in args.ensembles.split(",") if k.strip()]
    except ValueError:
        raise SystemExit(f"--ensembles {args.ensembles!r}: give sizes, e.g. 4 or 4,8") from None
    if any(k < 1 for k in sizes):
        raise SystemExit("--ensembles: every size must be at least 1")
    runs = [read_run(p) for p in args.runs]  # (every folder checked before any replay)
    out = []
    tmp = tempfile.TemporaryDirectory(prefix="checkpoint-choice-")
    for run in runs:
        make_ensembles(run, sizes, Path(tmp.name))
    for i, run in enumerate(runs):
        print(f"replaying {len(run.points)} checkpoints of {run.path}"
              f" ({i + 1}/{len(runs)})...", file=sys.stderr)
        test = replay_test(run, heuristics, args.trace, args.bf_plan)
        if args.val_windows > 0:
            print(f"  and on {args.val_windows} validation windows...", file=sys.stderr)
            test["baseline_windows"] = replay_windows(run, test, args.val_windows)
        out.append(report(run, test))
    if len(out) > 1:
        print("\nall runs:")
        table(["run", "rank corr.", "choice", "its test bsld", "its test util",
               "lowest val p99", "its test bsld", "its test util",
               "best on test", "passing every line"],
              [[Path(s["run"]).name,
                "n/a" if s["rank_corr"] is None else f"{s['rank_corr']:+.2f}",
                *_pick(s, "the run's choice (best.pt)"),
                *_pick(s, "lowest validation p99 wait"),
                _pick(s, "lowest test bsld (hindsight)")[0],
                ",".join(f"u{u}" for u in s["passing"]) or "none"] for s in out])
        print("\neach rule over all runs (test period):")
        table(["rule", "runs", "mean test bsld", "utilisation kept", "every line"],
              _rules(out) + _ensemble_rows(out))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1, default=float))
        print(f"wrote {args.json}")
    tmp.cleanup()
    return 0


def _rules(out: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Per rule: how its picks scored on the test periods of the runs, together."""
    rows = []
    for rule in out[0]["choices"]:
        picks = []
        for s in out:
            u = s["choices"].get(rule)
            if u is not None:
                picks.append((s, next(q for q in s["points"] if q["update"] == u)))
        if not picks:
            rows.append([rule, "0", "", "", ""])
            continue
        util = sum(bool(q["lines"].get("utilisation")) for _, q in picks)
        every = sum(q["update"] in s["passing"] for s, q in picks)
        rows.append([rule, str(len(picks)),
                     f"{np.mean([q['test']['bsld_mean'] for _, q in picks]):.1f}",
                     f"{util} of {len(picks)}", f"{every} of {len(picks)}"])
    return rows


def _ensemble_rows(out: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Per ensemble size: how the runs' ensembles scored on their test periods."""
    rows = []
    for k in dict.fromkeys(k for s in out for k in s.get("ensembles", {})):
        es = [s["ensembles"][k] for s in out if k in s.get("ensembles", {})]
        util = sum(bool(e["lines"].get("utilisation")) for e in es)
        rows.append([f"ensemble of the {k} best validated", str(len(es)),
                     f"{np.mean([e['test']['bsld_mean'] for e in es]):.1f}",
                     f"{util} of {len(es)}", f"{sum(e['passes'] for e in es)} of {len(es)}"])
    return rows


def _pick(s: Mapping[str, Any], rule: str) -> list[str]:
    u = s["choices"].get(rule)
    if u is None:
        return ["none", "", ""]
    p = next(q for q in s["points"] if q["update"] == u)
    return [f"u{u}", f"{p['test']['bsld_mean']:.1f}", f"{p['test']['util']:.4f}"]


if __name__ == "__main__":
    raise SystemExit(main())
