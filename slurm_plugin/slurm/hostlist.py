"""Slurm hostlist expressions: expand ``node[01-04,07]`` to host names and compress them back.

The grammar is the one ``scontrol show hostnames`` and ``scontrol show hostlist`` use:

* An expression is a list of items separated by commas outside brackets. Whitespace
  separates items too, and empty items are skipped, as in Slurm (``"a,,b"`` is ``a``, ``b``).
* An item is literal text with any number of bracket groups, e.g. ``gpu-a[1-2]-b[3-4]``.
  Several groups expand to their cartesian product, leftmost group varying slowest.
* A bracket group is a comma-separated list of numbers (``5``) and ranges (``1-10``).

Zero padding follows Slurm: every number of a range item is printed with at least as many
digits as its low bound was written with, so ``[01-10]`` gives ``01, 02, ..., 10`` and
``[1-10]`` gives ``1, 2, ..., 10``.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right
from collections.abc import Iterable

__all__ = ["MAX_HOSTS", "HostlistError", "compress", "expand"]

#: Largest number of host names one expression may expand to.
MAX_HOSTS = 1_000_000

_DIGITS = "0123456789"
_SEPARATORS = frozenset(", \t\r\n\f\v")
#: Characters a host name cannot hold (they would not survive a round trip).
_FORBIDDEN = frozenset("[],") | _SEPARATORS
_RANGE_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_GROUP = re.compile(r"\[([^\[\]]*)\]")
_MAX_QUOTE = 200


def _quote(text: str) -> str:
    """Quote ``text`` for an error message, cut short if it is very long."""
    if len(text) > _MAX_QUOTE:
        text = text[: _MAX_QUOTE - 3] + "..."
    return repr(text)


class HostlistError(ValueError):
    """A hostlist expression (or a host name to compress) is malformed.

    Attributes:
        expr: The offending expression or host name, as given.
        reason: One line saying what is wrong, naming the bad part.
    """

    def __init__(self, expr: str, reason: str) -> None:
        self.expr = expr
        self.reason = reason
        super().__init__(f"bad hostlist {_quote(expr)}: {reason}")

    def __reduce__(self) -> tuple[type[HostlistError], tuple[str, str]]:
        return (type(self), (self.expr, self.reason))


def _split_items(expr: str) -> list[str]:
    """Split ``expr`` at separators outside brackets, checking the brackets balance."""
    items: list[str] = []
    start = 0
    open_at = -1
    for i, ch in enumerate(expr):
        if ch == "[":
            if open_at >= 0:
                raise HostlistError(expr, f"nested '[' at offset {i}")
            open_at = i
        elif ch == "]":
            if open_at < 0:
                raise HostlistError(expr, f"unbalanced ']' at offset {i}")
            open_at = -1
        elif open_at < 0 and ch in _SEPARATORS:
            if i > start:
                items.append(expr[start:i])
            start = i + 1
    if open_at >= 0:
        raise HostlistError(expr, f"unbalanced '[' at offset {open_at}")
    if len(expr) > start:
        items.append(expr[start:])
    return items


def _parse_group(expr: str, content: str) -> tuple[list[tuple[int, int, int]], int]:
    """Parse the inside of one bracket group into ``(lo, hi, width)`` ranges and a count."""
    ranges: list[tuple[int, int, int]] = []
    count = 0
    for part in content.split(","):
        if not part:
            raise HostlistError(expr, f"empty range item in '[{content}]'")
        match = _RANGE_ITEM.fullmatch(part)
        if match is None:
            raise HostlistError(expr, f"bad range item {part!r} in '[{content}]'")
        lo_text, hi_text = match.groups()
        lo = int(lo_text)
        hi = lo if hi_text is None else int(hi_text)
        if hi < lo:
            raise HostlistError(expr, f"descending range {part!r} in '[{content}]'")
        count += hi - lo + 1
        if count > MAX_HOSTS:
            raise HostlistError(expr, f"range '[{content}]' has more than {MAX_HOSTS} hosts")
        ranges.append((lo, hi, len(lo_text)))
    return ranges, count


def _render_group(ranges: list[tuple[int, int, int]]) -> list[str]:
    """List the numbers of one parsed bracket group, padded, in the order given."""
    values: list[str] = []
    for lo, hi, width in ranges:
        if width <= 1:
            values.extend(map(str, range(lo, hi + 1)))
        else:
            values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names.

    ``"node[001-003,07],gpu-a[1-2]-b[3-4]"`` gives ``node001, node002, node003, node07,
    gpu-a1-b3, gpu-a1-b4, gpu-a2-b3, gpu-a2-b4``. Names come in the order the expression
    lists them; duplicates are kept.

    Args:
        expr: The expression, e.g. ``"node[01-16]"``; an empty (or blank) string is an
            empty list.

    Returns:
        The host names.

    Raises:
        HostlistError: The expression is malformed (unbalanced or nested brackets, an empty
            or non-numeric range item, a descending range) or expands to more than
            :data:`MAX_HOSTS` names.
    """
    parsed: list[tuple[list[str], list[list[tuple[int, int, int]]]]] = []
    total = 0
    for item in _split_items(expr):
        pieces = _GROUP.split(item)
        literals = pieces[0::2]
        groups: list[list[tuple[int, int, int]]] = []
        count = 1
        for content in pieces[1::2]:
            ranges, n = _parse_group(expr, content)
            groups.append(ranges)
            count *= n
            if count > MAX_HOSTS:
                break
        total += count
        if total > MAX_HOSTS:
            raise HostlistError(expr, f"expands to more than {MAX_HOSTS} hosts")
        parsed.append((literals, groups))

    names: list[str] = []
    for literals, groups in parsed:
        if not groups:
            names.append(literals[0])
        elif len(groups) == 1:
            prefix, suffix = literals
            names.extend([prefix + value + suffix for value in _render_group(groups[0])])
        else:
            values = [_render_group(ranges) for ranges in groups]
            inner, last = literals[:-1], literals[-1]
            for combo in itertools.product(*values):
                parts = [text for pair in zip(inner, combo, strict=True) for text in pair]
                parts.append(last)
                names.append("".join(parts))
    return names


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Merge sorted distinct integers into ``(lo, hi)`` runs of consecutive values."""
    runs: list[tuple[int, int]] = []
    lo = hi = numbers[0]
    for n in numbers[1:]:
        if n == hi + 1:
            hi = n
        else:
            runs.append((lo, hi))
            lo = hi = n
    runs.append((lo, hi))
    return runs


def _format_group(stem: str, width: int, numbers: list[int]) -> str:
    """Render one ``stem`` + numbers group as ``stem07`` or ``stem[01-04,07]``."""
    runs = _runs(numbers)
    if len(runs) == 1 and runs[0][0] == runs[0][1]:
        return stem + str(runs[0][0]).zfill(width)
    parts = [
        str(lo).zfill(width) if lo == hi else f"{str(lo).zfill(width)}-{str(hi).zfill(width)}"
        for lo, hi in runs
    ]
    return f"{stem}[{','.join(parts)}]"


def compress(names: Iterable[str]) -> str:
    """Compress host names into a Slurm hostlist expression.

    Names are grouped by the text before their trailing number (only the last run of digits
    is compressed, so ``gpu-a1-b3`` groups with ``gpu-a1-b4``) and by zero padding:
    ``node01`` and ``node1`` stay apart, while an unpadded number joins the widest padded
    group of the same stem that it prints correctly in (``node09``, ``node10`` give
    ``node[09-10]``). Names without a trailing number are kept as they are.

    The output is canonical: groups are sorted by stem (plain string order), then by
    padding width (names without a trailing number first); numbers are ascending within a
    group and consecutive ones merged into ranges. Duplicates are dropped, so the result
    describes the set of names and does not depend on their order. A group of one name is
    printed without brackets (``node07``). ``expand(compress(names))`` gives back the
    distinct names, sorted as described.

    Args:
        names: Host names, e.g. ``["node01", "node02", "node04"]``.

    Returns:
        The expression, e.g. ``"node[01-02,04]"``; ``""`` for no names.

    Raises:
        HostlistError: A name is empty or holds a character that cannot appear in a
            hostlist (``[``, ``]``, ``,`` or whitespace).
    """
    plain: set[str] = set()
    by_stem: dict[str, set[str]] = {}
    for name in names:
        if not name:
            raise HostlistError(name, "empty host name")
        if not _FORBIDDEN.isdisjoint(name):
            bad = next(ch for ch in name if ch in _FORBIDDEN)
            raise HostlistError(name, f"host name holds {bad!r}")
        stem = name.rstrip(_DIGITS)
        if len(stem) == len(name):
            plain.add(name)
        else:
            by_stem.setdefault(stem, set()).add(name[len(stem) :])

    # (stem, width) -> numbers; width 0 marks names without a trailing number.
    groups: dict[tuple[str, int], list[int]] = {(name, 0): [] for name in plain}
    for stem, digit_strings in by_stem.items():
        padded = sorted({len(d) for d in digit_strings if len(d) > 1 and d[0] == "0"})
        for digits in digit_strings:
            if len(digits) > 1 and digits[0] == "0":
                width = len(digits)
            else:
                # Unpadded: it prints the same at any width up to its length.
                at = bisect_right(padded, len(digits))
                width = padded[at - 1] if at else 1
            groups.setdefault((stem, width), []).append(int(digits))

    parts: list[str] = []
    for (stem, width), numbers in sorted(groups.items()):
        if width == 0:
            parts.append(stem)
        else:
            numbers.sort()
            parts.append(_format_group(stem, width, numbers))
    return ",".join(parts)
