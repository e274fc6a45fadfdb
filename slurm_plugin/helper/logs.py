"""Structured log lines: one JSON object per line on stderr (journald keeps them as is).

Every line has ``ts`` (ISO UTC), ``level``, ``event`` and the event's fields, e.g.::

    {"ts": "2026-11-22T10:00:00Z", "level": "error", "event": "cycle_failed",
     "error": "squeue --all --json: timed out after 10 s", "retry_in": 30.0}

Values are JSON-encoded (job-derived strings stay data; nothing is formatted into
a shell or a template).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["LEVELS", "EventLog"]

#: Levels, lowest first.
LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class EventLog:
    """Writes structured events as JSON lines.

    Args:
        stream: Where to write (default: ``sys.stderr`` at the time of each write).
        level: The lowest level written (``debug``, ``info``, ``warning``, ``error``).
        clock: Wall clock (for tests).
    """

    def __init__(self, stream: TextIO | None = None, level: str = "info",
                 clock: Any = time.time) -> None:
        if level not in LEVELS:
            raise ValueError(f"unknown log level {level!r}: use one of {sorted(LEVELS)}")
        self.stream = stream
        self.level = LEVELS[level]
        self.clock = clock
        self._lock = threading.Lock()

    def event(self, level: str, event: str, **fields: Any) -> None:
        """Write one event if ``level`` is at or above the configured level."""
        if LEVELS[level] < self.level:
            return
        rec = {"ts": _iso(self.clock()), "level": level, "event": event, **fields}
        line = json.dumps(rec, default=str, separators=(",", ":"), ensure_ascii=True)
        out = self.stream or sys.stderr
        with self._lock:
            try:
                out.write(line + "\n")
                out.flush()
            except (OSError, ValueError):
                pass  # a closed stderr must not stop the helper

    def debug(self, event: str, **fields: Any) -> None:
        """A ``debug`` event."""
        self.event("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        """An ``info`` event."""
        self.event("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        """A ``warning`` event."""
        self.event("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        """An ``error`` event."""
        self.event("error", event, **fields)
