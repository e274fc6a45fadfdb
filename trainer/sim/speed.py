"""Speed models: how long a job runs given where it was placed.

A speed model maps a started job (and its nodes) to its actual run time in the replay.
Only ``"none"`` exists in this slice: the run time recorded in history, whatever the
placement. LATER: ``locality`` (slower across leaf switches, per job sensitivity) and
``bandwidth`` (shared uplinks); they plug in here by name without touching the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from .state import Cluster, JobTable

__all__ = ["SPEED_MODELS", "NoSpeedModel", "SpeedModel", "make_speed_model"]


class SpeedModel(ABC):
    """Actual run time of a job on the nodes it got."""

    name: ClassVar[str] = ""

    @abstractmethod
    def run_time(self, jobs: JobTable, cluster: Cluster, job: int, nodes: np.ndarray,
                 leaves: int) -> int:
        """Seconds job ``job`` runs on ``nodes`` (spanning ``leaves`` leaf switches)."""


class NoSpeedModel(SpeedModel):
    """The run time as recorded (``end - start`` of the record), wherever the job runs."""

    name = "none"

    def run_time(self, jobs: JobTable, cluster: Cluster, job: int, nodes: np.ndarray,
                 leaves: int) -> int:
        """The recorded run time."""
        return int(jobs.run[job])


#: Speed models by name.
SPEED_MODELS: dict[str, type[SpeedModel]] = {"none": NoSpeedModel}


def make_speed_model(name: str) -> SpeedModel:
    """A speed model by name.

    Raises:
        KeyError: If the name is not registered.
    """
    try:
        return SPEED_MODELS[name]()
    except KeyError:
        raise KeyError(f"unknown speed model {name!r}: {sorted(SPEED_MODELS)}") from None
