"""Malformed Slurm output gives one typed, one-line error naming the field."""

from __future__ import annotations

import copy
import json

import pytest

from slurm_plugin.slurm import parse
from slurm_plugin.slurm.errors import SlurmError

META38 = {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}
JOB38 = {
    "job_id": 55, "job_state": "PENDING", "name": "pend", "user_name": "root",
    "account": "root", "partition": "gpu", "qos": "normal", "state_reason": "Priority",
    "submit_time": 1795299368, "eligible_time": 1795299368, "start_time": 0,
    "time_limit": 10, "node_count": 4, "cpus": 4, "priority": 1, "nice": 4294967246,
    "tres_req_str": "cpu=4,mem=2000G,node=4,billing=4,gres/gpu=32", "tres_alloc_str": "",
    "tres_per_node": "gres:gpu:8", "required_nodes": "node[01-04]", "excluded_nodes": "",
    "features": "leaf1", "nodes": "",
}


def doc(jobs, meta=META38):
    return json.dumps({"meta": meta, "errors": [], "jobs": jobs})


def test_minimal_v38_job():
    (job,) = parse.parse_squeue_json(doc([JOB38]))
    assert job.job_id == 55 and job.is_pending
    assert job.time_limit == 600
    assert job.nice == -50
    assert job.num_gpus == 32 and job.num_nodes == 4 and job.num_cpus == 4
    assert job.mem_mb == 2000 * 1024
    assert job.required_nodes == ("node01", "node02", "node03", "node04")
    assert job.eligible_time == 1795299368 and job.start_time is None
    assert job.site_factor is None


def _one_line(exc: SlurmError) -> str:
    msg = str(exc)
    assert "\n" not in msg
    return msg


def test_truncated_document():
    raw = doc([JOB38])[:-40]
    with pytest.raises(SlurmError) as ei:
        parse.parse_squeue_json(raw)
    assert "invalid JSON" in _one_line(ei.value)
    assert ei.value.command == "squeue --json"


@pytest.mark.parametrize(
    "field,value,name",
    [
        ("job_id", "55", "jobs[0].job_id"),
        ("time_limit", "10", "jobs[0].time_limit"),
        ("job_state", 3, "jobs[0].job_state"),
        ("priority", [1], "jobs[0].priority"),
        ("name", 7, "jobs[0].name"),
        ("required_nodes", "node[01-", "jobs[0]"),
        ("tres_req_str", "cpu=four", "jobs[0]"),
    ],
)
def test_wrong_types_name_the_field(field, value, name):
    bad = copy.deepcopy(JOB38)
    bad[field] = value
    with pytest.raises(SlurmError) as ei:
        parse.parse_squeue_json(doc([JOB38, bad][1:]))
    assert ei.value.field is not None and ei.value.field.startswith(name)
    assert name in _one_line(ei.value)


def test_missing_required_field():
    bad = {k: v for k, v in JOB38.items() if k != "job_id"}
    with pytest.raises(SlurmError) as ei:
        parse.parse_squeue_json(doc([JOB38, bad]))
    assert ei.value.field == "jobs[1].job_id"


@pytest.mark.parametrize(
    "meta,needle",
    [
        ({"plugin": {"type": "openapi/v0.0.37"}}, "unsupported format version v0.0.37"),
        ({"plugin": {"data_parser": "data_parser/v0.0.99"}}, "unsupported format version v0.0.99"),
        ({"plugin": {}}, "no format version declared"),
        (None, "no 'meta' block"),
    ],
)
def test_unknown_version(meta, needle):
    raw = json.dumps({"meta": meta, "jobs": [JOB38]} if meta is not None else {"jobs": [JOB38]})
    with pytest.raises(SlurmError) as ei:
        parse.parse_squeue_json(raw)
    assert needle in _one_line(ei.value)


def test_jobs_not_a_list():
    raw = json.dumps({"meta": META38, "jobs": {"55": JOB38}})
    with pytest.raises(SlurmError) as ei:
        parse.parse_squeue_json(raw)
    assert ei.value.field == "jobs"


def test_errors_reported_by_slurm():
    raw = json.dumps({"meta": META38, "errors": [{"error": "Unable to contact slurm controller"}],
                      "jobs": []})
    with pytest.raises(SlurmError) as ei:
        parse.parse_squeue_json(raw)
    assert "Unable to contact slurm controller" in str(ei.value)


def test_not_an_object():
    with pytest.raises(SlurmError):
        parse.parse_squeue_json("[]")


def test_topology_text():
    text = (
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[01-04]\n"
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[05-08]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[01-08] Switches=leaf[1-2]\n"
    )
    tree = parse.parse_topology(text)
    assert [s.name for s in tree.leaves] == ["leaf1", "leaf2"]
    assert tree.root is not None and tree.root.name == "spine"
    assert tree.root.switches == ("leaf1", "leaf2")
    assert tree.leaf_of("node06") == "leaf2"
    assert tree.leaf_of("node99") is None
    with pytest.raises(SlurmError) as ei:
        parse.parse_topology("SwitchName=x Level=zero Nodes=n1\n")
    assert ei.value.field == "line 1.Level"


def test_sacct_parsable_pipe_in_name_and_steps():
    header = "|".join(parse.SACCT_FIELDS)
    row = ("12|12|tc|alice|acct|gpu|normal|CANCELLED by 0|2026-01-01T00:00:00|"
           "2026-01-01T00:00:01|Unknown|Unknown|01:00:00|cpu=2,mem=1G,node=1,gres/gpu=2||"
           "None assigned|10|0:15|a|b;c")
    step = ("12.batch|12.batch|tc|||||COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:01|"
            "2026-01-01T00:00:02|2026-01-01T00:00:03|||cpu=2|node01||0:0|batch")
    (job,) = parse.parse_sacct_parsable("\n".join([header, row, step]))
    assert job.name == "a|b;c"
    assert job.state == "CANCELLED"
    assert job.start_time is None and job.end_time is None
    assert job.time_limit == 3600
    assert job.req.gpus == 2 and job.req.mem_mb == 1024
    assert job.nodes == () and job.signal == 15
    with pytest.raises(SlurmError) as ei:
        parse.parse_sacct_parsable("\n".join([header, row.replace("2026-01-01T00:00:00", "x")]))
    assert ei.value.field == "line 2.Submit"
