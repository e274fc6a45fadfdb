"""Tiny ONNX policies that honour the model contract, with their cards (tests only).

The real exporter (issue 6, ``exporter/``) writes the same two files: ``model.onnx``
carrying the ``rlsched.*`` metadata, and ``model.onnx.card.json`` in the card format of
the model contract. These builders need torch and onnx (the train/export extras):
callers skip with ``pytest.importorskip("torch")`` / ``("onnx")`` first.

:class:`TinyPolicy` scores each job with a fixed linear function of its features (so a
test knows the expected order by hand) and each candidate node set by how many leaf
switches it spans (fewer is better: a "compact" placement), plus a small preference
for nodes with more free GPUs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from slurm_plugin import features as F

INPUT_NAMES = ["jobs", "job_mask", "nodes", "node_leaf", "n_leaves", "globals", "cand_sets",
               "cand_mask", "place_job"]
OUTPUT_NAMES = ["job_logits", "place_logits", "value"]


def job_weights(**by_name: float) -> list[float]:
    """A job weight vector from feature names, e.g. ``job_weights(log_limit=-1.0)``."""
    w = [0.0] * len(F.JOB_FEATURES)
    for name, v in by_name.items():
        w[F.JOB_FEATURES.index(name)] = float(v)
    return w


def tiny_policy(weights: list[float], hold: float = -50.0, spread_penalty: float = 10.0) -> Any:
    """A :class:`TinyPolicy` (built lazily so importing this module needs no torch)."""
    import torch

    class TinyPolicy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wj = torch.nn.Parameter(torch.tensor(weights, dtype=torch.float32))
            gpu = F.NODE_FEATURES.index("free_gpu_frac")
            wn = torch.zeros(len(F.NODE_FEATURES))
            wn[gpu] = 0.01
            self.wn = torch.nn.Parameter(wn)
            self.hold = torch.nn.Parameter(torch.tensor(float(hold)))
            self.spread = float(spread_penalty)

        def forward(self, jobs, job_mask, nodes, node_leaf, n_leaves, globals_, cand_sets,
                    cand_mask, place_job):
            jl = (jobs * self.wj).sum(-1)
            jl = torch.where(job_mask, jl, torch.full_like(jl, -1e9))
            hold = (self.hold + globals_.sum() * 0.0).reshape(1)
            job_logits = torch.cat([jl, hold])
            leaf = node_leaf.to(torch.float32).unsqueeze(0).expand(cand_sets.shape[0], -1)
            hi = torch.where(cand_sets, leaf, torch.full_like(leaf, -1.0)).max(-1).values
            lo = torch.where(cand_sets, leaf, torch.full_like(leaf, 1e6)).min(-1).values
            node_score = (nodes * self.wn).sum(-1)
            pref = (cand_sets.to(torch.float32) * node_score).sum(-1)
            pl = -self.spread * (hi - lo) + pref + place_job.to(torch.float32) * 0.0 \
                + n_leaves.to(torch.float32) * 0.0
            pl = torch.where(cand_mask, pl, torch.full_like(pl, -1e9))
            value = hold.sum()
            return job_logits, pl, value

    return TinyPolicy()


def _example_inputs() -> tuple[Any, ...]:
    import torch

    j, n, k = 3, 5, 2
    return (torch.zeros(j, len(F.JOB_FEATURES)), torch.ones(j, dtype=torch.bool),
            torch.zeros(n, len(F.NODE_FEATURES)), torch.zeros(n, dtype=torch.int64),
            torch.tensor(1, dtype=torch.int64), torch.zeros(len(F.GLOBAL_FEATURES)),
            torch.ones(k, n, dtype=torch.bool), torch.ones(k, dtype=torch.bool),
            torch.tensor(0, dtype=torch.int64))


def export(path: Path, module: Any, *, opset: int = 17,
           metadata: dict[str, str] | None = None,
           norm: F.Normalisation | None = None) -> Path:
    """Export ``module`` to ``path`` with the contract's names and ``rlsched.*`` metadata."""
    import onnx
    import torch

    path = Path(path)
    torch.onnx.export(
        module, _example_inputs(), str(path), input_names=INPUT_NAMES,
        output_names=OUTPUT_NAMES, opset_version=opset, dynamo=False,
        dynamic_axes={"jobs": {0: "J"}, "job_mask": {0: "J"}, "nodes": {0: "N"},
                      "node_leaf": {0: "N"}, "cand_sets": {0: "K", 1: "N"},
                      "cand_mask": {0: "K"}, "job_logits": {0: "J1"},
                      "place_logits": {0: "K"}})
    model = onnx.load(str(path))
    meta = {
        "rlsched.format": "rlsched-model/1",
        "rlsched.schema_version": str(F.SCHEMA_VERSION),
        "rlsched.schema_hash": F.schema_hash(norm),
        "rlsched.normalisation": json.dumps(F.schema(norm)["normalisation"]),
        "rlsched.cluster": json.dumps({"name": "test", "nodes": 16, "gpus": 128,
                                       "switch_tree_hash": ""}),
        "rlsched.training": json.dumps({"algorithm": "tiny"}),
        "rlsched.version": "0.1.0",
        "rlsched.created": "2026-11-01T00:00:00Z",
    }
    meta.update(metadata or {})
    del model.metadata_props[:]
    for k, v in meta.items():
        p = model.metadata_props.add()
        p.key, p.value = k, v
    onnx.save(model, str(path))
    return path


def write_card(path: Path, *, opset: int = 17, norm: F.Normalisation | None = None,
               **override: Any) -> Path:
    """Write ``path + ".card.json"`` for the model at ``path`` (``override`` replaces keys)."""
    path = Path(path)
    card = {
        "format": "rlsched-model-card/1",
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "opset": opset,
        "schema_version": F.SCHEMA_VERSION,
        "schema_hash": F.schema_hash(norm),
        "normalisation": F.schema(norm)["normalisation"],
        "inputs": list(INPUT_NAMES),
        "outputs": list(OUTPUT_NAMES),
        "cluster": {"name": "test", "nodes": 16, "gpus": 128, "leaves": 4,
                    "switch_tree_hash": ""},
        "training": {"algorithm": "tiny", "config": {}, "window": []},
        "evaluation": {},
        "rlsched_version": "0.1.0",
        "created": "2026-11-01T00:00:00Z",
    }
    card.update(override)
    out = Path(str(path) + ".card.json")
    out.write_text(json.dumps(card, indent=2))
    return out


def build_model(directory: Path, weights: list[float] | None = None, *,
                name: str = "model.onnx", **kw: Any) -> Path:
    """Export a :func:`tiny_policy` and its card into ``directory``; return the ONNX path.

    Default weights prefer short time limits (``log_limit`` weight -1).
    """
    path = Path(directory) / name
    export(path, tiny_policy(weights or job_weights(log_limit=-1.0), **kw))
    write_card(path)
    path.chmod(0o644)
    Path(str(path) + ".card.json").chmod(0o644)
    return path
