"""Trace-file ingest (SWF, the ANL SWF variant, Philly-style CSV) and synthetic specs."""

from __future__ import annotations

import gzip
import os
from collections import Counter
from pathlib import Path

import pytest

from db.ingest.traces import (
    DEFAULT_CPUS_PER_NODE,
    DEFAULT_START_EPOCH,
    SWF_STATES,
    TraceHeader,
    read_philly_csv,
    read_swf,
    synthetic_spec,
)
from db.records import (
    BAD_NUMBER,
    BAD_TIME,
    BAD_VALUE,
    MISSING_FIELD,
    NEGATIVE_DURATION,
    UNKNOWN_STATE,
    WRONG_FIELD_COUNT,
    JobRecord,
    Rejected,
    TresCounts,
    check,
)

# ----------------------------------------------------------------------------- helpers

REPO = Path(__file__).resolve().parents[2]


def traces_dir() -> Path:
    env = os.environ.get("RLSCHED_TRACES")
    return Path(env) if env else REPO.parent / "shared" / "traces"


def trace_path(name: str) -> Path:
    d = traces_dir()
    if not d.is_dir():
        pytest.skip(f"trace folder {d} absent (a fresh clone has no ../shared; "
                    "set RLSCHED_TRACES to point at the traces)")
    p = d / name
    if not p.is_file():
        pytest.skip(f"trace {name} not found in {d}")
    return p


def swf(text: str, **kw):
    header, it = read_swf(text.splitlines(), **kw)
    return header, list(it)


def csv_(text: str, **kw):
    header, it = read_philly_csv(text.splitlines(), **kw)
    return header, list(it)


def only(items):
    assert len(items) == 1, items
    return items[0]


def one_record(text: str, **kw) -> JobRecord:
    _, items = swf(text, **kw)
    rec = only(items)
    assert isinstance(rec, JobRecord), rec
    assert check(rec) is None
    return rec


def one_rejected(text: str, reader=None, **kw) -> Rejected:
    _, items = (reader or swf)(text, **kw)
    rej = only(items)
    assert isinstance(rej, Rejected), rej
    assert "\n" not in rej.detail
    return rej


# ----------------------------------------------------------------------------- SWF

STD_HEADER = """\
; Version: 2.2
; Computer: Test Machine
; Installation: Test Site
; UnixStartTime: 1000000000
; TimeZoneString: Europe/Berlin
; MaxJobs: 3
; MaxRecords: 3
; MaxNodes: 128
; MaxProcs: 512
; MaxRuntime: 86400
; MaxMemory: 4194304
; Note: first note
; Note: second note
"""
#          job sub wait run alloc cpu  mem req  reqt  reqm st u g x q p prev think
STD_ROW = "1   0   10   100  8   95.5 2048  16  3600  4096  1  7 3 12 2 1  -1  -1"


def std_row(**repl: str) -> str:
    """STD_ROW with fields replaced by 1-based index: std_row(f11="0")."""
    toks = STD_ROW.split()
    for k, v in repl.items():
        toks[int(k[1:]) - 1] = v
    return " ".join(toks)


def test_swf_header_fields():
    header, items = swf(STD_HEADER + STD_ROW)
    assert header == TraceHeader(
        variant="standard",
        fields=header.fields,
        max_jobs=3, max_records=3, max_nodes=128, max_procs=512, max_runtime=86400,
        max_memory=4194304, unix_start_time=1_000_000_000,
        time_zone_string="Europe/Berlin", start_epoch=1_000_000_000, node_based=False,
        cpus_per_node=4,
    )
    assert header.fields["Computer"] == "Test Machine"
    assert header.fields["Note"] == "first note\nsecond note"
    assert len(items) == 1


def test_swf_standard_every_mapping():
    rec = one_record(STD_HEADER + STD_ROW, cluster="test")
    assert rec == JobRecord(
        job_id=1, name="x12", user="u7", account="g3", partition="q2", qos="",
        state="COMPLETED",
        submit_time=1_000_000_000, eligible_time=1_000_000_000,
        start_time=1_000_000_010, end_time=1_000_000_110,
        time_limit=3600,
        # 4 processors per node (MaxProcs / MaxNodes); 4096 KiB x 16 processors
        req=TresCounts(nodes=4, cpus=16, gpus=None, mem_mb=64),
        alloc=TresCounts(nodes=2, cpus=8, gpus=None, mem_mb=None),
        node_list="", nodes=(), priority=None, exit_code=None, cluster="test",
    )


def test_swf_unknowns_become_none_or_empty():
    row = std_row(f8="-1", f9="-1", f10="-1", f12="-1", f13="-1", f14="-1", f15="-1",
                  f16="-1")
    rec = one_record(STD_HEADER + row)
    assert (rec.user, rec.account, rec.partition, rec.name) == ("", "", "", "")
    assert rec.time_limit is None
    # requested processors unknown: the allocated count stands in
    assert rec.req == TresCounts(nodes=2, cpus=8, gpus=None, mem_mb=None)


def test_swf_partition_number_when_queue_unknown():
    assert one_record(STD_HEADER + std_row(f15="-1", f16="5")).partition == "p5"


def test_swf_unknown_wait_assumes_zero_wait_by_default():
    rec = one_record(STD_HEADER + std_row(f3="-1"))
    assert rec.start_time == rec.submit_time == 1_000_000_000
    assert rec.end_time == 1_000_000_100
    rec = one_record(STD_HEADER + std_row(f3="-1"), assume_zero_wait=False)
    assert rec.start_time is None and rec.end_time is None


def test_swf_unknown_run_time():
    rec = one_record(STD_HEADER + std_row(f4="-1"))
    assert rec.start_time == 1_000_000_010 and rec.end_time is None
    rec = one_record(STD_HEADER + std_row(f3="-1", f4="-1"))
    assert rec.start_time is None and rec.end_time is None


@pytest.mark.parametrize("status,state", [
    ("1", "COMPLETED"), ("0", "FAILED"), ("5", "CANCELLED"), ("-1", "COMPLETED"),
    ("2", "REQUEUED"), ("3", "COMPLETED"), ("4", "FAILED"), ("1.0", "COMPLETED"),
])
def test_swf_status_to_state(status, state):
    assert one_record(STD_HEADER + std_row(f11=status)).state == state


def test_swf_states_table_is_complete():
    assert set(SWF_STATES) == {None, 0, 1, 2, 3, 4, 5}


def test_swf_float_times_are_rounded():
    rec = one_record(STD_HEADER + std_row(f2="0.4", f3="9.6", f4="99.5", f9="3599.7"))
    assert rec.submit_time == 1_000_000_000
    assert rec.start_time == 1_000_000_010
    assert rec.end_time == 1_000_000_110  # round-half-even: 99.5 -> 100
    assert rec.time_limit == 3600


def test_swf_no_unix_start_time_uses_default_epoch_or_option():
    text = "; MaxNodes: 256\n1 5094 -1 12072 16 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n"
    header, (rec,) = swf(text)
    assert header.variant == "standard" and header.start_epoch == DEFAULT_START_EPOCH
    assert header.cpus_per_node == 1  # only MaxNodes: one processor per node
    assert rec.submit_time == DEFAULT_START_EPOCH + 5094
    assert rec.req == rec.alloc == TresCounts(nodes=16, cpus=16)
    assert rec.partition == "q0"
    _, (rec,) = swf(text, start_epoch=1_500_000_000)
    assert rec.submit_time == 1_500_000_000 + 5094
    _, (rec,) = swf(text, cpus_per_node=8)
    assert rec.alloc == TresCounts(nodes=2, cpus=16)


def test_swf_start_epoch_overrides_unix_start_time():
    _, (rec,) = swf(STD_HEADER + STD_ROW, start_epoch=2_000_000_000)
    assert rec.submit_time == 2_000_000_000


def test_swf_comments_and_blank_lines_yield_nothing_and_keep_line_numbers():
    text = STD_HEADER + STD_ROW + "\n\n   \n; a comment between jobs\n  ;indented\n" + \
        std_row(f1="2", f11="7")
    _, items = swf(text)
    assert [type(i) for i in items] == [JobRecord, Rejected]
    rej = items[1]
    assert rej.line == STD_HEADER.count("\n") + 6
    assert rej.raw == std_row(f1="2", f11="7")


ANL = """\
; Installation: Theta Argonne
; MaxJobs: 2
; MaxNodes: 4392
; MaxProcs: 4392
639487\t1672529301\t71\t3632\t8\t3600\t-1\t-1\t-1\t-1\t-1\t0\t-1\t-1\t-1\t-1\t-1\t-1
638720\t1671905072\t632522\t3648\t4096\t3600\t-1\t-1\t-1\t-1\t-1\t70296325381051\t-1\t-1\t-1\t-1\t-1\t-1
"""


def test_anl_variant_detected_and_mapped():
    header, (a, b) = swf(ANL)
    assert header.variant == "anl" and header.node_based
    assert header.start_epoch == 0 and header.cpus_per_node is None
    assert header.fields["Installation"] == "Theta Argonne"
    assert a == JobRecord(
        job_id=639487, name="", user="u0", account="", partition="", qos="",
        state="COMPLETED", submit_time=1672529301, eligible_time=1672529301,
        start_time=1672529301 + 71, end_time=1672529301 + 71 + 3632, time_limit=3600,
        req=TresCounts(nodes=8), alloc=TresCounts(nodes=8), node_list="", nodes=(),
        priority=None, exit_code=None,
    )
    assert b.user == "u70296325381051" and b.alloc.nodes == 4096


def test_anl_cpus_per_node_option():
    _, (a, _) = swf(ANL, cpus_per_node=64)
    assert a.alloc == a.req == TresCounts(nodes=8, cpus=512)


def test_anl_variant_forced_either_way():
    header, (a, _) = swf(ANL, variant="standard", start_epoch=0)
    assert header.variant == "standard"
    assert a.time_limit is None and a.alloc == TresCounts(nodes=8, cpus=8)
    header, _ = swf("; UnixStartTime: 1600000000\n" + ANL.split("\n", 4)[4])
    assert header.variant == "standard"  # a UnixStartTime header means relative times
    header, _ = swf("1 5 -1 1 1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1", variant="anl")
    assert header.variant == "anl"


def test_swf_bad_variant_and_cpus_per_node():
    with pytest.raises(ValueError):
        read_swf([], variant="pbs")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        read_swf([], cpus_per_node=0)


@pytest.mark.parametrize("row,reason,detail", [
    (" ".join(STD_ROW.split()[:17]), WRONG_FIELD_COUNT, "17 fields"),
    (STD_ROW + " 0", WRONG_FIELD_COUNT, "19 fields"),
    (std_row(f5="abc"), BAD_NUMBER, "allocated processors 'abc'"),
    (std_row(f5="8.5"), BAD_NUMBER, "allocated processors"),
    (std_row(f4="NaN"), BAD_NUMBER, "run time 'NaN'"),
    (std_row(f4="inf"), BAD_NUMBER, "run time"),
    (std_row(f4="1e400"), BAD_NUMBER, "run time"),
    (std_row(f1="9" * 19), BAD_NUMBER, "out of range"),
    (std_row(f1="9" * 5000), BAD_NUMBER, "job number"),
    (std_row(f1="1_000"), BAD_NUMBER, "job number"),
    (std_row(f1="\u0661\u0662"), BAD_NUMBER, "non-ASCII"),  # Arabic-Indic digits
    (std_row(f1="0"), BAD_NUMBER, "job number 0"),
    (std_row(f5="-2"), BAD_NUMBER, "allocated processors -2"),
    (std_row(f12="-7"), BAD_NUMBER, "user id -7"),
    (std_row(f8="9" * 18, f10="9" * 18), BAD_NUMBER, "requested memory"),  # overflows
    (std_row(f6="x"), BAD_NUMBER, "average cpu time"),  # unused fields are checked too
    (std_row(f1="-1"), MISSING_FIELD, "job number -1"),
    (std_row(f2="-1"), MISSING_FIELD, "submit time -1"),
    (std_row(f2="-5"), BAD_TIME, "submit time -5"),
    (std_row(f2="9" * 15), BAD_TIME, "after year 9999"),
    (std_row(f3="-5"), NEGATIVE_DURATION, "wait time -5"),
    (std_row(f4="-2"), NEGATIVE_DURATION, "run time -2"),
    (std_row(f9="-3"), NEGATIVE_DURATION, "requested time -3"),
    (std_row(f11="9"), UNKNOWN_STATE, "SWF status 9"),
])
def test_swf_rejections(row, reason, detail):
    rej = one_rejected(STD_HEADER + row + "\r\n")
    assert rej.reason == reason
    assert detail in rej.detail
    assert rej.raw == row
    assert rej.line == STD_HEADER.count("\n") + 1


def test_swf_submit_at_epoch_zero_fails_check():
    rej = one_rejected("1 0 0 10 1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1", start_epoch=0)
    assert rej.reason == BAD_TIME and "submit time 0" in rej.detail


def test_swf_raw_is_capped():
    rej = one_rejected("1 " + "x" * 100_000)
    assert len(rej.raw) == 65536


def test_raw_with_lone_surrogate_is_escaped():
    rej = one_rejected("1 \ud800")
    assert rej.reason == BAD_NUMBER and rej.raw == "1 \\ud800"
    rej = one_rejected(CSV_HEAD + "\ud800,1,1,1,a", reader=csv_)
    assert rej.reason == BAD_TIME and rej.raw == "\\ud800,1,1,1,a"


def test_swf_path_gz_and_one_shot_iterables_agree(tmp_path):
    text = STD_HEADER + STD_ROW + "\n" + std_row(f1="2", f4="-5") + "\n"
    plain = tmp_path / "t.swf"
    plain.write_text(text)
    gz = tmp_path / "t.swf.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write(text)
    results = []
    for src in (plain, str(gz), iter(text.splitlines(keepends=True))):
        header, it = read_swf(src)
        results.append((header, list(it)))
    assert results[0] == results[1] == results[2]
    assert [type(i) for i in results[0][1]] == [JobRecord, Rejected]


def test_swf_iterator_is_lazy(tmp_path):
    p = tmp_path / "t.swf"
    p.write_text(STD_HEADER + STD_ROW + "\n")
    header, it = read_swf(p)
    p.unlink()  # the header was read; the rows are read when iterated
    assert header.max_nodes == 128
    with pytest.raises(FileNotFoundError):
        next(it)


# ----------------------------------------------------------------------------- CSV

PHILLY = """\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,12,35412.0,6214e9
"""


def test_philly_mapping():
    header, (a, b) = csv_(PHILLY)
    assert header == TraceHeader(
        variant="philly", columns=("timestamp", "duration", "num_gpus", "gpu_time", "cluster"),
        gpus_per_node=8,
    )
    t = 1507532515  # 2017-10-09T07:01:55Z
    assert a == JobRecord(
        job_id=1, name="", user="", account="11cb48", partition="", qos="",
        state="COMPLETED", submit_time=t, eligible_time=t, start_time=t, end_time=t + 66,
        time_limit=None, req=TresCounts(nodes=1, gpus=1), alloc=TresCounts(nodes=1, gpus=1),
        node_list="", nodes=(), priority=None, exit_code=None,
    )
    assert b.job_id == 2 and b.alloc == TresCounts(nodes=2, gpus=12)  # ceil(12 / 8)
    _, (a, b) = csv_(PHILLY, gpus_per_node=4, cluster="philly")
    assert b.alloc.nodes == 3 and a.cluster == "philly"


def test_philly_zero_gpus_still_one_node_and_epoch_timestamps():
    rec = only(csv_("timestamp,duration,num_gpus\n1507532515,10,0\n")[1])
    assert rec.submit_time == 1507532515 and rec.alloc == TresCounts(nodes=1, gpus=0)
    rec = only(csv_("timestamp,duration,num_gpus\n2017-10-09T07:01:55.25,10.4,1\n")[1])
    assert rec.submit_time == 1507532515 and rec.end_time == 1507532525


def test_philly_time_zone_option():
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        la = zoneinfo.ZoneInfo("America/Los_Angeles")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no tz database")
    _, (a, _) = csv_(PHILLY, tz=la)
    assert a.submit_time == 1507532515 + 7 * 3600  # PDT is UTC-7


def test_philly_no_wait_option_and_unknown_duration():
    _, (a, _) = csv_(PHILLY, assume_zero_wait=False)
    assert a.start_time is None and a.end_time is None
    rec = only(csv_("timestamp,duration,num_gpus\n2017-10-09 07:01:55,,1\n")[1])
    assert rec.start_time is None and rec.end_time is None


FULL = """\
jobid,user,vc,status,timestamp,wait,duration,num_gpus,time_limit
77,ce2f4c,ee9e8c,Pass,2017-10-07 01:11:39,30,74,8,3600
application_1506638472019_14199,ab12,ee9e8c,Killed,2017-10-07 01:11:39,,10,8,
,ab12,ee9e8c,Failed,2017-10-07 01:11:39,,10,8,
,ab12,ee9e8c,timeout,2017-10-07 01:11:39,,10,8,
"""


def test_philly_optional_columns():
    _, (a, b, c, d) = csv_(FULL)
    t = 1507338699
    assert (a.job_id, a.name, a.user, a.account, a.state) == (77, "", "ce2f4c", "ee9e8c",
                                                              "COMPLETED")
    assert (a.start_time, a.end_time, a.time_limit) == (t + 30, t + 104, 3600)
    assert (b.job_id, b.name, b.state) == (2, "application_1506638472019_14199", "CANCELLED")
    assert b.start_time == t and b.time_limit is None
    assert (c.job_id, c.state, d.state) == (3, "FAILED", "TIMEOUT")


def test_philly_row_index_counts_rejected_rows_not_blank_ones():
    text = PHILLY.replace("\n2017-10-09 06:13", "\n\nbad,1,1,1,x\n2017-10-09 06:13")
    _, (a, rej, b) = csv_(text)
    assert isinstance(rej, Rejected) and rej.line == 4
    assert (a.job_id, b.job_id) == (1, 3)


CSV_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
FULL_HEAD = FULL.split("\n", 1)[0] + "\n"


@pytest.mark.parametrize("head,row,reason,detail", [
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,1,66.0", WRONG_FIELD_COUNT, "4 fields, header has 5"),
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,1,66.0,a,b", WRONG_FIELD_COUNT, "6 fields"),
    (CSV_HEAD, "2017-02-30 07:01:55,66.0,1,66.0,a", BAD_TIME, "timestamp"),
    (CSV_HEAD, "2017-10-09 24:00:00,66.0,1,66.0,a", BAD_TIME, "timestamp"),
    (CSV_HEAD, "yesterday,66.0,1,66.0,a", BAD_TIME, "timestamp 'yesterday'"),
    (CSV_HEAD, "999999999999,66.0,1,66.0,a", BAD_TIME, "after year 9999"),
    (CSV_HEAD, "1970-01-01 00:00:00,66.0,1,66.0,a", BAD_TIME, "submit time 0"),
    (CSV_HEAD, ",66.0,1,66.0,a", MISSING_FIELD, "timestamp empty"),
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,,66.0,a", MISSING_FIELD, "num_gpus empty"),
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,1.5,66.0,a", BAD_NUMBER, "num_gpus '1.5'"),
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,-1,66.0,a", BAD_NUMBER, "num_gpus -1"),
    (CSV_HEAD, "2017-10-09 07:01:55,nan,1,66.0,a", BAD_NUMBER, "duration 'nan'"),
    (CSV_HEAD, "2017-10-09 07:01:55,-5,1,66.0,a", NEGATIVE_DURATION, "duration '-5'"),
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,1,6c71a0,a", BAD_NUMBER, "gpu_time '6c71a0'"),
    (CSV_HEAD, '2017-10-09 07:01:55,66.0,1,66.0,"a', BAD_VALUE, "malformed CSV quoting"),
    (CSV_HEAD, "2017-10-09 07:01:55,66.0,1,66.0,a\x00b", BAD_VALUE, "cluster"),
    (FULL_HEAD, "1,u,vc,Exploded,2017-10-07 01:11:39,,10,8,", UNKNOWN_STATE, "'Exploded'"),
    (FULL_HEAD, "1,u,vc,Pass,2017-10-07 01:11:39,-3,10,8,", NEGATIVE_DURATION, "wait"),
    (FULL_HEAD, "1,u,vc,Pass,2017-10-07 01:11:39,,10,8,-60", NEGATIVE_DURATION, "time_limit"),
])
def test_philly_rejections(head, row, reason, detail):
    rej = one_rejected(head + row + "\n", reader=csv_)
    assert rej.reason == reason
    assert detail in rej.detail
    assert (rej.raw, rej.line) == (row, 2)


def test_philly_quoted_cells_are_read():
    rec = only(csv_(CSV_HEAD + '"2017-10-09 07:01:55","66.0",1,66.0,"a,b"\n')[1])
    assert rec.account == "a,b"


@pytest.mark.parametrize("text,match", [
    ("", "no CSV header"),
    ("\n \n", "no CSV header"),
    ("timestamp,duration,gpu_time\n", "num_gpus"),
    ("timestamp,duration,num_gpus,gpus\n", "twice"),
])
def test_philly_bad_header(text, match):
    with pytest.raises(ValueError, match=match):
        read_philly_csv(text.splitlines())


def test_philly_bad_gpus_per_node():
    with pytest.raises(ValueError):
        read_philly_csv(PHILLY.splitlines(), gpus_per_node=0)


# ----------------------------------------------------------------------------- specs


def test_spec_from_standard_header():
    header, _ = swf(STD_HEADER)
    spec = synthetic_spec("test", header)
    assert spec.name == "test" and spec.num_nodes == 128
    assert spec.total_cpus == 512 and spec.total_gpus == 0
    assert len(spec.switches.leaves) == 32
    spec = synthetic_spec("test", header, nodes_per_leaf=16, gpus_per_node=2, num_nodes=10)
    assert spec.num_nodes == 10 and len(spec.switches.leaves) == 1 and spec.total_gpus == 20


def test_spec_from_max_procs_only():
    header, _ = swf("; MaxProcs: 100\n")
    assert synthetic_spec("p", header).num_nodes == 100
    assert synthetic_spec("p", header, cpus_per_node=8).num_nodes == 13


def test_spec_from_anl_header():
    header, _ = swf(ANL)
    spec = synthetic_spec("theta", header)
    assert spec.num_nodes == 4392 and spec.nodes[0].cpus == DEFAULT_CPUS_PER_NODE
    assert spec.switches.root is not None and spec.switches.root.name == "spine"


def test_spec_needs_a_size():
    header, items = csv_(PHILLY)
    with pytest.raises(ValueError, match="num_nodes"):
        synthetic_spec("philly", header)
    spec = synthetic_spec("philly", header, num_nodes=4)
    assert spec.total_gpus == 32
    with pytest.raises(ValueError, match="num_nodes"):
        synthetic_spec("none", [])
    with pytest.raises(ValueError, match="num_nodes"):
        synthetic_spec("none", swf("; Version: 2\n")[0])


def test_spec_from_records():
    _, items = csv_(PHILLY)
    spec = synthetic_spec("philly", items)
    assert spec.num_nodes == 2 and spec.nodes[0].gpus == 8  # the 12-GPU job
    _, items = swf(STD_HEADER + STD_ROW + "\nnot a row\n")
    spec = synthetic_spec("std", items)  # the Rejected item is skipped
    assert spec.num_nodes == 4 and spec.total_gpus == 0
    assert synthetic_spec("std", items, cpus_per_node=1).num_nodes == 16


# ----------------------------------------------------------------------------- real traces


@pytest.mark.parametrize("name,reader,count,variant", [
    ("lublin_256.swf", read_swf, 10_000, "standard"),
    ("theta.swf", read_swf, 23_387, "anl"),
    ("philly.csv", read_philly_csv, 82_247, "philly"),
])
def test_real_trace_ingests_whole(name, reader, count, variant):
    path = trace_path(name)
    header, it = reader(path)
    kinds: Counter[str] = Counter()
    keys = set()
    first = None
    for item in it:
        if isinstance(item, Rejected):
            kinds[item.reason] += 1
            continue
        kinds["stored"] += 1
        keys.add((item.job_id, item.submit_time))
        first = first or item
    assert header.variant == variant
    assert kinds == {"stored": count}, kinds
    assert len(keys) == count  # (job_id, submit_time) is unique per cluster
    assert first is not None
    if name == "lublin_256.swf":
        assert header.max_nodes == 256 and header.max_jobs == 10_000
        assert first.submit_time == DEFAULT_START_EPOCH + 5094
        assert first.end_time == first.start_time + 12072
        assert first.alloc == TresCounts(nodes=16, cpus=16)
        assert synthetic_spec("lublin", header).num_nodes == 256
    elif name == "theta.swf":
        assert header.max_nodes == 4392
        assert (first.job_id, first.submit_time, first.time_limit) == (639487, 1672529301, 3600)
        assert synthetic_spec("theta", header).num_nodes == 4392
    else:
        assert first.submit_time == 1507532515 and first.account == "11cb48"
