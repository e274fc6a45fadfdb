"""Benchmark of the job-history store: bulk ingest rate, peak memory, and ``stats`` time.

Generates ``N`` synthetic :data:`db.records.JobRecord` objects (seeded, lazily: never all
in memory), ingests them with :meth:`db.store.Store.ingest`, then times
:meth:`db.store.Store.stats`, a re-ingest of a slice (all unchanged) and a streaming read.
Targets (from the issue): 1,000,000 rows into SQLite in under 60 s with peak RSS under
500 MB; ``stats`` on 1,000,000 jobs under 2 s.

    python3 benchmarks/db_stats.py                       # 1M rows, temporary SQLite file
    python3 benchmarks/db_stats.py -n 200000 --url postgresql+psycopg://u:p@127.0.0.1/db

The database given by ``--url`` is wiped (all rlsched tables dropped) first.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import MetaData

from db.records import JobRecord, TresCounts
from db.session import display_url, init_db, make_engine
from db.stats import collect_generic, summarize
from db.store import Store

STATES = ("COMPLETED",) * 70 + ("FAILED",) * 10 + ("CANCELLED",) * 10 + ("TIMEOUT",) * 5 + (
    "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "CANCELLED", "COMPLETED")
LIMITS = (600, 1800, 3600, 7200, 14400, 43200, 86400, 172800, None)
GPUS = (0, 0, 1, 1, 1, 2, 4, 8, 8, 16, 32, 64)
NUM_NODES = 512


def synthetic_jobs(
    n: int, seed: int = 0, start: int = 1_600_000_000, total: int | None = None
) -> Iterator[JobRecord]:
    """The first ``n`` of ``total`` plausible accounting records, reproducibly.

    Submit times increase; the last 1,000 of ``total`` (default ``n``) are still running
    or pending, with no end time (pending: no start, no allocation either).
    """
    total = n if total is None else total
    rng = random.Random(seed)
    users = [f"user{i:03d}" for i in range(300)]
    accounts = [f"acct{i:02d}" for i in range(40)]
    t = start
    for i in range(n):
        t += int(rng.expovariate(1 / 3.0))
        gpus = rng.choice(GPUS)
        nodes = max(1, gpus // 8) if gpus else rng.choice((1, 1, 1, 2, 4))
        cpus = nodes * rng.choice((8, 16, 32, 64))
        mem = cpus * 4096
        limit = rng.choice(LIMITS)
        state = rng.choice(STATES)
        u = rng.randrange(len(users))
        begin: int | None = t + int(rng.expovariate(1 / 900.0))
        run = int(rng.expovariate(1 / 3600.0))
        first = rng.randrange(NUM_NODES - nodes + 1)
        priority = rng.randrange(1, 100_000)
        if limit is not None:
            run = min(run, limit)
        if i >= total - 200:
            state = "PENDING"
            begin = end = None
            node_names: tuple[str, ...] = ()
            alloc = TresCounts()
            node_list = "None assigned"
        else:
            if i >= total - 1000:
                state = "RUNNING"
            end = None if state == "RUNNING" or begin is None else begin + run
            node_names = tuple(f"node{k:03d}" for k in range(first, first + nodes))
            node_list = (f"node{first:03d}" if nodes == 1
                         else f"node[{first:03d}-{first + nodes - 1:03d}]")
            alloc = TresCounts(nodes, cpus, gpus, mem)
        yield JobRecord(
            job_id=1000 + i, name=f"job-{i % 977}", user=users[u],
            account=accounts[u % len(accounts)], partition="gpu" if gpus else "cpu",
            qos=("normal", "high", "low")[i % 3], state=state, submit_time=t,
            eligible_time=t, start_time=begin, end_time=end, time_limit=limit,
            req=TresCounts(nodes, cpus, gpus, mem), alloc=alloc, node_list=node_list,
            nodes=node_names, priority=priority,
            exit_code=None if end is None else (0 if state == "COMPLETED" else 1),
            signal=None, array_job_id=None, array_task_id=None, restart_count=0,
        )


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def wipe(url: str) -> None:
    """Drop every table in the database, then create the rlsched schema."""
    engine = make_engine(url)
    meta = MetaData()
    meta.reflect(engine)
    meta.drop_all(engine)
    engine.dispose()
    init_db(url)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1_000_000, help="jobs to ingest")
    ap.add_argument("--url", help="database URL (wiped!); default: a temporary SQLite file")
    ap.add_argument("--batch-size", type=int, default=5000, help="ingest batch size")
    ap.add_argument("--gen-only", action="store_true", help="time the generator alone")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("-n must be at least 1")

    tmp = None
    if args.url is None:
        tmp = tempfile.TemporaryDirectory(prefix="rlsched-bench-")
        args.url = str(Path(tmp.name) / "bench.db")
    n = args.n
    print(f"rlsched store benchmark: {n:,} jobs into {display_url(make_engine(args.url).url)}")

    t0 = time.perf_counter()
    for _ in synthetic_jobs(n):
        pass
    gen_s = time.perf_counter() - t0
    print(f"  generate only      {gen_s:8.2f} s  ({n / gen_s:,.0f} records/s)")
    if args.gen_only:
        return 0

    wipe(args.url)
    rss0 = peak_rss_mb()
    with Store.open(args.url) as store:
        cid = store.cluster("bench")
        t0 = time.perf_counter()
        summary = store.ingest(cid, "synthetic", synthetic_jobs(n), batch_size=args.batch_size)
        ingest_s = time.perf_counter() - t0
        rss = peak_rss_mb()
        store_s = ingest_s - gen_s
        print(f"  ingest             {ingest_s:8.2f} s  ({n / ingest_s:,.0f} rows/s;"
              f" {store_s:.2f} s of it storing, generation excluded)")
        print(f"  peak RSS           {rss:8.0f} MiB (before ingest {rss0:.0f} MiB)")
        assert summary.inserted == n, summary

        k = min(n, 100_000)
        t0 = time.perf_counter()
        again = store.ingest(cid, "synthetic", synthetic_jobs(k, total=n),
                             batch_size=args.batch_size)
        re_s = time.perf_counter() - t0
        assert again.inserted == 0 and again.updated == 0 and again.unchanged == k, again
        print(f"  re-ingest {k:,} (unchanged) {re_s:6.2f} s  ({k / re_s:,.0f} rows/s)")

        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            stats = store.stats(cid)
            times.append(time.perf_counter() - t0)
        print(f"  stats              {min(times):8.2f} s  (best of 3; first {times[0]:.2f} s)")
        generic_s = None
        if store.engine.dialect.name == "sqlite":  # side by side: the portable GROUP BYs
            t0 = time.perf_counter()
            summarize(collect_generic(store.engine, cid), "bench")
            generic_s = time.perf_counter() - t0
            print(f"  stats, GROUP BY    {generic_s:8.2f} s  (the portable path, for comparison)")

        t0 = time.perf_counter()
        m = sum(1 for _ in store.jobs(cid))
        read_s = time.perf_counter() - t0
        print(f"  read all (jobs())  {read_s:8.2f} s  ({m / read_s:,.0f} records/s)")

    print("ratios to targets (< 1 is within target):")
    if n:
        per_million = ingest_s * 1_000_000 / n
        print(f"  ingest time / 60 s per 1M rows   {per_million / 60:6.2f}"
              f"   ({per_million:.1f} s per 1M rows)")
        print(f"  peak RSS / 500 MB                {rss * 1024 * 1024 / 500e6:6.2f}")
        print(f"  stats time / 2 s                 {min(times) / 2:6.2f}   (at {n:,} jobs)")
        if generic_s is not None:
            print(f"  stats fast path / GROUP BY path  {min(times) / generic_s:6.2f}")
    print(f"  jobs {stats.get('jobs')}, wait p50/p90/p99 "
          f"{stats.get('wait_s', {}).get('p50')}/{stats.get('wait_s', {}).get('p90')}/"
          f"{stats.get('wait_s', {}).get('p99')} s")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
