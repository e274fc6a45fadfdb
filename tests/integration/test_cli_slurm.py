"""`rlsched slurm ...` end to end against the test cluster."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurm_plugin.cli import main
from slurm_plugin.slurm.cli_backend import CliSlurmClient

from .conftest import Submit, wait_for

pytestmark = pytest.mark.integration


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_check_and_tables(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "16", "--exclusive", name="blocker")
    wait_for(lambda: any(j.job_id == blocker for j in slurm.running_jobs()), what="blocker")
    pending = submit("-N", "2", "--gres=gpu:8", "-t", "30", name="waiting")
    out = run("slurm", "check")
    assert "cluster   testcluster, Slurm 22.05" in out
    assert "nodes     16 (16 available), 1024 CPUs, 128 GPUs (128 allocated)" in out
    assert "topology  5 switches, 4 leaves, root spine" in out
    assert "jobs      1 pending, 1 running" in out
    assert out.rstrip().endswith("ok")

    jobs = {j["job_id"]: j for j in json.loads(run("slurm", "jobs", "--json"))}
    assert jobs[pending]["state"] == "PENDING" and jobs[pending]["num_gpus"] == 16
    assert jobs[blocker]["nodes"][0] == "node01"
    table = run("slurm", "jobs", "--state", "pending")
    assert "waiting" in table and "blocker" not in table
    assert "node[01-16]" in run("slurm", "topology")
    assert "leaf3" in run("slurm", "nodes")
    assert "priority/multifactor" in run("slurm", "config")
    assert "JOBID" in run("slurm", "sacct", "-S", "now-1h", "--format", "parsable")


def test_bad_backend_call_is_one_line_error(cluster: str):
    result = CliRunner().invoke(main, ["slurm", "--timeout", "0.001", "nodes"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: Slurm call failed: sinfo --json: timed out")
    assert "Traceback" not in result.output
