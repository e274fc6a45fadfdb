"""``rlsched report RUN_DIR``: one self-contained HTML page an admin can open anywhere.

:func:`build_report` reads what a run wrote (``rlsched demo``'s layout, see
:mod:`trainer.demo`; an ``rlsched evaluate --out DIR`` directory works too, with the
sections it has) and writes ``report.html``:

- the headline table: every learned policy, the Slurm baseline and the heuristics on
  the test period (mean/p95/p99 wait, bounded slowdown, JCT, utilisation,
  fragmentation, share of multi-node jobs within one leaf switch, Jain's fairness),
  with each policy's change against the Slurm baseline, the quality targets (with how
  sure each ratio is), the mean bounded slowdown per window of the test period and,
  after ``evaluate --draws``, the figures and lines over the draws of its timing;
- the evaluation plots (wait CDF, utilisation and fragmentation over time), the
  training curves (RL and imitation), the imitation agreement on held-out decisions,
  the model card, the run's stages and wall times, and the next steps on a real
  cluster.

The page has no external resource: the PNGs already in the run directory are embedded
as base64 ``data:`` URLs, the CSS is inline, there is no script. Only the standard
library is needed (no plotting happens here), so the runtime install can build it.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

__all__ = ["build_report", "report"]

#: Evaluation plots embedded, in order: (file beside ``eval.json``, caption).
PLOTS: tuple[tuple[str, str], ...] = (
    ("wait_cdf.png", "Wait time CDF on the test period (log scale; further left and"
                          " higher is better)."),
    ("utilisation.png", "Busy nodes over the test period."),
    ("fragmentation.png", "GPU fragmentation (SCHED²'s index) over the test period:"
                               " lower keeps whole servers free for large jobs."),
)
#: Training plots: (paths in the run directory, the first found is shown; caption).
#: ``rlsched demo`` writes ``rl/`` and ``imitation/``; ``rlsched train all`` one folder.
TRAINING_PLOTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("rl/curves.png", "curves.png"),
     "Reinforcement learning: training episodes (left) and the greedy policy on RL's"
     " validation window (right), with reference agents. The demo chooses the checkpoint"
     " to deploy by replaying the whole validation period in the simulator (above)."),
    (("imitation/curves.png",), "Imitation: training loss and validation agreement per epoch."),
)

#: Where the imitation report may be.
IMITATION_REPORTS = ("imitation/report.json", "imitation.json")
#: Where ``rlsched tune-guard --out`` may have written its ``guard.json`` (and
#: ``guard.png`` beside it), in the run directory.
GUARD_FILES = ("guard/guard.json", "guard.json", "eval/guard.json")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 color:#1d2430;background:#f6f7f9;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.7em;margin:0 0 4px}h2{font-size:1.25em;margin:34px 0 10px;
 border-bottom:2px solid #d9dde3;padding-bottom:4px}h3{font-size:1.05em;margin:18px 0 6px}
.sub{color:#5b6472;margin:0 0 14px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0}
.card{background:#fff;border:1px solid #d9dde3;border-radius:8px;padding:10px 14px;
 min-width:150px}.card b{display:block;font-size:1.35em}.card span{color:#5b6472;
 font-size:.85em}
table{border-collapse:collapse;background:#fff;font-size:.88em;margin:6px 0 4px}
th,td{border:1px solid #d9dde3;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#eef1f5;font-weight:600;white-space:normal;vertical-align:bottom}td:first-child,th:first-child{text-align:left}
tr.model td{background:#e8f3ec;font-weight:600}tr.ref td{background:#eef2fb}
.better{color:#17703a}.worse{color:#b3261e}
.pass,.fail,.na{display:inline-block;min-width:3.2em;text-align:center;border-radius:4px;
 padding:0 6px;font-weight:700;font-size:.85em;color:#fff}
.pass{background:#17803d}.fail{background:#c2410c}.na{background:#8a94a3}
figure{background:#fff;border:1px solid #d9dde3;border-radius:8px;margin:10px 0;
 padding:10px;display:inline-block;vertical-align:top}
figure img{display:block;max-width:100%;height:auto}
figcaption{color:#5b6472;font-size:.85em;max-width:760px;margin-top:4px}
pre{background:#fff;border:1px solid #d9dde3;border-radius:6px;padding:10px;
 overflow-x:auto;font-size:.8em}code{font-size:.92em}
details summary{cursor:pointer;color:#2456a6}
.note{color:#5b6472;font-size:.88em}
.wrap{overflow-x:auto}
"""


# ---------------------------------------------------------------------------- reading
def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _find_eval(run: Path) -> tuple[Path | None, Any]:
    for p in (run / "eval" / "eval.json", run / "eval.json"):
        data = _load_json(p)
        if isinstance(data, dict) and "metrics" in data:
            return p.parent, data
    return None, None


def _find_card(run: Path) -> Any:
    for p in [run / "model.onnx.card.json", *sorted(run.glob("*.card.json"))]:
        data = _load_json(p)
        if isinstance(data, dict):
            return data
    return None


# ---------------------------------------------------------------------------- formatting
def esc(x: Any) -> str:
    """HTML-escaped text of ``x``."""
    return html.escape(str(x), quote=True)


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.{digits}f}"
    return esc(v)


def _dur(s: Any) -> str:
    if s is None or not isinstance(s, (int, float)) or not math.isfinite(s):
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _pct(v: Any) -> str:
    return "-" if v is None or not math.isfinite(float(v)) else f"{float(v):.1%}"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{esc(alt)}">'


def _figure(p: Path, caption: str) -> str:
    if not p.is_file():
        return ""
    return f"<figure>{_img(p, caption)}<figcaption>{esc(caption)}</figcaption></figure>"


def _util(m: Mapping[str, Any]) -> Any:
    u = m.get("utilisation") or {}
    return u.get("gpus") if u.get("gpus") is not None else u.get("nodes")


def _rel(v: float | None, ref: float | None, lower_better: bool = True) -> str:
    if v is None or ref is None or not ref:
        return ""
    r = v / ref - 1
    good = (r < 0) if lower_better else (r > 0)
    cls = "better" if good and abs(r) >= 0.005 else "worse" if abs(r) >= 0.005 else ""
    return f' <span class="{cls}">({r:+.0%})</span>'


# ---------------------------------------------------------------------------- sections
def _headline(ev: Mapping[str, Any]) -> str:
    ms: Mapping[str, Any] = ev["metrics"]
    models = list(ev.get("models") or [])
    names = list(ev.get("names") or ms)
    ref = ms.get("slurm")
    cols = ["policy", "mean wait", "p95 wait", "p99 wait", "longest wait", "bounded slowdown",
            "mean JCT", "utilisation", "fragmentation", "multi-node jobs in one leaf",
            "fairness (Jain)"]
    rows = []
    for n in names:
        m = ms[n]
        cls = "model" if n in models else "ref" if n == "slurm" else ""
        w, b, j = m["wait_s"], m["bsld"], m["jct_s"]

        def rel(v: float, r: float, show: bool = n in models) -> str:
            return _rel(v, r) if show else ""

        label = f"{esc(n)} (learned)" if n in models else (
            "slurm (incumbent)" if n == "slurm" else esc(n))
        cells = [
            label,
            _dur(w["mean"]) + (rel(w["mean"], ref["wait_s"]["mean"]) if ref else ""),
            _dur(w["p95"]),
            _dur(w["p99"]) + (rel(w["p99"], ref["wait_s"]["p99"]) if ref else ""),
            _dur(w.get("max")) + (rel(w.get("max"), ref["wait_s"].get("max")) if ref else ""),
            _num(b["mean"]) + (rel(b["mean"], ref["bsld"]["mean"]) if ref else ""),
            _dur(j["mean"]) + (rel(j["mean"], ref["jct_s"]["mean"]) if ref else ""),
            _pct(_util(m)), _num(m["fragmentation"]["mean"]), _pct(m.get("single_leaf_share")),
            _num(m["fairness"]["jain_bsld"]),
        ]
        rows.append(f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    return (f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>")


def _check_rows(checks: Any) -> str:
    """One table row per target check: its verdict badge, name and detail."""
    badge = {True: '<span class="pass">pass</span>', False: '<span class="fail">miss</span>',
             None: '<span class="na">n/a</span>'}
    return "".join(f"<tr><td>{badge[c['ok']]} {esc(c['name'])}</td><td style='text-align:left'>"
                   f"{esc(c['detail'])}</td></tr>" for c in checks)


def _targets(t: Mapping[str, Any] | None) -> str:
    if not t:
        return ""
    items = _check_rows(t["checks"])
    verdict = ("all targets met" if t["passed"] else "some targets missed: the numbers say by"
               " how much")
    setup = f"<p class='note'>As replayed: {esc(t['setup'])}.</p>" if t.get("setup") else ""
    return (f"<h3>Quality targets ({esc(t['policy'])}): {esc(verdict)}</h3>{setup}"
            f"<table><tbody>{items}</tbody></table>")


def _switch_on(run_info: Any) -> str:
    """The demo's replay from the queue Slurm left (``run.json``'s ``switch_on``)."""
    summary = run_info.get("summary", {}) if isinstance(run_info, dict) else {}
    on = (summary.get("evaluation") or {}).get("switch_on") or {}
    t = on.get("targets")
    if not t or not t.get("checks"):
        return ""
    items = _check_rows(t["checks"])
    return ("<h3>From the queue Slurm left: the day the helper is switched on</h3>"
            "<p class='note'>The table above replays the validation period before the test"
            " period under each policy, from an empty cluster. Here every one of the"
            f" {_num(on.get('warmup_jobs'))} jobs before the test period is replayed under"
            " the incumbent Slurm, and the model takes over at the test period's first"
            " arrival with the queue and running jobs Slurm left, as the helper does when"
            " it is switched on. On a busy history the two starts differ most; a model"
            " that passes both is not winning on how the replay began.</p>"
            f"<table><tbody>{items}</tbody></table>")


def _pairs(ev: Mapping[str, Any]) -> str:
    """Each later model against the first (``eval.json``'s ``model_pairs``)."""
    pairs = ev.get("model_pairs") or []
    if not pairs:
        return ""
    items = "".join(f"<li>{esc(e['detail'])}</li>" for e in pairs)
    return (f"<h3>Models against {esc(pairs[0]['against'])}</h3>"
            f"<ul class='note'>{items}</ul>")


def _windows(ev: Mapping[str, Any]) -> str:
    """Mean bsld per consecutive window of the test period (``eval.json``'s ``windows``)."""
    w = ev.get("windows") or {}
    rows, bsld = w.get("rows") or [], w.get("bsld") or {}
    if len(rows) < 2:
        return ""
    names = [n for n in (w.get("shown") or ev.get("plotted") or list(bsld)) if n in bsld]
    t0 = w["first_arrival"][0]
    head = "".join(f"<th>{esc(c)}</th>" for c in ["window", "jobs", "from day", *names])
    body = "".join(
        "<tr>" + "".join(f"<td>{c}</td>" for c in [
            i + 1, _num(hi - lo), f"{(fa - t0) / 86400:.1f}",
            *(_num(float(bsld[n][i])) for n in names)]) + "</tr>"
        for i, ((lo, hi), fa) in enumerate(zip(rows, w["first_arrival"], strict=True)))
    return ("<h3>Mean bounded slowdown in consecutive windows of the test period</h3>"
            "<p class='note'>One test period is one stretch of history: a policy that wins"
            " in every window wins for a reason; one that wins overall but loses in half"
            " the windows may not win on the next stretch. The targets above give each"
            " ratio's 95% block-bootstrap interval for the same reason.</p>"
            f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{body}'
            "</tbody></table></div>")


#: The quality checks in the order ``evaluate`` reads them (eval.json sorts its keys).
CHECK_ORDER = ("bsld_vs_slurm", "bsld_vs_best_heuristic", "bsld_vs_best_deployable",
               "p99_wait", "utilisation", "jct_vs_best_heuristic", "jct_vs_best_deployable",
               "single_leaf_share")


def _draws(ev: Mapping[str, Any]) -> str:
    """The test period under jittered arrivals (``eval.json``'s ``draws``)."""
    d = ev.get("draws") or {}
    figures = d.get("figures") or {}
    if not figures:
        return ""
    k = d["draws"]
    # (eval.json's keys are sorted: the table order is evaluate's, models first)
    order = [n for n in (ev.get("names") or []) if n in figures]
    order += [n for n in figures if n not in order]
    models = [m for m in (ev.get("models") or []) if m in (d.get("passes") or {})]

    def spread(xs: Any) -> list[str]:
        if not xs or any(x is None for x in xs):
            return ["-", "-", "-"]
        return [_num(float(xs[0])), _num(sum(xs) / len(xs)),
                f"{_num(float(min(xs)))} to {_num(float(max(xs)))}"]

    head = "".join(f"<th>{esc(c)}</th>" for c in ["policy", "bsld as recorded",
                                                   "bsld mean", "bsld range",
                                                   "p99 wait mean", "util mean"])
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in [
            n, *spread(f.get("bsld")), *spread(f.get("p99"))[1:2],
            *spread(f.get("util"))[1:2]]) + "</tr>"
        for n, f in ((n, figures[n]) for n in order))
    passes = d.get("passes") or {}
    lines = ""
    if models:
        names = [c for c in CHECK_ORDER if c in passes[models[0]]]
        names += [c for c in passes[models[0]] if c not in names and c != "all"]
        phead = "".join(f"<th>{esc(c)}</th>" for c in ["model", *names, "all"])
        pbody = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in [
                m, *("-" if p[c] is None else f"{p[c]} of {k}" for c in names),
                f"{p['all']} of {k}"]) + "</tr>" for m, p in ((m, passes[m]) for m in models))
        lines = (f"<p class='note'>Quality lines kept, in draws of {k} (each draw read as"
                 " the recorded replay is):</p>"
                 f'<div class="wrap"><table><thead><tr>{phead}</tr></thead><tbody>{pbody}'
                 "</tbody></table></div>")
    first = next((m for m in models if m in (d.get("expected") or {})), None)
    expected = ""
    if first is not None:
        t = d["expected"][first]
        verdict = "all met" if t["passed"] else "some missed"
        expected = (f"<p class='note'>The lines of {esc(first)} on the mean figures over"
                    f" the draws: {verdict}.</p><table><tbody>"
                    f"{_check_rows(t['checks'])}</tbody></table>")
    return (f"<h3>The test period in {k} draws of its timing</h3>"
            "<p class='note'>One replay is one timing of these jobs. Draw 1 is the"
            f" history as recorded; in the others every arrival moved by up to"
            f" {_num(float(d['jitter']))} s, in the same order. A line kept in every draw"
            " is the policy's; one kept in some draws only is decided by timing no site"
            " controls.</p>"
            f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{body}'
            f"</tbody></table></div>{lines}{expected}")


def _days(s: Any) -> str:
    return f"{float(s) / 86400:.2f} d"


def _guard(run: Path) -> str:
    """The starvation guard chosen on the validation period (``rlsched tune-guard``)."""
    path = next((run / p for p in GUARD_FILES if (run / p).is_file()), None)
    if path is None:
        return ""
    g = _load_json(path)
    if not isinstance(g, dict) or not g.get("rows"):
        return ""
    sl, choice = g["slurm"], g.get("choice") or {}
    head = "".join(f"<th>{esc(c)}</th>" for c in ["guard", "mean bsld", "vs slurm",
                                                   "p99 wait", "max wait", "util"])
    body = [f"<tr><td>slurm</td><td>{_num(sl['bsld_mean'])}</td><td></td>"
            f"<td>{_days(sl['wait_p99'])}</td><td>{_days(sl['wait_max'])}</td>"
            f"<td>{_num(sl['util'])}</td></tr>"]
    tb = g.get("trained_behind") or {}  # (the guard an RL net was trained behind)
    for i, r in enumerate(g["rows"]):
        label = esc(r["setting"]["label"]) + (" (chosen)" if choice.get("row") == i else "")
        if tb and (r["setting"]["limit"], r["setting"]["order"]) == (tb["limit"], tb["order"]):
            label += " (trained behind)"
        p99, mx, util = ("" if r.get(k, True) else " class='worse'"
                         for k in ("p99_ok", "max_ok", "util_ok"))
        body.append(
            f"<tr><td>{label}</td><td>{_num(r['bsld_mean'])}</td>"
            f"<td>{_pct(r['bsld_vs_slurm'] - 1)}</td><td{p99}>{_days(r['wait_p99'])}</td>"
            f"<td{mx}>{_days(r['wait_max'])}</td><td{util}>{_num(r['util'])}</td></tr>")
    a, b = g["period"]["jobs"]
    many = g["period"].get("windows") or []
    why = (f" Chosen: starvation_limit = {choice['starvation_limit']:g} s, starvation_order"
           f" = {choice['starvation_order']}, {choice['why']}." if choice else "")
    what = (f"jobs {a} to {b - 1} (the validation period; never the test period)"
            if len(many) < 2 else
            f"{len(many)} periods of {b - a} jobs, jobs {many[0][0]} to {b - 1} (the last"
            " the validation period; never the test period), each on its own, and shows"
            " geometric means of the bsld and the waits and the mean utilisation over"
            " them,")
    return ("<h2>Starvation guard, chosen on the validation period</h2>"
            f"<p class='note'>rlsched tune-guard replayed {what} under the model behind"
            " each guard setting, without a guard and under Slurm. Marked: a p99 wait more"
            " than"
            f" {_pct(g['p99_slack'])} above Slurm's, a longest wait over its bound (when"
            f" one was given), or a utilisation below Slurm's"
            + (f" by more than {g['util_slack']:.2%}" if g.get("util_slack") else "")
            + f".{esc(why)}"
            "</p>"
            f'<div class="wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}'
            "</tbody></table></div>"
            + _figure(path.parent / "guard.png", "Mean bounded slowdown against p99 wait, one"
                      " point per guard setting, on the validation period."))


def _cards(ev: Mapping[str, Any], run_info: Any) -> str:
    ms = ev["metrics"]
    models = list(ev.get("models") or [])
    if not models or "slurm" not in ms:
        return ""
    p, s = ms[models[0]], ms["slurm"]
    out = []

    def card(value: str, label: str) -> None:
        out.append(f'<div class="card"><b>{value}</b><span>{esc(label)}</span></div>')

    for key, label in (("bsld", "mean bounded slowdown"), ("wait_s", "mean wait"),
                       ("jct_s", "mean job completion time")):
        a, b = float(p[key]["mean"]), float(s[key]["mean"])
        if b:
            card(f"{a / b - 1:+.0%}", f"{label} vs the incumbent Slurm")
    pw, sw = float(p["wait_s"]["p99"]), float(s["wait_s"]["p99"])
    if sw:
        card(f"{pw / sw - 1:+.0%}", "p99 wait vs the incumbent Slurm")
    if isinstance(run_info, dict) and run_info.get("total_s"):
        card(_dur(float(run_info["total_s"])), "wall time of the whole run")
    return '<div class="cards">' + "".join(out) + "</div>"


def _imitation(rep: Any) -> str:
    if not isinstance(rep, dict) or not rep.get("metrics"):
        return ""
    split = "test" if "test" in rep["metrics"] else next(iter(rep["metrics"]))
    m = rep["metrics"][split]
    rows = []
    for name, label in (("net", "the policy net"), ("fifo", "FIFO order (reference)"),
                        ("fifo_backfill", "FIFO with EASY backfill (reference)"),
                        ("priority", "recorded priority (reference)"),
                        ("random", "random choice (reference)")):
        a = m.get(name)
        if not a:
            continue
        rows.append(f"<tr><td>{esc(label)}</td><td>{_pct(a.get('top1'))}</td>"
                    f"<td>{_pct(a.get('top5'))}</td><td>{_pct(a.get('top1_nontrivial'))}</td>"
                    f"<td>{_num(int(a.get('decisions', 0)))}</td></tr>")
    pl = m.get("placement") or {}
    place = ""
    if pl.get("decisions"):
        place = (f"<p class='note'>Placement (leaf switches of multi-node starts,"
                 f" {int(pl['decisions'])} decisions): the net picks a matching node set"
                 f" {_pct(pl.get('net_top1'))} of the time (first candidate"
                 f" {_pct(pl.get('first_candidate_top1'))}, random"
                 f" {_pct(pl.get('random_top1'))}).</p>")
    splits = rep.get("splits") or {}
    return ("<h3>Imitation agreement with the site's scheduler</h3>"
            f"<p class='note'>On {esc(split)} decisions (later than any it trained on;"
            f" splits: {esc(', '.join(f'{k} {v}' for k, v in splits.items()))}; best epoch"
            f" {esc(rep.get('best_epoch'))}): how often the job the scheduler started is the"
            " net's first choice (top-1) or among its first five."
            + (" FIFO with EASY backfill picks the earliest arrival among the jobs that"
               " fit without delaying the oldest job that cannot start: what a"
               " first-come-first-served Slurm with backfill would start."
               if m.get("fifo_backfill") else "")
            + (" The net orders jobs by its fitted prior alone (<code>"
               + next((k for k in ("area_prior", "amount_prior")
                       if rep.get(k) is not None), "est_prior")
               + "</code>): that agreed with the scheduler at least as well"
               " as its trained job head on the validation decisions."
               if rep.get("prior_alone") else "") + "</p>"
            "<table><thead><tr><th>ranking</th><th>top-1</th><th>top-5</th>"
            "<th>top-1, 2+ choices</th><th>decisions</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>" + place)


def _model_card(card: Any) -> str:
    if not isinstance(card, dict):
        return "<p class='note'>No model card in this run directory.</p>"
    cl = card.get("cluster") or {}
    tr = card.get("training") or {}
    par = card.get("parity") or {}
    diffs = par.get("max_diff") or {}
    rows = [
        ("file sha256", f"<code>{esc(card.get('sha256'))}</code>"),
        ("feature schema", f"v{esc(card.get('schema_version'))}, hash"
                           f" <code>{esc(str(card.get('schema_hash'))[:16])}...</code>"),
        ("ONNX opset", esc(card.get("opset"))),
        ("inputs / outputs", esc(", ".join(card.get("inputs") or [])) + " / "
         + esc(", ".join(card.get("outputs") or []))),
        ("cluster", f"{esc(cl.get('name'))}: {esc(cl.get('nodes'))} nodes,"
                    f" {esc(cl.get('gpus'))} GPUs, {esc(cl.get('leaves'))} leaf switches"),
        ("training", esc(tr.get("algorithm"))),
        ("parity (ONNX vs torch)", f"{esc(par.get('cases'))} inputs, max difference "
         + esc(", ".join(f"{k} {float(v):.1e}" for k, v in diffs.items()))
         + f" (tolerance {esc(par.get('atol'))})"),
        ("created", f"{esc(card.get('created'))} by rlsched {esc(card.get('rlsched_version'))}"),
    ]
    body = "".join(f"<tr><td>{esc(k)}</td><td style='text-align:left'>{v}</td></tr>"
                   for k, v in rows)
    full = esc(json.dumps(card, indent=2, sort_keys=True, default=str))
    return (f"<table><tbody>{body}</tbody></table>"
            f"<details><summary>the whole card (model.onnx.card.json)</summary>"
            f"<pre>{full}</pre></details>")


def _stages(run_info: Any) -> str:
    if not isinstance(run_info, dict) or not run_info.get("stages"):
        return ""
    rows = "".join(f"<tr><td>{esc(s['title'])}</td><td>{float(s['seconds']):.1f} s</td></tr>"
                   for s in run_info["stages"])
    total = sum(float(s["seconds"]) for s in run_info["stages"])
    return (f"<table><thead><tr><th>stage</th><th>wall time</th></tr></thead><tbody>{rows}"
            f"<tr><td><b>total</b></td><td><b>{total:.1f} s</b></td></tr></tbody></table>")


def _setup(cfg: Any, run_info: Any, ev: Mapping[str, Any]) -> str:
    parts = []
    summary = run_info.get("summary", {}) if isinstance(run_info, dict) else {}
    store = summary.get("store") or (ev.get("input") or {})
    cl = store.get("cluster") or {}
    wl = summary.get("workload") or {}
    if wl.get("trace"):
        parts.append(f"Trace <code>{esc(os.path.basename(str(wl['trace'])))}</code>,"
                     " ingested with <code>rlsched ingest</code>; its logged starts are"
                     " the history imitated.")
    elif wl:
        parts.append(f"A seeded synthetic GPU workload of {_num(wl.get('jobs'))} jobs from"
                     f" {_num(wl.get('users'))} users over {_num(wl.get('span_days'), 1)} days"
                     f" (offered load {_pct(wl.get('offered_load'))}); its history under the"
                     " incumbent Slurm (multifactor priority, EASY backfill, topology/tree"
                     " placement) was written as a <code>sacct -P</code> dump and ingested"
                     " with <code>rlsched ingest sacct --file</code>.")
    if cl:
        parts.append(f"Cluster <b>{esc(cl.get('name'))}</b>: {esc(cl.get('nodes'))} nodes,"
                     f" {esc(cl.get('gpus'))} GPUs, {esc(cl.get('leaves'))} leaf switches.")
    split = ev.get("split") or {}
    if split.get("test"):
        parts.append(f"Jobs split by arrival: {esc(split['train']['jobs'])} train,"
                     f" {esc(split['val']['jobs'])} validate, {esc(split['test']['jobs'])}"
                     " test (the test period below: never seen in training; the jobs just"
                     " before it are replayed first so it starts on a loaded cluster).")
    parts.append(f"Speed model <code>{esc(ev.get('speed_model'))}</code>: "
                 + ("a job spread over servers and leaf switches runs slower."
                    if ev.get("speed_model") not in (None, "none") else
                    "run times as recorded."))
    teacher = summary.get("teacher") or {}
    if teacher.get("choice") not in (None, "history"):
        sc = teacher.get("bsld_mean") or {}
        parts.append(f"RL started from a net imitating <code>{esc(teacher['choice'])}</code>"
                     f" (<code>teacher</code>), the order with the lowest mean bounded"
                     f" slowdown over the jobs before the test period"
                     f" ({_num(sc.get(teacher['choice']))} against the incumbent Slurm's"
                     f" {_num(sc.get('slurm'))}), not from the net imitating the"
                     f" site's scheduler (<code>imitation</code>).")
    elif teacher:
        parts.append("RL started from the net imitating the site's scheduler"
                     + (" (no order beat the incumbent Slurm before the test period)."
                        if teacher.get("why") else "."))
    sel = summary.get("selection") or {}
    if sel.get("val_bsld_mean"):
        shown = ", ".join(f"{esc(k)} {float(v):.3f}" for k, v in sel["val_bsld_mean"].items())
        n_win = int(sel.get("windows") or 1)
        where = ("the validation period replayed in the simulator (" if n_win == 1 else
                 f"{n_win} validation windows replayed in the simulator, each on its own"
                 " (the validation period and the periods of as many jobs before it;"
                 " geometric means; ")
        parts.append(f"The deployed model (<code>policy</code>) is <b>{esc(sel.get('chosen'))}"
                     f"</b>, the checkpoint with the lowest mean bounded slowdown on"
                     f" {where}{shown}; slurm {_num(sel.get('slurm_val_bsld_mean'))}).")
    if isinstance(cfg, dict) and cfg.get("demo"):
        d = cfg["demo"]
        parts.append(f"Budget <code>{esc(d.get('budget'))}</code>, seed {esc(d.get('seed'))},"
                     f" RL algorithm <code>{esc(d.get('algo'))}</code>.")
    return "<p>" + " ".join(parts) + "</p>"


NEXT_STEPS = """
<p>The same pipeline on a real cluster (see the README and <code>docs/admin-guide.md</code>):</p>
<pre>rlsched db init
rlsched ingest sacct --since now-90d          # the site's own history
rlsched train all --cluster NAME --out run/   # imitation, then RL
rlsched export run/best.pt -o /etc/rlsched/model.onnx --db "$RLSCHED_DB" --cluster NAME
rlsched verify /etc/rlsched/model.onnx
rlsched helper run --mode shadow              # computes and logs, changes nothing
rlsched helper log --since now-1d             # what it would have done
# then mode = "enforce" in /etc/rlsched/helper.toml (contrib/rlsched-helper.service)</pre>
"""


# ---------------------------------------------------------------------------- build
def build_report(run_dir: str | os.PathLike[str], output: str | os.PathLike[str] | None = None
                 ) -> Path:
    """Write the self-contained HTML report of a run directory (module docstring).

    Args:
        run_dir: The run directory.
        output: The HTML file (default ``RUN_DIR/report.html``).

    Returns:
        The path written.

    Raises:
        FileNotFoundError: If the directory holds no ``eval.json`` (nothing to report).
    """
    run = Path(run_dir)
    ev_dir, ev = _find_eval(run)
    if ev_dir is None:
        raise FileNotFoundError(f"{run}: no eval/eval.json or eval.json (run rlsched demo or"
                                " rlsched evaluate --out DIR first)")
    cfg = _load_json(run / "config.json")
    run_info = _load_json(run / "run.json")
    card = _find_card(run)
    imit = next((r for r in (_load_json(run / p) for p in IMITATION_REPORTS)
                 if isinstance(r, dict)), None)
    plots = "".join(_figure(ev_dir / name, cap) for name, cap in PLOTS)
    training = "".join(_figure(next((run / r for r in rels if (run / r).is_file()),
                                    run / rels[0]), cap) for rels, cap in TRAINING_PLOTS)
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    models = ev.get("models") or []
    title = "rlsched: learned policy vs the incumbent Slurm"
    sections = [
        f"<h1>{esc(title)}</h1>",
        f"<p class='sub'>Run <code>{esc(run.resolve().name)}</code>, report built {esc(now)}."
        f" Policies: {esc(', '.join(models) or '(none)')}.</p>",
        _cards(ev, run_info),
        _setup(cfg, run_info, ev),
        "<h2>Test period: the learned policy against the baselines</h2>",
        "<p class='note'>Every row replays the same jobs on the same cluster with the same"
        " scheduler options and speed model; lower wait, slowdown and JCT are better."
        " Changes of the learned policies are relative to the incumbent Slurm (multifactor"
        " priority with EASY backfill, as configured). Utilisation: busy GPUs (nodes on a"
        " cluster without GPUs) from the first test arrival to the last end, so the"
        " drain of the last jobs counts too.</p>",
        _headline(ev),
        _targets(ev.get("targets")),
        _switch_on(run_info),
        _pairs(ev),
        _windows(ev),
        _draws(ev),
        _guard(run),
        "<h2>Waits, utilisation and fragmentation</h2>",
        plots or "<p class='note'>No plots in this run directory (matplotlib was not"
                 " installed when it ran).</p>",
    ]
    if training or imit:
        sections += ["<h2>Training</h2>", training, _imitation(imit)]
    sections += ["<h2>Model card</h2>", _model_card(card)]
    stages = _stages(run_info)
    if stages:
        sections += ["<h2>Run</h2>", stages]
    sections += ["<h2>Next: your own cluster</h2>", NEXT_STEPS]
    page = ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
            + "\n".join(s for s in sections if s) + "</main></body></html>\n")
    out = Path(output) if output is not None else run / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="HTML file to write (default RUN_DIR/report.html).")
def report(run_dir: str, output: str | None) -> None:
    """Build one self-contained HTML report of a run (rlsched demo or evaluate --out).

    The headline table (learned policy vs the Slurm baseline vs the heuristics on the
    test period), the quality targets, wait CDFs, utilisation and fragmentation over
    time, training curves, imitation agreement and the model card, with the PNGs
    embedded: one file to open or mail, no external resource.
    """
    try:
        path = build_report(run_dir, output)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {path}")
