"""Fuzz the trace readers: 100,000 mutated lines, each stored or quarantined, none lost.

A seeded mutator (reproducible, no hypothesis shrinking needed at this volume) takes
real-looking SWF, ANL and Philly CSV rows and deletes, duplicates and swaps fields,
swaps in garbage bytes, huge/negative numbers, NaN, infinities, Unicode digits, empty
cells, cuts and splices lines, changes separators and line terminators. Every line that
is not blank (and, in SWF, not a ``;`` comment) must yield exactly one item, in order:
a record that passes :func:`db.records.check`, or a Rejected with a known reason, the
raw line and its line number.
"""

from __future__ import annotations

import random
import time

import pytest

from db.ingest.traces import read_philly_csv, read_swf
from db.records import (
    BAD_NUMBER,
    BAD_TIME,
    BAD_VALUE,
    END_BEFORE_START,
    MAX_RAW,
    MISSING_FIELD,
    NEGATIVE_DURATION,
    UNKNOWN_STATE,
    WRONG_FIELD_COUNT,
    JobRecord,
    Rejected,
    check,
)

KNOWN_REASONS = {
    WRONG_FIELD_COUNT, BAD_TIME, BAD_NUMBER, NEGATIVE_DURATION, END_BEFORE_START,
    UNKNOWN_STATE, MISSING_FIELD, BAD_VALUE,
}
TOTAL_LINES = 100_000
BATCH = 5_000

SWF_HEADER = ["; Version: 2.2", "; UnixStartTime: 1000000000", "; MaxNodes: 128",
              "; MaxProcs: 512", ""]
ANL_HEADER = ["; Installation: Theta Argonne", "; MaxNodes: 4392", "; MaxProcs: 4392"]
STD_SEEDS = [
    "1    5094 -1   12072  16 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1",
    "2    5170 -1       2   1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1",
    "3   0   10   100  8   95.5 2048  16  3600  4096  1  7 3 12 2 1  -1  -1",
    "4   60  0    0    0   -1   -1    4   600   -1    5  2 1 -1 1 -1  3  15",
    "5   61.5 3.2 7.9  4   7.1  1024  4   60.0  1024  0  3 1 4 -1 2  -1  -1",
    "6   99  -1   -1   32  -1   -1   32  7200  -1    2  9 9 9 9 9  -1  -1",
]
ANL_SEEDS = [
    "639487\t1672529301\t71\t3632\t8\t3600\t-1\t-1\t-1\t-1\t-1\t0\t-1\t-1\t-1\t-1\t-1\t-1",
    "638720\t1671905072\t632522\t3648\t4096\t3600\t-1\t-1\t-1\t-1\t-1\t70296325381051"
    "\t-1\t-1\t-1\t-1\t-1\t-1",
    "641141\t1673522574\t4845012\t60\t128\t1800\t-1\t-1\t-1\t-1\t-1\t89450981463050"
    "\t-1\t-1\t-1\t-1\t-1\t-1",
]
CSV_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
CSV_SEEDS = [
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48",
    "2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0",
    "2017-11-08 08:12:11,57.0,16,912.0,b436b2",
    "2017-12-22 08:02:11,4628226.0,128,37025808.0,6214e9",
]
FULL_HEADER = "jobid,user,vc,status,timestamp,wait,duration,num_gpus,time_limit"
FULL_SEEDS = [
    "77,ce2f4c,ee9e8c,Pass,2017-10-07 01:11:39,30,74,8,3600",
    'application_1506638472019_14199,ab12,ee9e8c,Killed,"2017-10-07 01:11:39",,10,8,',
    ",ab12,ee9e8c,Failed,2017-10-07T01:11:39,,10.5,2,60",
]

SPECIALS = [
    "", " ", "-1", "0", "-0", "1", "-2", "-999999", "NaN", "nan", "inf", "-inf", "1e309",
    "1e-309", "1e18", "1.5", "-1.0", "1.", ".5", "+5", "1_000", "0x10", "9" * 19, "9" * 40,
    "9" * 5000, "-" + "9" * 25, "18446744073709551614", "\u0661\u0662\u0663",
    "\uff11\uff12", "\u00b2", "\x00", "\ufeff1", "\u00e9", "\U0001f642", "1\u00a02",
    "\u2028", "\x1c", "\x0b", ";", ",", '"', '"a,b"', '""', "2017-02-30 00:00:00",
    "2017-10-09 24:00:00", "9999-12-31 23:59:59", "0000-01-01 00:00:00",
    "1970-01-01 00:00:00", "2017-10-09", "1507532515", "999999999999", "Pass", "killed",
    "COMPLETED", "unknown", "\ud800", "\\N", "NULL",
]
GARBAGE_CHARS = (
    "0123456789-.eE+ \t,;:\"'\x00\x01\x07\x0b\x0c\x1b\x7f\x80\x85\xa0\u2028\u3000"
    "\ufffd\ufeff\u0661\uff10\U0001f600abcxyzAZ"
)


def mutate_fields(rng: random.Random, fields: list[str]) -> list[str]:
    op = rng.randrange(8)
    f = list(fields)
    i = rng.randrange(len(f)) if f else 0
    if op == 0 and f:
        del f[i]
    elif op == 1 and f:
        f.insert(i, f[i])
    elif op == 2 and len(f) > 1:
        j = rng.randrange(len(f))
        f[i], f[j] = f[j], f[i]
    elif op == 3 and f:
        f[i] = rng.choice(SPECIALS)
    elif op == 4 and f:
        f[i] = "".join(rng.choice(GARBAGE_CHARS) for _ in range(rng.randrange(1, 12)))
    elif op == 5 and f:
        f[i] = str(rng.choice([-1, 1]) * rng.randrange(10 ** rng.randrange(1, 30)))
    elif op == 6 and f:
        f[i] = repr(rng.uniform(-1e6, 1e12))
    elif f:
        f[i] = str(-rng.randrange(2, 10**6))
    return f


def mutate_text(rng: random.Random, line: str, seeds: list[str], comment: bool) -> str:
    op = rng.randrange(11)
    n = len(line)
    if op == 0:  # insert a random character
        k = rng.randrange(n + 1)
        return line[:k] + rng.choice(GARBAGE_CHARS) + line[k:]
    if op == 1 and n:  # delete a span
        k = rng.randrange(n)
        return line[:k] + line[k + rng.randrange(1, 6):]
    if op == 2:  # truncate
        return line[:rng.randrange(n + 1)]
    if op == 3:  # splice two rows
        return line + rng.choice(["", " ", ","]) + rng.choice(seeds)
    if op == 4:  # line terminators and padding
        return rng.choice(["", " ", "\t", "\ufeff"]) + line + rng.choice(
            ["\n", "\r\n", "\r", " ", "\t\n", "\x00", "\n\n"])
    if op == 5:
        return rng.choice(["", " ", "\t", "   \t ", "\n", "\r\n", "\x0c", "\u3000", "\x00"])
    if op == 6 and comment:
        return rng.choice([";", " ; ", ";;"]) + line
    if op == 7:  # separators
        return line.replace(rng.choice([" ", "\t", ","]), rng.choice(["  ", "\t", ",", ";", ""]))
    if op == 8:  # a huge line
        return line + " 1" * rng.randrange(1, 40_000) if rng.random() < 0.01 else line * 3
    if op == 9 and n:  # flip a byte-ish character
        k = rng.randrange(n)
        return line[:k] + chr(rng.randrange(0x20, 0x3000)) + line[k + 1:]
    return line


def make_lines(rng: random.Random, seeds: list[str], sep: str | None, count: int,
               comment: bool) -> list[str]:
    out = []
    for _ in range(count):
        line = rng.choice(seeds)
        if rng.random() < 0.1:
            out.append(line)
            continue
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.6:
                fields = line.split(sep) if sep is not None else line.split()
                joiner = sep if sep is not None else rng.choice([" ", "\t", "  "])
                line = joiner.join(mutate_fields(rng, fields))
            else:
                line = mutate_text(rng, line, seeds, comment)
        out.append(line)
    return out


def swf_skipped(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith(";")


def csv_skipped(line: str) -> bool:
    return not line.strip()


def expected_raw(line: str) -> str:
    raw = line.rstrip("\r\n")[:MAX_RAW]
    if not raw.isascii():
        raw = raw.encode("utf-8", "backslashreplace").decode("utf-8")[:MAX_RAW]
    return raw


def verify(lines: list[str], items: list, first_line: int, skipped) -> tuple[int, int]:
    """Check items against lines (lines[k] is line first_line + k of the input)."""
    expected = [first_line + k for k, ln in enumerate(lines) if not skipped(ln)]
    assert len(items) == len(expected), (len(items), len(expected))
    stored = quarantined = 0
    for item, lineno in zip(items, expected, strict=True):
        if isinstance(item, Rejected):
            quarantined += 1
            assert item.reason in KNOWN_REASONS, item
            assert item.line == lineno, (item, lineno)
            assert item.raw == expected_raw(lines[lineno - first_line])
            assert "\n" not in item.detail and item.detail
            item.raw.encode("utf-8")  # storable text
            item.detail.encode("utf-8")
        else:
            stored += 1
            assert isinstance(item, JobRecord), item
            assert check(item) is None, item
            for text in (item.name, item.user, item.account, item.partition, item.state):
                assert text.isprintable() or not text, item
            for t in (item.submit_time, item.start_time, item.end_time, item.time_limit):
                assert t is None or (isinstance(t, int) and -(2**63) < t < 2**63)
    return stored, quarantined


def run_swf(rng: random.Random, header: list[str], seeds: list[str], variant, n: int):
    lines = make_lines(rng, seeds, None, n, comment=True)
    _, it = read_swf(header + lines, variant=variant)
    return verify(lines, list(it), len(header) + 1, swf_skipped)


def run_csv(rng: random.Random, header: str, seeds: list[str], n: int):
    lines = make_lines(rng, seeds, ",", n, comment=False)
    _, it = read_philly_csv([header, *lines])
    return verify(lines, list(it), 2, csv_skipped)


def test_fuzz_100k_lines():
    rng = random.Random(20240611)
    t0 = time.perf_counter()
    plan = [
        ("std", 30_000), ("anl", 25_000), ("csv", 30_000), ("full", 15_000),
    ]
    assert sum(n for _, n in plan) == TOTAL_LINES
    totals = {}
    for kind, n in plan:
        stored = quarantined = 0
        for start in range(0, n, BATCH):
            size = min(BATCH, n - start)
            if kind == "std":
                s, q = run_swf(rng, SWF_HEADER, STD_SEEDS, "standard", size)
            elif kind == "anl":
                s, q = run_swf(rng, ANL_HEADER, ANL_SEEDS, "anl", size)
            elif kind == "csv":
                s, q = run_csv(rng, CSV_HEADER, CSV_SEEDS, size)
            else:
                s, q = run_csv(rng, FULL_HEADER, FULL_SEEDS, size)
            stored += s
            quarantined += q
        totals[kind] = (stored, quarantined)
        # the mutator must exercise both outcomes substantially
        assert stored > n // 10 and quarantined > n // 5, (kind, stored, quarantined)
    elapsed = time.perf_counter() - t0
    print(f"fuzz: {TOTAL_LINES} lines in {elapsed:.1f} s; (stored, quarantined) {totals}")


HEADER_KEYS = ["MaxNodes", "MaxProcs", "UnixStartTime", "MaxJobs", "MaxRuntime",
               "TimeZoneString", "Version", "Note", "maxnodes", "Max Nodes"]


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_headers_and_variant_detection(seed):
    """Garbage header values and auto-detection never crash, and sizes stay sane."""
    rng = random.Random(seed)
    for _ in range(500):
        header = []
        for _ in range(rng.randrange(0, 6)):
            value = rng.choice(SPECIALS + [str(rng.randrange(-10, 10**20))])
            header.append(f"; {rng.choice(HEADER_KEYS)}: {value}")
        seeds = rng.choice([STD_SEEDS, ANL_SEEDS])
        lines = make_lines(rng, seeds, None, 5, comment=True)
        h, it = read_swf(header + lines)
        assert h.variant in ("standard", "anl")
        assert h.cpus_per_node is None or h.cpus_per_node >= 1
        assert h.max_nodes is None or h.max_nodes >= 1
        verify(lines, list(it), len(header) + 1, swf_skipped)
