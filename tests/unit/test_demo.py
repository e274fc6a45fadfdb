"""``rlsched demo``: a tiny run end to end (store, imitation, RL, export, verify, report)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("gymnasium")

from slurm_plugin import cli  # noqa: E402
from slurm_plugin.slurm.parse import parse_sacct_parsable  # noqa: E402
from trainer.demo import (  # noqa: E402
    ARTIFACTS,
    BUDGETS,
    STAGES,
    DemoConfig,
    _prepare_out,
    resolve_budget,
    warm_teacher,
)
from trainer.guard import grid  # noqa: E402
from trainer.sim.policies import BASELINES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
THETA = TRACES / "theta.swf"


def _demo(*args: str):
    res = CliRunner().invoke(cli.main, ["demo", *args])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    res = _demo("--jobs", "200", "--budget", "tiny", "--out", str(out), "--seed", "5")
    return out, res.output


def test_layout_and_final_table(tiny):
    out, output = tiny
    for a in ARTIFACTS:
        assert (out / a).exists(), a
    for f in ("history/sacct.txt", "history/cluster.json", "history/workload.json",
              "history/ingest.txt", "imitation/imitation.pt", "imitation/report.json",
              "rl/best.pt", "rl/last.pt", "rl/curves.json", "eval/eval.json"):
        assert (out / f).is_file(), f
    run = json.loads((out / "run.json").read_text())
    assert [s["name"] for s in run["stages"]] == [n for n, _ in STAGES]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["demo"]["jobs"] == 200 and cfg["budget"] == BUDGETS["tiny"].to_dict()
    assert cfg["speed_model"] == "locality"
    # the final table: the model, the imitation net and every baseline
    lines = [ln.split()[0] for ln in output.splitlines() if ln.strip()]
    for name in ["policy", "imitation", *BASELINES]:
        assert name in lines
    assert "quality targets of policy" in output
    assert "from the queue the incumbent Slurm left at the test period's start" in output
    assert f"open {out / 'report.html'}" in output


def test_history_went_through_sacct_and_the_store(tiny):
    from db.store import Store

    out, _ = tiny
    dump = (out / "history" / "sacct.txt").read_text()
    recs = parse_sacct_parsable(dump)
    assert len(recs) == 200
    assert all(r.start_time is not None and r.nodes for r in recs)
    with Store.open(str(out / "store.db")) as store:
        cid = store.cluster_id("demo")
        stored = sorted(store.jobs(cid), key=lambda r: r.job_id)
        spec = store.cluster_spec("demo")
    assert len(stored) == 200
    by_id = {r.job_id: r for r in recs}
    for r in stored:  # what the store holds is what the dump said
        d = by_id[r.job_id]
        assert (r.submit_time, r.start_time, r.end_time, r.nodes) == (
            d.submit_time, d.start_time, d.end_time, d.nodes)
    assert spec is not None and spec.num_nodes == 16 and spec.total_gpus == 128
    assert len(spec.switches.leaves) == 4
    assert "inserted 200" in (out / "history" / "ingest.txt").read_text()


def test_model_is_exported_verified_and_evaluated(tiny):
    import hashlib

    out, _ = tiny
    card = json.loads((out / "model.onnx.card.json").read_text())
    assert card["sha256"] == hashlib.sha256((out / "model.onnx").read_bytes()).hexdigest()
    assert card["cluster"]["name"] == "demo" and card["cluster"]["leaves"] == 4
    run = json.loads((out / "run.json").read_text())
    warm = run["summary"]["teacher"]["choice"]
    start = "imitation" if warm == "history" else f"imitation of {warm}"
    assert card["training"]["algorithm"] in (start, f"{start} + ppo", "imitation")
    ev = card["evaluation"]
    assert ev["period"] == "test" and ev["rows"][0][0] == "policy"
    assert "OK: the helper may use this model" in (out / "verify.txt").read_text()
    from slurm_plugin.model import load_model

    assert load_model(out / "model.onnx").sha256 == card["sha256"]  # the helper's checks
    data = json.loads((out / "eval" / "eval.json").read_text())
    assert data["models"] == ["policy", "imitation"] + (["teacher"] if warm != "history" else [])
    assert data["split"]["test"]["jobs"] == 40  # the last 20% of 200
    sel = run["summary"]["selection"]
    assert sel["chosen"] in sel["val_bsld_mean"]
    assert sel["val_bsld_mean"][sel["chosen"]] == min(sel["val_bsld_mean"].values())
    # chosen on the guard's four windows, each replayed on its own: geometric means
    assert sel["windows"] == 4 and set(sel["per_window"]) == {*sel["val_bsld_mean"], "slurm"}
    for name, figs in sel["per_window"].items():
        assert len(figs) == 4
        want = sel["val_bsld_mean"].get(name, sel["slurm_val_bsld_mean"])
        assert want == pytest.approx(float(np.prod(figs)) ** 0.25, rel=1e-12)
    # the guard chosen on the validation period is the one the model is evaluated behind
    g = json.loads((out / "guard" / "guard.json").read_text())
    assert g["period"]["kind"] == "validation" and g["period"]["jobs"] == [140, 160]
    # judged as tune-guard judges by default: the validation period and 3 before it
    assert g["period"]["windows"] == [[80, 100], [100, 120], [120, 140], [140, 160]]
    assert g["util_slack"] == 0.002  # (as tune-guard chooses by default)
    assert run["summary"]["guard"]["windows"] == 4
    assert len(g["rows"]) == 1 + len(grid()) and g["rows"][0]["setting"]["label"] == "none"
    chosen = g["rows"][g["choice"]["row"]]["setting"]
    assert run["summary"]["guard"]["starvation_limit"] == chosen["limit"] > 0
    assert data["targets"]["starvation_limit"] == chosen["limit"]
    assert data["targets"]["starvation_order"] == chosen["order"]
    # again from the queue Slurm left: every job before the test period under Slurm
    on = run["summary"]["evaluation"]["switch_on"]
    assert on["warmup_jobs"] == 160 and set(on["bsld_mean"]) == {"policy", "slurm"}
    assert [c["name"] for c in on["targets"]["checks"]] == [
        "bsld_vs_slurm", "p99_wait", "utilisation"]
    assert "every run took over from the slurm baseline's queue" in on["targets"]["setup"]
    assert on["targets"]["starvation_limit"] == chosen["limit"]


def test_rl_starts_from_the_best_order_before_the_test_period(tiny):
    from trainer.policy import PLACE_TRAINED, load_checkpoint

    out, output = tiny
    run = json.loads((out / "run.json").read_text())
    t = run["summary"]["teacher"]
    scores = t["bsld_mean"]
    assert "slurm" in scores and all(not BASELINES[n].oracle for n in scores)
    assert t["choice"] == (warm_teacher(scores) or "history")
    assert t["choice"] != "history", "seed 5's history has an order better than its Slurm"
    assert scores[t["choice"]] < scores["slurm"]
    assert f"RL starts from a net imitating {t['choice']}" in output
    teacher = load_checkpoint(out / "imitation" / "teacher.pt")
    assert teacher.extra["training"]["algorithm"] == f"imitation of {t['choice']}"
    assert teacher.extra["imitation"]["config"]["teacher"] == t["choice"]
    rl = load_checkpoint(out / "rl" / "best.pt")
    assert rl.extra["training"]["algorithm"] == f"imitation of {t['choice']} + ppo"
    assert rl.extra[PLACE_TRAINED] == teacher.extra[PLACE_TRAINED]  # the head it started from
    sel = run["summary"]["selection"]["val_bsld_mean"]
    assert set(sel) == {"imitation", "teacher", "rl-best", "rl-last"}


def test_warm_teacher_by_hand():
    assert warm_teacher({"slurm": 4.0, "fifo": 4.0, "sef": 1.8, "sjf": 1.8}) == "sef"
    assert warm_teacher({"slurm": 4.0, "fifo": 4.0}) is None  # a tie is no better
    assert warm_teacher({"slurm": 1.3, "sef": 1.4}) is None
    # a light history: every order about 1, none clearly better than the incumbent's
    assert warm_teacher({"slurm": 1.0001, "gandiva": 1.0, "sef": 1.00005}) is None
    assert warm_teacher({"slurm": 2.0, "sef": 1.985}) is None  # within 1%
    assert warm_teacher({"slurm": 2.0, "sef": 1.975}) == "sef"
    assert warm_teacher({"slurm": 2.0, "sef": 1.985}, margin=0.0) == "sef"
    assert warm_teacher({"fifo": 2.0, "sjf": 1.0}, incumbent="fifo") == "sjf"


def test_history_teacher_keeps_the_incumbents_copy(tmp_path):
    out = tmp_path / "hist"
    res = _demo("--jobs", "200", "--budget", "tiny", "--out", str(out), "--seed", "5",
                "--teacher", "history", "--select-windows", "1")
    run = json.loads((out / "run.json").read_text())
    assert run["summary"]["teacher"] == {"choice": "history"}
    one = run["summary"]["selection"]  # the validation period alone
    assert one["windows"] == 1 and all(len(v) == 1 for v in one["per_window"].values())
    assert one["val_bsld_mean"] == {n: v[0] for n, v in one["per_window"].items()
                                    if n != "slurm"}
    assert "mean bsld on the validation period (20 jobs, slurm" in res.output
    assert not (out / "imitation" / "teacher.pt").exists()
    assert "RL starts from the net imitating the site's scheduler" in res.output
    assert json.loads((out / "eval" / "eval.json").read_text())["models"] == [
        "policy", "imitation"]
    assert set(run["summary"]["selection"]["val_bsld_mean"]) == {
        "imitation", "rl-best", "rl-last"}


def test_report_is_written(tiny):
    out, _ = tiny
    page = (out / "report.html").read_text()
    assert page.count("<img ") >= 4  # eval plots, RL and imitation curves
    assert "Model card" in page and "Quality targets (policy)" in page
    assert "Starvation guard, chosen on the validation period" in page
    assert "From the queue Slurm left: the day the helper is switched on" in page


def test_same_seed_same_run(tiny, tmp_path):
    out, _ = tiny
    again = tmp_path / "again"
    _demo("--jobs", "200", "--budget", "tiny", "--out", str(again), "--seed", "5")
    a = json.loads((out / "eval" / "eval.json").read_text())["metrics"]
    b = json.loads((again / "eval" / "eval.json").read_text())["metrics"]
    for m in (*a.values(), *b.values()):
        m.pop("sim")
    assert a == b
    assert (out / "history" / "sacct.txt").read_text() == (
        again / "history" / "sacct.txt").read_text()


def test_an_earlier_run_is_kept_unless_forced(tmp_path):
    import click

    out = tmp_path / "run"
    (out / "eval").mkdir(parents=True)
    (out / "report.html").write_text("old")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(click.UsageError, match="--force"):
        _prepare_out(DemoConfig(out=str(out)))
    _prepare_out(DemoConfig(out=str(out), force=True))
    assert not (out / "report.html").exists() and not (out / "eval").exists()
    assert (out / "notes.txt").read_text() == "mine"  # never touches other files


def test_budgets():
    assert resolve_budget("tiny") == BUDGETS["tiny"]
    assert resolve_budget("Small") == BUDGETS["small"]
    assert resolve_budget("50000").rl_steps == 50_000
    assert resolve_budget("50k").rl_steps == 50_000
    assert resolve_budget("50k").imitation_epochs == BUDGETS["small"].imitation_epochs
    for bad in ("huge", "0", "-5", "k"):
        with pytest.raises(ValueError, match="budget"):
            resolve_budget(bad)
    with pytest.raises(ValueError, match="budget"):
        DemoConfig(budget="huge")
    with pytest.raises(ValueError, match="jobs"):
        DemoConfig(jobs=10)


def test_bad_options_are_usage_errors(tmp_path):
    res = CliRunner().invoke(cli.main, ["demo", "--budget", "huge", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "unknown budget" in res.output
    res = CliRunner().invoke(cli.main, ["demo", "--teacher", "oracle", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "unknown teacher 'oracle'" in res.output


@pytest.mark.skipif(not THETA.is_file(), reason=f"{THETA} not found (set $RLSCHED_TRACES)")
def test_trace_runs_the_same_pipeline(tmp_path):
    out = tmp_path / "theta"
    res = _demo("--trace", str(THETA), "--jobs", "300", "--budget", "tiny", "--out", str(out))
    assert not (out / "history" / "sacct.txt").exists()  # no simulated history
    assert "rlsched ingest swf" in (out / "history" / "ingest.txt").read_text()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speed_model"] == "none" and cfg["cluster_name"] == "theta"
    run = json.loads((out / "run.json").read_text())
    assert [s["name"] for s in run["stages"]] == [
        n for n, _ in STAGES if n not in ("workload", "history")]
    assert run["summary"]["store"]["replayed"] == 300
    assert (out / "report.html").is_file() and "theta" in res.output
