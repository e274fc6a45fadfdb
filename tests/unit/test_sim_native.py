"""The optional compiled simulator (trainer.sim.native): choice, staleness, parity.

The parity test replays the same cases in two child processes, one on the Python
modules and one on the compiled build, and requires identical results. It needs a
build of the current sources (``rlsched build-sim``); without one it skips, unless
``RLSCHED_REQUIRE_NATIVE=1`` (CI builds it and sets that), where a missing build fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_plugin.cli import main
from trainer.sim import native

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("native_parity_child.py")
TRACE = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces")) \
    / "lublin_256.swf"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """native's state as if trainer.sim were imported anew, builds under tmp_path."""
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setenv("RLSCHED_SIM_BUILD", str(tmp_path / "cache"))
    monkeypatch.setenv("RLSCHED_SIM", "auto")
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def fake_build(path: Path, digest: str, modules=native.MODULES) -> None:
    (path / "trainer" / "sim").mkdir(parents=True)
    for m in modules:
        (path / "trainer" / "sim" / f"{m}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (path / native._STAMP).write_text(json.dumps({"hash": digest}))


def test_source_hash_follows_every_source(monkeypatch, tmp_path):
    files = []
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
        files.append(tmp_path / name)
    monkeypatch.setattr(native, "_sources", lambda: files)
    h0 = native.source_hash()
    assert native.source_hash() == h0
    (tmp_path / "b.py").write_text("x = 2\n")
    assert native.source_hash() != h0
    # the real list: the compiled modules and what they are typed against, all present
    monkeypatch.undo()
    assert all(p.is_file() for p in native._sources())
    assert {p.stem for p in native._sources()} >= set(native.MODULES) | {"state", "records"}


def test_python_mode_never_looks(fresh, monkeypatch):
    monkeypatch.setenv("RLSCHED_SIM", "python")
    path: list[str] = []
    st = native.activate(path)
    assert not st.active and path == [] and st.reason == "RLSCHED_SIM=python"


def test_auto_uses_only_a_build_of_these_sources(fresh, monkeypatch):
    monkeypatch.setenv("RLSCHED_SIM", "auto")
    digest = native.source_hash()
    dest = native.build_dir(digest)
    assert dest.parent == fresh / "cache" and digest in dest.name
    path: list[str] = ["pkg"]
    st = native.activate(path)
    assert not st.active and "missing" in st.reason and path == ["pkg"]

    fake_build(dest, "0" * 20)  # built from other sources: ignored
    monkeypatch.setattr(native, "_status", None)
    st = native.activate(path)
    assert not st.active and "other sources" in st.reason and path == ["pkg"]

    (dest / native._STAMP).write_text(json.dumps({"hash": digest}))
    monkeypatch.setattr(native, "_status", None)
    st = native.activate(path)
    assert st.active and st.path == dest
    assert path == [str(dest / "trainer" / "sim"), "pkg"]
    assert str(dest) not in sys.path  # (its trainer/ folder would hide the real package)
    assert native.activate([]) is st  # decided once per process


def test_a_build_missing_a_module_is_not_used(fresh, monkeypatch):
    digest = native.source_hash()
    fake_build(native.build_dir(digest), digest, native.MODULES[:-1])
    st = native.activate([])
    assert not st.active and native.MODULES[-1] in st.reason


def test_a_build_that_does_not_load_is_not_used(fresh, monkeypatch):
    digest = native.source_hash()
    dest = native.build_dir(digest)
    fake_build(dest, digest)
    lib = dest / "deadbeef0123456789ab__mypyc.cpython-311-x86_64-linux-gnu.so"
    lib.write_bytes(b"not a shared library")
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    path: list[str] = []
    st = native.activate(path)
    assert not st.active and "does not load" in st.reason and lib.name in st.reason
    assert path == [] and str(dest) not in sys.path  # nothing of it left on the paths
    monkeypatch.setattr(native, "_status", None)
    monkeypatch.setenv("RLSCHED_SIM", "native")
    with pytest.raises(ImportError, match="build-sim --force"):
        native.activate([])


def test_native_mode_refuses_without_a_build_and_says_how(fresh, monkeypatch):
    monkeypatch.setenv("RLSCHED_SIM", "native")
    with pytest.raises(ImportError, match="rlsched build-sim"):
        native.activate([])
    monkeypatch.setenv("RLSCHED_SIM", "fast")
    with pytest.raises(ImportError, match="auto, python, native"):
        native.activate([])


def test_build_sim_check_says_what_runs():
    out = CliRunner().invoke(main, ["build-sim", "--check"])
    assert out.exit_code == 0, out.output
    st = native.status()
    assert ("compiled" if st.active else "Python") in out.output and st.mode in out.output


def _child(mode: str) -> dict:
    env = dict(os.environ, RLSCHED_SIM=mode)
    if TRACE.is_file():
        env["PARITY_TRACE"] = str(TRACE)
    out = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True,
                         env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_compiled_engine_replays_exactly_as_the_python_one():
    st = native.status()
    usable = st.active or native._usable(native.build_dir(), native.source_hash()) is None
    if not usable:
        if os.environ.get("RLSCHED_REQUIRE_NATIVE") == "1":
            pytest.fail(f"RLSCHED_REQUIRE_NATIVE=1 but {st.reason}: run 'rlsched build-sim'")
        pytest.skip(f"no compiled build ({st.reason}): 'rlsched build-sim' makes one")
    py, nat = _child("python"), _child("native")
    assert not py["native"] and py["engine_file"].endswith("engine.py")
    assert nat["native"] and nat["engine_file"].endswith(".so")
    assert set(py["cases"]) == set(nat["cases"])
    assert any(c["leafy"] for c in py["cases"].values())  # the fast path was replayed
    assert any(not c["leafy"] for c in py["cases"].values())  # and the node arrays
    assert len({round(c["bsld"], 6) for c in py["cases"].values()}) > 10  # cases differ
    assert all(c["planned"] > 0 for k, c in py["cases"].items() if "conservative" in k)
    diff = {k: (py["cases"][k]["bsld"], nat["cases"][k]["bsld"]) for k in py["cases"]
            if py["cases"][k] != nat["cases"][k]}
    assert not diff, f"compiled and Python replays differ (mean bsld python, compiled): {diff}"


def test_spawned_workers_import_the_real_package(tiny_checkpoint, tmp_path):
    """``--workers N`` spawns processes that inherit ``sys.path``: the compiled build's
    folder (which holds a ``trainer/`` folder) must not be on it, or the workers import
    that folder as the ``trainer`` package and fail (run from outside the checkout, as
    the ``rlsched`` command is, so that only the install finds the package)."""
    usable = native._usable(native.build_dir(), native.source_hash()) is None
    if not usable:
        if os.environ.get("RLSCHED_REQUIRE_NATIVE") == "1":
            pytest.fail("RLSCHED_REQUIRE_NATIVE=1 but no compiled build: 'rlsched build-sim'")
        pytest.skip("no compiled build: 'rlsched build-sim' makes one")
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} not found (shared traces)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RLSCHED_SIM"] = "native"
    out = subprocess.run(
        [sys.executable, "-m", "slurm_plugin", "tune-guard", str(tiny_checkpoint),
         "--trace", str(TRACE), "--limit", "300", "--limits", "1h", "--orders", "age",
         "--workers", "2", "--json"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r["setting"]["label"] for r in json.loads(out.stdout)["rows"]] == ["none",
                                                                              "1h age"]
