"""Suite-wide checks: with RLSCHED_REQUIRE_TRAIN=1 (CI), the training stack must be present.

Tests of the torch policy, the Gymnasium env and the ONNX exporter skip when their
packages are missing (a runtime-only install); CI installs them and sets
``RLSCHED_REQUIRE_TRAIN=1`` so that such a skip becomes an error instead.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

import trainer  # noqa: F401  (pins the portable kernels before any test loads torch)

TRAIN_PACKAGES = ("torch", "gymnasium", "onnx", "onnxruntime", "matplotlib")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fail early when CI asked for the training stack and it is not installed."""
    if os.environ.get("RLSCHED_REQUIRE_TRAIN") == "1":
        missing = [p for p in TRAIN_PACKAGES if importlib.util.find_spec(p) is None]
        if missing:
            raise pytest.UsageError(
                f"RLSCHED_REQUIRE_TRAIN=1 but {', '.join(missing)} not installed: "
                "run contrib/run-tests (it installs torch==2.13.0 and the train extra)")


@pytest.fixture
def replayed_policies(monkeypatch: pytest.MonkeyPatch) -> list:
    """The policy of every ``Simulator.run()`` the test makes, in order."""
    from trainer.sim.engine import Simulator

    seen: list = []
    real = Simulator.run

    def run(self):  # type: ignore[no-untyped-def]
        seen.append(self.policy)
        return real(self)

    monkeypatch.setattr(Simulator, "run", run)
    return seen


@pytest.fixture
def returns_of(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``returns_of(owner, name)``: wraps ``owner.name``; the list of ``(args, result)``."""

    def wrap(owner: object, name: str) -> list:
        calls: list = []
        real = getattr(owner, name)

        def spy(*a, **k):  # type: ignore[no-untyped-def]
            out = real(*a, **k)
            calls.append((a, out))
            return out

        monkeypatch.setattr(owner, name, spy)
        return calls

    return wrap
