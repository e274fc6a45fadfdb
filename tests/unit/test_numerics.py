"""trainer.numerics: the portable kernels are pinned before torch loads, and recorded."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import numerics

ROOT = Path(__file__).resolve().parents[2]


def test_pin_sets_what_is_unset_and_keeps_what_the_admin_set():
    env = {"MKL_CBWR": "COMPATIBLE"}
    added = numerics.pin(env, machine="x86_64")
    assert added == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert env == {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2",
                   "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert numerics.pin(env, machine="x86_64") == {}  # idempotent


@pytest.mark.parametrize(("env", "machine"), [
    ({"RLSCHED_NUMERICS": "native"}, "x86_64"),
    ({"RLSCHED_NUMERICS": " Native "}, "AMD64"),
    ({}, "aarch64"),
    ({}, "arm64"),
])
def test_pin_leaves_native_mode_and_other_cpus_alone(env, machine):
    before = dict(env)
    assert numerics.pin(env, machine=machine) == {}
    assert env == before


def test_an_unknown_mode_warns_and_reads_as_portable():
    env = {"RLSCHED_NUMERICS": "fast"}
    with pytest.warns(UserWarning, match="'fast' is not one of portable, native"):
        assert numerics.pin(env, machine="x86_64")["ATEN_CPU_CAPABILITY"] == "avx2"


def _probe(env_over: dict[str, str], first: str) -> dict[str, object]:
    """A fresh interpreter that imports ``first`` and then torch; what it ran with."""
    env = {k: v for k, v in os.environ.items()
           if k not in (*numerics.PORTABLE_ENV, numerics.ENV_MODE)}
    env.update(env_over)
    code = (f"import {first}, json, torch, trainer.numerics as n;"
            " print(json.dumps(n.describe()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_avx2() -> bool:
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="the portable kernels are pinned on x86-64 only")
@pytest.mark.skipif(not _has_avx2(), reason="this CPU has no AVX2: torch keeps its own")
def test_importing_trainer_first_makes_torch_use_the_avx2_kernels():
    pytest.importorskip("torch")
    pinned = _probe({}, "trainer")
    assert pinned["mode"] == "portable" and pinned["cpu_capability"] == "AVX2"
    assert pinned["MKL_CBWR"] == "AVX2" and pinned["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    native = _probe({"RLSCHED_NUMERICS": "native"}, "trainer")
    assert native["mode"] == "native" and native["MKL_CBWR"] is None
    plain = _probe({}, "torch")  # torch first: its own choice, which native keeps
    assert native["cpu_capability"] == plain["cpu_capability"]


def test_cpu_model_reads_cpuinfo_and_falls_back(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
                    "model\t\t: 17\nmodel name\t: AMD EPYC\nflags\t: fpu\n\n"
                    "processor\t: 1\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: other\n")
    assert numerics.cpu_model(str(info)) == "AMD EPYC (family 25, model 17)"  # the first CPU
    info.write_text("processor\t: 0\nmodel name\t: ARMv8 Processor\n")
    assert numerics.cpu_model(str(info)) == "ARMv8 Processor"
    fallback = numerics.cpu_model(str(tmp_path / "absent"))
    assert fallback == (platform.processor() or "unknown")


def test_describe_records_numpys_version_and_simd_targets():
    import numpy as np

    d = numerics.describe()
    assert d["numpy"] == np.__version__
    assert isinstance(d["cpu"], str) and d["cpu"]
    simd = d["numpy_simd"]
    assert simd is None or (isinstance(simd, list) and all(isinstance(t, str) for t in simd))


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="numpy's x86 SIMD targets")
def test_numpy_simd_says_which_targets_the_environment_turned_off():
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    code = ("import json, numpy, trainer.numerics as n; print(json.dumps(n.numpy_simd()))")

    def probe(extra: dict[str, str]) -> list[str] | None:
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, cwd=ROOT,
                             check=True, capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])

    on = probe({})
    if not on:
        pytest.skip("this numpy dispatches no SIMD target on this CPU")
    off = probe({"NPY_DISABLE_CPU_FEATURES": " ".join(on)})
    assert off is not None and not set(on) & set(off)
