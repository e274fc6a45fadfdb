"""trainer.draws: the test period under jittered arrivals (``evaluate --draws``)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_plugin import cli
from trainer.draws import jittered, mean_metrics, summarize
from trainer.evaluate import EvalConfig, check_targets, evaluate
from trainer.sim.policies import make_policy
from trainer.sim.state import Cluster, build_jobs
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

from .test_evaluate import LUBLIN


def _table(n: int, seed: int = 3, interarrival: float = 20.0):
    wc = WorkloadConfig(num_jobs=n, seed=seed, mean_interarrival_s=interarrival)
    spec = default_cluster(wc)
    cl = Cluster.from_spec(spec)
    return build_jobs(replay_records(generate(wc), spec), cl), cl


def test_jitter_moves_arrivals_within_bounds_and_keeps_their_order():
    jobs, _ = _table(300)
    moved = jittered(jobs, 60, np.random.default_rng(0))
    assert (np.diff(moved.eligible) >= 0).all()  # still in arrival order
    assert (np.abs(moved.eligible - jobs.eligible) <= 60).all()
    assert (moved.eligible != jobs.eligible).mean() > 0.5
    assert np.array_equal(moved.eligible - moved.submit, jobs.eligible - jobs.submit)
    assert np.array_equal(moved.run, jobs.run) and np.array_equal(moved.nodes, jobs.nodes)
    assert jittered(jobs, 0, np.random.default_rng(0)) is jobs
    again = jittered(jobs, 60, np.random.default_rng(0))
    assert np.array_equal(again.eligible, moved.eligible)  # seeded


def _fig(bsld, p99, util, jct=100.0, share=None):
    return {"bsld": bsld, "p99": p99, "util": util, "jct": jct, "single_leaf_share": share}


def test_mean_figures_and_pass_counts_by_hand():
    cfg = EvalConfig()
    draws = [  # net below lrf in draw 1 only; 30% below slurm in both; util lower in 2
        {"net": _fig(60.0, 100.0, 0.9), "slurm": _fig(100.0, 100.0, 0.9),
         "lrf": _fig(61.0, 90.0, 0.9)},
        {"net": _fig(68.0, 100.0, 0.8), "slurm": _fig(100.0, 120.0, 0.9),
         "lrf": _fig(55.0, 90.0, 0.9)},
    ]
    mean = mean_metrics(draws)
    assert mean["net"]["bsld"]["mean"] == 64.0 and mean["lrf"]["bsld"]["mean"] == 58.0
    assert mean["slurm"]["wait_s"]["p99"] == 110.0
    assert mean["net"]["utilisation"] == {"gpus": None, "nodes": pytest.approx(0.85)}
    assert mean["net"]["single_leaf_share"] is None
    per_draw = [check_targets(_metrics(d), "net", cfg, locality=False,
                              heuristics=["lrf"]) for d in draws]
    expected = check_targets(mean, "net", cfg, locality=False, heuristics=["lrf"])
    s = summarize(draws, {"net": per_draw}, {"net": expected}, jitter=60.0, seed=0)
    assert s["draws"] == 2 and s["figures"]["lrf"]["bsld"] == [61.0, 55.0]
    assert s["passes"]["net"] == {"bsld_vs_slurm": 2, "bsld_vs_best_heuristic": 1,
                                  "p99_wait": 2, "utilisation": 1, "all": 1}
    ok = {c["name"]: c["ok"] for c in s["expected"]["net"]["checks"]}
    assert ok == {"bsld_vs_slurm": True, "bsld_vs_best_heuristic": False,  # 64 vs 58
                  "p99_wait": True, "utilisation": False}  # 0.85 vs 0.9
    json.dumps(s)  # JSON-able


def _metrics(d):
    """Metrics dicts of one draw's figures, as check_targets reads them."""
    return mean_metrics([d])


def test_the_best_heuristic_line_is_also_counted_against_the_best_deployable_one():
    cfg = EvalConfig()
    draws = [  # spf reads the recorded run time (an oracle); lrf does not
        {"net": _fig(60.0, 100.0, 0.9), "slurm": _fig(100.0, 100.0, 0.9),
         "spf": _fig(50.0, 90.0, 0.9), "lrf": _fig(61.0, 90.0, 0.9)},  # below lrf only
        {"net": _fig(60.0, 100.0, 0.9), "slurm": _fig(100.0, 100.0, 0.9),
         "spf": _fig(70.0, 90.0, 0.9), "lrf": _fig(59.0, 90.0, 0.9)},  # lrf is the best
        {"net": _fig(58.0, 100.0, 0.9), "slurm": _fig(100.0, 100.0, 0.9),
         "spf": _fig(70.0, 90.0, 0.9), "lrf": _fig(59.0, 90.0, 0.9)},  # below both
    ]
    per_draw = [check_targets(_metrics(d), "net", cfg, locality=False,
                              heuristics=["spf", "lrf"]) for d in draws]
    s = summarize(draws, {"net": per_draw}, {}, jitter=60.0, seed=0)
    assert s["passes"]["net"]["bsld_vs_best_heuristic"] == 1
    assert s["passes"]["net"]["bsld_vs_best_deployable"] == 2  # draws 1 and 3
    assert list(s["passes"]["net"])[:3] == ["bsld_vs_slurm", "bsld_vs_best_heuristic",
                                            "bsld_vs_best_deployable"]
    only_lrf = [check_targets(_metrics(d), "net", cfg, locality=False,
                              heuristics=["lrf"]) for d in draws]
    assert "bsld_vs_best_deployable" not in summarize(
        draws, {"net": only_lrf}, {}, jitter=60.0, seed=0)["passes"]["net"]


def test_a_check_not_applicable_in_every_draw_counts_none():
    cfg = EvalConfig()
    draws = [{"net": _fig(60.0, 100.0, 0.9), "slurm": _fig(100.0, 100.0, 0.9)}] * 2
    per_draw = [check_targets(_metrics(d), "net", cfg, locality=False, heuristics=[])
                for d in draws]
    s = summarize(draws, {"net": per_draw}, {}, jitter=60.0, seed=0)
    assert s["passes"]["net"]["bsld_vs_best_heuristic"] is None
    assert s["passes"]["net"]["all"] == 2


def test_draw_settings_are_checked():
    with pytest.raises(ValueError, match="draws >= 1"):
        EvalConfig(draws=0)
    with pytest.raises(ValueError, match="jitter"):
        EvalConfig(draws=3, jitter=0.0)
    with pytest.raises(ValueError, match="jitter"):
        EvalConfig(jitter=-1.0)
    assert EvalConfig(jitter=0.0).draws == 1  # one replay needs no jitter


def test_evaluate_replays_the_test_period_under_jittered_arrivals():
    jobs, cl = _table(240)
    cfg = EvalConfig(baselines=("slurm", "fifo", "sjf"), resamples=0, draws=3, jitter=120)
    models = {"mine": make_policy("sjf"), "other": make_policy("fifo")}
    res = evaluate(jobs, cl, models, cfg)
    one = evaluate(jobs, cl, {"mine": make_policy("sjf"), "other": make_policy("fifo")},
                   dataclasses.replace(cfg, draws=1))
    assert one.draws is None
    assert res.targets == one.targets  # the targets stay read on the recorded replay
    d = res.draws
    assert d is not None and d["draws"] == 3 and d["jitter"] == 120
    assert set(d["figures"]) == {"mine", "other", "slurm", "fifo", "sjf"}
    for name, f in d["figures"].items():
        assert f["bsld"][0] == res.metrics[name]["bsld"]["mean"]  # draw 1 as recorded
        assert len(f["bsld"]) == 3
    assert any(f["bsld"][1:] != f["bsld"][:1] * 2 for f in d["figures"].values())
    # a policy object replays afresh in every draw: "mine" is sjf, draw by draw
    assert d["figures"]["mine"] == d["figures"]["sjf"]
    assert set(d["passes"]) == {"mine", "other"}
    for p in d["passes"].values():
        assert all(v is None or 0 <= v <= 3 for v in p.values())
    exp = d["expected"]["mine"]
    bsld = next(c for c in exp["checks"] if c["name"] == "bsld_vs_slurm")
    assert bsld["value"] == pytest.approx(np.mean(d["figures"]["mine"]["bsld"]))
    again = evaluate(jobs, cl, {"mine": make_policy("sjf"), "other": make_policy("fifo")},
                     cfg)
    assert again.draws == d  # seeded by the replay's seed
    side = evaluate(jobs, cl, {"mine": make_policy("sjf"), "other": make_policy("fifo")},
                    cfg, workers=2)
    assert side.draws == d  # the same draws, replayed in two processes
    with pytest.raises(ValueError, match="workers"):
        evaluate(jobs, cl, {}, cfg, workers=0)
    other_seed = evaluate(jobs, cl, {"mine": make_policy("sjf")},
                          dataclasses.replace(cfg, baselines=("slurm",)), seed=1)
    assert other_seed.draws["seed"] == 1
    json.dumps(res.to_dict()["draws"])


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found (set $RLSCHED_TRACES)")
def test_evaluate_command_prints_and_writes_the_draws(tmp_path, tiny_checkpoint):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--baselines", "lrf", "--resamples", "0", "--draws", "3", "--jitter", "30",
        "--workers", "2",
        "--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert ("the test period in 3 draws (draw 1 as recorded, the others with every arrival"
            " moved by up to 30 s, order kept):") in result.output
    assert "quality lines passed, in draws of 3" in result.output
    assert "quality lines of tiny on the mean figures over the 3 draws:" in result.output
    data = json.loads((out / "eval.json").read_text())
    assert data["draws"]["draws"] == 3 and data["config"]["draws"] == 3
    assert set(data["draws"]["figures"]) == {"tiny", "slurm", "lrf"}
    bad = CliRunner().invoke(cli.main, [
        "evaluate", f"tiny={tiny_checkpoint}", "--trace", str(LUBLIN), "--limit", "300",
        "--draws", "0"])
    assert bad.exit_code == 2 and "--draws" in bad.output
