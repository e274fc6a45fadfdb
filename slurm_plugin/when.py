"""Times and spans as admins type them on the command line, read one way everywhere."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import click

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(value: str, *, now: datetime | None = None) -> datetime:
    """Read a time the way an admin types it.

    ``2026-01-31``, ``2026-01-31T12:00:00`` (UTC unless an offset is given), ``now``, or
    ``now-7d`` / ``now-12h`` / ``now-30m``.

    Raises:
        click.BadParameter: For anything else.
    """
    now = now or datetime.now(timezone.utc)
    v = value.strip()
    if v == "now":
        return now
    if v.startswith("now-"):
        return now - parse_span(v[4:])
    try:
        t = datetime.fromisoformat(v)
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: use an ISO date/time (2026-01-31 or 2026-01-31T12:00:00, UTC),"
            " 'now', or 'now-7d' / 'now-12h'"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def epoch_s(t: datetime, *, ceil: bool = False) -> int:
    """Epoch seconds of ``t`` (naive: UTC), truncated, or with ``ceil`` rounded up.

    Round up an exclusive window end: Slurm's accounting bounds are whole seconds, so a
    job in the same second as a sub-second end would otherwise fall outside.
    """
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    secs = int(t.timestamp())
    return secs + 1 if ceil and t.microsecond else secs


def parse_span(value: str) -> timedelta:
    """``1d``, ``12h``, ``30m``, ``2w``, ``90s`` as a timedelta.

    Raises:
        click.BadParameter: For anything else, or a span that is not positive.
    """
    v = value.strip().lower()
    try:
        n, unit = int(v[:-1]), v[-1]
        seconds = n * _DURATION_UNITS[unit]
    except (ValueError, KeyError, IndexError):
        raise click.BadParameter(f"{value!r}: use a span like 1d, 12h, 30m, 2w") from None
    if seconds <= 0:
        raise click.BadParameter(f"{value!r}: the span must be positive")
    return timedelta(seconds=seconds)
