"""`rlsched ingest ...` into each backend: idempotent, incremental, nothing lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from db.store import Store
from slurm_plugin.cli import main
from slurm_plugin.slurm import parse

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "22.05"
TRACES = Path(os.environ.get("RLSCHED_TRACES",
                             Path(__file__).resolve().parents[2].parent / "shared" / "traces"))
HEADER = "|".join(parse.SACCT_FIELDS)


def row(job_id: int, state: str = "COMPLETED", end: str = "2026-01-01T01:00:00",
        start: str = "2026-01-01T00:01:00") -> str:
    return (f"{job_id}|{job_id}|tc|alice|ml|gpu|normal|{state}|2026-01-01T00:00:00|"
            f"2026-01-01T00:00:00|{start}|{end}|02:00:00|cpu=8,mem=32G,node=2,gres/gpu=4|"
            f"cpu=8,mem=32G,node=2,gres/gpu=4|node[01-02]|1000|0:0|job{job_id}")


def rlsched(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_sacct_dump_idempotent_update_and_quarantine(store_url: str, tmp_path: Path):
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join([
        HEADER, row(1), row(2, "RUNNING", end="Unknown"), row(3).replace("|1000|", "|x|"),
        row(4, end="2025-01-01T00:00:00"), row(5),
    ]) + "\n")
    out = rlsched("ingest", "sacct", "--db", store_url, "--file", str(dump), "--cluster", "tc")
    assert "read 5, inserted 3, updated 0, unchanged 0, quarantined 2" in out
    assert "bad number" in out and "end before start" in out
    out = rlsched("ingest", "sacct", "--db", store_url, "--file", str(dump), "--cluster", "tc")
    assert "inserted 0, updated 0, unchanged 3, quarantined 2" in out

    # job 2 finished since: a later dump updates it instead of adding a row
    dump.write_text("\n".join([HEADER, row(2)]) + "\n")
    out = rlsched("ingest", "sacct", "--db", store_url, "--file", str(dump), "--cluster", "tc")
    assert "inserted 0, updated 1, unchanged 0" in out
    with Store.open(store_url) as store:
        cid = store.cluster("tc")
        jobs = {j.job_id: j for j in store.jobs(cid)}
        assert sorted(jobs) == [1, 2, 5] and jobs[2].state == "COMPLETED"
        bad = store.quarantined(cid)
        assert sorted(q.reason for q in bad) == ["bad number"] * 2 + ["end before start"] * 2
        assert any("|x|" in q.raw for q in bad)


def test_strict_exits_non_zero(store_url: str, tmp_path: Path):
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join([HEADER, row(1), row(2).replace("COMPLETED", "EXPLODED")]) + "\n")
    result = CliRunner().invoke(main, ["ingest", "sacct", "--db", store_url, "--file",
                                       str(dump), "--cluster", "tc", "--strict"])
    assert result.exit_code == 1
    assert "1 rows quarantined (--strict)" in result.output
    assert "inserted 1" in result.output  # the good row is still stored


def test_golden_json_dump_names_its_cluster(store_url: str):
    out = rlsched("ingest", "sacct", "--db", store_url, "--file", str(GOLDEN / "sacct.json"))
    assert "cluster 'testcluster'" in out and "quarantined 0" in out


@pytest.mark.parametrize("name,jobs", [("lublin_256.swf", 10000), ("theta.swf", 23387)])
def test_swf_traces_ingest_whole(store_url: str, name: str, jobs: int):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present (set RLSCHED_TRACES)")
    out = rlsched("ingest", "swf", str(path), "--db", store_url)
    assert f"read {jobs}, inserted {jobs}, updated 0, unchanged 0, quarantined 0" in out
    with Store.open(store_url) as store:
        spec = store.cluster_spec(path.stem)
        assert spec is not None and spec.num_nodes >= 1 and spec.switches.leaves


def test_philly_trace_with_options(store_url: str, tmp_path: Path):
    csv = tmp_path / "p.csv"
    csv.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                   "1500000000,100,16,1600,vc1\n1500000010,50,1,50,vc2\nbad,1,1,1,vc\n")
    out = rlsched("ingest", "philly", str(csv), "--db", store_url, "--nodes", "8",
                  "--gpus-per-node", "8", "--nodes-per-leaf", "2")
    assert "read 3, inserted 2" in out and "quarantined 1" in out
    with Store.open(store_url) as store:
        spec = store.cluster_spec("p")
        assert spec.num_nodes == 8 and spec.total_gpus == 64 and len(spec.switches.leaves) == 4
        assert [j.req.nodes for j in store.jobs(store.cluster("p"))] == [2, 1]


def test_bad_inputs_have_clear_errors(store_url: str, tmp_path: Path):
    noheader = tmp_path / "x.txt"
    noheader.write_text(row(1) + "\n")
    r = CliRunner().invoke(main, ["ingest", "sacct", "--db", store_url, "--file", str(noheader),
                                  "--cluster", "tc"])
    assert r.exit_code != 0 and "not a sacct -P header" in r.output
    r = CliRunner().invoke(main, ["ingest", "sacct", "--db", store_url, "--file",
                                  str(GOLDEN / "sacct-X-P.txt")])
    assert r.exit_code == 2 and "give --cluster" in r.output
    r = CliRunner().invoke(main, ["ingest", "sacct", "--db", store_url, "--since", "someday"])
    assert r.exit_code == 2 and "use an ISO date" in r.output
