"""benchmarks/seed_ensembles.py: its rules and groups, and real runs' ensembles replayed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
LUBLIN = TRACES / "lublin_256.swf"


def test_rules_and_groups_read_as_documented():
    se = load_benchmark("seed_ensembles")
    assert se.parse_rules("4:2, 8:4") == [(4, 2), (8, 4)]
    for bad in ("4", "4:0", "x:1", "0:1"):
        with pytest.raises(SystemExit, match="is not K:P"):
            se.parse_rules(bad)
    runs = [Path(f"r{i}") for i in range(5)]
    assert se.groups(runs, 2) == [runs[0:2], runs[2:4]]  # r4 left out of the pairs
    assert se.groups(runs, 5) == [runs]
    assert se.groups(runs, 6) == []
    assert se.name_of(runs[:2], 4, 2) == "r0+r1 K4:P2"


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found")
def test_a_group_ensemble_is_train_ensembles_replayed_as_evaluate_replays_it(tmp_path,
                                                                             capsys):
    from click.testing import CliRunner

    from slurm_plugin.cli import main as cli
    from trainer.cli import _prepare, resolve
    from trainer.evaluate import EvalConfig, evaluate

    se = load_benchmark("seed_ensembles")
    runs = [tmp_path / f"s{seed}" for seed in (1, 2)]
    for seed, run in zip((1, 2), runs, strict=True):
        res = CliRunner().invoke(cli, [
            "train", "rl", "--trace", str(LUBLIN), "--limit", "400", "--out", str(run),
            "--hidden", "8", "--episode-jobs", "40", "--val-jobs", "30", "--max-jobs", "16",
            "--budget", "2u", "--eval-every", "1", "--algo-opt", "episodes=2",
            "--keep-checkpoints", "--starvation-limit", "86400", "--no-progress",
            "--seed", str(seed)])
        assert res.exit_code == 0, res.output + repr(res.exception)
    out_json = tmp_path / "x.json"
    assert se.main([*map(str, runs), "--groups", "2,3", "--rules", "2:1",
                    "--heuristics", "spf", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    got = json.loads(out_json.read_text())
    rows = got["rows"]
    assert set(rows) == {"s1 best.pt", "s2 best.pt", "s1+s2 K2:P1"}  # no group of 3
    assert "groups of 2, K2:P1" in text and "every line kept" in text
    # the group's ensemble is what train ensemble writes, replayed as evaluate replays it
    ens = tmp_path / "ens.pt"
    res = CliRunner().invoke(cli, ["train", "ensemble", *map(str, runs), "--members", "2",
                                   "--per-run", "1", "--out", str(ens)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    from trainer.policy import load_checkpoint

    want = [[m["seed"], m["update"]] for m in load_checkpoint(ens).extra["ensemble"]["members"]]
    assert rows["s1+s2 K2:P1"]["members"] == want and {s for s, _ in want} == {1, 2}
    prep = _prepare(resolve(trace=str(LUBLIN), limit=400))
    ev = evaluate(prep.jobs, prep.cluster, {"e": str(ens), "b": str(runs[0] / "best.pt")},
                  EvalConfig(baselines=("slurm", "spf"), resamples=0, windows=1,
                             guard_heuristics=True, starvation_limit=86400),
                  options=prep.options, priority=prep.priority)
    assert rows["s1+s2 K2:P1"]["bsld_mean"] == pytest.approx(
        float(ev.metrics["e"]["bsld"]["mean"]))
    assert rows["s1 best.pt"]["bsld_mean"] == pytest.approx(
        float(ev.metrics["b"]["bsld"]["mean"]))
    assert got["baselines"]["slurm"]["bsld_mean"] == pytest.approx(
        float(ev.metrics["slurm"]["bsld"]["mean"]))
    # --only-groups: the group's ensemble alone, the same figures
    assert se.main([*map(str, runs), "--rules", "2:1", "--heuristics", "spf", "--json",
                    str(out_json), "--only-groups"]) == 0
    only = json.loads(out_json.read_text())["rows"]
    assert set(only) == {"s1+s2 K2:P1"}
    assert only["s1+s2 K2:P1"]["bsld_mean"] == rows["s1+s2 K2:P1"]["bsld_mean"]
