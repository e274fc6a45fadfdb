"""Every SlurmClient call, for real, against the test cluster."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest

from slurm_plugin.slurm.cli_backend import CliSlurmClient
from slurm_plugin.slurm.errors import SlurmError

from .conftest import Submit, wait_for

pytestmark = pytest.mark.integration

NODES = [f"node{i:02d}" for i in range(1, 17)]


def _job(slurm: CliSlurmClient, job_id: int):
    return next((j for j in slurm.jobs() if j.job_id == job_id), None)


def _running(slurm: CliSlurmClient, job_id: int):
    j = _job(slurm, job_id)
    return j if j is not None and j.is_running else None


def test_nodes_topology_config(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "2", "--gres=gpu:8", "--exclusive", "-w", "node05,node06")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    nodes = {n.name: n for n in slurm.nodes()}
    assert sorted(nodes) == NODES
    n5, n1 = nodes["node05"], nodes["node01"]
    assert (n1.cpus, n1.gpus, n1.alloc_gpus, n1.alloc_cpus) == (64, 8, 0, 0)
    assert n1.state == "IDLE" and n1.available
    assert n5.state == "ALLOCATED" and n5.alloc_gpus == 8 and n5.alloc_cpus == 64
    assert n1.features == ("leaf1",) and nodes["node16"].features == ("leaf4",)
    assert n1.partitions == ("gpu",)

    tree = slurm.topology()
    assert [s.name for s in tree.leaves] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert tree.root is not None and tree.root.name == "spine"
    assert tree.root.nodes == tuple(NODES)
    assert tree.leaf_of("node07") == "leaf2"

    cfg = slurm.config()
    assert cfg.cluster_name == "testcluster"
    assert cfg.slurm_version.startswith("22.05")
    assert cfg.priority_type == "priority/multifactor"
    assert cfg.priority_weights["age"] > 0
    assert cfg.scheduler_parameters.get("sched_interval") == "1"
    assert cfg.topology_plugin == "topology/tree"


def test_jobs_pending_and_running_fields(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "16", "--exclusive", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    weird = 'x; rm -rf / "$(id)" `id` | tee'
    a = submit("-N", "2", "--gres=gpu:4", "-t", "10", "-n", "4", "--mem=2G", name=weird)
    b = submit("--switches=1@5:00", "-N", "4", "--constraint=leaf2", "-x", "node03",
               "--nice=50", "-t", "1-00:00:00")
    c = submit("--array=1-3", "-n", "1", "-t", "5")
    jobs = {j.job_id: j for j in slurm.jobs()}
    blk = jobs[blocker]
    assert blk.is_running and blk.nodes == tuple(NODES) and blk.num_nodes == 16
    assert blk.num_gpus == 128 and blk.start_time is not None

    ja = jobs[a]
    assert ja.is_pending and ja.name == weird and ja.user == "root"
    assert (ja.num_nodes, ja.num_cpus, ja.num_gpus) == (2, 4, 8)
    assert ja.time_limit == 600 and ja.mem_mb is not None and ja.mem_mb >= 2048
    assert ja.partition == "gpu" and ja.qos == "normal" and ja.submit_time > 0
    assert ja.nodes == () and ja.site_factor == 0 and ja.nice == 0

    jb = jobs[b]
    assert jb.features == "leaf2" and jb.excluded_nodes == ("node03",)
    assert jb.nice == 50 and jb.time_limit == 86400
    assert jb.switches == 1 and jb.switches_wait == 300

    tasks = [j for j in jobs.values() if j.array_job_id == c]
    assert tasks, "array job missing"
    assert slurm.pending_jobs() and all(j.is_pending for j in slurm.pending_jobs())
    assert [j.job_id for j in slurm.running_jobs()] == [blocker]


def test_site_factor_changes_start_order(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "16", "--exclusive", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    first = submit("-N", "16", "--exclusive", name="first")
    second = submit("-N", "16", "--exclusive", name="second")
    slurm.set_site_factor(second, 5000)
    assert _job(slurm, second).site_factor == 5000
    assert _job(slurm, first).site_factor == 0
    wait_for(lambda: _job(slurm, second).priority > _job(slurm, first).priority,
             what="priority to follow the site factor")
    subprocess.run(["scancel", str(blocker)], check=True)
    started = wait_for(lambda: [j.job_id for j in slurm.running_jobs()], what="a job to start")
    assert started == [second], f"expected {second} (site factor 5000) first, got {started}"
    assert _job(slurm, first).is_pending


def test_req_nodes_steers_a_pending_job(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "16", "--exclusive", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    job = submit("-N", "2", "--gres=gpu:8")
    slurm.set_req_nodes(job, ["node14", "node13"])
    assert _job(slurm, job).required_nodes == ("node13", "node14")
    subprocess.run(["scancel", str(blocker)], check=True)
    j = wait_for(lambda: _running(slurm, job), what="steered job to start")
    assert j.nodes == ("node13", "node14")


def test_clear_req_nodes(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "16", "--exclusive", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    job = submit("-N", "1")
    slurm.set_req_nodes(job, ["node09"])
    assert _job(slurm, job).required_nodes == ("node09",)
    slurm.clear_req_nodes(job)
    assert _job(slurm, job).required_nodes == ()


def test_switches_are_set_and_cleared_on_a_pending_job(slurm: CliSlurmClient, submit: Submit):
    blocker = submit("-N", "16", "--exclusive", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    job = submit("-N", "2", "--gres=gpu:8")
    assert _job(slurm, job).switches is None
    slurm.set_switches(job, 1, 240)  # (under max_switch_wait, 300 s here)
    j = _job(slurm, job)
    assert j.switches == 1 and j.switches_wait == 240
    slurm.set_switches(job, 1, 3600)  # Slurm caps the wait at max_switch_wait
    assert _job(slurm, job).switches_wait == 300
    slurm.clear_switches(job)
    assert _job(slurm, job).switches in (None, 0)
    subprocess.run(["scancel", str(blocker)], check=True)
    wait_for(lambda: _running(slurm, job), what="job to start")
    with pytest.raises(SlurmError, match="not PENDING"):
        slurm.set_switches(job, 1, 240)
    with pytest.raises(SlurmError, match="not PENDING"):
        slurm.clear_switches(job)
    with pytest.raises(ValueError, match="switch wait"):
        slurm.set_switches(job, 1, 0)


def test_a_job_given_switches_waits_for_one_leaf(slurm: CliSlurmClient, submit: Submit):
    # one node free in leaf1 (node04) and one in leaf2 (node08): a 2-node job could
    # start now only across both leaves
    held = [submit("-N", "3", "--exclusive", "-w", "node01,node02,node03"),
            submit("-N", "3", "--exclusive", "-w", "node05,node06,node07"),
            submit("-N", "8", "--exclusive", "-w", "node[09-16]")]
    for b in held:
        wait_for(lambda b=b: _running(slurm, b), what="blockers to start")
    job = submit("-N", "2", "--exclusive", "--hold")
    slurm.set_switches(job, 1, 240)
    subprocess.run(["scontrol", "release", str(job)], check=True)
    time.sleep(4)  # several scheduling passes (sched_interval=1, bf_interval=1)
    assert _job(slurm, job).is_pending  # not spread over leaf1 and leaf2
    subprocess.run(["scancel", str(held[1])], check=True)  # leaf2 frees up
    j = wait_for(lambda: _running(slurm, job), what="job to start in one leaf")
    assert set(j.nodes) <= {"node05", "node06", "node07", "node08"}


def test_req_nodes_refuses_running_job(slurm: CliSlurmClient, submit: Submit):
    job = submit("-N", "1", "-w", "node02")
    wait_for(lambda: _running(slurm, job), what="job to start")
    with pytest.raises(SlurmError, match="not PENDING"):
        slurm.set_req_nodes(job, ["node02", "node03"])
    with pytest.raises(SlurmError, match="not PENDING"):
        slurm.clear_req_nodes(job)
    assert _running(slurm, job).nodes == ("node02",)


def test_update_errors_are_typed(slurm: CliSlurmClient):
    with pytest.raises(SlurmError) as ei:
        slurm.set_site_factor(999999, 10)
    assert ei.value.command.startswith("scontrol update JobId=999999")
    assert ei.value.stderr
    with pytest.raises(SlurmError, match="unknown"):
        slurm.set_req_nodes(999999, ["node01"])


def test_timeout_is_a_typed_error(cluster: str):
    with pytest.raises(SlurmError, match="timed out"):
        CliSlurmClient(timeout=0.001).nodes()


@pytest.mark.parametrize("use_json", [True, False])
def test_sacct_reads_finished_jobs(slurm: CliSlurmClient, submit: Submit, use_json: bool):
    t0 = datetime.now(timezone.utc) - timedelta(seconds=5)
    job = submit("-N", "2", "--gres=gpu:2", "-t", "3", sleep=1, name="acct|me")
    wait_for(lambda: _job(slurm, job) is None, what="job to finish")

    def recorded():
        rows = slurm.accounting(t0, datetime.now(timezone.utc) + timedelta(minutes=1),
                                use_json=use_json)
        return next((r for r in rows if r.job_id == job and r.end_time), None)

    r = wait_for(recorded, timeout=30, what="sacct to record the job")
    assert r.state == "COMPLETED" and r.exit_code == 0
    assert r.name == "acct|me" and r.user == "root" and r.cluster == "testcluster"
    assert r.alloc.nodes == 2 and r.req.nodes == 2 and len(r.nodes) == 2
    assert r.alloc.gpus == 4 and r.time_limit == 180
    assert r.submit_time <= r.start_time <= r.end_time
    done = slurm.accounting(t0, datetime.now(timezone.utc) + timedelta(minutes=1),
                            states=["COMPLETED"], use_json=use_json)
    assert all(x.state == "COMPLETED" for x in done) and any(x.job_id == job for x in done)
