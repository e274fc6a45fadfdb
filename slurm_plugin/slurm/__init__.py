"""The Slurm boundary: one :class:`SlurmClient` interface, a CLI/JSON and a pyslurm backend."""

from .client import DEFAULT_TIMEOUT, SlurmClient, make_client
from .errors import SlurmError
from .types import (
    PENDING,
    RUNNING,
    AccountingJob,
    SchedulerConfig,
    SlurmJob,
    SlurmNode,
    Switch,
    SwitchTree,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "PENDING",
    "RUNNING",
    "AccountingJob",
    "SchedulerConfig",
    "SlurmClient",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "Switch",
    "SwitchTree",
    "make_client",
]
