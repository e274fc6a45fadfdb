"""The helper's state file: what ``rlsched helper status`` shows and what survives a restart.

One small JSON document, replaced atomically (written to a temporary file in the same
directory, fsynced, then renamed), so a helper killed at any point leaves either the
old or the new state, never a torn one. It holds:

- the last cycle: when, how long, mode, model, outcome, counts;
- counters since the state was created: cycles, errors, changes by field and mode;
- ``site``: the site factor the helper last set (or, in shadow mode, would have set)
  per pending job, the base of the hysteresis when Slurm does not show it;
- ``steer``: the jobs the helper steered (node list, cycles since), for the rollback.

Values set in ``enforce`` and in ``shadow`` mode are kept apart (``enforced`` and
``shadow`` sections): switching modes never mistakes a would-be value for a real one.
A lock file beside the state (``<state>.lock``, ``flock``) keeps two helpers, or a
helper and ``rlsched helper reset``, from working on the same state at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..fsio import atomic_write

__all__ = ["STATE_VERSION", "HelperState", "LockedError", "Section", "Steering", "lock"]

#: Bumped when the layout changes (an unknown version is ignored, with a warning).
STATE_VERSION = 1


class LockedError(RuntimeError):
    """Another helper (or ``helper reset``) holds the state lock."""


@dataclass
class Steering:
    """A job the helper steered.

    Attributes:
        nodes: The node names it required (sorted).
        cycles: Cycles seen since (the job still pending).
        at: When the steering was set, epoch s.
    """

    nodes: list[str]
    cycles: int = 0
    at: int = 0


@dataclass
class Section:
    """Values of one mode, by job id: site factors, steering, rollbacks, leaf waits.

    ``switches`` holds when each job was asked to wait for one leaf switch. A job whose
    steering was rolled back is not steered again while it stays pending; a job asked to
    wait for one leaf is not asked again.
    """

    site: dict[int, int] = field(default_factory=dict)
    steer: dict[int, Steering] = field(default_factory=dict)
    rolled_back: dict[int, int] = field(default_factory=dict)
    switches: dict[int, int] = field(default_factory=dict)

    def prune(self, pending: set[int]) -> None:
        """Forget site factors, rollbacks and leaf waits of jobs no longer pending."""
        for table in (self.site, self.rolled_back, self.switches):
            for k in [k for k in table if k not in pending]:
                del table[k]

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (job ids as strings)."""
        return {"site": {str(k): v for k, v in self.site.items()},
                "steer": {str(k): asdict(v) for k, v in self.steer.items()},
                "rolled_back": {str(k): v for k, v in self.rolled_back.items()},
                "switches": {str(k): v for k, v in self.switches.items()}}

    @classmethod
    def from_json(cls, data: Any) -> Section:
        """Read back :meth:`to_json` (malformed entries are dropped)."""
        sec = cls()
        if not isinstance(data, dict):
            return sec
        for k, v in (data.get("site") or {}).items():
            with contextlib.suppress(TypeError, ValueError):
                sec.site[int(k)] = int(v)
        for k, v in (data.get("rolled_back") or {}).items():
            with contextlib.suppress(TypeError, ValueError):
                sec.rolled_back[int(k)] = int(v)
        for k, v in (data.get("switches") or {}).items():
            with contextlib.suppress(TypeError, ValueError):
                sec.switches[int(k)] = int(v)
        for k, v in (data.get("steer") or {}).items():
            with contextlib.suppress(TypeError, ValueError, KeyError):
                sec.steer[int(k)] = Steering(sorted(str(n) for n in v["nodes"]),
                                             int(v.get("cycles", 0)), int(v.get("at", 0)))
        return sec


@dataclass
class HelperState:
    """Everything in the state file (see the module docstring)."""

    started_at: int | None = None
    pid: int | None = None
    mode: str = ""
    model: str = ""
    model_sha: str | None = None
    model_status: str = ""
    last_cycle_at: int | None = None
    last_cycle_ok_at: int | None = None
    last_cycle_seconds: float | None = None
    last_cycle: dict[str, Any] = field(default_factory=dict)
    cycles: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    last_error: str | None = None
    last_error_at: int | None = None
    changes: dict[str, int] = field(default_factory=dict)
    enforced: Section = field(default_factory=Section)
    shadow: Section = field(default_factory=Section)

    def section(self, enforce: bool) -> Section:
        """The section of a mode."""
        return self.enforced if enforce else self.shadow

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to change counter ``key`` (e.g. ``"enforce:site_factor"``)."""
        if n:
            self.changes[key] = self.changes.get(key, 0) + n

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict."""
        d = {k: v for k, v in asdict(self).items() if k not in ("enforced", "shadow")}
        d["version"] = STATE_VERSION
        d["enforced"] = self.enforced.to_json()
        d["shadow"] = self.shadow.to_json()
        return d

    @classmethod
    def from_json(cls, data: Any) -> HelperState:
        """Read back :meth:`to_json`; unknown keys are ignored.

        Raises:
            ValueError: If ``data`` is not a state of a known version.
        """
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"not a helper state of version {STATE_VERSION}")
        st = cls()
        for k in asdict(st):
            if k in ("enforced", "shadow") or k not in data:
                continue
            setattr(st, k, data[k])
        st.changes = {str(k): int(v) for k, v in dict(st.changes or {}).items()}
        st.last_cycle = dict(st.last_cycle or {})
        st.enforced = Section.from_json(data.get("enforced"))
        st.shadow = Section.from_json(data.get("shadow"))
        return st

    # ------------------------------------------------------------------ file
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> HelperState:
        """The state in ``path``; a fresh state if the file does not exist.

        Raises:
            ValueError: If the file exists but is not a readable state (the message says
                to move it away).
        """
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise ValueError(f"cannot read the helper state {p}: {exc.strerror}") from None
        try:
            return cls.from_json(json.loads(text))
        except (json.JSONDecodeError, ValueError, TypeError) as exc:
            raise ValueError(f"helper state {p} is unreadable ({exc}): move it away and"
                             " restart (the helper then starts from a fresh state)") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically (temporary file, fsync, rename); create the directory if needed."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        atomic_write(p, data.encode("utf-8"), 0o640)


@contextlib.contextmanager
def lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive lock of a state file (``<path>.lock``) for the block.

    Raises:
        LockedError: If another process holds it.
    """
    p = Path(str(path) + ".lock")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(f"{p} is locked: another 'rlsched helper' runs on this state"
                              " (stop it first, e.g. systemctl stop rlsched-helper)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
