"""The same floating-point results on every Intel x86-64 machine.

Torch picks its CPU kernels by the instruction set it finds (ATen's AVX2 or AVX-512
kernels, MKL's code paths), and each rounds differently. Training amplifies the
differences: on the Lublin trace one imitation command gave top-1 agreement 0.889 with
AVX-512 kernels, 0.891 with the scalar ones and 0.894 with AVX2 ones, on one machine,
and the three nets scored 297 to 429 mean bounded slowdown on the test period. So a
retraining on another host, or a figure read on another machine, was another net.

Importing :mod:`trainer` therefore pins, before torch is loaded, the kernels every
x86-64 CPU of the last decade has (``portable``, the default): ATen's AVX2 kernels
(``ATEN_CPU_CAPABILITY``), MKL's AVX2 code path (``MKL_CBWR``, MKL's conditional
numerical reproducibility) and oneDNN's (``ONEDNN_MAX_CPU_ISA``). A variable already
set in the environment is kept, and ``RLSCHED_NUMERICS=native`` pins nothing (each
machine's fastest kernels). Training runs on one thread
(:func:`trainer.policy.deterministic_torch`). The cost was not measurable here: 3
epochs of Lublin imitation took 23.3 s pinned and 23.8 s native. :func:`describe` says
what was in effect; ``config.json`` records it next to every output, with numpy's
version and SIMD targets and the CPU's model name.

MKL keeps its AVX2 branch on Intel CPUs only: Intel's documentation of conditional
numerical reproducibility says that on other vendors' CPUs ``MKL_CBWR=AVX2`` runs the
automatic branch instead, and that its ``COMPATIBLE`` branch gives the same results on
Intel and compatible CPUs. So ``portable`` repeats a net across Intel machines, not
across vendors. Measured: on an Intel Xeon (family 6, model 167; stop 59) eight Lublin
RL runs chose as stop 57's did (the four choices keeping every line scored 134.3,
149.7, 149.3 and 145.0 on the test period both times), where an AMD EPYC (family 25,
model 1; stop 58) gave the same imitation net but other RL runs.
``RLSCHED_NUMERICS=compatible`` pins MKL's ``COMPATIBLE`` branch (the rest as
``portable``), which Intel documents for a site that trains on both vendors' CPUs; it
gives another net than ``portable`` (on that Xeon, imitation top-1 0.894 against 0.895),
so keep one mode for a site. It did not make the vendors agree (stop 60, an AMD EPYC,
family 25, model 17, which repeated stop 58's RL runs exactly): the Lublin imitation
``--imitate-from lrf``, 3 epochs, reported top-1 0.898 there under ``compatible``
against the Xeon's 0.894 (0.896 against 0.895 under ``portable``). The weights differ
under both modes (``benchmarks/numerics_cost.py``'s digests of that imitation's
folder): ``d3049a03b0b2ee16`` (``portable``) and ``06a30b3153e9f858``
(``compatible``) on the AMD EPYC, ``f0bfab5319a0d946`` and ``81566f3c712c9738`` on an
Intel Xeon (family 6, model 167; stop 61; ``portable`` gave its digest in both of two runs).
So some arithmetic rounds by vendor in training itself, beyond MKL's branch; nets and
figures repeat on one vendor's machines only.
It costs time (``benchmarks/numerics_cost.py``, side by side on that Xeon): 3 epochs
of Lublin imitation took 35.0 s against 26.8 s, 4 RL updates 72.8 s against 65.5 s.

NumPy picks its own SIMD kernels too (``NPY_DISABLE_CPU_FEATURES`` turns them off), and
they differ by machine as well: on an AVX-512 CPU float64 ``exp``, ``log``, ``log1p`` and
``expm1`` round differently with its AVX-512 kernels than with its AVX2 ones, and
``argsort``'s default (unstable) sort orders tied keys differently. They are left alone,
because nothing here depends on them: the simulator, features and trainer sort with
explicit tie-breaks (``lexsort``, ``kind="stable"``), and the features round float64
results to float32. Measured on an AVX-512 machine with numpy 2.4.6 (stop 39): the
Lublin imitation (``--imitate-from seaf``, 3 epochs) and 3 updates of PPO from it gave
bit-identical weights with numpy's AVX-512 kernels on and off, and with the compiled and
the Python simulator; stop 59 found the same for 40 updates of Lublin RL from a net
imitating ``lrf`` (every checkpoint bit-identical with ``NPY_DISABLE_CPU_FEATURES``
turning off its AVX-512 targets).
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from collections.abc import Mapping, MutableMapping
from typing import Any

ENV_MODE = "RLSCHED_NUMERICS"
MODES = ("portable", "compatible", "native")
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""What ``portable`` sets where unset: the instruction set every x86-64 CPU since 2013 has."""
MODE_ENV: dict[str, dict[str, str]] = {
    "portable": PORTABLE_ENV,
    "compatible": {**PORTABLE_ENV, "MKL_CBWR": "COMPATIBLE"},
    "native": {},
}
"""What each mode sets where unset. ``compatible``: MKL's branch for Intel and other
vendors' CPUs alike (its AVX2 branch holds on Intel CPUs only)."""

_X86 = {"x86_64", "amd64", "x64"}


def mode(environ: Mapping[str, str] | None = None) -> str:
    """``portable`` (the default), ``compatible`` or ``native``, from ``RLSCHED_NUMERICS``.

    Any other value warns (saying what to set) and reads as ``portable``.
    """
    env = os.environ if environ is None else environ
    value = env.get(ENV_MODE, "portable").strip().lower() or "portable"
    if value not in MODES:
        warnings.warn(f"{ENV_MODE}={value!r} is not one of {', '.join(MODES)}: using"
                      " portable (unset it, or set native for each machine's fastest kernels)",
                      stacklevel=2)
        return "portable"
    return value


def pin(environ: MutableMapping[str, str] | None = None, machine: str | None = None
        ) -> dict[str, str]:
    """Set the mode's kernel variables (:data:`MODE_ENV`) that are unset; return what it set.

    Does nothing under ``RLSCHED_NUMERICS=native``, on a CPU that is not x86-64 (its
    kernels are another family altogether) or once torch is loaded (it has read them).
    """
    env = os.environ if environ is None else environ
    arch = (machine if machine is not None else platform.machine()).lower()
    want = MODE_ENV[mode(env)]
    if not want or arch not in _X86:
        return {}
    if environ is None and "torch" in sys.modules:
        return {}
    added = {k: v for k, v in want.items() if k not in env}
    env.update(added)
    return added


def describe() -> dict[str, Any]:
    """What the floating-point results of this process depend on (for ``config.json``)."""
    out: dict[str, Any] = {"mode": mode(), "machine": platform.machine()}
    for key in PORTABLE_ENV:
        out[key] = os.environ.get(key)
    out["cpu"] = cpu_model()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        out["numpy"] = numpy.__version__
        out["numpy_simd"] = numpy_simd()
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.__version__
        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out


def numpy_simd() -> list[str] | None:
    """NumPy's SIMD targets in effect (``None``: numpy does not say).

    Those it was built to dispatch that this CPU has and ``NPY_DISABLE_CPU_FEATURES``
    left on.
    """
    import importlib

    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):  # 2, 1
        try:
            umath = importlib.import_module(name)
        except ImportError:
            continue
        dispatch, found = (getattr(umath, "__cpu_dispatch__", None),
                           getattr(umath, "__cpu_features__", None))
        if dispatch is not None and found is not None:
            return [str(t) for t in dispatch if found.get(t)]
    return None


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, family and model (Linux's ``/proc/cpuinfo``).

    A virtual machine may show a bare name ("AMD EPYC") for several generations; the
    family and model numbers tell them apart. Without ``/proc/cpuinfo``: what
    ``platform`` says.
    """
    seen: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if seen:
                        break  # the first processor's block is enough
                    continue
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "cpu family", "model"):
                    seen.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = seen.get("model name") or platform.processor() or "unknown"
    if "cpu family" in seen and "model" in seen:
        return f"{name} (family {seen['cpu family']}, model {seen['model']})"
    return name
