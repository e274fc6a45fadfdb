"""The data_parser formats v0.0.39 to v0.0.44 (fixtures: tests/golden/LATER_FORMATS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.slurm import parse
from slurm_plugin.slurm.errors import SlurmError

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
VERSIONS = ["v0.0.39", "v0.0.40", "v0.0.41", "v0.0.44"]


def read(version: str, name: str) -> str:
    return (GOLDEN / version / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_declared_version_is_detected(version):
    for name in ("squeue.json", "sacct.json", "sinfo.json"):
        doc, n = parse.load_document(read(version, name), name)
        assert n == int(version.rsplit(".", 1)[1])


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue(version):
    jobs = {j.job_id: j for j in parse.parse_squeue_json(read(version, "squeue.json"))}
    pend = jobs[1001]
    assert pend.is_pending and pend.state_reason == "ReqNodeNotAvail"
    assert pend.nice == -50 and pend.time_limit == 3600 and pend.num_gpus == 4
    assert pend.required_nodes == ("gpu03",) and pend.start_time is None
    assert pend.priority == 1200 and pend.mem_mb == 128000
    run = jobs[1002]
    assert run.is_running and run.nodes == ("gpu04", "gpu05") and run.num_gpus == 16
    assert run.start_time == 1767265200 and run.time_limit == 86400
    task = jobs[1007]
    assert (task.array_job_id, task.array_task_id) == (1003, 3)
    assert jobs[1010].time_limit is None  # unlimited


@pytest.mark.parametrize("version", VERSIONS)
def test_sacct(version):
    rows = {r.job_id: r for r in parse.parse_sacct_json(read(version, "sacct.json"))}
    assert rows[1001].state == "PENDING" and rows[1001].start_time is None
    assert rows[1001].req.gpus == 4 and rows[1001].alloc.gpus is None
    assert rows[1002].alloc.nodes == 2 and rows[1002].nodes == ("gpu04", "gpu05")
    assert rows[1002].alloc.gpus == 16 and rows[1002].time_limit == 86400
    assert (rows[1007].array_job_id, rows[1007].array_task_id) == (1003, 3)
    assert rows[1010].time_limit is None


@pytest.mark.parametrize("version", VERSIONS)
def test_grouped_sinfo_is_refused_with_the_way_out(version):
    raw = read(version, "sinfo.json")
    assert parse.is_grouped_sinfo(raw)
    with pytest.raises(SlurmError, match="scontrol show nodes --json"):
        parse.parse_nodes_json(raw)


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.44"])
def test_scontrol_show_nodes(version):
    nodes = {n.name: n for n in parse.parse_nodes_json(read(version, "scontrol-show-nodes.json"))}
    assert nodes["gpu01"].state == "IDLE" and nodes["gpu01"].available
    assert nodes["gpu02"].state == "MIXED" and nodes["gpu02"].alloc_gpus == 4
    assert nodes["gpu02"].gpus == 8 and nodes["gpu02"].alloc_cpus == 12
    assert nodes["gpu02"].features == ("a100", "ib", "leaf1")
    assert nodes["gpu03"].state_flags == ("DRAIN",) and not nodes["gpu03"].available
    assert nodes["gpu03"].partitions == ("gpu",)


def test_switches_fields_by_version():
    base = {"job_id": 1, "job_state": ["PENDING"], "tres_req_str": "cpu=1,node=1"}
    meta = {"plugin": {"data_parser": "data_parser/v0.0.41"}}
    import json

    old = dict(base, minimum_switches=1, maximum_switch_wait_time=300)
    new = dict(base, required_switches=2, maximum_switch_wait_time=60)
    none = dict(base, minimum_switches=0, maximum_switch_wait_time=0)
    jobs = parse.parse_squeue_json(json.dumps({"meta": meta, "jobs": [old, new, none]}))
    assert [(j.switches, j.switches_wait) for j in jobs] == [(1, 300), (2, 60), (None, None)]
