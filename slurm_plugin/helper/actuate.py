"""Changes the helper makes, their audit, and how they reach Slurm.

A :class:`Change` is one field of one job: ``site_factor`` (an integer inside the
configured band, or 0 when ``rlsched helper reset`` puts it back), ``req_nodes`` (a
pending job's required node list; ``None`` clears it) or ``switches`` (a pending job's
``Switches=1@wait``, the wait at most a day; ``None`` clears it). The only Slurm calls
are :meth:`~slurm_plugin.slurm.SlurmClient.set_site_factor`,
:meth:`~slurm_plugin.slurm.SlurmClient.set_req_nodes`,
:meth:`~slurm_plugin.slurm.SlurmClient.clear_req_nodes`,
:meth:`~slurm_plugin.slurm.SlurmClient.set_switches` and
:meth:`~slurm_plugin.slurm.SlurmClient.clear_switches` (argument lists, never a shell;
the client refuses to change the node list or switch count of a job that is not
pending). Nothing here
can set ``Priority=``, hold, cancel or requeue a job.

Audit is write-ahead: the cycle records its changes in the store *before* applying
them (a helper killed in between leaves a record of a change that may not have been
made, never a change without a record), and records each change that then failed
again with mode ``failed``. :class:`StoreAudit` writes to :class:`db.store.Store`;
:class:`MemoryAudit` keeps entries in a list (tests, dry runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..slurm.client import SlurmClient
from ..slurm.errors import SlurmError
from ..slurm.hostlist import compress, expand
from ..slurm.types import SlurmJob
from .config import MAX_SWITCH_WAIT

__all__ = [
    "FIELDS",
    "Actuator",
    "ApplyResult",
    "AuditSink",
    "Change",
    "MemoryAudit",
    "StoreAudit",
    "nodes_text",
    "parse_nodes",
    "plan_reset",
]

#: The job fields the helper changes.
FIELDS = ("site_factor", "req_nodes", "switches")


def nodes_text(nodes: Sequence[str] | None) -> str | None:
    """A node list as one hostlist expression (``None`` stays ``None``)."""
    return None if nodes is None else compress(list(nodes))


@dataclass(frozen=True)
class Change:
    """One change of one job's field.

    Attributes:
        job_id: The job.
        field: ``"site_factor"``, ``"req_nodes"`` or ``"switches"``.
        old: The value before (an int, a tuple of node names, a ``(count, wait)`` pair, or
            ``None``).
        new: The value after (``None`` clears a node list or a switch count).
        reason: Why: ``policy``, ``starvation``, ``steer``, ``locality``, ``rollback`` or
            ``reset``.
    """

    job_id: int
    field: str
    old: Any
    new: Any
    reason: str

    def text(self, value: Any) -> str | None:
        """``old``/``new`` as stored in the audit log."""
        if value is None:
            return None
        if self.field == "req_nodes":
            return nodes_text(value)
        if self.field == "switches":
            count, wait = value
            return f"{int(count)}@{int(wait)}"
        return str(int(value))

    def as_audit(self) -> tuple[int, str, str | None, str | None]:
        """``(job_id, field, old text, new text)``."""
        return (self.job_id, self.field, self.text(self.old), self.text(self.new))

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (for log lines and ``helper once --json``)."""
        return {"job": self.job_id, "field": self.field, "old": self.text(self.old),
                "new": self.text(self.new), "reason": self.reason}


class AuditSink(Protocol):
    """Where changes are recorded."""

    def record(self, changes: Sequence[Change], *, mode: str, model_sha: str | None,
               at: int) -> None:
        """Record ``changes`` in one go (all or nothing)."""


class MemoryAudit:
    """Audit entries kept in a list: ``(at, mode, model_sha, job, field, old, new)``."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, str, str | None, int, str, str | None, str | None]] = []

    def record(self, changes: Sequence[Change], *, mode: str, model_sha: str | None,
               at: int) -> None:
        """Append the changes."""
        for c in changes:
            job, fld, old, new = c.as_audit()
            self.entries.append((at, mode, model_sha, job, fld, old, new))


class StoreAudit:
    """Audit entries in the store's ``audit_log`` table (see :mod:`db.store`).

    The store is opened on first use and re-opened after a failure, so a database that
    was down comes back without restarting the helper.

    Args:
        url: Database URL or SQLite path (``None``/``""``: ``$RLSCHED_DB`` or the default).
        cluster: Cluster name the entries belong to (created in the store if new), or a
            function returning it once known (the helper learns it from Slurm).
        timeout: Seconds a connection or a wait for another writer's lock may take
            (``None``: the store's defaults; SQLite waits 30 s). The helper bounds it so
            that a locked or unreachable store fails the cycle quickly, before any change
            is applied (a change is never made without its audit record).
    """

    def __init__(self, url: str | None,
                 cluster: str | Callable[[], str | None] | None = None,
                 timeout: float | None = None) -> None:
        self.url = url or None
        self.cluster = cluster
        self.timeout = timeout
        self._store: Any = None
        self._cluster_id: int | None = None

    def _cluster_name(self) -> str | None:
        return self.cluster() if callable(self.cluster) else self.cluster

    def store(self) -> Any:
        """The open :class:`db.store.Store`.

        Raises:
            db.session.StoreError: If it cannot be opened (message says what to do).
        """
        if self._store is None:
            from db.session import resolve_url
            from db.store import Store

            self._store = Store.open(resolve_url(self.url), timeout=self.timeout)
        if self._cluster_id is None:
            name = self._cluster_name()
            if name:
                try:
                    self._cluster_id = self._store.cluster(name)
                except Exception:
                    self.close()
                    raise
        return self._store

    def history(self, cluster: str, since: int, lookback: int = 7 * 86400
                ) -> list[tuple[str, int, int, int, int, tuple[str, ...]]]:
        """Finished jobs of ``cluster`` that ended at or after ``since``.

        As ``(user, end, run seconds, limit seconds, cpus, nodes)``, for
        :class:`~slurm_plugin.features.UserHistory`. Jobs submitted up to ``lookback``
        seconds before ``since`` are read (the store indexes submit times).
        """
        store = self.store()
        cid = store.cluster_id(cluster)
        if cid is None:
            return []
        out = []
        for r in store.jobs(cid, since=since - lookback):
            if r.end_time is None or r.start_time is None or r.end_time < since:
                continue
            cpus = r.alloc.cpus or r.req.cpus or 1
            out.append((r.user, int(r.end_time), int(r.end_time - r.start_time),
                        int(r.time_limit or 0), int(cpus), tuple(r.nodes)))
        return out

    def record(self, changes: Sequence[Change], *, mode: str, model_sha: str | None,
               at: int) -> None:
        """Insert the changes in one transaction.

        Raises:
            db.session.StoreError: If the store cannot be opened.
            sqlalchemy.exc.SQLAlchemyError: If the insert fails (the store is re-opened on
                the next call).
        """
        if not changes:
            return
        store = self.store()
        try:
            store.audit_many([c.as_audit() for c in changes], model_sha,
                             cluster_id=self._cluster_id, mode=mode, at=at)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        """Close the store (re-opened on next use)."""
        if self._store is not None:
            try:
                self._store.close()
            finally:
                self._store = None


@dataclass
class ApplyResult:
    """What :meth:`Actuator.apply` did.

    Attributes:
        applied: Changes Slurm accepted.
        failed: Changes Slurm refused, with the error.
        skipped: Changes not tried (the time budget ran out or Slurm stopped answering).
        aborted: Why the rest was skipped, if it was.
    """

    applied: list[Change]
    failed: list[tuple[Change, str]]
    skipped: list[Change]
    aborted: str | None = None


class Actuator:
    """Applies changes through a :class:`~slurm_plugin.slurm.SlurmClient`, within bounds.

    Args:
        client: The Slurm client.
        band: ``(lo, hi)``: a site factor outside it is never written (0 is allowed only
            for a ``reset``).
        budget: Seconds the whole batch may take; the rest waits for the next cycle.
        max_consecutive_failures: After this many failures in a row (slurmctld down or
            timing out), stop and leave the rest.
        clock: Monotonic clock (for tests).
    """

    def __init__(self, client: SlurmClient, band: tuple[int, int], *, budget: float = 60.0,
                 max_consecutive_failures: int = 3, clock: Any = time.monotonic) -> None:
        self.client = client
        self.lo, self.hi = band
        self.budget = budget
        self.max_failures = max_consecutive_failures
        self.clock = clock

    def check(self, change: Change) -> None:
        """Refuse a change the helper must never make.

        Raises:
            ValueError: For an unknown field, a site factor outside the band (0 is allowed
                for a reset), or a node list that is not a list of node names.
        """
        if change.field == "site_factor":
            v = change.new
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"site factor for job {change.job_id} is not an int: {v!r}")
            if not (self.lo <= v <= self.hi or (v == 0 and change.reason == "reset")):
                raise ValueError(f"site factor {v} for job {change.job_id} is outside the"
                                 f" band [{self.lo}, {self.hi}]")
        elif change.field == "req_nodes":
            if change.new is not None and (isinstance(change.new, str) or not change.new):
                raise ValueError(f"node list for job {change.job_id} must be a non-empty"
                                 " sequence of names")
        elif change.field == "switches":
            v = change.new
            if v is not None and not (
                    isinstance(v, tuple) and len(v) == 2 and v[0] == 1
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                    and 1 <= v[1] <= MAX_SWITCH_WAIT):
                raise ValueError(f"switch request for job {change.job_id} must be (1, wait)"
                                 f" with 1 <= wait <= {MAX_SWITCH_WAIT:g} s, not {v!r}")
        else:
            raise ValueError(f"the helper never changes {change.field!r}")

    def _apply_one(self, change: Change) -> None:
        self.check(change)
        if change.field == "site_factor":
            self.client.set_site_factor(change.job_id, int(change.new))
        elif change.field == "switches":
            if change.new is None:
                self.client.clear_switches(change.job_id)
            else:
                self.client.set_switches(change.job_id, *change.new)
        elif change.new is None:
            self.client.clear_req_nodes(change.job_id)
        else:
            self.client.set_req_nodes(change.job_id, list(change.new))

    def apply(self, changes: Sequence[Change]) -> ApplyResult:
        """Apply the changes in order; one failing change does not stop the others."""
        start = self.clock()
        res = ApplyResult([], [], [])
        streak = 0
        for i, c in enumerate(changes):
            if self.clock() - start > self.budget:
                res.skipped = list(changes[i:])
                res.aborted = f"time budget of {self.budget:g} s used up"
                break
            try:
                self._apply_one(c)
            except (SlurmError, ValueError, TypeError) as exc:
                res.failed.append((c, str(exc)))
                streak += 1
                if streak >= self.max_failures:
                    res.skipped = list(changes[i + 1:])
                    res.aborted = f"{streak} failures in a row (last: {exc})"
                    break
                continue
            streak = 0
            res.applied.append(c)
        return res


def parse_nodes(text: str | None) -> tuple[str, ...] | None:
    """An audited node list back to sorted names (``None`` stays ``None``)."""
    return None if text is None else tuple(sorted(expand(text)))


def _follow(table: dict[int, Any], job_id: int, mode: str, value: Any) -> None:
    """Keep ``table[job_id]`` as the value the helper set and that is still in effect.

    An ``enforce`` entry sets it; a ``reset``, a clearing entry, or a ``failed`` entry of
    that same value (the change was never made) forgets it.
    """
    if mode == "enforce" and value:
        table[job_id] = value
    elif mode in ("failed", "reset") or value is None:
        if mode != "failed" or table.get(job_id) == value:
            table.pop(job_id, None)


def plan_reset(entries: Sequence[tuple[int, str, str, str | None, str | None]],
               jobs: Mapping[int, SlurmJob]) -> tuple[list[Change], list[str]]:
    """What ``rlsched helper reset`` undoes: the helper's own values, still in place.

    Args:
        entries: Audit entries oldest first, as ``(job, field, mode, old, new)``.
        jobs: The jobs Slurm knows now, by id.

    Returns:
        ``(changes, notes)``: site factors back to 0, node lists and switch counts
        cleared, only on
        pending jobs whose current value is still the one the helper set (a value someone
        changed since is left alone, with a note saying so).
    """
    site: dict[int, int] = {}
    steer: dict[int, tuple[str, ...]] = {}
    switches: dict[int, str] = {}
    for job_id, fld, mode, _old, new in entries:
        if mode not in ("enforce", "failed", "reset"):
            continue  # shadow entries changed nothing
        if fld == "switches":
            _follow(switches, job_id, mode, new)
            continue
        if fld == "site_factor":
            if mode == "enforce" and new is not None:
                site[job_id] = int(new)
            elif mode in ("failed", "reset") or new is None:
                site.pop(job_id, None)
        elif fld == "req_nodes":
            _follow(steer, job_id, mode, parse_nodes(new))
    changes: list[Change] = []
    notes: list[str] = []
    for job_id, value in sorted(site.items()):
        job = jobs.get(job_id)
        if job is None or not job.is_pending:
            continue
        cur = job.site_factor
        if cur is None or cur == value:
            if value != 0:
                changes.append(Change(job_id, "site_factor", value if cur is None else cur, 0,
                                      "reset"))
        elif cur != 0:
            notes.append(f"job {job_id}: site factor is {cur}, the helper set {value}:"
                         " changed by someone else since, left alone")
    for job_id, nodes in sorted(steer.items()):
        job = jobs.get(job_id)
        if job is None or not job.is_pending:
            continue
        if tuple(sorted(job.required_nodes)) == nodes:
            changes.append(Change(job_id, "req_nodes", nodes, None, "reset"))
        elif job.required_nodes:
            notes.append(f"job {job_id}: node list is {compress(list(job.required_nodes))},"
                         f" the helper set {compress(list(nodes))}: left alone")
    for job_id, text in sorted(switches.items()):
        job = jobs.get(job_id)
        if job is None or not job.is_pending or not job.switches:
            continue
        count = int(text.partition("@")[0])
        if job.switches == count:  # (Slurm may have capped the wait: the count tells)
            changes.append(Change(job_id, "switches", (job.switches, job.switches_wait or 0),
                                  None, "reset"))
        else:
            notes.append(f"job {job_id}: switch count is {job.switches}, the helper set"
                         f" {count}: left alone")
    return changes, notes
