"""Suite-wide checks: with RLSCHED_REQUIRE_TRAIN=1 (CI), the training stack must be present.

Tests of the torch policy, the Gymnasium env and the ONNX exporter skip when their
packages are missing (a runtime-only install); CI installs them and sets
``RLSCHED_REQUIRE_TRAIN=1`` so that such a skip becomes an error instead.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

TRAIN_PACKAGES = ("torch", "gymnasium", "onnx", "onnxruntime", "matplotlib")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fail early when CI asked for the training stack and it is not installed."""
    if os.environ.get("RLSCHED_REQUIRE_TRAIN") == "1":
        missing = [p for p in TRAIN_PACKAGES if importlib.util.find_spec(p) is None]
        if missing:
            raise pytest.UsageError(
                f"RLSCHED_REQUIRE_TRAIN=1 but {', '.join(missing)} not installed: "
                "run contrib/run-tests (it installs torch==2.13.0 and the train extra)")
