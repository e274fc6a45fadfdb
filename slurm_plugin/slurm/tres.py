"""TRES strings (``cpu=4,mem=4000M,gres/gpu=2``) and GRES counts (``gpu:a100:4(S:0-1)``).

Slurm prints trackable resources in two forms: named (``sacct`` ``ReqTRES``/``AllocTRES``,
``scontrol``) and by id (``1=4,2=4000,4=2,1001=2``, the database form; the ids come from
``sacctmgr show tres``). :func:`parse_tres` reads both into ``{name: int}`` with memory in
MiB; :func:`format_tres` writes the named form back.

Special values: nothing is converted here. A TRES value Slurm uses as a marker (e.g.
``NO_VAL64``, 18446744073709551614, or ``INFINITE64``) comes back as that plain integer;
the caller that knows the field decides what it means. Usage-statistics strings whose
values are times (``cpu=00:01:02`` in ``TRESUsageInTot``) are not TRES counts and are
rejected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType

__all__ = [
    "STATIC_TRES_IDS",
    "TresError",
    "format_tres",
    "gpu_count",
    "is_memory_key",
    "parse_gres_count",
    "parse_tres",
]

#: Ids Slurm gives its built-in TRES (ids of ``gres/...``, ``license/...`` and the like are
#: assigned per cluster from 1001 on: read them from ``sacctmgr show tres``).
STATIC_TRES_IDS: Mapping[int, str] = MappingProxyType(
    {1: "cpu", 2: "mem", 3: "energy", 4: "node", 5: "billing", 6: "fs/disk", 7: "vmem", 8: "pages"}
)

#: Keys :func:`format_tres` writes first, in this order; others follow sorted.
_FIRST_KEYS = ("cpu", "mem", "energy", "node", "billing")
_FIRST_RANK = {key: rank for rank, key in enumerate(_FIRST_KEYS)}

_KEY = re.compile(r"[^\s=,]+")
_ID_KEY = re.compile(r"[0-9]+")
_VALUE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([KMGTPkmgtp])?")
_COUNT = re.compile(r"([0-9]+)([KMGTPkmgtp])?")
_POWER = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_NULLS = frozenset({"", "(null)", "n/a", "none"})
_GRES_PREFIXES = ("gres/", "gres:")


class TresError(ValueError):
    """A TRES string or GRES string is malformed.

    Attributes:
        item: The offending item (or the whole string when no single item is to blame).
        reason: One line saying what is wrong.
    """

    def __init__(self, item: str, reason: str) -> None:
        self.item = item
        self.reason = reason
        super().__init__(f"bad TRES/GRES item {item!r}: {reason}")

    def __reduce__(self) -> tuple[type[TresError], tuple[str, str]]:
        return (type(self), (self.item, self.reason))


def is_memory_key(key: str) -> bool:
    """Tell whether a TRES key holds memory (``mem``, or any key ending in ``/mem``).

    Memory values are kept in MiB and printed with an ``M`` suffix.

    Args:
        key: A TRES name, e.g. ``"mem"`` or ``"gres/gpu"``.

    Returns:
        True for memory keys.
    """
    return key == "mem" or key.endswith("/mem")


def _parse_value(key: str, raw: str, item: str) -> int:
    """Read one TRES value; memory to MiB, fractions rounded up."""
    if raw.isascii() and raw.isdigit():  # the common case, fast
        return int(raw)
    match = _VALUE.fullmatch(raw)
    if match is None:
        raise TresError(item, f"value {raw!r} is not a non-negative number")
    number, unit = match.groups()
    if unit is None:
        if "." in number:
            raise TresError(item, f"value {raw!r} is not a whole number")
        return int(number)
    power = _POWER[unit.upper()]
    if "." not in number:  # integer with a unit: exact integer arithmetic
        n = int(number)
        if not is_memory_key(key):
            return n << (10 * power)
        shift = 10 * (power - 2)
        return n << shift if shift >= 0 else -(-n >> -shift)
    amount = Fraction(number)
    if is_memory_key(key):
        # MiB is 1024**2 bytes: K divides by 1024, M keeps, G multiplies by 1024...
        amount *= Fraction(1024) ** (power - 2)
    else:
        amount *= 1 << (10 * power)
    return math.ceil(amount)


def parse_tres(text: str | None, id_names: Mapping[int, str] | None = None) -> dict[str, int]:
    """Parse a TRES string, named or by id, into ``{name: count}``.

    ``"cpu=4,mem=4000M,node=2,billing=4,gres/gpu=2"`` gives ``{"cpu": 4, "mem": 4000,
    "node": 2, "billing": 4, "gres/gpu": 2}``; with ``id_names={1: "cpu", 2: "mem"}``,
    ``"1=4,2=4000,1001=2"`` gives ``{"cpu": 4, "mem": 4000, "id:1001": 2}``.

    Memory keys (see :func:`is_memory_key`) are normalised to MiB: suffixes ``K``, ``M``,
    ``G``, ``T``, ``P`` are powers of 1024 (any case), no suffix means MiB (also in the id
    form, where Slurm stores MiB), and a fraction of a MiB rounds up (``1K`` is 1). Other
    keys take plain integers; a suffixed value (``1.5K``) is multiplied by the power of
    1024 and rounded up. Special values are not interpreted (see the module docstring).

    Args:
        text: The TRES string; ``None``, empty or blank gives ``{}``.
        id_names: TRES names by id, for the id form (e.g. :data:`STATIC_TRES_IDS` merged
            with the cluster's ``sacctmgr show tres``). An id missing from it, or any id
            when it is ``None``, is kept as the key ``"id:<n>"``.

    Returns:
        Counts by TRES name, in the order the string lists them.

    Raises:
        TresError: An item is not ``key=value``, its value is not a non-negative number
            (with an optional unit), or a key appears twice.
    """
    if text is None or not text.strip():
        return {}
    if id_names is None:
        return dict(_parse_named_cached(text))
    return _parse_tres(text, id_names)


@lru_cache(maxsize=8192)
def _parse_named_cached(text: str) -> tuple[tuple[str, int], ...]:
    """Named-form TRES strings repeat across jobs: parse each distinct one once."""
    return tuple(_parse_tres(text, None).items())


def _parse_tres(text: str, id_names: Mapping[int, str] | None) -> dict[str, int]:
    result: dict[str, int] = {}
    for piece in text.split(","):
        item = piece.strip()
        key, sep, raw = item.partition("=")
        key = key.strip()
        raw = raw.strip()
        if not sep or _KEY.fullmatch(key) is None:
            raise TresError(item, "expected key=value")
        if _ID_KEY.fullmatch(key):
            tres_id = int(key)
            name = id_names.get(tres_id) if id_names is not None else None
            key = name if name else f"id:{tres_id}"
        if key in result:
            raise TresError(item, f"duplicate key {key!r}")
        result[key] = _parse_value(key, raw, item)
    return result


def format_tres(tres: Mapping[str, int]) -> str:
    """Write TRES counts in Slurm's named form, e.g. ``cpu=4,mem=4000M,gres/gpu=2``.

    Keys come in a stable order: ``cpu``, ``mem``, ``energy``, ``node``, ``billing``, then
    the others sorted. Memory keys (see :func:`is_memory_key`) are printed in MiB with an
    ``M`` suffix. ``parse_tres(format_tres(d)) == d`` for every valid ``d``.

    Args:
        tres: Counts by TRES name (memory in MiB).

    Returns:
        The TRES string; ``""`` for an empty mapping.

    Raises:
        TresError: A key is empty, all digits (it would read back as an id) or holds
            ``=``, ``,`` or whitespace, or a value is not a non-negative integer.
    """
    keys = sorted(tres, key=lambda k: (_FIRST_RANK.get(k, len(_FIRST_KEYS)), k))
    items: list[str] = []
    for key in keys:
        value = tres[key]
        item = f"{key}={value}"
        if _KEY.fullmatch(key) is None or _ID_KEY.fullmatch(key) is not None:
            raise TresError(item, f"key {key!r} cannot be written as a TRES name")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TresError(item, f"value {value!r} is not a non-negative integer")
        items.append(f"{item}M" if is_memory_key(key) else item)
    return ",".join(items)


def gpu_count(tres: Mapping[str, int]) -> int:
    """Count the GPUs in parsed TRES.

    Args:
        tres: Counts by TRES name, as :func:`parse_tres` returns.

    Returns:
        ``gres/gpu`` if present (Slurm lists it as the total beside any typed entries),
        else the sum of the typed ``gres/gpu:<type>`` entries, else 0.
    """
    if "gres/gpu" in tres:
        return tres["gres/gpu"]
    return sum(value for key, value in tres.items() if key.startswith("gres/gpu:"))


def _strip_gres_prefix(text: str) -> str:
    """Drop a leading ``gres/`` or ``gres:``."""
    for prefix in _GRES_PREFIXES:
        if text.startswith(prefix) and len(text) > len(prefix):
            return text[len(prefix) :]
    return text


def _split_gres(text: str) -> list[str]:
    """Split a GRES list at commas outside parentheses."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise TresError(text, f"unbalanced ')' at offset {i}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise TresError(text, "unbalanced '('")
    items.append(text[start:])
    return items


def _strip_detail(item: str) -> str:
    """Drop a trailing detail group such as ``(S:0-1)`` or ``(IDX:0-7)``.

    A parenthesised field of its own (``gpu:(null):8``) is not a detail and is kept.
    """
    if not item.endswith(")"):
        return item
    depth = 0
    for i in range(len(item) - 1, -1, -1):
        if item[i] == ")":
            depth += 1
        elif item[i] == "(":
            depth -= 1
            if depth == 0:
                if i > 0 and item[i - 1] != ":":
                    return item[:i]
                return item
    return item


def _parse_count(raw: str, item: str) -> int:
    """Read a GRES count such as ``8`` or ``100K`` (powers of 1024)."""
    match = _COUNT.fullmatch(raw)
    if match is None:
        raise TresError(item, f"count {raw!r} is not a non-negative integer")
    number, unit = match.groups()
    return int(number) << (10 * _POWER[unit.upper()] if unit else 0)


def parse_gres_count(text: str | None, name: str = "gpu") -> int:
    """Count one GRES in a GRES string as Slurm prints it in node/job JSON and ``sinfo``.

    Understood items: ``gpu:8``, ``gpu:a100:4``, ``gpu:a100:4(S:0-1)``,
    ``gpu:(null):8(IDX:0-7)``, ``gres:gpu:8`` (22.05 ``tres_per_node``), ``gres/gpu:2``,
    ``gres/gpu=2``, ``gres/gpu:a100=2``; a bare ``gpu`` (or ``gpu:a100``, a type with no
    count) means 1. Items of other GRES are skipped. Counts of several matching items are
    added (``gpu:a100:2,gpu:v100:1`` is 3), except that an untyped ``gres/gpu=N`` TRES item,
    when present, is the total (Slurm lists typed items beside it as a breakdown).

    Args:
        text: The GRES string; ``None``, empty, ``(null)`` or ``N/A`` gives 0.
        name: The GRES to count; a ``gres/`` or ``gres:`` prefix is ignored.

    Returns:
        The count.

    Raises:
        TresError: Parentheses do not balance, or a matching item's count is malformed
            (``gpu:``, ``gres/gpu=x``).
    """
    if text is None or text.strip().lower() in _NULLS:
        return 0
    wanted = _strip_gres_prefix(name.strip())
    totals: list[int] = []
    counts: list[int] = []
    for piece in _split_gres(text.strip()):
        item = piece.strip()
        if item.lower() in _NULLS:
            continue
        body = _strip_gres_prefix(_strip_detail(item))
        key, sep, raw = body.partition("=")
        fields = key.split(":")
        if fields[0].strip() != wanted:
            continue
        if sep:
            count = _parse_count(raw.strip(), item)
            (totals if len(fields) == 1 else counts).append(count)
        elif len(fields) == 1:
            counts.append(1)
        else:
            last = fields[-1].strip()
            if not last:
                raise TresError(item, "missing count after ':'")
            counts.append(_parse_count(last, item) if _COUNT.fullmatch(last) else 1)
    return sum(totals) if totals else sum(counts)
