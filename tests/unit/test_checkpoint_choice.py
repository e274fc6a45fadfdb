"""benchmarks/checkpoint_choice.py: the rank correlation, and a real run's checkpoints replayed."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from .benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
LUBLIN = TRACES / "lublin_256.swf"


def _module():
    return load_benchmark("checkpoint_choice")


def test_spearman_reads_ranks_with_ties_sharing_their_mean():
    cc = _module()
    assert cc.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert cc.spearman([1, 2, 3, 4], [9, 3, 2, 1]) == pytest.approx(-1.0)
    assert cc.spearman([1, 2, 3, 4], [1, 100, 2, 3]) == pytest.approx(0.4)  # ranks only
    # ties: x ranks (0, 1.5, 1.5, 3) against y (0, 1, 2, 3)
    assert cc.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833, abs=1e-6)
    assert math.isnan(cc.spearman([1, 2], [2, 1]))  # too few pairs
    assert math.isnan(cc.spearman([1, 1, 1], [1, 2, 3]))  # one rank: no order
    with pytest.raises(ValueError):
        cc.spearman([1, 2, 3], [1, 2])


def test_the_rules_choose_as_their_names_say():
    cc = _module()

    def pt(update, bsld, p99, kept, test_bsld, passes=False):
        val = {"bsld_mean": bsld, "wait_p99": p99,
               **dict(zip(("p99_ok", "bsld_ok", "util_ok"), map(float, kept), strict=True))}
        return cc.Point(update, Path(f"u{update}.pt"), val, {"bsld_mean": test_bsld},
                        {"bsld_vs_slurm": passes})

    pts = [pt(0, 300.0, 9000.0, (1, 1, 1), 290.0),
           pt(5, 250.0, 7000.0, (1, 1, 0), 240.0),   # lowest p99 and bsld, loses utilisation
           pt(10, 260.0, 8000.0, (1, 1, 1), 230.0, passes=True),
           pt(15, 260.0, 8000.0, (1, 1, 1), 235.0),  # ties u10 on validation: the earlier wins
           pt(20, 400.0, 9500.0, (0, 1, 1), 220.0)]
    run = cc.Run(Path("r"), {}, {}, pts, 10, {})
    got = {rule: (None if q is None else q.update) for rule, q in cc.choices(run).items()}
    assert got == {"the run's choice (best.pt)": 10,
                   "lowest validation bsld": 5,
                   "bounds kept, then lowest validation bsld": 10,
                   "lowest validation p99 wait": 5,
                   "bounds kept, then lowest validation p99 wait": 10,
                   "lowest test bsld (hindsight)": 20,
                   "lowest test bsld passing every line (hindsight)": 10}
    pts[0].val["wait_p99"] = 7500.0  # keeps every bound and now the lowest p99 among them
    got = cc.choices(run)
    assert got["bounds kept, then lowest validation p99 wait"].update == 0
    assert got["bounds kept, then lowest validation bsld"].update == 10


def test_the_window_rules_read_every_window():
    cc = _module()

    def pt(update, windows):
        return cc.Point(update, Path(f"u{update}.pt"), {"bsld_mean": 1.0, "wait_p99": 1.0},
                        {"bsld_mean": 1.0},
                        windows=[{"bsld_mean": b, "p99_ok": float(p), "bsld_ok": 1.0,
                                  "util_ok": float(u)} for b, p, u in windows])

    pts = [pt(0, [(100.0, 1, 1), (100.0, 1, 1)]),   # geometric mean 100, every bound
           pt(5, [(10.0, 1, 0), (400.0, 1, 0)]),    # 63.2: the lowest, no utilisation
           pt(10, [(50.0, 0, 1), (150.0, 1, 1)]),   # 86.6, p99 lost once
           pt(15, [(40.0, 1, 1), (160.0, 1, 0)])]   # 80.0
    got = {rule: q.update for rule, q in cc.choices(cc.Run(Path("r"), {}, {}, pts, 0, {})).items()
           if q is not None and rule.startswith("2 windows")}
    assert got == {"2 windows: lowest geometric-mean bsld": 5,
                   "2 windows: most bounds kept (p99, bsld, util), then lowest geometric mean": 0,
                   "2 windows: utilisation kept in most, then lowest geometric mean": 10}
    pts[3].windows[1]["util_ok"] = 1.0  # keeps every bound now, and a lower mean than u0
    got = cc.choices(cc.Run(Path("r"), {}, {}, pts, 0, {}))
    assert got["2 windows: most bounds kept (p99, bsld, util), then lowest geometric mean"
               ].update == 15
    from trainer.guard import _geo  # the mean the rules read (the demo's select stage's)

    assert _geo([10.0, 1000.0]) == pytest.approx(100.0)
    assert not any("best heuristic" in rule for rule in got)  # no heuristic replayed


def test_the_best_heuristic_rules_read_its_bsld_and_its_own_utilisation():
    cc = _module()
    slurm = {"bsld_mean": 300.0, "wait_p99": 1000.0, "util": 0.95}
    base = {"slurm": slurm, "lrf": {"bsld_mean": 150.0, "wait_p99": 900.0, "util": 0.90},
            "sef": {"bsld_mean": 160.0, "wait_p99": 800.0, "util": 0.93}}
    assert cc.best_heuristic(base) == "lrf"  # the lowest bsld, whatever its utilisation
    assert cc.best_heuristic({"slurm": slurm}) is None
    tie = {"slurm": slurm, "sef": base["lrf"], "lrf": base["lrf"]}
    assert cc.best_heuristic(tie) == "lrf"  # a tie by name, as check_targets breaks it
    kept = cc._kept_against({"bsld_mean": 140.0, "wait_p99": 1050.0, "util": 0.91}, base)
    # Slurm's utilisation (0.95) is lost, lrf's own (0.90) kept; bsld below lrf's
    assert kept == {"p99_ok": 1.0, "bsld_ok": 1.0, "util_ok": 0.0, "best_ok": 1.0,
                    "best_util_ok": 1.0}
    kept = cc._kept_against({"bsld_mean": 150.0, "wait_p99": 1200.0, "util": 0.8999}, base)
    assert kept == {"p99_ok": 0.0, "bsld_ok": 1.0, "util_ok": 0.0, "best_ok": 0.0,
                    "best_util_ok": 0.0}  # a tie with the heuristic is not below it
    assert set(cc._kept_against({"bsld_mean": 1.0, "wait_p99": 1.0, "util": 1.0},
                                {"slurm": slurm})) == {"p99_ok", "bsld_ok", "util_ok"}

    def pt(update, windows):
        return cc.Point(update, Path(f"u{update}.pt"), {"bsld_mean": 1.0, "wait_p99": 1.0},
                        {"bsld_mean": 1.0},
                        windows=[{"bsld_mean": b, "p99_ok": float(p), "bsld_ok": 1.0,
                                  "util_ok": 0.0, "best_ok": float(h),
                                  "best_util_ok": float(u)} for b, p, h, u in windows])

    pts = [pt(0, [(100.0, 1, 1, 1), (100.0, 1, 1, 1)]),  # every line, mean 100
           pt(5, [(10.0, 1, 1, 0), (400.0, 1, 1, 0)]),   # 63.2, the heuristic's util lost
           pt(10, [(50.0, 1, 1, 1), (150.0, 1, 0, 1)]),  # 86.6, above it once
           pt(15, [(40.0, 0, 1, 1), (160.0, 1, 1, 1)])]  # 80.0, p99 lost once
    got = {rule: q.update for rule, q in cc.choices(cc.Run(Path("r"), {}, {}, pts, 0, {})).items()
           if q is not None and "best heuristic" in rule}
    assert got == {
        "2 windows: the best heuristic's lines kept in most (p99 within 10% of Slurm's, bsld"
        " below it, utilisation not below its own), then lowest geometric mean": 0,
        "2 windows: utilisation not below the best heuristic's in most, then lowest geometric"
        " mean": 15}


def test_the_replays_read_the_runs_own_history_and_backfill_plan(tmp_path):
    cc = _module()
    trace = tmp_path / "t.swf"
    trace.write_text("")

    def run(**command):
        return cc.Run(tmp_path, {"trace": str(trace), "limit": 400, "seed": 7, "out": "x",
                                 **command}, {"speed_model": "locality"}, [], None, {})

    sim = cc.sim_config(run(bf_plan="conservative"))
    assert (sim.trace, sim.limit, sim.bf_plan) == (str(trace), 400, "conservative")
    assert sim.speed_model == "locality" and sim.seed == 0  # RL's seed is not the replay's
    assert cc.sim_config(run(bf_plan="conservative"), bf_plan="easy").bf_plan == "easy"
    assert cc.sim_config(run()).bf_plan is None  # a run from before --bf-plan: the default
    moved = tmp_path / "moved.swf"
    moved.write_text("")
    assert cc.sim_config(run(), trace=str(moved)).trace == str(moved)
    with pytest.raises(SystemExit, match="give --trace FILE"):
        cc.sim_config(run(), trace=str(tmp_path / "gone.swf"))


def test_a_folder_that_is_no_run_says_what_to_give(tmp_path):
    cc = _module()
    with pytest.raises(SystemExit, match="no config.json; give the --out folder"):
        cc.read_run(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "curves.json").write_text(json.dumps({"val": [{"update": 0}]}))
    with pytest.raises(SystemExit, match="train with --keep-checkpoints"):
        cc.read_run(tmp_path)


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found")
def test_every_kept_checkpoint_is_replayed_as_evaluate_replays_it(tmp_path, capsys):
    from click.testing import CliRunner

    from slurm_plugin.cli import main as cli
    from trainer.cli import _prepare, resolve
    from trainer.evaluate import EvalConfig, evaluate

    cc = _module()
    run = tmp_path / "run"
    res = CliRunner().invoke(cli, [
        "train", "rl", "--trace", str(LUBLIN), "--limit", "400", "--out", str(run),
        "--hidden", "8", "--episode-jobs", "40", "--val-jobs", "30", "--max-jobs", "16",
        "--budget", "2u", "--eval-every", "1", "--algo-opt", "episodes=2",
        "--val-deployed", "--val-bounds", "--keep-checkpoints", "--starvation-limit",
        "86400", "--starvation-order", "policy", "--no-progress", "--ensemble", "2"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    out_json = tmp_path / "choice.json"
    assert cc.main([str(run), str(run), "--heuristics", "spf", "--json", str(out_json),
                    "--val-windows", "2", "--ensembles", "2"]) == 0
    text = capsys.readouterr().out
    assert "rank correlation of validation bsld with test bsld:" in text
    assert "behind 1 d policy" in text  # the run's own guard
    assert "all runs:" in text  # two runs given (the same one twice)
    assert "each rule over all runs" in text and "2 windows: lowest geometric-mean" in text
    summary = json.loads(out_json.read_text())
    assert len(summary) == 2 and summary[0]["points"] == summary[1]["points"]  # replays repeat
    s = summary[0]
    assert [p["update"] for p in s["points"]] == [0, 1, 2]
    curves = json.loads((run / "curves.json").read_text())
    assert s["choices"]["the run's choice (best.pt)"] == curves["best"]["update"]
    # the run validated with --val-bounds and the default metric: the offline rule agrees
    assert s["choices"]["bounds kept, then lowest validation bsld"] == curves["best"]["update"]
    for p, v in zip(s["points"], curves["val"], strict=True):  # validation as the run read it
        assert p["val"]["bsld_mean"] == pytest.approx(v["bsld_mean"])
    # each checkpoint's test figures are rlsched evaluate's for it, behind the same guard
    last = run / "checkpoints" / "update-00002.pt"

    def test_period(prep):  # the last checkpoint on the test period, behind the run's guard
        return evaluate(prep.jobs, prep.cluster, {"net": str(last)},
                        EvalConfig(baselines=("slurm", "spf"), resamples=0, windows=1,
                                   guard_heuristics=True, starvation_limit=86400,
                                   starvation_order="policy"),
                        options=prep.options, priority=prep.priority)

    prep = _prepare(resolve(trace=str(LUBLIN), limit=400))
    ev = test_period(prep)
    assert s["points"][2]["test"]["bsld_mean"] == pytest.approx(
        float(ev.metrics["net"]["bsld"]["mean"]))
    assert s["slurm_test"]["bsld_mean"] == pytest.approx(float(ev.metrics["slurm"]["bsld"]["mean"]))
    # and its share idle while jobs waited, evaluate's reading beside the utilisation line
    assert s["points"][2]["test"]["idle_waiting"] == pytest.approx(
        float(ev.metrics["net"]["utilisation"]["idle_waiting"]["nodes"]))
    assert "idle waiting" in text
    # the ensemble is train rl --ensemble 2's, replayed as evaluate replays that file
    assert s["ensembles"]["2"]["members"] == json.loads(
        (run / "summary.json").read_text())["ensemble"]
    ens = evaluate(prep.jobs, prep.cluster, {"net": str(run / "ensemble.pt")},
                   EvalConfig(baselines=("slurm", "spf"), resamples=0, windows=1,
                              guard_heuristics=True, starvation_limit=86400,
                              starvation_order="policy"),
                   options=prep.options, priority=prep.priority)
    assert s["ensembles"]["2"]["test"]["bsld_mean"] == pytest.approx(
        float(ens.metrics["net"]["bsld"]["mean"]))
    assert "ensemble of the 2 best validated (train rl --ensemble 2)" in text
    assert "ensemble of the 2 best validated" in text.split("each rule over all runs")[1]
    lowest = min(s["points"], key=lambda p: (p["test"]["bsld_mean"], p["update"]))
    assert s["choices"]["lowest test bsld (hindsight)"] == lowest["update"]
    passing = [p["update"] for p in s["points"] if all(v is not False for v in p["lines"].values())]
    assert s["passing"] == passing
    # each checkpoint's figures on the validation windows are evaluate's on that period,
    # replayed on its own after as long a warm-up, behind the run's guard
    from trainer.evaluate import Split, time_split
    from trainer.guard import validation_windows
    from trainer.sim.stepper import window

    cfg = EvalConfig(baselines=("slurm",), resamples=0, windows=1, starvation_limit=86400,
                     starvation_order="policy")
    sp = time_split(prep.jobs.n, cfg.train, cfg.val)
    wins = validation_windows(prep.jobs.n, cfg, 2)
    assert len(wins) == 2 and wins[1][0] == sp.val_start
    for k, (a, b) in enumerate(wins):
        val = window(prep.jobs, 0, b, shift=False)
        ev = evaluate(val, prep.cluster, {"net": str(last)}, cfg, options=prep.options,
                      priority=prep.priority, split=Split(val.n, a, a),
                      warmup_jobs=min(sp.test_start - sp.val_start, a))
        assert s["points"][2]["windows"][k]["bsld_mean"] == pytest.approx(
            float(ev.metrics["net"]["bsld"]["mean"]))
        assert s["slurm_windows"][k]["bsld_mean"] == pytest.approx(
            float(ev.metrics["slurm"]["bsld"]["mean"]))
        assert set(s["points"][2]["windows"][k]) >= {"p99_ok", "bsld_ok", "util_ok",
                                                      "best_ok", "best_util_ok"}
        # the heuristic behind the run's guard, as the test period replays it
        guarded = evaluate(val, prep.cluster, {}, replace(cfg, baselines=("slurm", "spf"),
                                                          guard_heuristics=True),
                           options=prep.options, priority=prep.priority,
                           split=Split(val.n, a, a),
                           warmup_jobs=min(sp.test_start - sp.val_start, a))
        assert s["baseline_windows"][k]["spf"]["bsld_mean"] == pytest.approx(
            float(guarded.metrics["spf"]["bsld"]["mean"]))
        assert s["baseline_windows"][k]["slurm"] == s["slurm_windows"][k]
        assert s["points"][2]["windows"][k]["best_util_ok"] == float(
            s["points"][2]["windows"][k]["util"] >= s["baseline_windows"][k]["spf"]["util"])
    assert "checkpoints kept (p/b/u; below it, its util)" in text
    # --bf-plan conservative: the test replays plan backfill as Slurm does, as evaluate's
    cons_json = tmp_path / "choice-conservative.json"
    assert cc.main([str(run), "--heuristics", "spf", "--json", str(cons_json),
                    "--bf-plan", "conservative"]) == 0
    c = json.loads(cons_json.read_text())[0]
    cons = _prepare(resolve(trace=str(LUBLIN), limit=400, bf_plan="conservative"))
    assert cons.options.bf_plan == "conservative"
    ev = test_period(cons)
    assert c["points"][2]["test"]["bsld_mean"] == pytest.approx(
        float(ev.metrics["net"]["bsld"]["mean"]))
    assert c["slurm_test"]["bsld_mean"] == pytest.approx(float(ev.metrics["slurm"]["bsld"]["mean"]))
    assert c["slurm_test"] != s["slurm_test"]  # the plan changed Slurm's own replay
