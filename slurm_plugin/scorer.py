"""The ONNX scorer: the DESIGN's ``Policy`` (``score``, ``place``) on a verified model.

:class:`OnnxScorer` feeds an :class:`~slurm_plugin.features.Observation` to the model's
onnxruntime session as the model contract says (all inputs are built; only those the
session declares are fed) and returns:

- :meth:`OnnxScorer.score`: ``job_logits``, one score per pending job plus the "hold"
  score last (``J + 1`` values; jobs that cannot start now are ``-1e9``);
- :meth:`OnnxScorer.place`: the index of the best candidate node set of one job
  (``argmax`` of ``place_logits``; ties go to the lowest index).

When only the job scores are wanted, the place head still needs candidate inputs: the
scorer feeds one empty, masked candidate (``K = 1``), which the contract allows and
which avoids zero-sized tensors (onnxruntime 1.31 fails on some zero-row ops).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .features import GLOBAL_FEATURES, JOB_FEATURES, NODE_FEATURES, Observation
from .model import LoadedModel
from .placement import Candidates

__all__ = ["MASKED", "OnnxScorer", "ScoreError"]

#: The logit of a masked job or candidate (contract).
MASKED = -1e9


class ScoreError(Exception):
    """The model failed on an observation (onnxruntime error or malformed output)."""


class OnnxScorer:
    """The policy behind one verified :class:`~slurm_plugin.model.LoadedModel`.

    Thread-safe: onnxruntime sessions may run concurrently (the job_submit hint server
    scores from another thread).
    """

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self._inputs = frozenset(model.input_names)

    @property
    def sha256(self) -> str:
        """The model's sha256."""
        return self.model.sha256

    def _feed(self, obs: Observation, job_mask: np.ndarray, cand_sets: np.ndarray,
              cand_mask: np.ndarray, place_job: int) -> dict[str, np.ndarray]:
        j, n = obs.n_jobs, obs.n_nodes
        if obs.jobs.shape != (j, len(JOB_FEATURES)):
            raise ScoreError(f"jobs table is {obs.jobs.shape}, expected ({j}, {len(JOB_FEATURES)})")
        if obs.nodes.shape != (n, len(NODE_FEATURES)) or n < 1:
            raise ScoreError(f"nodes table is {obs.nodes.shape}, expected (N>=1,"
                             f" {len(NODE_FEATURES)})")
        if obs.globals.shape != (len(GLOBAL_FEATURES),):
            raise ScoreError(f"globals are {obs.globals.shape}, expected ({len(GLOBAL_FEATURES)},)")
        full = {
            "jobs": np.ascontiguousarray(obs.jobs, dtype=np.float32),
            "job_mask": np.ascontiguousarray(job_mask, dtype=bool),
            "nodes": np.ascontiguousarray(obs.nodes, dtype=np.float32),
            "node_leaf": np.ascontiguousarray(obs.node_leaf, dtype=np.int64),
            "n_leaves": np.array(int(obs.n_leaves), dtype=np.int64),
            "globals": np.ascontiguousarray(obs.globals, dtype=np.float32),
            "cand_sets": np.ascontiguousarray(cand_sets, dtype=bool),
            "cand_mask": np.ascontiguousarray(cand_mask, dtype=bool),
            "place_job": np.array(int(place_job), dtype=np.int64),
        }
        return {k: v for k, v in full.items() if k in self._inputs}

    def _run(self, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        try:
            out: list[Any] = self.model.session.run(["job_logits", "place_logits"], feed)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own many types
            msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
            raise ScoreError(f"model {self.model.short_sha} failed: {msg}") from None
        jl = np.asarray(out[0], dtype=np.float64).reshape(-1)
        pl = np.asarray(out[1], dtype=np.float64).reshape(-1)
        return jl, pl

    def score(self, obs: Observation, job_mask: np.ndarray | None = None) -> np.ndarray:
        """One score per pending job, then the hold score (``J + 1`` float64 values).

        Args:
            obs: The observation.
            job_mask: Overrides ``obs.job_mask`` (the helper ranks every pending job by
                feeding all True; the ``fits_now`` feature still tells the model which can
                start now).

        Raises:
            ScoreError: If the model fails or returns the wrong number of values; a NaN
                score counts as a failure too.
        """
        mask = obs.job_mask if job_mask is None else np.asarray(job_mask, dtype=bool)
        if mask.shape != (obs.n_jobs,):
            raise ScoreError(f"job_mask has shape {mask.shape}, expected ({obs.n_jobs},)")
        n = obs.n_nodes
        feed = self._feed(obs, mask, np.zeros((1, n), dtype=bool), np.zeros(1, dtype=bool), 0)
        jl, _ = self._run(feed)
        if jl.shape != (obs.n_jobs + 1,):
            raise ScoreError(f"job_logits has {jl.size} values, expected {obs.n_jobs + 1}")
        if np.isnan(jl).any():
            raise ScoreError(f"model {self.model.short_sha} returned NaN job scores")
        return jl

    def place(self, obs: Observation, job_row: int, candidates: Candidates) -> int:
        """Index of the candidate node set the model prefers for job row ``job_row``.

        Raises:
            ValueError: If there are no candidates or ``job_row`` is out of range.
            ScoreError: If the model fails or returns the wrong number of values.
        """
        k = len(candidates)
        if k == 0:
            raise ValueError("place() needs at least one candidate node set")
        if not 0 <= job_row < obs.n_jobs:
            raise ValueError(f"job row {job_row} outside 0..{obs.n_jobs - 1}")
        if candidates.sets.shape != (k, obs.n_nodes):
            raise ValueError(f"candidate sets are {candidates.sets.shape}, expected"
                             f" ({k}, {obs.n_nodes})")
        feed = self._feed(obs, obs.job_mask, candidates.sets, np.ones(k, dtype=bool), job_row)
        _, pl = self._run(feed)
        if pl.shape != (k,):
            raise ScoreError(f"place_logits has {pl.size} values, expected {k}")
        if np.isnan(pl).any():
            raise ScoreError(f"model {self.model.short_sha} returned NaN placement scores")
        return int(np.argmax(pl))
