"""The helper's runtime (slurm_plugin) must import without torch or onnx."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = r"""
import importlib, json, pkgutil, sys
import slurm_plugin
mods = []
for m in pkgutil.walk_packages(slurm_plugin.__path__, "slurm_plugin."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except ImportError as exc:
        # only optional backends may be unimportable, and only for their optional package
        if getattr(exc, "name", None) not in ("pyslurm",):
            raise
    mods.append(m.name)
HEAVY = ("torch", "onnx", "trainer", "exporter", "gymnasium")
heavy = sorted(k for k in sys.modules if k.split(".")[0] in HEAVY)
print(json.dumps({"modules": mods, "heavy": heavy}))
"""


def test_slurm_plugin_imports_without_torch_or_onnx():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "slurm_plugin.slurm.cli_backend" in result["modules"]
    assert "slurm_plugin.cli" in result["modules"]
    assert result["heavy"] == []
