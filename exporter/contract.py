"""The model contract as the writer needs it (see :mod:`exporter`'s docstring).

The names, formats and the card location are the reader's
(:mod:`slurm_plugin.model`: ``MODEL_FORMAT``, ``CARD_FORMAT``, ``CARD_SUFFIX``,
``INPUTS``, ``OUTPUTS``, ``card_path``), re-exported here; this module adds the
``metadata_props`` keys and card fields the exporter writes, and :func:`feed`, the
input dict of one observation. numpy, :mod:`slurm_plugin` and the standard library
only: ``rlsched verify`` runs with the runtime install.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from slurm_plugin.model import (
    CARD_FORMAT,
    CARD_SUFFIX,
    INPUTS,
    MODEL_FORMAT,
    OUTPUTS,
    card_path,
)

__all__ = [
    "CARD_FIELDS",
    "CARD_FORMAT",
    "CARD_SUFFIX",
    "CLUSTER_FIELDS",
    "INPUTS",
    "META_CLUSTER",
    "META_CREATED",
    "META_FORMAT",
    "META_NORMALISATION",
    "META_SCHEMA_HASH",
    "META_SCHEMA_VERSION",
    "META_TRAINING",
    "META_VERSION",
    "MODEL_FORMAT",
    "OUTPUTS",
    "TRAINING_FIELDS",
    "card_path",
    "feed",
]

# metadata_props keys (strings) inside the ONNX file
META_FORMAT: Final = "rlsched.format"
META_SCHEMA_VERSION: Final = "rlsched.schema_version"
META_SCHEMA_HASH: Final = "rlsched.schema_hash"
META_NORMALISATION: Final = "rlsched.normalisation"
META_CLUSTER: Final = "rlsched.cluster"
META_TRAINING: Final = "rlsched.training"
META_VERSION: Final = "rlsched.version"
META_CREATED: Final = "rlsched.created"

#: Keys every card has (the contract's; a card may carry more).
CARD_FIELDS: Final[tuple[str, ...]] = (
    "format", "sha256", "opset", "schema_version", "schema_hash", "normalisation",
    "inputs", "outputs", "cluster", "training", "evaluation", "rlsched_version", "created")
#: Keys of the card's ``cluster``.
CLUSTER_FIELDS: Final[tuple[str, ...]] = ("name", "nodes", "gpus", "leaves", "switch_tree_hash")
#: Keys of the card's ``training``.
TRAINING_FIELDS: Final[tuple[str, ...]] = ("algorithm", "config", "window")


def feed(jobs: np.ndarray, job_mask: np.ndarray, nodes: np.ndarray, node_leaf: np.ndarray,
         n_leaves: int, globals_: np.ndarray, cand_sets: np.ndarray | None = None,
         cand_mask: np.ndarray | None = None, place_job: int = 0,
         names: frozenset[str] | set[str] | None = None) -> dict[str, np.ndarray]:
    """The input dict of a contract model for one observation (dtypes as the contract).

    Args:
        jobs: ``(J, Fj)`` job features.
        job_mask: ``(J,)`` jobs that may start now.
        nodes: ``(N, Fn)`` node features (``N >= 1``).
        node_leaf: ``(N,)`` leaf switch of each node.
        n_leaves: Number of leaf switches.
        globals_: ``(G,)`` global features.
        cand_sets: ``(K, N)`` candidate node sets; ``None``: no candidate (``K = 0``).
        cand_mask: ``(K,)`` usable candidates; ``None``: all of them.
        place_job: Row of the job the candidates belong to (0 when there is none).
        names: Only these inputs (the ones a session declares); ``None``: all.

    Raises:
        ValueError: On shapes that do not agree (with what was expected).
    """
    j, n = int(jobs.shape[0]), int(nodes.shape[0])
    if n < 1:
        raise ValueError("the node table must have at least one row")
    sets = (np.zeros((0, n), dtype=bool) if cand_sets is None
            else np.ascontiguousarray(cand_sets, dtype=bool))
    if sets.ndim != 2 or sets.shape[1] != n:
        raise ValueError(f"cand_sets must be (K, {n}), got {sets.shape}")
    k = int(sets.shape[0])
    cmask = (np.ones(k, dtype=bool) if cand_mask is None
             else np.ascontiguousarray(cand_mask, dtype=bool))
    if cmask.shape != (k,):
        raise ValueError(f"cand_mask must be ({k},), got {cmask.shape}")
    if job_mask.shape != (j,) or node_leaf.shape != (n,):
        raise ValueError(f"job_mask must be ({j},) and node_leaf ({n},), got"
                         f" {job_mask.shape} and {node_leaf.shape}")
    full = {
        "jobs": np.ascontiguousarray(jobs, dtype=np.float32),
        "job_mask": np.ascontiguousarray(job_mask, dtype=bool),
        "nodes": np.ascontiguousarray(nodes, dtype=np.float32),
        "node_leaf": np.ascontiguousarray(node_leaf, dtype=np.int64),
        "n_leaves": np.array(int(n_leaves), dtype=np.int64),
        "globals": np.ascontiguousarray(globals_, dtype=np.float32),
        "cand_sets": sets,
        "cand_mask": cmask,
        "place_job": np.array(int(place_job), dtype=np.int64),
    }
    if names is None:
        return full
    return {k: v for k, v in full.items() if k in names}
