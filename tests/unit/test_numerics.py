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


def test_compatible_mode_pins_mkls_branch_for_every_vendor():
    env = {"RLSCHED_NUMERICS": "compatible"}
    assert numerics.pin(env, machine="x86_64") == {
        "ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    mine = {"RLSCHED_NUMERICS": "compatible", "MKL_CBWR": "AVX2"}  # the admin's kept
    assert "MKL_CBWR" not in numerics.pin(mine, machine="x86_64")
    assert mine["MKL_CBWR"] == "AVX2"
    assert numerics.pin({"RLSCHED_NUMERICS": "compatible"}, machine="aarch64") == {}


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
    with pytest.warns(UserWarning, match="'fast' is not one of portable, compatible, native"):
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
    compatible = _probe({"RLSCHED_NUMERICS": "compatible"}, "trainer")
    assert compatible["mode"] == "compatible" and compatible["MKL_CBWR"] == "COMPATIBLE"
    assert compatible["cpu_capability"] == "AVX2"
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


def test_numerics_cost_reads_the_out_folder_and_digests_the_weights(tmp_path):
    pytest.importorskip("torch")
    from trainer.policy import PolicyConfig, PolicyNet, save_checkpoint

    from .benchmark_module import load_benchmark

    nc = load_benchmark("numerics_cost")
    assert nc.out_folder(["rlsched", "train", "rl", "--out", "/x/y"]) == Path("/x/y")
    assert nc.out_folder(["rlsched", "--out=/z"]) == Path("/z")
    assert nc.out_folder(["rlsched", "train"]) is None
    assert nc.weights_digest(tmp_path / "absent") == ""
    net = PolicyNet(PolicyConfig(hidden=8))
    save_checkpoint(tmp_path / "a.pt", net)
    first = nc.weights_digest(tmp_path)
    save_checkpoint(tmp_path / "a.pt", net)  # saved again: the same weights
    assert nc.weights_digest(tmp_path) == first and len(first) == 16
    with __import__("torch").no_grad():
        next(net.parameters()).add_(1e-3)
    save_checkpoint(tmp_path / "a.pt", net)
    assert nc.weights_digest(tmp_path) != first
    with pytest.raises(SystemExit, match="after --"):
        nc.main(["--repeats", "1"])
