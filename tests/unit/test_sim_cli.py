"""``rlsched simulate`` / ``rlsched compare`` smoke tests on a real trace (CliRunner)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_plugin import cli
from trainer.sim.policies import BASELINES

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
LUBLIN = TRACES / "lublin_256.swf"
GOLDEN_CONFIG = ROOT / "tests" / "golden" / "22.05" / "scontrol-show-config.txt"

needs_trace = pytest.mark.skipif(
    not LUBLIN.is_file(),
    reason=f"{LUBLIN} not found (the shared traces folder is absent; set $RLSCHED_TRACES)",
)


def _run(*args: str):
    result = CliRunner().invoke(cli.main, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def test_commands_are_registered_without_an_extra():
    for name in ("simulate", "compare"):
        assert name in cli.COMMANDS
        assert cli.COMMANDS[name].extra is None


@needs_trace
def test_simulate_prints_table_and_writes_outputs(tmp_path):
    out = tmp_path / "out"
    res = _run("simulate", "--trace", str(LUBLIN), "--limit", "2000", "--policy", "fifo",
               "--out", str(out))
    assert "bsld" in res.output and "fifo" in res.output
    m = json.loads((out / "metrics.json").read_text())
    assert m["jobs"] == 2000 and m["policy"] == "fifo"
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"]["limit"] == 2000
    assert cfg["scheduler"]["bf_interval"] == 30  # Slurm's default without --config
    assert cfg["cluster"]["nodes"] == 256
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "pip install 'rlsched[train]'" in res.output  # stderr is mixed in
    else:
        assert (out / "wait_cdf.png").is_file()


@needs_trace
def test_simulate_json_with_slurm_config(tmp_path):
    res = _run("simulate", "--trace", str(LUBLIN), "--limit", "500", "--config",
               str(GOLDEN_CONFIG), "--json", "--bf-interval", "0")
    m = json.loads(res.stdout)
    assert m["policy"] == "slurm" and m["jobs"] == 500
    assert m["sim"]["recalcs"] > 0  # PriorityWeightAge is set: priorities are recalculated


@needs_trace
def test_simulate_with_conservative_backfill(tmp_path):
    out = {}
    for plan in ("easy", "conservative"):
        res = _run("simulate", "--trace", str(LUBLIN), "--limit", "2000", "--json",
                   "--bf-plan", plan, "--out", str(tmp_path / plan))
        out[plan] = json.loads(res.stdout)
        cfg = json.loads((tmp_path / plan / "config.json").read_text())
        assert cfg["scheduler"]["bf_plan"] == plan
    easy, cons = out["easy"]["sim"], out["conservative"]["sim"]
    assert cons["backfill_incremental"] == 0  # every pass plans afresh, as Slurm's
    assert cons["reservations"] > 5 * easy["reservations"]  # every blocked job, not the first
    assert out["easy"]["wait_s"] != out["conservative"]["wait_s"]


def test_conservative_backfill_on_shared_nodes_is_a_clean_error():
    philly = TRACES / "philly.csv"
    if not philly.is_file():
        pytest.skip(f"{philly} not found (the shared traces folder is absent)")
    res = CliRunner().invoke(cli.main, ["simulate", "--trace", str(philly), "--limit", "100",
                                        "--bf-plan", "conservative"])
    assert res.exit_code != 0 and not isinstance(res.exception, ValueError)
    assert "jobs sharing nodes; use --bf-plan easy" in res.output


@needs_trace
def test_compare_runs_every_baseline(tmp_path):
    out = tmp_path / "cmp"
    res = _run("compare", "--trace", str(LUBLIN), "--limit", "2000", "--out", str(out))
    for name in BASELINES:
        assert name in res.output
    data = json.loads((out / "compare.json").read_text())
    assert [m["policy"] for m in data] == list(BASELINES)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["baselines"]["gandiva"]["placement"] == "gandiva"
    by = {m["policy"]: m for m in data}
    # backfill helps FIFO on this trace
    assert by["fifo"]["wait_s"]["mean"] < by["fifo-nobf"]["wait_s"]["mean"]


@needs_trace
def test_missing_limits_users_gives_the_jobs_modelled_requests(tmp_path):
    """Lublin records no requested time: 'run' plans backfill with the run times, so sjf
    orders by run time exactly (as sif does); 'users' plans with modelled requests."""
    out = {}
    for how in ("run", "users"):
        res = _run("compare", "--trace", str(LUBLIN), "--limit", "1500", "--json",
                   "--missing-limits", how, "--out", str(tmp_path / how))
        out[how] = {m["policy"]: m for m in json.loads(res.stdout)}
        cfg = json.loads((tmp_path / how / "config.json").read_text())
        assert cfg["command"]["missing_limits"] == how
    run, users = out["run"], out["users"]
    assert run["sjf"]["bsld"]["mean"] == run["sif"]["bsld"]["mean"]
    assert users["sjf"]["bsld"]["mean"] != users["sif"]["bsld"]["mean"]
    assert users["sif"]["bsld"]["mean"] != run["sif"]["bsld"]["mean"]  # backfill plans differ
    assert users["fifo-nobf"]["wait_s"] == run["fifo-nobf"]["wait_s"]  # no backfill: no use
    res = CliRunner().invoke(cli.main, ["compare", "--trace", str(LUBLIN),
                                        "--missing-limits", "oracle"])
    assert res.exit_code == 2 and "oracle" in res.output


def test_input_is_required():
    result = CliRunner().invoke(cli.main, ["simulate"])
    assert result.exit_code != 0
    assert "--trace FILE or --db URL --cluster NAME" in result.output


def test_unknown_store_cluster_is_a_clean_error(tmp_path):
    from db.session import init_db

    url = f"sqlite:///{tmp_path / 's.db'}"
    init_db(url)
    result = CliRunner().invoke(cli.main, ["simulate", "--db", url, "--cluster", "nope"])
    assert result.exit_code != 0
    assert "no cluster named 'nope'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_help_on_every_option():
    for name in ("simulate", "compare"):
        cmd = cli.load_command(name, cli.COMMANDS[name])
        assert (cmd.help or "").strip()
        for p in cmd.params:
            assert (getattr(p, "help", None) or "").strip(), (name, p.name)
