"""Terminal output shared by every ``rlsched`` command: aligned tables and JSON."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows as left-aligned columns under ``headers``."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    raise TypeError(f"cannot print {type(o).__name__} as JSON")


def emit_json(data: Any) -> None:
    """Print ``data`` (dataclasses included) as indented, key-sorted JSON."""
    json.dump(data, sys.stdout, default=_default, indent=2, sort_keys=True)
    sys.stdout.write("\n")
