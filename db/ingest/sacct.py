"""Ingest from sacct: the live cluster in time windows, or a saved sacct dump.

Both formats Slurm prints are read: ``sacct -P`` (a header line, then ``|``-separated
rows; streamed line by line) and ``sacct --json`` (one document; read whole). Every job
row yields one :data:`~db.records.Parsed` item: a record, or a
:class:`~db.records.Rejected` with the raw row and the reason. Job steps
(``123.batch``) are not jobs and yield nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO

from slurm_plugin.slurm import parse
from slurm_plugin.slurm.cli_backend import CliSlurmClient
from slurm_plugin.slurm.client import SlurmClient
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.hostlist import HostlistError
from slurm_plugin.slurm.tres import TresError
from slurm_plugin.slurm.values import FieldError

from ..records import BAD_JSON, Parsed, Rejected, rejection

#: Default window for live ingest: slurmdbd is asked one day at a time.
DEFAULT_WINDOW = timedelta(days=1)

_ROW_ERRORS = (FieldError, HostlistError, TresError)


class DumpFormatError(ValueError):
    """A dump file is neither ``sacct -P`` output with its header nor ``sacct --json``."""


def read_parsable_lines(lines: Iterable[str], *, first_line: int = 1) -> Iterator[Parsed]:
    """Parse ``sacct -P`` output, header first, one row at a time.

    Raises:
        DumpFormatError: If the first line is not a sacct header (``--noheader`` dumps
            cannot be read: the columns would be unknown).
    """
    it = iter(lines)
    header = next(it, "")
    try:
        reader = parse.SacctParsableReader(header)
    except FieldError:
        raise DumpFormatError(
            f"line {first_line} is not a sacct -P header (got {header.strip()[:80]!r}): dump"
            " with `sacct -P --format=...` and without --noheader"
        ) from None
    for n, line in enumerate(it, start=first_line + 1):
        if not line.strip():
            continue
        try:
            record = reader.row(line, n)
        except _ROW_ERRORS as exc:
            yield rejection(exc, line.rstrip("\r\n"), n)
            continue
        if record is not None:
            yield record


def read_json_text(text: str | bytes) -> Iterator[Parsed]:
    """Parse a ``sacct --json`` document, one job object at a time.

    A document that cannot be read at all (truncated, no version) yields a single
    :class:`~db.records.Rejected` holding its start, so it is quarantined, not lost.
    """
    try:
        records = parse.sacct_json_records(text)
    except SlurmError as exc:
        raw = text.decode(errors="replace") if isinstance(text, bytes) else text
        yield Rejected(raw[:65536], BAD_JSON, str(exc), None)
        return
    for i, rec in enumerate(records):
        try:
            yield parse.sacct_json_record(rec, f"jobs[{i}]")
        except _ROW_ERRORS as exc:
            yield rejection(exc, json.dumps(rec, sort_keys=True, default=str), i)


def read_dump(path: str | Path) -> Iterator[Parsed]:
    """Read a saved sacct dump, ``-P`` or ``--json`` (told apart by the first character).

    Raises:
        DumpFormatError: For a ``-P`` dump without its header line.
        OSError: If the file cannot be read.
    """
    p = Path(path)
    with p.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        first = _first_char(fh)
        if first == "{":
            yield from read_json_text(fh.read())
        else:
            yield from read_parsable_lines(fh)


def _first_char(fh: IO[str]) -> str:
    pos = fh.tell()
    while True:
        ch = fh.read(1)
        if not ch or not ch.isspace():
            fh.seek(pos)
            return ch


def windows(
    start: datetime, end: datetime, step: timedelta = DEFAULT_WINDOW
) -> Iterator[tuple[datetime, datetime]]:
    """Split ``[start, end)`` into consecutive windows of ``step``.

    Raises:
        ValueError: If ``step`` is not positive.
    """
    if step <= timedelta(0):
        raise ValueError("the window must be positive")
    t = start
    while t < end:
        yield t, min(t + step, end)
        t += step


def read_live(
    client: SlurmClient,
    start: datetime,
    end: datetime,
    *,
    window: timedelta = DEFAULT_WINDOW,
    use_json: bool | None = None,
    on_window: Callable[[datetime, datetime], None] | None = None,
) -> Iterator[Parsed]:
    """Read accounting from the live cluster, one window at a time.

    sacct returns the jobs active in a window, so a long job appears in several windows:
    each job is yielded once (the first time it is seen in this run; a later run updates
    it if it changed). With the CLI backend, rows are parsed one by one so a bad row is
    quarantined instead of failing its window; other backends return records.

    Args:
        client: The Slurm client.
        start: First instant (timezone-aware, or naive UTC).
        end: Last instant (exclusive).
        window: Length of each sacct call's window (default one day).
        use_json: Force ``sacct --json`` or ``-P`` (CLI backend only; default per version).
        on_window: Called after each window (for progress).

    Raises:
        SlurmError: If sacct itself fails (nothing of that window is lost: rerun).
    """
    seen: set[tuple[int, int]] = set()
    for w0, w1 in windows(_aware(start), _aware(end), window):
        items: Iterable[Parsed]
        if isinstance(client, CliSlurmClient):
            raw, is_json = client.sacct_output(w0, w1, use_json=use_json)
            items = read_json_text(raw) if is_json else read_parsable_lines(raw.splitlines())
        else:
            items = client.accounting(w0, w1)
        for item in items:
            if not isinstance(item, Rejected):
                key = (item.job_id, item.submit_time)
                if key in seen:
                    continue
                seen.add(key)
            yield item
        if on_window is not None:
            on_window(w0, w1)


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)
