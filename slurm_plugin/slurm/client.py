"""The one interface everything in rlsched uses to talk to Slurm."""

from __future__ import annotations

import abc
import os
import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from .hostlist import compress
from .types import (
    PENDING,
    RUNNING,
    AccountingJob,
    SchedulerConfig,
    SlurmJob,
    SlurmNode,
    SwitchTree,
)

#: Default timeout (seconds) for one Slurm call.
DEFAULT_TIMEOUT = 30.0


class SlurmClient(abc.ABC):
    """Read the state of a Slurm cluster and make the few changes rlsched is allowed.

    Every call is bounded by :attr:`timeout` and raises
    :class:`~slurm_plugin.slurm.errors.SlurmError` on any failure.
    The only changes are a job's site factor and a pending job's required node list:
    nothing here holds, cancels, requeues or re-prioritises a job.
    """

    #: Short name of the backend (``"cli"`` or ``"pyslurm"``).
    backend: str = ""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout

    # ------------------------------------------------------------------ reading
    @abc.abstractmethod
    def jobs(self, states: Iterable[str] = (PENDING, RUNNING)) -> list[SlurmJob]:
        """Jobs slurmctld knows, restricted to ``states`` (base states, upper case)."""

    def pending_jobs(self) -> list[SlurmJob]:
        """Jobs waiting to start."""
        return self.jobs((PENDING,))

    def running_jobs(self) -> list[SlurmJob]:
        """Jobs holding nodes now."""
        return self.jobs((RUNNING,))

    @abc.abstractmethod
    def nodes(self) -> list[SlurmNode]:
        """All nodes, each once."""

    @abc.abstractmethod
    def topology(self) -> SwitchTree:
        """The switch tree (empty when topology/tree is not configured)."""

    @abc.abstractmethod
    def config(self) -> SchedulerConfig:
        """The scheduler configuration: priority weights, SchedulerParameters..."""

    @abc.abstractmethod
    def accounting(
        self,
        start: datetime,
        end: datetime,
        *,
        states: Sequence[str] = (),
        all_users: bool = True,
    ) -> list[AccountingJob]:
        """Jobs from accounting (sacct) in the time window ``[start, end)``.

        Array tasks and requeued jobs come as their own records; job steps are not
        returned. ``states`` filters on the job state (client-side where Slurm ignores it).
        """

    # ------------------------------------------------------------------ changing
    @abc.abstractmethod
    def set_site_factor(self, job_id: int, value: int) -> None:
        """Set a job's ``SiteFactor`` (added to its multifactor priority)."""

    @abc.abstractmethod
    def set_req_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        """Require a pending job to run on ``nodes`` (ReqNodeList).

        Raises:
            SlurmError: If the job is not pending (a running job would be resized).
        """

    @abc.abstractmethod
    def clear_req_nodes(self, job_id: int) -> None:
        """Remove a pending job's ReqNodeList (rollback of :meth:`set_req_nodes`)."""

    @abc.abstractmethod
    def set_switches(self, job_id: int, count: int, wait: int) -> None:
        """Ask that a pending job run within ``count`` leaf switches (``Switches=``).

        It waits up to ``wait`` seconds for them (``Switches=count@wait``; Slurm caps the
        wait at its ``max_switch_wait``, and the wait runs from its next scheduling
        attempt).

        Raises:
            ValueError: If ``count`` is not >= 1 or ``wait`` not >= 1.
            SlurmError: If the job is not pending, or the update fails.
        """

    @abc.abstractmethod
    def clear_switches(self, job_id: int) -> None:
        """Remove a pending job's switch count (``Switches=0``; undoes :meth:`set_switches`)."""


#: A node name rlsched will put into ReqNodeList (Slurm's own names are like this).
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def switches_text(count: int, wait: int) -> str:
    """``Switches=`` value for :meth:`SlurmClient.set_switches`: ``count@[D-]HH:MM:SS``.

    Raises:
        ValueError: If ``count`` or ``wait`` is not an int >= 1.
    """
    for name, v in (("count", count), ("wait", wait)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"switch {name} must be an int >= 1, got {v!r}")
    d, rest = divmod(wait, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{count}@{f'{d}-' if d else ''}{h:02d}:{m:02d}:{sec:02d}"


def req_nodes_hostlist(nodes: Sequence[str]) -> str:
    """Check node names for ``set_req_nodes`` and compress them to one hostlist.

    Raises:
        ValueError: If ``nodes`` is empty or holds something that is not a node name.
    """
    names = list(nodes)
    if not names:
        raise ValueError("set_req_nodes needs at least one node (use clear_req_nodes)")
    bad = [n for n in names if not isinstance(n, str) or not _NODE_NAME.match(n)]
    if bad:
        raise ValueError(f"not a node name: {bad[0]!r}")
    return compress(names)


def make_client(backend: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> SlurmClient:
    """Build a client.

    Args:
        backend: ``"cli"``, ``"pyslurm"`` or ``None`` (``$RLSCHED_SLURM_BACKEND``,
            else ``"cli"``).
        timeout: Seconds allowed for each Slurm call.
    """
    name = backend or os.environ.get("RLSCHED_SLURM_BACKEND", "cli")
    if name == "cli":
        from .cli_backend import CliSlurmClient

        return CliSlurmClient(timeout=timeout)
    if name == "pyslurm":
        from .pyslurm_backend import PySlurmClient

        return PySlurmClient(timeout=timeout)
    raise ValueError(f"unknown Slurm backend {name!r}: use 'cli' or 'pyslurm'")
