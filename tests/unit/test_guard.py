"""trainer.guard: the starvation guard chosen on the validation period (rlsched tune-guard)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurm_plugin import cli
from trainer.evaluate import SLURM, EvalConfig, Split, _util_reading, evaluate, time_split
from trainer.guard import (
    DEFAULT_UTIL_SLACK,
    GuardSetting,
    choose,
    grid,
    parse_expresses,
    parse_limits,
    parse_resolutions,
    pooled,
    sweep,
    validation_windows,
)
from trainer.sim.state import Cluster, build_jobs
from trainer.sim.stepper import window
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
LUBLIN = TRACES / "lublin_256.swf"


def test_limits_are_read_as_admins_type_them():
    assert parse_limits("1d, 36h,7200,1d") == (86400.0, 129600.0, 7200.0)
    for bad in ("", " , ", "2x", "0d", "-1d"):
        with pytest.raises(click.BadParameter):
            parse_limits(bad)


def test_setting_labels_and_validation():
    assert GuardSetting(0.0).label == "none"
    assert GuardSetting(2 * 86400.0, "policy").label == "2d policy"
    assert GuardSetting(5400.0).label == "90m age"
    assert GuardSetting(90.0).label == "90s age"
    assert GuardSetting(14 * 86400.0, "age", 0.2).label == "14d age, r=0.2"
    assert GuardSetting(0.0, resolution=0.5).label == "none, r=0.5"
    assert grid([86400.0], ["age"], [0.0, 0.2]) == [GuardSetting(86400.0),
                                                   GuardSetting(86400.0, "age", 0.2)]
    assert parse_resolutions("0, 0.2,0.2") == (0.0, 0.2)
    with pytest.raises(ValueError, match="score_resolution"):
        GuardSetting(60.0, resolution=-1.0)
    with pytest.raises(ValueError, match="starvation_order"):
        GuardSetting(60.0, "oldest")
    with pytest.raises(ValueError, match=">= 0"):
        GuardSetting(-1.0)


def test_express_lanes_in_settings_labels_and_the_grid():
    assert GuardSetting(2 * 86400.0, "policy", express=900.0).label == "2d policy, x=15m"
    assert GuardSetting(86400.0, "policy", 0.2, 1800.0).label == "1d policy, r=0.2, x=30m"
    assert parse_expresses("0, 15m,900,1h") == (0.0, 900.0, 3600.0)
    with pytest.raises(click.BadParameter):
        parse_expresses("soon")
    # a lane with either order
    assert grid([86400.0], ["age", "policy"], [0.0], [0.0, 900.0]) == [
        GuardSetting(86400.0), GuardSetting(86400.0, "policy"),
        GuardSetting(86400.0, express=900.0), GuardSetting(86400.0, "policy", express=900.0)]
    assert GuardSetting(86400.0, "age", express=900.0).label == "1d age, x=15m"
    with pytest.raises(ValueError, match="needs the starvation guard"):
        GuardSetting(0.0, "policy", express=900.0)


def _row(limit, bsld, p99_ok, util_ok, p99=1.0):
    return {"setting": GuardSetting(limit), "bsld_mean": bsld, "wait_p99": p99,
            "wait_max": 10.0 + limit, "util": 0.5, "p99_ok": p99_ok, "util_ok": util_ok}


def test_choice_by_hand():
    rows = [_row(0, 1.0, True, True),  # unguarded: the best, never chosen
            _row(1, 50.0, True, True), _row(2, 40.0, True, True),
            _row(3, 10.0, True, False), _row(4, 5.0, False, True)]
    i, why = choose(rows)
    assert i == 2 and why.endswith("keep the p99 wait and the utilisation within"
                                   " Slurm's bounds")
    for r, ok in zip(rows, (True, True, False, True, True), strict=True):
        r["max_ok"] = ok  # a bound on the longest wait too: it outranks utilisation
    i, why = choose(rows)
    assert i == 1 and "the p99 wait, the longest wait and the utilisation" in why
    rows[1]["util_ok"] = False  # none keeps all three: p99 and longest wait
    i, why = choose(rows)
    assert i == 3 and why == ("no setting also keeps the utilisation within Slurm's"
                              " bounds: the lowest mean bounded slowdown among those"
                              " that keep the p99 wait and the longest wait")
    for r in rows:
        del r["max_ok"]
    rows[2]["util_ok"] = False  # none keeps both: p99 alone
    i, why = choose(rows)
    assert i == 3 and "also keeps the utilisation" in why
    for r in rows:
        r["p99_ok"] = False
    rows[4]["wait_p99"], rows[2]["wait_p99"] = 3.0, 0.5  # none keeps p99: lowest p99
    i, why = choose(rows)
    assert i == 2 and "lowest p99 wait" in why
    assert choose(rows[:1]) is None


def test_a_setting_worse_than_slurm_is_not_chosen_for_its_utilisation():
    # Lublin, 4 periods, with a utilisation slack of 0.4%: only 1 d age kept the pooled
    # utilisation, at a bsld 42.5% above Slurm's; 2 d policy was 66.5% below it
    rows = [_row(0, 50.9, True, False), _row(1, 812.3, True, True),
            _row(2, 191.1, True, False), _row(3, 64.5, False, False)]
    for r in rows:
        r["bsld_ok"] = r["bsld_mean"] <= 569.9
    i, why = choose(rows)
    assert i == 2 and why == ("no setting also keeps the utilisation within Slurm's"
                              " bounds: the lowest mean bounded slowdown among those"
                              " that keep the p99 wait and the mean bounded slowdown")
    rows[2]["util_ok"] = True  # it keeps all three
    assert choose(rows)[0] == 2
    # no guarded setting is at or below Slurm's bsld (an untrained model): the bound is
    # not one, and the utilisation still counts
    rows[2].update(bsld_mean=900.0, bsld_ok=False, util_ok=False)
    i, why = choose(rows)
    assert i == 1 and why.endswith("keep the p99 wait and the utilisation within"
                                   " Slurm's bounds")
    # nor when only a setting over the p99 bound is below it
    rows[3]["bsld_ok"] = True
    assert choose(rows)[0] == 1


def test_settings_that_replay_the_same_keep_the_helpers_default():
    day = 86400.0

    def row(limit, order="age", bsld=3.0):
        return {"setting": GuardSetting(limit, order), "bsld_mean": bsld, "wait_p99": 9.0,
                "wait_max": 20.0, "util": 0.5, "p99_ok": True, "util_ok": True}

    rows = [row(0.0), row(day), row(2 * day), row(2 * day, "policy"), row(4 * day)]
    i, why = choose(rows)  # the guard never acted: every setting ties
    assert rows[i]["setting"] == GuardSetting(2 * day, "age")  # the helper's default
    assert why.endswith("(4 settings replay it the same: the helper's default kept)")
    rows[2]["wait_max"] = 19.0  # the default differs: the first of the others
    i, why = choose(rows)
    assert i == 1 and why.endswith("(3 settings replay it the same: the first kept)")
    rows[4]["bsld_mean"] = 2.0  # a strictly better one: no tie
    i, why = choose(rows)
    assert i == 4 and "replay it the same" not in why


def _table(n: int, interarrival: float):
    wc = WorkloadConfig(num_jobs=n, seed=3, mean_interarrival_s=interarrival)
    spec = default_cluster(wc)
    cl = Cluster.from_spec(spec)
    return build_jobs(replay_records(generate(wc), spec), cl), cl


def _by_hand(jobs, cl, model, s, a, b, val):
    """The model behind setting ``s`` and Slurm on jobs ``a..b`` as their "test": evaluate
    on the jobs before ``b`` only, after 20 warm-up jobs (5% of all 400, not of ``b``)."""
    c = EvalConfig(train=0.5, val=val, baselines=(SLURM,),
                   starvation_limit=s.limit, starvation_order=s.order)
    ev = evaluate(window(jobs, 0, b, shift=False), cl, {"m": model}, c, split=Split(b, a, a),
                  warmup_jobs=20)
    assert ev.warmup_jobs == 20
    assert ev.metrics["m"]["jobs"] == b - a
    return ev.metrics["m"], ev.metrics[SLURM]


def test_sweep_replays_the_validation_period_as_evaluate_does(tiny_checkpoint):
    jobs, cl = _table(400, interarrival=5.0)  # a queue builds up
    cfg = EvalConfig(train=0.5, val=0.3, warmup=0.05)
    settings = [GuardSetting(60.0, "age"), GuardSetting(60.0, "policy")]
    res = sweep(jobs, cl, tiny_checkpoint, settings, cfg)
    a, b = time_split(jobs.n, 0.5, 0.3).val
    assert res.period == (a, b) == (200, 320)
    assert [r["setting"] for r in res.rows] == [GuardSetting(0.0), *settings]
    # by hand: evaluate on the jobs before the test period, the validation period as
    # its "test" (the test period's jobs are never replayed), after as many warm-up jobs
    # as evaluate replays before the test period: 5% of all 400, not of the 320 kept
    for r in res.rows:
        m, sl = _by_hand(jobs, cl, tiny_checkpoint, r["setting"], a, b, 0.3)
        assert r["bsld_mean"] == pytest.approx(m["bsld"]["mean"])
        assert r["wait_p99"] == pytest.approx(m["wait_s"]["p99"])
        assert r["wait_max"] == pytest.approx(m["wait_s"]["max"])
        assert res.slurm["wait_p99"] == pytest.approx(sl["wait_s"]["p99"])
        assert r["p99_ok"] == (m["wait_s"]["p99"] <= 1.1 * sl["wait_s"]["p99"])
        assert r["util_ok"] == (r["util"] >= res.slurm["util"])
        assert r["util_arrivals"] == pytest.approx(  # shown, not a bound
            _util_reading(m, "to_last_arrival"))
        assert r["idle_waiting"] == pytest.approx(_util_reading(m, "idle_waiting"))
        assert r["bsld_vs_slurm"] == pytest.approx(m["bsld"]["mean"] / sl["bsld"]["mean"])
    assert res.rows[1]["wait_max"] != res.rows[0]["wait_max"]  # the guard acted
    assert res.choice is not None and res.choice[0] in (1, 2)
    assert res.windows == [(200, 320)] and all("windows" not in r for r in res.rows)
    d = res.to_dict()
    assert d["period"] == {"jobs": [200, 320], "kind": "validation"}
    assert d["choice"]["starvation_limit"] == 60.0 and d["rows"][0]["setting"]["label"] == "none"
    json.dumps(d)
    assert all("max_ok" not in r for r in res.rows)  # the longest wait: not bounded
    two = sweep(jobs, cl, tiny_checkpoint, settings, cfg, workers=2,  # side by side
                max_wait_slack=0.5, util_slack=0.2)
    assert two.slurm == res.slurm and two.max_wait_slack == 0.5 and two.util_slack == 0.2
    for r, t in zip(res.rows, two.rows, strict=True):
        assert t == {**r, "max_ok": t["wait_max"] <= 1.5 * res.slurm["wait_max"],
                     "util_ok": t["util"] >= 0.8 * res.slurm["util"]}
    assert two.to_dict()["util_slack"] == 0.2 and res.to_dict()["util_slack"] == 0.0
    with pytest.raises(ValueError, match="util_slack"):
        sweep(jobs, cl, tiny_checkpoint, settings, cfg, util_slack=1.0)
    with pytest.raises(ValueError, match="workers"):
        sweep(jobs, cl, tiny_checkpoint, settings, cfg, workers=0)
    with pytest.raises(ValueError, match="validation period is empty"):
        sweep(jobs, cl, tiny_checkpoint, settings, EvalConfig(val=0.0))


def test_pooled_figures_weigh_every_window_the_same():
    one = {"bsld_mean": 3.7, "wait_p99": 1234.5, "wait_max": 99.9, "util": 0.81,
           "util_arrivals": 0.79, "idle_waiting": 0.05}
    assert pooled([one]) == one  # one window: its figures, exactly
    two = {"bsld_mean": 37.0, "wait_p99": 12.345, "wait_max": 9.99, "util": 0.61,
           "util_arrivals": 0.59, "idle_waiting": 0.15}
    p = pooled([one, two])
    assert p["bsld_mean"] == pytest.approx((3.7 * 37.0) ** 0.5)
    assert p["wait_p99"] == pytest.approx(123.45) and p["wait_max"] == pytest.approx(31.59,
                                                                                     rel=1e-3)
    assert p["util"] == pytest.approx(0.71) and p["util_arrivals"] == pytest.approx(0.69)
    assert p["idle_waiting"] == pytest.approx(0.10)
    # a ratio of pooled figures is the geometric mean of the per-window ratios
    s1, s2 = {**one, "bsld_mean": 7.4}, {**two, "bsld_mean": 3.7}
    ratio = p["bsld_mean"] / pooled([s1, s2])["bsld_mean"]
    assert ratio == pytest.approx(((3.7 / 7.4) * (37.0 / 3.7)) ** 0.5)


def test_validation_windows_end_at_the_test_period_and_keep_their_warmup():
    cfg = EvalConfig(train=0.5, val=0.2, warmup=0.05)  # 400 jobs: val 200..279, 20 warm
    assert validation_windows(400, cfg) == [(200, 280)]
    assert validation_windows(400, cfg, 3) == [(40, 120), (120, 200), (200, 280)]
    with pytest.raises(ValueError, match="do not fit .* 20 warm-up jobs each: at most 3"):
        validation_windows(400, cfg, 4)
    with pytest.raises(ValueError, match="windows must be >= 1"):
        validation_windows(400, cfg, 0)
    with pytest.raises(ValueError, match="validation period is empty"):
        validation_windows(400, EvalConfig(val=0.0), 2)


def test_sweep_over_windows_pools_replays_made_as_evaluate_makes_them(tiny_checkpoint):
    jobs, cl = _table(400, interarrival=5.0)
    cfg = EvalConfig(train=0.5, val=0.2, warmup=0.05)
    settings = [GuardSetting(60.0, "age"), GuardSetting(60.0, "policy")]
    res = sweep(jobs, cl, tiny_checkpoint, settings, cfg, windows=3, max_wait_slack=0.5)
    assert res.period == (200, 280) and res.windows == [(40, 120), (120, 200), (200, 280)]
    slurm_w = []
    for k, (a, b) in enumerate(res.windows):  # by hand: each window on its own
        for i, r in enumerate(res.rows):
            m, sl = _by_hand(jobs, cl, tiny_checkpoint, r["setting"], a, b, 0.2)
            w = r["windows"][k]
            assert w["bsld_mean"] == pytest.approx(m["bsld"]["mean"])
            assert w["wait_p99"] == pytest.approx(m["wait_s"]["p99"])
            assert w["p99_ok"] == (m["wait_s"]["p99"] <= 1.1 * sl["wait_s"]["p99"])
            assert w["bsld_vs_slurm"] == pytest.approx(m["bsld"]["mean"] / sl["bsld"]["mean"])
            if i == 0:
                slurm_w.append(sl)
    geo = 1.0
    for sl in slurm_w:
        geo *= sl["bsld"]["mean"]
    assert res.slurm["bsld_mean"] == pytest.approx(geo ** (1 / 3))
    for r in res.rows:  # the row: pooled figures, bounds read on them
        assert r["bsld_mean"] == pytest.approx(pooled(r["windows"])["bsld_mean"])
        assert r["util"] == pytest.approx(sum(w["util"] for w in r["windows"]) / 3)
        assert r["p99_ok"] == (r["wait_p99"] <= 1.1 * res.slurm["wait_p99"])
        assert r["util_ok"] == (r["util"] >= res.slurm["util"])
        assert r["max_ok"] == (r["wait_max"] <= 1.5 * res.slurm["wait_max"])
        assert r["bsld_vs_slurm"] == pytest.approx(r["bsld_mean"] / res.slurm["bsld_mean"])
    assert res.choice == choose(res.rows)
    # the last window is the validation period, replayed as a one-window sweep does
    one = sweep(jobs, cl, tiny_checkpoint, settings, cfg, max_wait_slack=0.5)
    for r, o in zip(res.rows, one.rows, strict=True):
        assert {k: r["windows"][-1][k] for k in o if k != "setting"} == {
            k: v for k, v in o.items() if k != "setting"}
    d = res.to_dict()
    assert d["period"]["windows"] == [[40, 120], [120, 200], [200, 280]]
    assert len(d["rows"][1]["windows"]) == 3
    json.dumps(d)
    with pytest.raises(ValueError, match="at most 3"):
        sweep(jobs, cl, tiny_checkpoint, settings, cfg, windows=4)


def _tune(model, out, *extra):
    """``rlsched tune-guard`` on Lublin's first 300 jobs, 1 h and 2 d in age order."""
    r = CliRunner().invoke(cli.main, [
        "tune-guard", str(model), "--trace", str(LUBLIN), "--limit", "300",
        "--limits", "1h,2d", "--orders", "age", *extra, "--out", str(out)])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found (shared traces)")
def test_tune_guard_command(tmp_path, tiny_checkpoint):
    out = tmp_path / "g"
    r = _tune(tiny_checkpoint, out, "--max-wait-slack", "0.5", "--windows", "1",
              "--util-slack", "0.01")
    assert "validation period: jobs 210..239 (30 jobs)" in r.output
    assert "longest-wait bound: Slurm's + 50%; utilisation bound: Slurm's - 1.00%" in r.output
    assert "to last arrival" in r.output  # (shown beside the checked utilisation)
    assert "idle waiting" in r.output
    assert "starvation_limit = " in r.output and 'starvation_order = "age"' in r.output
    data = json.loads((out / "guard.json").read_text())
    limit = int(data["choice"]["starvation_limit"])  # as typed: 172800, not 1.728e+05
    assert f"rlsched evaluate MODEL --starvation-limit {limit} --starvation-order age" in r.output
    assert [x["setting"]["label"] for x in data["rows"]] == ["none", "1h age", "2d age"]
    assert data["input"]["jobs"] == 300 and data["choice"]["row"] in (1, 2)
    assert data["max_wait_slack"] == 0.5 and "max_ok" in data["rows"][1]
    assert data["util_slack"] == 0.01
    assert data["rescore"] == 15.0 and "--rescore" not in r.output  # the helper's default
    worse = data["rows"][data["choice"]["row"]]["bsld_vs_slurm"] >= 1
    assert ("warning: behind this guard" in r.output) == worse  # (an untrained net)
    pytest.importorskip("matplotlib")
    assert (out / "guard.png").stat().st_size > 1000
    assert data["resolutions"] == [0.0] and "score_resolution" not in data["choice"]
    assert "score_resolution" not in r.output
    # with score resolutions: each guard once per resolution; the helper lines say which
    rounded = tmp_path / "r"
    r = _tune(tiny_checkpoint, rounded, "--resolutions", "0,1e6", "--windows", "1",
              "--util-slack", "0")
    assert "utilisation bound" not in r.output  # (0: not lower, said nowhere else)
    tied = json.loads((rounded / "guard.json").read_text())
    assert tied["util_slack"] == 0
    assert tied["resolutions"] == [0.0, 1e6]
    assert [x["setting"]["label"] for x in tied["rows"]] == [
        "none", "1h age", "2d age", "1h age, r=1e+06", "2d age, r=1e+06"]
    rows = {x["setting"]["label"]: x for x in tied["rows"]}
    for label in ("1h age", "2d age"):  # exact scores: the same replays as before
        assert rows[label]["bsld_mean"] == next(
            x for x in data["rows"] if x["setting"]["label"] == label)["bsld_mean"]
    # every score ties at 1e6: the model replays in arrival order, not in its own
    assert rows["2d age, r=1e+06"]["bsld_mean"] != rows["2d age"]["bsld_mean"]
    chosen = tied["rows"][tied["choice"]["row"]]["setting"]["resolution"]
    assert tied["choice"]["score_resolution"] == chosen
    assert f"score_resolution = {chosen:g}" in r.output
    assert ("--score-resolution" in r.output) == (chosen > 0)
    # with express lanes: each guard once per lane, and the helper lines
    lanes = tmp_path / "x"
    r = _tune(tiny_checkpoint, lanes, "--orders", "age,policy", "--express-limits", "0,1h",
              "--windows", "1")
    swept = json.loads((lanes / "guard.json").read_text())
    assert swept["express_limits"] == [0.0, 3600.0]
    assert [x["setting"]["label"] for x in swept["rows"]] == [
        "none", "1h age", "1h policy", "2d age", "2d policy", "1h age, x=1h",
        "1h policy, x=1h", "2d age, x=1h", "2d policy, x=1h"]
    lane = swept["rows"][swept["choice"]["row"]]["setting"]["express"]
    assert swept["choice"]["express_limit"] == lane
    assert f"express_limit = {lane:.1f}" in r.output
    assert ("--express-limit 3600" in r.output) == (lane > 0)
    # re-ranked as seldom as Slurm re-computes priorities: said, recorded, and passed on
    slow = tmp_path / "slow"
    r = _tune(tiny_checkpoint, slow, "--windows", "1", "--rescore", "300")
    assert "the model re-ranks the queue every 300 s (the helper's interval)" in r.output
    assert "--rescore 300 (same input options)" in r.output
    assert json.loads((slow / "guard.json").read_text())["rescore"] == 300.0
    bad = CliRunner().invoke(cli.main, ["tune-guard", str(tiny_checkpoint), "--trace",
                                        str(LUBLIN), "--express-limits", "soon"])
    assert bad.exit_code != 0 and "seconds, or 15m, 1h" in bad.output
    bad = CliRunner().invoke(cli.main, ["tune-guard", str(tiny_checkpoint), "--trace",
                                        str(LUBLIN), "--resolutions", "-1"])
    assert bad.exit_code != 0 and "a score resolution is a number >= 0" in bad.output
    bad = CliRunner().invoke(cli.main, ["tune-guard", str(tiny_checkpoint), "--trace",
                                        str(LUBLIN), "--orders", "oldest"])
    assert bad.exit_code != 0 and "use age and/or policy" in bad.output
    bad = CliRunner().invoke(cli.main, ["tune-guard", str(tiny_checkpoint), "--trace",
                                        str(LUBLIN), "--limits", "soon"])
    assert bad.exit_code != 0 and "span" in bad.output


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found (shared traces)")
def test_tune_guard_command_over_windows(tmp_path, tiny_checkpoint):
    out = tmp_path / "w"
    r = _tune(tiny_checkpoint, out)  # by default: the validation period and 3 before it
    assert "validation: 4 windows of 30 jobs (jobs 120..239, the last the validation" in r.output
    assert "lower in" in r.output and "starvation_limit = " in r.output
    data = json.loads((out / "guard.json").read_text())
    assert data["period"]["windows"] == [[120, 150], [150, 180], [180, 210], [210, 240]]
    assert all(len(x["windows"]) == 4 for x in data["rows"])
    assert data["switch_wait"] == 0 and "--switch-wait" not in r.output
    assert data["util_slack"] == DEFAULT_UTIL_SLACK == 0.002  # (the default)
    assert "utilisation bound: Slurm's - 0.20%" in r.output
    # fewer fit before the validation period (jobs 60..89, 30 warm-up jobs): as many;
    # and the model replayed with the helper's leaf-switch wait, as deployed with it
    r = _tune(tiny_checkpoint, tmp_path / "f", "--train", "0.2", "--val", "0.1",
              "--switch-wait", "1800")
    assert "note: only 2 validation window(s) fit" in r.output
    assert "validation: 2 windows of 30 jobs (jobs 30..89" in r.output
    assert "multi-node jobs wait up to 30m for one leaf switch" in r.output
    assert "--switch-wait 1800 (same input options)" in r.output
    assert json.loads((tmp_path / "f" / "guard.json").read_text())["switch_wait"] == 1800
    r = CliRunner().invoke(cli.main, [
        "tune-guard", str(tiny_checkpoint), "--trace", str(LUBLIN), "--limit", "300",
        "--limits", "1h", "--orders", "age", "--windows", "8"])
    assert r.exit_code != 0 and "8 windows of 30 jobs do not fit" in r.output
    assert "at most 7" in r.output


def test_trained_guard_is_read_from_the_checkpoints_training_settings(tmp_path,
                                                                      tiny_checkpoint):
    torch = pytest.importorskip("torch")
    from trainer.guard import trained_guard
    from trainer.policy import PolicyConfig, PolicyNet, save_checkpoint

    def saved(name: str, train: dict) -> Path:
        torch.manual_seed(0)
        path = tmp_path / name
        save_checkpoint(path, PolicyNet(PolicyConfig(hidden=8)),
                        extra={"config": {"train": train}})
        return path

    guarded = saved("g.pt", {"train_guard": True, "starvation_limit": 3600.0,
                             "starvation_order": "policy"})
    assert trained_guard(guarded) == GuardSetting(3600.0, "policy")
    lane = saved("x.pt", {"train_guard": True, "starvation_limit": 3600.0,
                          "starvation_order": "policy", "express_limit": 900.0})
    assert trained_guard(lane) == GuardSetting(3600.0, "policy", express=900.0)
    # validated behind a guard, not trained behind one; no guard; no training settings
    assert trained_guard(saved("v.pt", {"train_guard": False,
                                        "starvation_limit": 3600.0})) is None
    assert trained_guard(saved("n.pt", {"train_guard": True,
                                        "starvation_limit": 0.0})) is None
    assert trained_guard(tiny_checkpoint) is None
    assert trained_guard(tmp_path / "model.onnx") is None
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert trained_guard(tmp_path / "junk.pt") is None


@pytest.mark.skipif(not LUBLIN.is_file(), reason=f"{LUBLIN} not found (shared traces)")
def test_tune_guard_marks_the_guard_the_model_was_trained_behind(tmp_path):
    torch = pytest.importorskip("torch")
    from trainer.policy import PolicyConfig, PolicyNet, save_checkpoint

    torch.manual_seed(0)
    model = tmp_path / "rl.pt"
    save_checkpoint(model, PolicyNet(PolicyConfig(hidden=8)), extra={"config": {"train": {
        "train_guard": True, "starvation_limit": 3600.0, "starvation_order": "age"}}})
    out = tmp_path / "g"
    r = _tune(model, out, "--windows", "1")
    data = json.loads((out / "guard.json").read_text())
    assert data["trained_behind"] == {"limit": 3600.0, "order": "age", "label": "1h age"}
    rows = [ln.split() for ln in r.output.splitlines()]
    marked = [ln for ln in rows if "(trained)" in ln]
    assert len(marked) == 1 and marked[0][:2] == ["1h", "age"]
    assert "the model was trained behind 1h age (train rl --train-guard" in r.output
    other = data["rows"][data["choice"]["row"]]["setting"]["label"] != "1h age"
    assert ("judge both on the test period (rlsched evaluate --starvation-limit 3600"
            " --starvation-order age)" in r.output) == other
