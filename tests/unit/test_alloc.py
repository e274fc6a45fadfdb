"""trainer.alloc: training processes keep freed memory (glibc's malloc settings)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from trainer import alloc


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return False
    return sys.platform.startswith("linux")


@pytest.fixture
def fresh(monkeypatch):
    """Each test decides anew (the real function decides once per process)."""
    monkeypatch.setattr(alloc, "_applied", None)


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")
def test_glibc_accepts_every_setting_once(fresh, monkeypatch):
    monkeypatch.delenv(alloc.ENV_VAR, raising=False)
    assert alloc.keep_freed_memory() is True
    # decided once: a later call neither calls mallopt again nor changes the answer
    monkeypatch.setenv(alloc.ENV_VAR, "0")
    assert alloc.keep_freed_memory() is True


class _FakeGlibc:
    """A C library that has glibc's version call and a mallopt refusing ``refuse``."""

    def __init__(self, refuse: int | None) -> None:
        self.calls: list[tuple[int, int]] = []
        refused = refuse

        class _Fn:
            def __call__(fn, param, value):  # noqa: N805
                self.calls.append((param, value))
                return 0 if param == refused else 1

        self.mallopt = _Fn()
        self.gnu_get_libc_version = lambda: b"2.36"


def test_every_setting_is_tried_and_a_refusal_reported(fresh, monkeypatch):
    monkeypatch.delenv(alloc.ENV_VAR, raising=False)
    lib = _FakeGlibc(refuse=alloc._M_MMAP_THRESHOLD)
    monkeypatch.setattr(alloc.ctypes, "CDLL", lambda *a: lib)
    assert alloc.keep_freed_memory(mmap_threshold=5, trim_threshold=6, top_pad=7) is False
    assert sorted(lib.calls) == [(alloc._M_MMAP_THRESHOLD, 5), (alloc._M_TOP_PAD, 7),
                                 (alloc._M_TRIM_THRESHOLD, 6)]
    monkeypatch.setattr(alloc, "_applied", None)
    monkeypatch.setattr(alloc.ctypes, "CDLL", lambda *a: _FakeGlibc(refuse=None))
    assert alloc.keep_freed_memory() is True


def test_an_old_glibc_gets_the_largest_mmap_threshold_it_allows(fresh, monkeypatch):
    monkeypatch.delenv(alloc.ENV_VAR, raising=False)
    lib = _FakeGlibc(refuse=None)
    real = lib.mallopt
    # older glibc: HEAP_MAX_SIZE / 2 at most
    lib.mallopt = lambda p, v: 0 if p == alloc._M_MMAP_THRESHOLD and v > (32 << 20) else real(p, v)
    monkeypatch.setattr(alloc.ctypes, "CDLL", lambda *a: lib)
    assert alloc.keep_freed_memory() is True
    assert (alloc._M_MMAP_THRESHOLD, 32 << 20) in lib.calls


def test_the_admin_can_turn_it_off(fresh, monkeypatch):
    monkeypatch.setenv(alloc.ENV_VAR, "0")
    called = []
    monkeypatch.setattr(alloc.ctypes, "CDLL", lambda *a: called.append(a))
    assert alloc.keep_freed_memory() is False and called == []


def test_another_c_library_is_left_alone(fresh, monkeypatch):
    class Musl:  # has mallopt (a stub) but not glibc's version call
        def mallopt(self, *a):
            raise AssertionError("called mallopt on a C library that is not glibc")

    monkeypatch.delenv(alloc.ENV_VAR, raising=False)
    monkeypatch.setattr(alloc.ctypes, "CDLL", lambda *a: Musl())
    assert alloc.keep_freed_memory() is False


def _fresh_process(code: str, **env: str) -> str:
    """Run ``code`` in a new interpreter (the setting is decided once per process)."""
    e = {k: v for k, v in os.environ.items() if k != alloc.ENV_VAR}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**e, **env}, timeout=120, check=True)
    return r.stdout.strip()


_STATE = "import sys, {mod}; a = sys.modules.get('trainer.alloc'); " \
         "print(None if a is None else a._applied)"


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")
def test_importing_trainer_applies_it_once_for_every_command_and_worker():
    # every command (rlsched train, evaluate, replay-live, ...) and every worker process
    # (local or a Ray actor) imports trainer; no call site can be missed
    assert _fresh_process(_STATE.format(mod="trainer")) == "True"
    assert _fresh_process(_STATE.format(mod="trainer.rl.workers")) == "True"
    assert _fresh_process(_STATE.format(mod="trainer"), **{alloc.ENV_VAR: "0"}) == "False"


def test_the_helper_never_applies_it():
    # the helper's processes keep the C library's own settings: they never load trainer
    code = _STATE.format(mod="slurm_plugin.cli, slurm_plugin.helper.cli, slurm_plugin.helper.cycle")
    assert _fresh_process(code) == "None"
