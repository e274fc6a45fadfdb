"""Ingest benchmark (not a test): sacct -P rows and the shared trace files into the store.

    python benchmarks/ingest.py                      # 1,000,000 sacct rows into SQLite
    python benchmarks/ingest.py --rows 200000 --pg   # also PostgreSQL
    python benchmarks/ingest.py --traces             # the three files in ../shared/traces

Each measurement runs in a fresh child process so its peak memory (ru_maxrss) is its own.
Figures to reach (issue 3): 1,000,000 sacct -P rows into SQLite in under 60 s, peak
memory under 500 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PG_URL = os.environ.get(
    "RLSCHED_BENCH_PG", "postgresql+psycopg://rlsched_test:rlsched_test@127.0.0.1/rlsched_test"
)


def write_dump(path: Path, rows: int, seed: int = 0) -> None:
    """A realistic sacct -P dump: varied users, sizes, states, times over a year."""
    from slurm_plugin.slurm import parse

    rng = random.Random(seed)
    states = ["COMPLETED"] * 80 + ["FAILED"] * 8 + ["CANCELLED by 0"] * 6 + ["TIMEOUT"] * 4
    states += ["OUT_OF_MEMORY", "NODE_FAIL"]
    t = 1_735_689_600  # 2025-01-01
    with path.open("w") as fh:
        fh.write("|".join(parse.SACCT_FIELDS) + "\n")
        for i in range(1, rows + 1):
            t += rng.randint(0, 60)
            nodes = rng.choice([1, 1, 1, 2, 4, 8, 16])
            gpus = nodes * rng.choice([0, 1, 2, 4, 8])
            cpus = nodes * rng.choice([1, 4, 16, 64])
            mem = nodes * rng.choice([4, 16, 64, 256])
            wait = int(rng.expovariate(1 / 600))
            run = int(rng.expovariate(1 / 3600)) + 1
            limit = max(run, rng.choice([3600, 4 * 3600, 86400]))
            first = rng.randint(1, 200)
            nl = f"node[{first:03d}-{first + nodes - 1:03d}]" if nodes > 1 else f"node{first:03d}"
            tres = f"billing={cpus},cpu={cpus},mem={mem}G,node={nodes}"
            if gpus:
                tres += f",gres/gpu={gpus}"
            fh.write("|".join([
                str(i), str(i), "bench", f"user{rng.randint(1, 300)}",
                f"acct{rng.randint(1, 30)}", rng.choice(["gpu", "cpu", "debug"]), "normal",
                rng.choice(states), _iso(t), _iso(t), _iso(t + wait), _iso(t + wait + run),
                _dur(limit), tres, tres, nl, str(rng.randint(1000, 50000)),
                rng.choice(["0:0", "0:0", "1:0", "0:9"]), f"job-{rng.randint(1, 5000)}",
            ]) + "\n")


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def _dur(s: int) -> str:
    d, r = divmod(s, 86400)
    hm = f"{r // 3600:02d}:{r % 3600 // 60:02d}:00"
    return f"{d}-{hm}" if d else hm


def child(kind: str, url: str, path: str) -> None:
    """Run one ingest and print a JSON line with its figures."""
    from db.session import init_db
    from db.store import Store

    init_db(url)
    t0 = time.perf_counter()
    with Store.open(url) as store:
        if kind == "sacct":
            from db.ingest.sacct import read_dump

            cid = store.cluster("bench")
            summary = store.ingest(cid, "sacct-file", read_dump(path))
        else:
            from db.ingest import traces

            header, items = (traces.read_philly_csv(path) if path.endswith(".csv")
                             else traces.read_swf(path))
            cid = store.cluster(Path(path).stem)
            summary = store.ingest(cid, f"trace:{Path(path).name}", items)
        stored = store.count_jobs(cid)
    dt = time.perf_counter() - t0
    print(json.dumps({
        "kind": kind, "file": Path(path).name, "url": url.split("://")[0],
        "rows": summary.read, "stored": stored, "quarantined": sum(summary.quarantined.values()),
        "seconds": round(dt, 2), "rows_per_s": round(summary.read / dt),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }))


def run_child(kind: str, url: str, path: str) -> dict[str, object]:
    """Run :func:`child` in a fresh process and print its figures."""
    out = subprocess.run([sys.executable, __file__, "--child", kind, url, path],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr}")
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(result))
    return result


def main() -> None:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--pg", action="store_true", help="also ingest into PostgreSQL")
    ap.add_argument("--traces", action="store_true", help="ingest the shared trace files")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    tmp = Path(tempfile.mkdtemp(prefix="rlsched-bench-"))
    if args.traces:
        traces_dir = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
        for name in ("lublin_256.swf", "theta.swf", "philly.csv"):
            run_child("trace", f"sqlite:///{tmp / (name + '.db')}", str(traces_dir / name))
            if args.pg:
                run_child("trace", PG_URL, str(traces_dir / name))
        return
    dump = tmp / "sacct.txt"
    t0 = time.perf_counter()
    write_dump(dump, args.rows)
    print(f"wrote {args.rows} rows ({dump.stat().st_size / 2**20:.0f} MiB) in"
          f" {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    run_child("sacct", f"sqlite:///{tmp / 'bench.db'}", str(dump))
    if args.pg:
        run_child("sacct", PG_URL, str(dump))


if __name__ == "__main__":
    main()
