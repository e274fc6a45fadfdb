"""Special Slurm values, durations and timestamps, converted once, at the edge.

Everything the parsers read goes through these helpers, so the rest of rlsched never
sees ``UNLIMITED``, ``NO_VAL``, ``4294967295`` or ``{"set": ..., "number": ...}``.
A wrong value raises :class:`FieldError` naming the field; the parsers turn it into a
:class:`~slurm_plugin.slurm.errors.SlurmError` with the command attached.
"""

from __future__ import annotations

import re
from calendar import monthrange, timegm
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

#: 32-bit special values (slurm.h): INFINITE, NO_VAL, and their 16/64-bit cousins.
INFINITE = 0xFFFFFFFF
NO_VAL = 0xFFFFFFFE
INFINITE16 = 0xFFFF
NO_VAL16 = 0xFFFE
INFINITE64 = 0xFFFFFFFFFFFFFFFF
NO_VAL64 = 0xFFFFFFFFFFFFFFFE
_SPECIAL = {INFINITE, NO_VAL, INFINITE64, NO_VAL64}

#: Strings Slurm prints for "no limit" or "not known".
_NONE_STRINGS = {
    "", "unlimited", "infinite", "partition_limit", "none", "unknown", "n/a", "(null)",
    "not_set", "invalid",
}


#: Kinds of :class:`FieldError`, so callers (ingest) can count bad rows by cause.
KIND_VALUE = "value"
KIND_TIME = "time"
KIND_NUMBER = "number"
KIND_STATE = "state"
KIND_MISSING = "missing"
KIND_FIELD_COUNT = "field count"


class FieldError(ValueError):
    """A field had a value of the wrong type or form.

    Attributes:
        field: Path of the field, e.g. ``jobs[3].time_limit`` or ``line 7.Submit``.
        message: What is wrong with it.
        kind: One of the ``KIND_*`` constants.
    """

    def __init__(self, field: str, message: str, kind: str = KIND_VALUE) -> None:
        self.field = field
        self.message = message
        self.kind = kind
        super().__init__(f"{field}: {message}")


def number(value: Any, field: str, *, special16: bool = False) -> int | None:
    """Read a Slurm number in any JSON form, mapping special values to ``None``.

    Accepts an int, an integral float, ``None`` (unset), or the data_parser object
    ``{"set": bool, "infinite": bool, "number": int}`` (v0.0.40 and later).
    ``NO_VAL``/``INFINITE`` (32 and 64 bit, and 16 bit when ``special16``) give ``None``.

    Raises:
        FieldError: For strings, booleans, lists and malformed objects.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        if "number" not in value and "set" not in value:
            raise FieldError(
                field, f"expected a number object, got keys {sorted(value)}", KIND_NUMBER
            )
        if value.get("infinite") is True or value.get("set") is False:
            return None
        return number(value.get("number"), field, special16=special16)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(
            field, f"expected a number, got {type(value).__name__} {value!r:.40}", KIND_NUMBER
        )
    if isinstance(value, float):
        if value != value or not value.is_integer():
            raise FieldError(field, f"expected an integer, got {value!r}", KIND_NUMBER)
        value = int(value)
    if value in _SPECIAL or (special16 and value in (INFINITE16, NO_VAL16)):
        return None
    return int(value)


def number_or(value: Any, field: str, default: int) -> int:
    """Like :func:`number` but with a default for unset/special values."""
    n = number(value, field)
    return default if n is None else n


def _time_number(value: Any, field: str) -> int | None:
    try:
        return number(value, field)
    except FieldError as exc:
        raise FieldError(exc.field, exc.message, KIND_TIME) from None


def timestamp(value: Any, field: str) -> int | None:
    """An epoch-seconds time; 0 and special values mean "not set" and give ``None``."""
    n = _time_number(value, field)
    return None if n is None or n <= 0 else n


def minutes_to_seconds(value: Any, field: str) -> int | None:
    """A time limit in minutes (JSON) to seconds; unset/INFINITE give ``None``."""
    n = _time_number(value, field)
    return None if n is None else n * 60


def text(value: Any, field: str) -> str:
    """A string field; ``None`` gives ``""``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FieldError(field, f"expected a string, got {type(value).__name__} {value!r:.40}")
    return value


def states(value: Any, field: str) -> tuple[str, tuple[str, ...]]:
    """A state as a string (``"IDLE+DRAIN"``, ``"idle"``) or a list (v0.0.40+).

    Returns:
        The base state (upper case) and the remaining flags.
    """
    if isinstance(value, str):
        parts = [p for p in re.split(r"[+,\s]+", value.strip().upper()) if p]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = [v.upper() for v in value]
    else:
        raise FieldError(field, f"expected a state string or list, got {value!r:.40}", KIND_STATE)
    if not parts:
        raise FieldError(field, "empty state", KIND_STATE)
    # Trailing '*' (not responding) and '~' (powered down) decorate sinfo's short states.
    base = parts[0].rstrip("*~#!%$@^-")
    return base, tuple(parts[1:])


#: Slurm stores nice and site factor as unsigned 32-bit with this offset (``NICE_OFFSET``).
NICE_OFFSET = 0x80000000


def site_factor(value: Any, field: str) -> int | None:
    """A site factor, decoding Slurm's ``NICE_OFFSET`` encoding where it is still applied.

    Slurm keeps ``site_factor`` as ``NICE_OFFSET + value`` internally; printers that pass
    the raw number on give values above 2**30 (the settable range is +/- 2147483645, so
    plain values that large do not occur in practice).
    """
    n = number(value, field)
    if n is None:
        return None
    return n - NICE_OFFSET if n > (1 << 30) else n


def signed32(value: int) -> int:
    """Decode a nice value printed as unsigned 32-bit (``4294967246`` is ``-50``)."""
    return value - (1 << 32) if value >= (1 << 31) else value


# --------------------------------------------------------------------- text forms
_DURATION = re.compile(
    r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+(?:\.\d+)?))?$"
)


def duration(value: str, field: str) -> int | None:
    """Parse a Slurm duration to seconds; ``UNLIMITED``/``Partition_Limit``... give ``None``.

    Forms (as sacct/scontrol print and accept): ``MM``, ``MM:SS``, ``HH:MM:SS``,
    ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``; fractional seconds are dropped.
    """
    s = value.strip()
    if s.lower() in _NONE_STRINGS:
        return None
    m = _DURATION.match(s)
    if not m:
        raise FieldError(field, f"not a Slurm duration: {value!r:.40}", KIND_TIME)
    d, a, b, c = m.group("d"), m.group("a"), m.group("b"), m.group("c")
    cs = int(float(c)) if c is not None else None
    if d is not None:  # D-HH[:MM[:SS]]
        secs = int(d) * 86400 + int(a) * 3600 + int(b or 0) * 60 + (cs or 0)
    elif cs is not None:  # HH:MM:SS
        secs = int(a) * 3600 + int(b or 0) * 60 + cs
    elif b is not None:  # MM:SS
        secs = int(a) * 60 + int(b)
    else:  # MM
        secs = int(a) * 60
    return secs


def format_duration(seconds: int) -> str:
    """Seconds to ``D-HH:MM:SS`` (or ``HH:MM:SS`` under a day), as Slurm prints it."""
    d, rem = divmod(int(seconds), 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})$")


def iso_utc(value: str, field: str) -> int | None:
    """A ``YYYY-MM-DDTHH:MM:SS`` time printed with ``TZ=UTC`` to epoch seconds.

    ``Unknown``, ``None`` and empty give ``None``. rlsched runs every Slurm command with
    ``TZ=UTC`` so that the printed local time is UTC.
    """
    s = value.strip()
    if s.lower() in _NONE_STRINGS:
        return None
    m = _ISO.match(s)
    if not m:
        raise FieldError(field, f"not a Slurm timestamp: {value!r:.40}", KIND_TIME)
    h, mi, se = int(s[11:13]), int(s[14:16]), int(s[17:19])
    if h > 23 or mi > 59 or se > 60:
        raise FieldError(field, f"not a Slurm timestamp: {value!r:.40}", KIND_TIME)
    day = _day_start(s[:10])
    if day is None:
        raise FieldError(field, f"not a Slurm timestamp: {value!r:.40}", KIND_TIME)
    return day + h * 3600 + mi * 60 + se


@lru_cache(maxsize=4096)
def _day_start(date: str) -> int | None:
    """Epoch seconds of a ``YYYY-MM-DD`` day at 00:00 UTC, ``None`` if no such day.

    Cached: the same days recur on many rows.
    """
    y, mo, d = int(date[:4]), int(date[5:7]), int(date[8:10])
    if not (1 <= mo <= 12 and 1 <= d <= monthrange(y, mo)[1]):
        return None
    return timegm((y, mo, d, 0, 0, 0, 0, 0, 0))


def int_text(value: str, field: str) -> int | None:
    """An integer printed as text; special strings and special numbers give ``None``."""
    s = value.strip()
    if s.lower() in _NONE_STRINGS:
        return None
    try:
        n = int(s)
    except ValueError:
        raise FieldError(field, f"not an integer: {value!r:.40}", KIND_NUMBER) from None
    return None if n in _SPECIAL else n
