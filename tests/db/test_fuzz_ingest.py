"""Fuzz the whole sacct path into the store: 100,000 mutated lines, none lost, no crash.

A seeded mutator damages real-looking ``sacct -P`` rows (fields dropped, duplicated,
swapped, garbage bytes, NUL, huge/negative numbers, broken hostlists and TRES, swapped
times, unknown states). Every data line must end up either stored (inserted, updated or
unchanged: mutations can collide on the ``(job id, submit time)`` key) or quarantined
with a reason, and the store's counts must add up.
"""

from __future__ import annotations

import random

import pytest

from db.ingest.sacct import read_parsable_lines
from db.store import Store
from slurm_plugin.slurm import parse

HEADER = "|".join(parse.SACCT_FIELDS)
SEEDS = [
    "{id}|{id}|tc|alice|ml|gpu|normal|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|"
    "2026-01-01T00:01:00|2026-01-01T01:00:00|02:00:00|cpu=8,mem=32G,node=2,gres/gpu=4|"
    "cpu=8,mem=32G,node=2,gres/gpu=4|node[01-02]|1000|0:0|train",
    "{id}|{id}_3|tc|bob|cs|cpu|high|CANCELLED by 0|2026-02-01T10:00:00|Unknown|None|"
    "2026-02-01T10:05:00|UNLIMITED|billing=1,cpu=1,mem=4000M,node=1||None assigned|"
    "4294967295|0:15|x",
    "{id}|{id}|tc|carol|ml|gpu|normal|RUNNING|2026-03-01T00:00:00|2026-03-01T00:00:00|"
    "2026-03-01T00:00:05|Unknown|1-00:00:00|cpu=64,mem=500G,node=8,gres/gpu:a100=64|"
    "cpu=512,node=8,gres/gpu=64|gpu-a[1-2]-b[3-6]|5|0:0|name with | pipe",
]
GARBAGE = ["", "-1", "99999999999999999999999", "NaN", "é", "\x00", "[", "node[9-1]",
           "cpu=-4", "mem=1Q", "2026-02-30T00:00:00", "24:00:00", "EXPLODED", "|", "=="]


def mutate(line: str, rng: random.Random) -> str:
    fields = line.split("|")
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7)
        i = rng.randrange(len(fields))
        if op == 0:
            fields[i] = rng.choice(GARBAGE)
        elif op == 1 and len(fields) > 1:
            del fields[i]
        elif op == 2:
            fields.insert(i, fields[rng.randrange(len(fields))])
        elif op == 3:
            j = rng.randrange(len(fields))
            fields[i], fields[j] = fields[j], fields[i]
        elif op == 4:
            fields[i] = fields[i][: rng.randrange(len(fields[i]) + 1)]
        elif op == 5:
            fields[i] = str(rng.choice([0, -5, 2**31, 2**63, 2**64 + 3]))
        else:
            fields[i] = "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(6)))
    return "|".join(fields)


def lines(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        base = rng.choice(SEEDS).format(id=k + 1)
        out.append(base if rng.random() < 0.2 else mutate(base, rng))
    return out


@pytest.mark.parametrize("n", [100_000])
def test_every_mutated_line_is_stored_or_quarantined(tmp_path, n):
    from db.session import init_db

    url = f"sqlite:///{tmp_path / 'fuzz.db'}"
    init_db(url)
    data = [ln for ln in lines(n) if ln.strip()]
    # a mutated line may look like a job step ("12.batch"): those are not jobs
    steps = sum(1 for ln in data if "." in ln.split("|")[0])
    with Store.open(url) as store:
        cid = store.cluster("tc")  # the rows name cluster tc
        s = store.ingest(cid, "fuzz", read_parsable_lines([HEADER, *data]))
        assert s.read == len(data) - steps
        assert s.inserted + s.updated + s.unchanged + sum(s.quarantined.values()) == s.read
        assert store.count_jobs(cid) == s.inserted
        assert len(store.quarantined(cid)) == sum(s.quarantined.values())
        assert s.inserted > n // 10 and sum(s.quarantined.values()) > n // 10
        assert all(reason for reason in s.quarantined)
