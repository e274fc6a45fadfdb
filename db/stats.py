"""Summary statistics of a cluster's job history (``rlsched db stats``).

Everything is reduced inside the database to exact histograms (value -> count) of the
job state, requested GPUs, requested nodes, time limit and wait (``start - submit``),
plus per-user job counts and GPU-seconds; percentiles come from those histograms, so
they are exact. Two ways to get the histograms, same results (a test checks both):

- the portable one, plain ``GROUP BY`` queries, for PostgreSQL and MariaDB (whose hash
  and index aggregation make them fast);
- a fast path for SQLite, which has no hash aggregation (every ``GROUP BY`` sorts all
  rows, ~0.4-1 s per query at a million jobs): one scan per chunk of rows
  concatenates the few columns needed (``group_concat``) and counts them with
  :class:`collections.Counter`, the next chunk's scan overlapping this chunk's count.

Percentiles use the nearest-rank definition: the p-th percentile of ``n`` values is the
``ceil(p/100 * n)``-th smallest.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, case, func, select, text

from .models import Job

__all__ = ["PERCENTILES", "Histograms", "cluster_stats", "collect_generic", "collect_sqlite",
           "percentile"]

#: Percentiles reported for waits, sizes and time limits.
PERCENTILES = (50, 90, 99)

_JOBS = cast(Table, Job.__table__)
#: Rows per SQLite scan in the fast path (bounds the memory of the concatenated text).
SQLITE_CHUNK = 100_000
_USER_SEP = "\x1f"  # ASCII unit separator: not in any user name Slurm accepts


@dataclass
class Histograms:
    """What the database reduces a cluster's jobs to."""

    jobs: int = 0
    first_submit: int | None = None
    last_submit: int | None = None
    last_end: int | None = None
    states: Counter[str] = field(default_factory=Counter)
    req_gpus: Counter[int | None] = field(default_factory=Counter)
    req_nodes: Counter[int | None] = field(default_factory=Counter)
    time_limit: Counter[int | None] = field(default_factory=Counter)
    wait: Counter[int] = field(default_factory=Counter)
    user_jobs: Counter[str] = field(default_factory=Counter)
    user_gpu_seconds: Counter[str] = field(default_factory=Counter)


def _gpu_seconds() -> Any:
    c = _JOBS.c
    return case(
        ((c.alloc_gpus > 0) & c.start_time.is_not(None) & c.end_time.is_not(None),
         c.alloc_gpus * (c.end_time - c.start_time)),
        else_=None,
    )


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


# ---------------------------------------------------------------------------- portable
def collect_generic(engine: Engine, cluster_id: int) -> Histograms:
    """The histograms through plain ``GROUP BY`` queries (any backend)."""
    with engine.connect() as conn:
        return _collect_generic(conn, cluster_id)


def _collect_generic(conn: Connection, cluster_id: int) -> Histograms:
    c = _JOBS.c
    mine = c.cluster_id == cluster_id
    h = Histograms()
    row = conn.execute(
        select(func.count(), func.min(c.submit_time), func.max(c.submit_time),
               func.max(c.end_time)).where(mine)
    ).one()
    h.jobs = int(row[0])
    h.first_submit, h.last_submit, h.last_end = (
        None if v is None else int(v) for v in row[1:]
    )
    for col, counter in ((c.state, h.states), (c.req_gpus, h.req_gpus),
                         (c.req_nodes, h.req_nodes), (c.time_limit, h.time_limit)):
        stmt = select(col, func.count()).where(mine).group_by(col)
        target = cast("Counter[Any]", counter)
        for value, n in conn.execute(stmt):
            target[value if value is None or isinstance(value, str) else int(value)] += int(n)
    wait = (c.start_time - c.submit_time).label("wait")
    stmt = select(wait, func.count()).where(mine, c.start_time.is_not(None)).group_by(wait)
    for value, n in conn.execute(stmt):
        h.wait[int(value)] += int(n)
    stmt = select(c.user, func.count(), func.sum(_gpu_seconds())).where(mine).group_by(c.user)
    for user, n, gs in conn.execute(stmt):
        h.user_jobs[user] += int(n)
        if gs:
            h.user_gpu_seconds[user] += int(gs)
    return h


# ---------------------------------------------------------------------------- SQLite
_SQLITE_CHUNK_SQL = f"""
SELECT count(*),
       group_concat(state, ','),
       group_concat(coalesce(req_gpus, ''), ','),
       group_concat(coalesce(req_nodes, ''), ','),
       group_concat(coalesce(time_limit, ''), ','),
       group_concat(CASE WHEN start_time IS NOT NULL THEN start_time - submit_time END, ','),
       group_concat("user", '{_USER_SEP}'),
       group_concat(CASE WHEN alloc_gpus > 0 AND start_time IS NOT NULL
                         AND end_time IS NOT NULL THEN "user" END, '{_USER_SEP}'),
       group_concat(CASE WHEN alloc_gpus > 0 AND start_time IS NOT NULL
                         AND end_time IS NOT NULL
                         THEN alloc_gpus * (end_time - start_time) END, ',')
FROM jobs NOT INDEXED
WHERE cluster_id = :cid AND id >= :lo AND id < :hi
"""


def _split(text_: str | None, sep: str = ",") -> list[str]:
    return [] if text_ is None else text_.split(sep)


def _int_counter(text_: str | None) -> Counter[int | None]:
    out: Counter[int | None] = Counter()
    for key, n in Counter(_split(text_)).items():
        out[int(key) if key else None] += n
    return out


def _span(conn: Connection, cluster_id: int, h: Histograms) -> None:
    """First and last submit, last end: index lookups on ``(cluster_id, *_time)``."""
    c = _JOBS.c
    mine = c.cluster_id == cluster_id
    first, last = conn.execute(select(func.min(c.submit_time), func.max(c.submit_time))
                               .where(mine)).one()
    end = conn.execute(select(func.max(c.end_time)).where(mine)).scalar()
    h.first_submit, h.last_submit, h.last_end = (
        None if v is None else int(v) for v in (first, last, end)
    )


def _fetch_chunk(engine: Engine, cluster_id: int, lo: int) -> tuple[Any, ...]:
    with engine.connect() as conn:
        return tuple(conn.execute(
            text(_SQLITE_CHUNK_SQL), {"cid": cluster_id, "lo": lo, "hi": lo + SQLITE_CHUNK}
        ).one())


def collect_sqlite(engine: Engine, cluster_id: int) -> Histograms | None:
    """The histograms by scanning SQLite in rowid chunks; ``None`` if it cannot.

    SQLite concatenates the chunk's columns (releasing the GIL) in a helper thread
    while this one counts the previous chunk. Returns ``None`` (use
    :func:`collect_generic`) if a user name contains the separator, which the counts
    reveal.
    """
    c = _JOBS.c
    h = Histograms()
    with engine.connect() as conn:
        lo, hi = conn.execute(
            select(func.min(c.id), func.max(c.id)).where(c.cluster_id == cluster_id)
        ).one()
        if lo is None:
            return h
        _span(conn, cluster_id, h)
    starts = range(int(lo), int(hi) + 1, SQLITE_CHUNK)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlsched-stats") as pool:
        future = pool.submit(_fetch_chunk, engine, cluster_id, starts[0])
        for i in range(len(starts)):
            row = future.result()
            if i + 1 < len(starts):  # one chunk ahead, no more: memory stays bounded
                future = pool.submit(_fetch_chunk, engine, cluster_id, starts[i + 1])
            n = int(row[0])
            if n == 0:
                continue
            h.jobs += n
            h.states.update(_split(row[1]))
            h.req_gpus.update(_int_counter(row[2]))
            h.req_nodes.update(_int_counter(row[3]))
            h.time_limit.update(_int_counter(row[4]))
            h.wait.update({int(k): v for k, v in Counter(_split(row[5])).items()})
            users = _split(row[6], _USER_SEP)
            gpu_users = _split(row[7], _USER_SEP)
            gpu_seconds = _split(row[8])
            if len(users) != n or len(gpu_users) != len(gpu_seconds):
                future.cancel()
                return None
            h.user_jobs.update(users)
            acc = h.user_gpu_seconds
            for user, gs in zip(gpu_users, map(int, gpu_seconds), strict=True):
                acc[user] += gs
    return h


# ---------------------------------------------------------------------------- summary
def percentile(hist: Mapping[int, int], q: float) -> int | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of a histogram; ``None`` if empty."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for value in sorted(hist):
        seen += hist[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable")  # pragma: no cover


def _distribution(hist: Mapping[int | None, int], *, with_hist: bool) -> dict[str, Any]:
    known = {k: v for k, v in hist.items() if k is not None}
    n = sum(known.values())
    out: dict[str, Any] = {"count": n}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(known, q)
    out["mean"] = round(sum(k * v for k, v in known.items()) / n, 3) if n else None
    out["max"] = max(known) if known else None
    out["unknown"] = hist.get(None, 0)
    if with_hist:
        out["hist"] = [[k, known[k]] for k in sorted(known)]
    return out


def summarize(h: Histograms, cluster: str, *, top: int = 10) -> dict[str, Any]:
    """The JSON-able summary :meth:`db.store.Store.stats` returns."""
    span = (None if h.first_submit is None or h.last_submit is None
            else h.last_submit - h.first_submit)
    waits = cast("Mapping[int | None, int]", h.wait)
    gpu_seconds = sum(h.user_gpu_seconds.values())

    def user_row(user: str) -> dict[str, Any]:
        return {"user": user, "jobs": h.user_jobs[user],
                "gpu_hours": round(h.user_gpu_seconds[user] / 3600, 3)}

    by_jobs = sorted(h.user_jobs, key=lambda u: (-h.user_jobs[u], u))[:top]
    by_gpu = sorted((u for u in h.user_gpu_seconds if h.user_gpu_seconds[u] > 0),
                    key=lambda u: (-h.user_gpu_seconds[u], u))[:top]
    time_limit = _distribution(h.time_limit, with_hist=True)
    time_limit["unlimited"] = time_limit.pop("unknown")
    return {
        "cluster": cluster,
        "jobs": h.jobs,
        "first_submit": h.first_submit,
        "last_submit": h.last_submit,
        "last_end": h.last_end,
        "span_s": span,
        "states": dict(sorted(h.states.items(), key=lambda kv: (-kv[1], kv[0]))),
        "started": sum(h.wait.values()),
        "wait_s": _distribution(waits, with_hist=False),
        "req_gpus": _distribution(h.req_gpus, with_hist=True),
        "req_nodes": _distribution(h.req_nodes, with_hist=True),
        "time_limit_s": time_limit,
        "gpu_hours": round(gpu_seconds / 3600, 3),
        "users": len(h.user_jobs),
        "top_users": [user_row(u) for u in by_jobs],
        "top_users_by_gpu_hours": [user_row(u) for u in by_gpu],
    }


def cluster_stats(
    engine: Engine, cluster_id: int, cluster: str, *, top: int = 10
) -> dict[str, Any]:
    """Summarise one cluster's jobs: counts, span, states, wait and size percentiles, users.

    Returns:
        ``jobs``, ``first_submit``/``last_submit``/``last_end`` (epoch s), ``span_s``,
        ``states`` (state -> jobs), ``started`` (jobs with a start time), ``wait_s``,
        ``req_gpus``, ``req_nodes`` and ``time_limit_s`` (each with ``count``, ``p50``,
        ``p90``, ``p99``, ``mean``, ``max``, and, but for waits, ``hist`` as
        ``[value, jobs]`` pairs; ``unknown`` counts unrecorded values, ``unlimited``
        time limits), ``gpu_hours`` (allocated GPUs x run time of the jobs that ran),
        ``users``, and the ``top`` users by job count (``top_users``) and by GPU-hours
        (``top_users_by_gpu_hours``), each ``{"user", "jobs", "gpu_hours"}``.
    """
    hist = collect_sqlite(engine, cluster_id) if engine.dialect.name == "sqlite" else None
    if hist is None:
        hist = collect_generic(engine, cluster_id)
    return summarize(hist, cluster, top=top)
