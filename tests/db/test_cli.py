"""``rlsched db ...`` through click's CliRunner, on all three backends."""

from __future__ import annotations

import json

from click.testing import CliRunner

from db.cli import db
from db.records import TresCounts
from db.session import head_revision
from db.store import Store
from slurm_plugin.cli import main

from .conftest import job

T0 = 1_700_000_000


def _run(args, env=None):
    return CliRunner().invoke(main, ["db", *args], env=env or {}, catch_exceptions=False)


def test_init_upgrade_with_a_temp_sqlite_path(tmp_path, monkeypatch):
    monkeypatch.delenv("RLSCHED_DB", raising=False)
    path = tmp_path / "sub" / "hist.db"
    r = _run(["--db", str(path), "stats"])
    assert r.exit_code == 1 and "rlsched db init" in r.output and not path.exists()
    r = _run(["--db", str(path), "init"])
    assert r.exit_code == 0, r.output
    assert f"initialised (schema revision {head_revision()})" in r.output and path.exists()
    r = _run(["--db", str(path), "init"])
    assert r.exit_code == 0 and "already initialised" in r.output
    r = _run(["--db", str(path), "upgrade"])
    assert r.exit_code == 0 and "up to date" in r.output


def test_db_from_environment(tmp_path, monkeypatch):
    path = tmp_path / "env.db"
    monkeypatch.setenv("RLSCHED_DB", str(path))
    r = _run(["init"])
    assert r.exit_code == 0 and str(path) in r.output
    r = _run(["clusters"])
    assert r.exit_code == 0 and "no clusters" in r.output


def test_default_location(tmp_path, monkeypatch):
    monkeypatch.delenv("RLSCHED_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    r = _run(["init"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rlsched" / "rlsched.db").exists()


def test_cli_on_each_backend(backend_url):
    r = _run(["--db", backend_url, "upgrade"])
    assert r.exit_code == 1 and "Error:" in r.output and "rlsched db init" in r.output
    assert "Traceback" not in r.output
    r = _run(["--db", backend_url, "init"])
    assert r.exit_code == 0, r.output
    assert "rlsched_test:***@" in r.output or backend_url.startswith("sqlite")
    r = _run(["--db", backend_url, "stats"])
    assert r.exit_code == 1 and "no clusters" in r.output
    # put some history in, through the store
    with Store.open(backend_url) as store:
        cid = store.cluster("alpha")
        s = store.ingest(cid, "sacct", [
            job(1, T0), job(2, T0 + 60, user="bob", req=TresCounts(1, 4, 0, 100))])
        assert s.inserted == 2
        store.cluster("beta")
    r = _run(["--db", backend_url, "clusters"])
    assert r.exit_code == 0 and "alpha" in r.output and "beta" in r.output
    r = _run(["--db", backend_url, "stats"])
    assert r.exit_code == 1 and "--cluster" in r.output  # two clusters: which one?
    r = _run(["--db", backend_url, "stats", "--cluster", "gamma"])
    assert r.exit_code == 1 and "no cluster 'gamma'" in r.output
    r = _run(["--db", backend_url, "stats", "--cluster", "alpha"])
    assert r.exit_code == 0, r.output
    assert "cluster alpha: 2 jobs, 2 users" in r.output and "TOP USERS" in r.output
    r = _run(["--db", backend_url, "stats", "--cluster", "alpha", "--json"])
    data = json.loads(r.output)
    assert data["jobs"] == 2 and data["states"] == {"COMPLETED": 2}
    r = _run(["--db", backend_url, "runs", "--cluster", "alpha", "--json"])
    assert json.loads(r.output)[0]["inserted"] == 2
    r = _run(["--db", backend_url, "quarantine", "--cluster", "alpha"])
    assert r.exit_code == 0


def test_unreachable_server_is_one_line():
    r = _run(["--db", "postgresql+psycopg://u:secret@127.0.0.1:1/x", "stats"])
    assert r.exit_code == 1
    assert r.output.startswith("Error: cannot open the database") and "secret" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_every_db_command_has_help():
    for name, cmd in db.commands.items():
        assert (cmd.help or "").strip(), name
        for p in cmd.params:
            if p.name != "help":
                assert (getattr(p, "help", "") or "").strip(), (name, p.name)
