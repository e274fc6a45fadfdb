"""``OnnxPolicy``: an exported model behind the simulator's policy interface.

:class:`OnnxPolicy` is :class:`trainer.policy.TorchPolicy` with onnxruntime as the
scoring backend: the same observations (:func:`trainer.sim.observe.observe`), the same
candidate sets and fallback placement, the same use of the outputs; only the numbers
come from the ONNX session. ``simulate()`` with it therefore replays what the torch
policy replays: the scores differ by float rounding only (``<= 1e-5``, checked at
export), so the start order and placements are the same unless two jobs' scores lie
within that rounding of each other.

``TorchPolicy`` calls its net's ``forward_batch`` on a one-observation
:class:`~trainer.policy.Batch`; :class:`OrtBackend` provides that method over a
session (the batch of one holds exactly the contract inputs). A scoring hook in
``TorchPolicy`` (e.g. ``_logits(batch)``) would let this subclass override one method
instead of standing in for the net.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, cast

import numpy as np
import torch
from torch import Tensor

from slurm_plugin.features import Normalisation, UserHistory
from slurm_plugin.model import load_model
from trainer.policy import Batch, PolicyNet, TorchPolicy
from trainer.sim.slurm import PrioritySettings

from .contract import OUTPUTS, feed

__all__ = ["OnnxPolicy", "OrtBackend"]


class OrtBackend:
    """Stands in for a :class:`~trainer.policy.PolicyNet` in :class:`TorchPolicy`.

    Args:
        session: An onnxruntime session of a contract model.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self.names = frozenset(i.name for i in session.get_inputs())

    def eval(self) -> OrtBackend:
        """Itself (a session has no training mode)."""
        return self

    def forward_batch(self, b: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """The contract outputs of a batch of one, shaped as ``PolicyNet.forward_batch``.

        Raises:
            ValueError: On a batch of more than one observation.
        """
        if b.size != 1:
            raise ValueError(f"OrtBackend scores one observation at a time, got {b.size}")
        k = int(b.cand_sets.shape[1])
        pj = int(b.place_job[0])
        f = feed(b.jobs[0].numpy(), b.job_mask[0].numpy(), b.nodes[0].numpy(),
                 b.node_leaf[0].numpy(), int(b.node_leaf[0].max()) + 1, b.globals[0].numpy(),
                 b.cand_sets[0].numpy() > 0.5, b.cand_mask[0].numpy(),
                 pj if 0 <= pj < b.hold_index else 0, self.names)
        jl, pl, v = self.session.run(list(OUTPUTS), f)
        return (torch.from_numpy(np.asarray(jl)).unsqueeze(0),
                torch.from_numpy(np.asarray(pl).reshape(k)).unsqueeze(0),
                torch.from_numpy(np.asarray(v).reshape(1)))


class OnnxPolicy(TorchPolicy):
    """A verified ONNX model as a simulator policy (module docstring).

    Args:
        session: An onnxruntime session of a contract model.
        norm: Normalisation of the features (the card's).
        history: Users' history for the run-time, usage and locality estimates.
        settings: Priority settings (the order of the jobs that do not fit now,
            without ``rank_all``).
        placement: Fallback placement name.
        max_sets: Candidate node sets per placement.
        rank_all: As :class:`~trainer.policy.TorchPolicy`'s (the helper's ``rank_all``).
    """

    name: ClassVar[str] = "onnx"

    def __init__(self, session: Any, *, norm: Normalisation | None = None,
                 history: UserHistory | None = None,
                 settings: PrioritySettings | None = None, placement: str = "tree",
                 max_sets: int = 8, rank_all: bool = True,
                 rescore_period: float | None = None) -> None:
        backend = OrtBackend(session)
        # TorchPolicy only calls eval() and forward_batch() on its net
        super().__init__(cast(PolicyNet, backend), history=history, norm=norm,
                         settings=settings, placement=placement, max_sets=max_sets,
                         rank_all=rank_all, rescore_period=rescore_period)
        self.backend = backend

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], **kwargs: Any) -> OnnxPolicy:
        """Not for this class: a checkpoint is a torch policy.

        Raises:
            TypeError: Always (use :meth:`from_file` on an exported model, or
                ``TorchPolicy.from_checkpoint``).
        """
        raise TypeError("OnnxPolicy loads an exported model: OnnxPolicy.from_file(model.onnx);"
                        " for a checkpoint use TorchPolicy.from_checkpoint")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> OnnxPolicy:
        """A policy from ``model.onnx``, checked first as the helper checks it.

        Raises:
            slurm_plugin.model.ModelError: If the model fails the checks.
        """
        m = load_model(path)
        return cls(m.session, norm=m.norm, **kwargs)
