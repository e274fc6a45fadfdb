"""trainer.report: one self-contained HTML page, checked in a real headless browser."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import subprocess

import pytest
from click.testing import CliRunner

from slurm_plugin import cli
from trainer.evaluate import EvalConfig, evaluate
from trainer.report import _dur, _num, _rel, build_report
from trainer.sim.policies import make_policy
from trainer.sim.state import Cluster, build_jobs
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
REQUIRED = os.environ.get("RLSCHED_REQUIRE_CLUSTER") == "1"

#: Model name with markup: it must come out escaped.
ODD = "sjf<b>&co"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    wc = WorkloadConfig(num_jobs=200, seed=1, mean_interarrival_s=60)
    spec = default_cluster(wc)
    cl = Cluster.from_spec(spec)
    jobs = build_jobs(replay_records(generate(wc), spec), cl)
    evaluate(jobs, cl, {ODD: make_policy("sjf"), "second": make_policy("fifo")},
             EvalConfig(baselines=("slurm", "fifo", "dsif"), draws=3),
             speed_model="locality", out=run / "eval")
    card = {"format": "rlsched-model-card/1", "sha256": "ab" * 32, "opset": 17,
            "schema_version": 1, "schema_hash": "cd" * 32, "inputs": ["jobs"],
            "outputs": ["job_logits"], "cluster": {"name": "demo", "nodes": 16, "gpus": 128,
                                                   "leaves": 4},
            "training": {"algorithm": "imitation + ppo"},
            "parity": {"cases": 1010, "atol": 1e-4, "max_diff": {"job_logits": 3e-6}},
            "created": "2024-01-01T00:00:00Z", "rlsched_version": "0.1"}
    (run / "model.onnx.card.json").write_text(json.dumps(card))
    (run / "imitation").mkdir()
    (run / "imitation" / "report.json").write_text(json.dumps({
        "splits": {"train": 70, "val": 10, "test": 20}, "best_epoch": 2, "prior_alone": True,
        "metrics": {"test": {"net": {"top1": 0.5, "top5": 0.9, "top1_nontrivial": 0.4,
                                     "decisions": 20.0},
                             "fifo": {"top1": 0.6, "top5": 0.95, "top1_nontrivial": 0.5,
                                      "decisions": 20.0},
                             "placement": {"decisions": 0.0}}}}))
    (run / "run.json").write_text(json.dumps({
        "stages": [{"name": "rl", "title": "reinforcement learning", "seconds": 12.5}],
        "total_s": 12.5, "summary": {}}))
    pngs = sorted((run / "eval").glob("*.png"))
    if pngs:  # a training plot, as the demo's rl stage writes one
        (run / "rl").mkdir()
        shutil.copy(pngs[0], run / "rl" / "curves.png")
    _guard_json(run, pngs[0] if pngs else None)
    build_report(run)
    return run


def _guard_json(run, png):
    """A tune-guard result as ``rlsched tune-guard --out run/guard`` writes it."""
    from trainer.guard import GuardSetting, GuardSweep, choose

    day = 86400.0
    rows = [{"setting": GuardSetting(0.0), "bsld_mean": 5.0, "wait_p99": 2 * day,
             "wait_max": 9 * day, "util": 0.8, "p99_ok": False, "util_ok": False,
             "bsld_vs_slurm": 0.25},
            {"setting": GuardSetting(2 * day, "policy"), "bsld_mean": 10.0,
             "wait_p99": day, "wait_max": 4 * day, "util": 0.9, "p99_ok": True,
             "util_ok": True, "bsld_vs_slurm": 0.5}]
    g = GuardSweep((100, 150), {"bsld_mean": 20.0, "wait_p99": 1.5 * day,
                                "wait_max": 3 * day, "util": 0.85}, rows, 0.1)
    g.choice = choose(rows)
    (run / "guard").mkdir()
    (run / "guard" / "guard.json").write_text(json.dumps(g.to_dict()))
    if png is not None:
        shutil.copy(png, run / "guard" / "guard.png")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def test_report_is_self_contained(run_dir):
    page = (run_dir / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "<link" not in page and "@import" not in page
    for attr in re.findall(r'(?:src|href)="([^"]*)"', page):
        assert attr.startswith("data:image/png;base64,"), attr[:60]
    assert not re.search(r"url\(", page)
    imgs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    n_png = (len(list((run_dir / "eval").glob("*.png"))) + (run_dir / "rl" / "curves.png").exists()
             + (run_dir / "guard" / "guard.png").exists())
    assert len(imgs) == n_png
    for b64 in imgs:
        w, h = _png_size(base64.b64decode(b64))
        assert w > 100 and h > 100


def test_report_content(run_dir):
    page = (run_dir / "report.html").read_text()
    ev = json.loads((run_dir / "eval" / "eval.json").read_text())
    assert ODD not in page and "sjf&lt;b&gt;&amp;co" in page  # escaped
    for name in ("fifo", "dsif"):
        assert f"<td>{name}</td>" in page
    assert "slurm (incumbent" in page
    assert "Quality targets" in page
    assert "As replayed: sjf&lt;b&gt;&amp;co without a starvation guard." in page
    assert "consecutive windows of the test period" in page and "95% interval" in page
    assert "<th>from day</th>" in page
    assert "<th>longest wait</th>" in page  # the headline table's column, vs Slurm's
    longest = ev["metrics"][ODD]["wait_s"]["max"]
    slurm_longest = ev["metrics"]["slurm"]["wait_s"]["max"]
    assert longest >= ev["metrics"][ODD]["wait_s"]["p99"] and slurm_longest > 0
    assert f"<td>{_dur(longest)}{_rel(longest, slurm_longest)}</td>" in page
    assert "Models against sjf&lt;b&gt;&amp;co" in page and "second vs sjf&lt;b" in page
    first = ev["windows"]["bsld"]["slurm"][0]  # the Slurm baseline's first window
    assert f"<td>{_num(float(first))}</td>" in page
    for c in ev["targets"]["checks"]:
        assert c["name"] in page
    assert "imitation + ppo" in page and "ab" * 32 in page  # the model card
    assert "50.0%" in page  # imitation top-1 of the net
    assert "by its fitted prior alone (<code>est_prior</code>)" in page
    assert "reinforcement learning" in page and "12.5 s" in page
    # the guard chosen on the validation period (rlsched tune-guard --out run/guard)
    assert "Starvation guard, chosen on the validation period" in page
    assert "jobs 100 to 149" in page and "2d policy (chosen)" in page
    assert "<td class='worse'>2.00 d</td>" in page  # the unguarded p99 over the bound
    assert "<td>1.00 d</td>" in page and "starvation_limit = 172800 s" in page
    # the test period in draws of its timing (evaluate --draws 3)
    d = ev["draws"]
    assert "The test period in 3 draws of its timing" in page
    assert "moved by up to 60.0 s" in page
    bsld = d["figures"]["slurm"]["bsld"]
    assert (f"<td>{_num(float(bsld[0]))}</td><td>{_num(sum(bsld) / 3)}</td>"
            f"<td>{_num(float(min(bsld)))} to {_num(float(max(bsld)))}</td>") in page
    assert f"<td>{ODD}</td>" not in page and "<td>sjf&lt;b&gt;&amp;co</td>" in page
    assert f"<td>{d['passes'][ODD]['all']} of 3</td>" in page
    assert "The lines of sjf&lt;b&gt;&amp;co on the mean figures over the draws" in page
    sec = page.split("draws of its timing")[1]  # models first, in evaluate's order
    assert sec.index("<td>sjf&lt;b&gt;&amp;co</td>") < sec.index("<td>second</td>") < (
        sec.index("<td>slurm</td>"))
    assert sec.index("<th>bsld_vs_slurm</th>") < sec.index("<th>utilisation</th>")


def test_report_says_when_the_guard_was_judged_on_several_periods(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    g = json.loads((run / "guard" / "guard.json").read_text())
    g["period"]["windows"] = [[50, 100], [100, 150]]  # (tune-guard --windows 2)
    g["util_slack"] = 0.002  # (--util-slack 0.002)
    (run / "guard" / "guard.json").write_text(json.dumps(g))
    page = build_report(run).read_text()
    assert ("replayed 2 periods of 50 jobs, jobs 50 to 149 (the last the validation"
            " period; never the test period), each on its own") in page
    assert "jobs 100 to 149 (the validation period" not in page
    assert "or a utilisation below Slurm's by more than 0.20%." in page
    assert "by more than" not in build_report(run_dir).read_text()  # (no slack)
    assert "(trained behind)" not in page
    limit, order = g["rows"][1]["setting"]["limit"], g["rows"][1]["setting"]["order"]
    g["trained_behind"] = {"limit": limit, "order": order, "label": "x"}  # (an RL net's)
    (run / "guard" / "guard.json").write_text(json.dumps(g))
    page = build_report(run).read_text()
    assert page.count("(trained behind)") == 1
    assert f"{g['rows'][1]['setting']['label']}" in page.split("(trained behind)")[0][-80:]


def test_report_says_which_net_rl_started_from(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    assert "RL started from" not in build_report(run).read_text()  # (not a demo's run)
    info = json.loads((run / "run.json").read_text())
    info["summary"]["teacher"] = {"choice": "sef<i>", "bsld_mean": {"sef<i>": 1.8,
                                                                    "slurm": 4.0}}
    (run / "run.json").write_text(json.dumps(info))
    page = build_report(run).read_text()
    assert ("RL started from a net imitating <code>sef&lt;i&gt;</code> (<code>teacher</code>),"
            " the order with the lowest mean bounded slowdown over the jobs before the test"
            " period (1.800 against the incumbent Slurm's 4.000)") in page
    info["summary"]["teacher"] = {"choice": "history", "bsld_mean": {"slurm": 1.0},
                                  "why": "no order beat the incumbent's"}
    (run / "run.json").write_text(json.dumps(info))
    page = build_report(run).read_text()
    assert ("RL started from the net imitating the site's scheduler (no order beat the"
            " incumbent Slurm before the test period).") in page


def test_report_command_and_missing_eval(run_dir, tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli.main, ["report", str(run_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote {out}" in res.output
    strip = re.compile(r"report built [^.]*\.")  # the only part that changes
    assert strip.sub("", out.read_text()) == strip.sub("", (run_dir / "report.html").read_text())
    res = CliRunner().invoke(cli.main, ["report", str(tmp_path)])
    assert res.exit_code != 0 and "no eval/eval.json" in res.output
    assert cli.COMMANDS["report"].extra is None  # runtime install suffices


# ---------------------------------------------------------------------------- browser
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not REQUIRED,
    reason="chromium not installed (apt-get install chromium; contrib/run-tests installs it)")

#: Injected into a copy of the page: the browser writes each image's decoded width.
PROBE = ("<script>window.addEventListener('load',()=>{for(const i of document.images)"
         "i.setAttribute('data-nw',String(i.naturalWidth));"
         "document.body.setAttribute('data-loaded','1')});</script>")


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None, "chromium is required (RLSCHED_REQUIRE_CLUSTER=1)"
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--hide-scrollbars", "--enable-logging=stderr",
                           "--v=0", *args], capture_output=True, text=True, timeout=120)


@needs_chromium
def test_report_renders_in_chromium(run_dir, tmp_path):
    page = (run_dir / "report.html").read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))
    res = _chromium("--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    assert 'data-loaded="1"' in dom, "the load event never fired"
    widths = re.findall(r'data-nw="(\d+)"', dom)
    assert len(widths) == page.count("<img ") > 0
    assert all(int(w) > 100 for w in widths), widths  # every image decoded
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    assert "Quality targets" in dom

    shot = tmp_path / "shot.png"
    res = _chromium("--window-size=1280,2400", f"--screenshot={shot}",
                    (run_dir / "report.html").as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    assert _png_size(shot.read_bytes()) == (1280, 2400)
    assert shot.stat().st_size > 50_000  # text, tables and plots, not a blank page
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console


def test_imitation_section_names_the_prior_the_net_orders_by():
    from trainer.report import _imitation

    rep = {"prior_alone": True, "metrics": {"test": {
        "net": {"top1": 0.9, "top5": 0.98, "top1_nontrivial": 0.8, "decisions": 10.0},
        "fifo": {"top1": 0.7, "top5": 0.9, "top1_nontrivial": 0.6, "decisions": 10.0},
        "placement": {"decisions": 0.0}}}}
    assert "alone (<code>est_prior</code>)" in _imitation(rep)
    assert "alone (<code>area_prior</code>)" in _imitation({**rep, "area_prior": 0.79})
    assert "alone (<code>amount_prior</code>)" in _imitation({**rep, "amount_prior": 20.0})
    assert "alone" not in _imitation({**rep, "prior_alone": False})


def test_imitation_section_shows_the_easy_backfill_reference():
    from trainer.report import _imitation

    row = {"top1_nontrivial": 0.5, "decisions": 10.0}
    rep = {"metrics": {"test": {
        "net": {"top1": 0.4, "top5": 0.7, **row}, "fifo": {"top1": 0.6, "top5": 0.9, **row},
        "fifo_backfill": {"top1": 0.997, "top5": 1.0, **row},
        "placement": {"decisions": 0.0}}}}
    html = _imitation(rep)
    assert "<td>FIFO with EASY backfill (reference)</td><td>99.7%</td>" in html
    assert "without delaying the oldest job that cannot start" in html
    # an imitation report written before the reference existed has neither
    del rep["metrics"]["test"]["fifo_backfill"]
    assert "EASY" not in _imitation(rep)

