"""``rlsched helper`` end to end on a fake Slurm, a real SQLite store and a real tiny model.

The Slurm client is the in-memory fake (the CLI's only boundary replaced); the store,
the state file, the ONNX model and onnxruntime are real.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
from click.testing import CliRunner

from db.session import init_db
from slurm_plugin import cli as root
from slurm_plugin.helper import cli as hcli

from .helper_fakes import FakeSlurm, mk_job


def _config(tmp_path, model, **extra) -> str:
    lines = {
        "model": str(model), "state_file": str(tmp_path / "state.json"),
        "store": str(tmp_path / "store.db"), "steering": "none", "interval": 5.0,
        **extra,
    }
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in lines.items())
    p = tmp_path / "helper.toml"
    p.write_text(text)
    p.chmod(0o640)
    return str(p)


def run(args, client=None, monkeypatch=None):
    if client is not None:
        monkeypatch.setattr(hcli, "make_client", lambda *a, **k: client)
    return CliRunner().invoke(root.main, ["helper", *args])


def test_helper_is_registered_and_documents_itself():
    assert "helper" in root.COMMANDS
    r = CliRunner().invoke(root.main, ["helper", "run", "--help"])
    assert r.exit_code == 0
    for opt in ("--band-hi", "--mode", "--starvation-limit", "--no-rank-all", "--config"):
        assert opt in r.output


def test_example_is_printed_and_world_writable_config_refused(tmp_path):
    r = CliRunner().invoke(root.main, ["helper", "config", "--example"])
    assert r.exit_code == 0 and 'mode = "shadow"' in r.output
    p = tmp_path / "h.toml"
    p.write_text('mode = "enforce"\n')
    os.chmod(p, 0o666)
    r = CliRunner().invoke(root.main, ["helper", "--config", str(p), "once"])
    assert r.exit_code != 0 and "world-writable" in r.output


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from tests.onnx_fixture import build_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_model(tmp_path_factory.mktemp("model"))


def test_once_log_status_reset(tmp_path, model, monkeypatch):
    init_db(f"sqlite:///{tmp_path / 'store.db'}")
    cfg = _config(tmp_path, model)
    client = FakeSlurm([mk_job(1, limit=7200), mk_job(2, limit=60), mk_job(3, limit=600)])

    r = run(["--config", cfg, "once"], client, monkeypatch)
    assert r.exit_code == 0, r.output
    assert "mode shadow" in r.output and "would be made" in r.output
    assert client.calls == []

    r = run(["log", "--config", cfg, "--json"])
    entries = json.loads(r.stdout)
    assert [(e["job_id"], e["new_value"], e["mode"]) for e in entries] == [
        (2, "100000", "shadow"), (3, "50000", "shadow")]

    r = run(["--config", cfg, "once", "--mode", "enforce", "--json"], client, monkeypatch)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["applied"] == 2 and out["mode"] == "enforce"
    assert [c[:3] for c in client.calls] == [("set_site_factor", 2, 100000),
                                             ("set_site_factor", 3, 50000)]

    r = run(["status", "--config", cfg, "--json"])
    st = json.loads(r.stdout)
    assert st["cycles"] == 2 and st["errors"] == 0 and st["running"] is False
    assert st["changes"] == {"enforce:site_factor": 2, "shadow:site_factor": 2}
    r = run(["status", "--config", cfg])
    assert "changes: enforce:site_factor 2, shadow:site_factor 2" in r.output

    client.calls.clear()
    r = run(["reset", "--config", cfg, "--yes"], client, monkeypatch)
    assert r.exit_code == 0, r.output
    assert sorted(client.calls) == [("set_site_factor", 2, 0), ("set_site_factor", 3, 0)]
    r = run(["log", "--config", cfg, "--mode", "reset"])
    assert r.output.count("reset") == 2
    client.calls.clear()
    r = run(["reset", "--config", cfg, "--yes"], client, monkeypatch)
    assert "nothing to reset" in r.output and client.calls == []


def test_once_with_a_bad_model_changes_nothing_and_exits_1(tmp_path, model, monkeypatch):
    init_db(f"sqlite:///{tmp_path / 'store.db'}")
    bad = tmp_path / "model.onnx"
    bad.write_bytes(model.read_bytes() + b"\x00")
    (tmp_path / "model.onnx.card.json").write_text(
        (model.parent / "model.onnx.card.json").read_text())
    cfg = _config(tmp_path, bad, mode="enforce")
    client = FakeSlurm([mk_job(1, limit=60), mk_job(2, limit=600)])
    r = run(["--config", cfg, "once"], client, monkeypatch)
    assert r.exit_code == 1
    assert "model unusable" in r.output and "sha256" in r.output
    assert client.calls == []


def test_once_without_a_store_fails_open(tmp_path, model, monkeypatch):
    cfg = _config(tmp_path, model, mode="enforce",
                  store="postgresql+psycopg://nobody:x@127.0.0.1:1/none")
    client = FakeSlurm([mk_job(1, limit=60), mk_job(2, limit=600)])
    r = run(["--config", cfg, "once"], client, monkeypatch)
    assert r.exit_code == 1 and "FAILED" in r.output
    assert client.calls == []
