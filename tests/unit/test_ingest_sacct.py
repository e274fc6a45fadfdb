"""sacct ingest: dumps in both formats, bad rows quarantined with a reason."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from db import records as r
from db.ingest import sacct
from slurm_plugin.slurm import parse

G = Path(__file__).resolve().parent.parent / "golden" / "22.05"
HEADER = "|".join(parse.SACCT_FIELDS)
GOOD = ("7|7|tc|alice|ml|gpu|normal|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:00|"
        "2026-01-01T00:01:00|2026-01-01T01:00:00|02:00:00|cpu=8,mem=32G,node=2,gres/gpu=4|"
        "cpu=8,mem=32G,node=2,gres/gpu=4|node[01-02]|1000|0:0|train")


def split(items):
    recs = [i for i in items if not isinstance(i, r.Rejected)]
    rej = [i for i in items if isinstance(i, r.Rejected)]
    return recs, rej


def test_golden_parsable_dump_reads_whole(tmp_path):
    recs, rej = split(list(sacct.read_dump(G / "sacct-X-P.txt")))
    assert rej == []
    assert len(recs) == len((G / "sacct-X-P.txt").read_text().splitlines()) - 1
    assert all(r.check(x) is None for x in recs)


def test_golden_json_dump_reads_whole():
    recs, rej = split(list(sacct.read_dump(G / "sacct.json")))
    assert rej == [] and len(recs) == len(json.loads((G / "sacct.json").read_text())["jobs"])


def test_good_row():
    (rec,) = sacct.read_parsable_lines([HEADER, GOOD])
    assert rec.job_id == 7 and rec.alloc.gpus == 4 and rec.nodes == ("node01", "node02")
    assert rec.time_limit == 7200 and rec.end_time - rec.start_time == 3540


@pytest.mark.parametrize(
    "mutate,reason",
    [
        (lambda s: s.replace("|train", ""), r.WRONG_FIELD_COUNT),
        (lambda s: s.replace("2026-01-01T00:01:00", "2026-13-01T00:01:00"), r.BAD_TIME),
        (lambda s: s.replace("2026-01-01T00:01:00", "yesterday"), r.BAD_TIME),
        (lambda s: s.replace("02:00:00", "soon"), r.BAD_TIME),
        (lambda s: s.replace("node[01-02]", "node[02-01]"), r.BAD_HOSTLIST),
        (lambda s: s.replace("cpu=8,mem=32G", "cpu=eight,mem=32G", 1), r.BAD_TRES),
        (lambda s: s.replace("|1000|", "|high|"), r.BAD_NUMBER),
        (lambda s: s.replace("7|7|", "x|x|"), r.BAD_NUMBER),
    ],
)
def test_bad_rows_are_rejected_with_reason(mutate, reason):
    bad = mutate(GOOD)
    items = list(sacct.read_parsable_lines([HEADER, GOOD, bad, GOOD.replace("7|7|", "8|8|")]))
    recs, rej = split(items)
    assert [x.job_id for x in recs] == [7, 8]
    assert len(rej) == 1 and rej[0].reason == reason, rej
    assert rej[0].raw == bad and rej[0].line == 3


def test_check_catches_inconsistent_rows():
    swapped = GOOD.replace("2026-01-01T01:00:00", "2025-12-31T00:00:00")
    (rec,) = sacct.read_parsable_lines([HEADER, swapped])
    assert r.check(rec) == (r.END_BEFORE_START, f"end {rec.end_time} < start {rec.start_time}")
    weird_state = GOOD.replace("COMPLETED", "EXPLODED")
    (rec,) = sacct.read_parsable_lines([HEADER, weird_state])
    assert r.check(rec)[0] == r.UNKNOWN_STATE


def test_steps_and_blank_lines_yield_nothing():
    step = GOOD.replace("7|7|", "7.batch|7.batch|")
    assert list(sacct.read_parsable_lines([HEADER, "", step, "  "])) == []


def test_dump_without_header_is_a_clear_error(tmp_path):
    p = tmp_path / "noheader.txt"
    p.write_text(GOOD + "\n")
    with pytest.raises(sacct.DumpFormatError, match="not a sacct -P header"):
        list(sacct.read_dump(p))


def test_truncated_json_is_quarantined_not_lost(tmp_path):
    p = tmp_path / "d.json"
    text = (G / "sacct.json").read_text()[:5000]
    p.write_text(text)
    (only,) = list(sacct.read_dump(p))
    assert isinstance(only, r.Rejected) and only.reason == r.BAD_JSON and only.raw == text


def test_bad_json_record_is_rejected_others_kept(tmp_path):
    doc = json.loads((G / "sacct.json").read_text())
    doc["jobs"][1]["time"]["start"] = "noon"
    doc["jobs"][2] = ["not", "an", "object"]
    p = tmp_path / "d.json"
    p.write_text(json.dumps(doc))
    recs, rej = split(list(sacct.read_dump(p)))
    assert len(recs) == len(doc["jobs"]) - 2
    assert sorted(x.reason for x in rej) == [r.BAD_TIME, r.BAD_VALUE]
    assert {x.line for x in rej} == {1, 2}


def test_windows():
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ws = list(sacct.windows(t0, t0 + timedelta(days=2, hours=12)))
    assert len(ws) == 3 and ws[-1][1] - ws[-1][0] == timedelta(hours=12)
    assert all(a[1] == b[0] for a, b in zip(ws, ws[1:], strict=False))
    with pytest.raises(ValueError):
        list(sacct.windows(t0, t0 + timedelta(days=1), timedelta(0)))


def test_sacct_window_end_rounds_up_to_the_second():
    # sacct keeps jobs eligible strictly before -E, to the second: an end of 12:00:00.25
    # asks for -E 12:00:01 so a job eligible at 12:00:00 is kept; the start rounds down
    from slurm_plugin.slurm.cli_backend import CliSlurmClient

    class Recording(CliSlurmClient):
        def run(self, args):
            calls.append(list(args))
            return ""

    calls: list[list[str]] = []
    client = Recording()
    client._version = (22, 5)
    t0 = datetime(2026, 1, 1, 11, 50, 0, 900_000, tzinfo=timezone.utc)
    client.sacct_output(t0, datetime(2026, 1, 1, 12, 0, 0, 250_000, tzinfo=timezone.utc))
    client.sacct_output(t0, datetime(2026, 1, 1, 12, 0, 0))  # naive UTC, whole second
    for argv, end in zip(calls, ["2026-01-01T12:00:01", "2026-01-01T12:00:00"], strict=True):
        assert argv[argv.index("-S") + 1] == "2026-01-01T11:50:00"
        assert argv[argv.index("-E") + 1] == end
