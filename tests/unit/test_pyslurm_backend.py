"""PySlurmClient against a fake pyslurm 25.11 module (no Slurm, no pyslurm needed)."""

from __future__ import annotations

import builtins
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from slurm_plugin.slurm import pyslurm_backend
from slurm_plugin.slurm.cli_backend import CliSlurmClient
from slurm_plugin.slurm.client import make_client
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.pyslurm_backend import NOT_INSTALLED, PySlurmClient
from slurm_plugin.slurm.types import PENDING, RUNNING

from . import fake_pyslurm as fake

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def state():
    st = fake.reset()
    yield st
    forbidden = [name for name, _ in fake.STATE.calls if name in fake.FORBIDDEN]
    assert not forbidden, f"pyslurm backend made forbidden calls: {forbidden}"
    fake.reset()


@pytest.fixture
def client() -> PySlurmClient:
    return PySlurmClient(timeout=5, module=fake)


class FakeCli:
    """Records what PySlurmClient delegates to ``scontrol`` via CliSlurmClient.run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, outputs: dict[str, str] | None = None):
        self.argv: list[list[str]] = []
        self.outputs = outputs or {}
        cli = self

        def run(self_: CliSlurmClient, args: Any) -> str:
            cli.argv.append(list(args))
            return cli.outputs.get(args[0], "")

        monkeypatch.setattr(CliSlurmClient, "run", run)


# ------------------------------------------------------------------ construction
def test_module_imports_without_pyslurm():
    code = (
        "import sys; sys.modules['pyslurm'] = None\n"
        "from slurm_plugin.slurm.pyslurm_backend import PySlurmClient\n"
        "print(PySlurmClient.backend)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "pyslurm"


def test_constructing_without_pyslurm_gives_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes `import pyslurm` fail
    with pytest.raises(SlurmError) as info:
        PySlurmClient(timeout=3)
    assert info.value.command == "import pyslurm"
    assert info.value.reason == (
        "pyslurm is not installed: pip install 'rlsched[pyslurm]' (needs Slurm 25.11 headers)"
        " or use the cli backend"
    )
    assert info.value.reason == NOT_INSTALLED
    with pytest.raises(SlurmError, match="not installed"):
        make_client("pyslurm")


def test_broken_pyslurm_install_is_not_reported_as_missing(monkeypatch):
    def broken_import(name, *args, **kwargs):
        if name == "pyslurm":
            raise ImportError("libslurm.so.43: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    real_import = builtins.__import__
    monkeypatch.setattr("builtins.__import__", broken_import)
    with pytest.raises(SlurmError) as info:
        PySlurmClient()
    assert info.value.command == "import pyslurm"
    assert "could not be loaded" in info.value.reason and "libslurm" in info.value.reason


def test_old_pyslurm_without_the_new_api_is_refused():
    old = type(sys)("pyslurm")
    old.__version__ = "21.8.1"
    with pytest.raises(SlurmError, match="needs pyslurm 25.11"):
        PySlurmClient(module=old)


def test_injected_module_and_timeout(client):
    assert client.pyslurm is fake and client.timeout == 5 and client.backend == "pyslurm"


# ------------------------------------------------------------------ jobs
def test_pending_job_conversion(client):
    fake.add_job(
        41, name="train", user_name="bob", account="ml", partition="gpu,debug", qos="high",
        state="PENDING", state_reason="Resources", priority=4242, nice=-50,
        submit_time=1_700_000_000, eligible_time=1_700_000_060, start_time=None,
        time_limit=90, num_nodes=4, cpus=32,
        requested_tres="cpu=32,mem=500G,node=4,billing=32,gres/gpu=32,gres/gpu:a100=32",
        required_nodes="node[01-04]", excluded_nodes="node07", constraints=["leaf1&ib"],
        required_switches=1, max_wait_time_switches=300,
    )
    (job,) = client.jobs()
    assert job.is_pending and job.state == PENDING
    assert (job.job_id, job.name, job.user, job.account) == (41, "train", "bob", "ml")
    assert job.partition == "gpu" and job.qos == "high"
    assert job.state_reason == "Resources"
    assert job.submit_time == 1_700_000_000 and job.eligible_time == 1_700_000_060
    assert job.start_time is None
    assert job.time_limit == 90 * 60  # pyslurm gives minutes
    assert (job.num_nodes, job.num_cpus, job.num_gpus) == (4, 32, 32)
    assert job.mem_mb == 500 * 1024
    assert job.priority == 4242 and job.nice == -50
    assert job.site_factor is None  # pyslurm's Job does not expose it
    assert job.required_nodes == ("node01", "node02", "node03", "node04")
    assert job.excluded_nodes == ("node07",)
    assert job.features == "leaf1&ib"
    assert job.switches == 1 and job.switches_wait == 300
    assert job.nodes == ()
    assert job.array_job_id is None and job.array_task_id is None


def test_running_job_uses_allocation(client):
    fake.add_job(
        7, state="RUNNING", state_reason="None", start_time=1_700_000_500, num_nodes=2,
        cpus=16, requested_tres="cpu=8,mem=16G,node=1,gres/gpu=4",
        allocated_tres="cpu=16,mem=32G,node=2,billing=16,gres/gpu=8",
        allocated_nodes="gpu-a[1-2]",
    )
    (job,) = client.jobs()
    assert job.is_running and job.state == RUNNING
    assert job.start_time == 1_700_000_500 and job.state_reason == "None"
    assert (job.num_nodes, job.num_cpus, job.num_gpus, job.mem_mb) == (2, 16, 8, 32 * 1024)
    assert job.nodes == ("gpu-a1", "gpu-a2")
    assert job.switches is None and job.switches_wait is None


def test_unlimited_and_unset_values(client):
    # _raw_time gives None for INFINITE and for unset; u32_parse "UNLIMITED" for INFINITE.
    fake.add_job(
        1, time_limit=None, nice=None, eligible_time=None, priority="UNLIMITED",
        num_nodes=None, cpus=None, requested_tres=None, required_switches="UNLIMITED",
        memory=None, constraints=[],
    )
    (job,) = client.jobs()
    assert job.time_limit is None
    assert job.nice == 0 and job.eligible_time is None and job.priority == 0
    assert job.num_nodes == 1 and job.num_cpus == 0 and job.num_gpus == 0
    assert job.mem_mb is None and job.switches is None and job.features == ""


def test_gpus_from_typed_tres_and_tres_per_node(client):
    fake.add_job(1, requested_tres="cpu=2,node=1,gres/gpu:a100=2,gres/gpu:v100=1")
    fake.add_job(2, num_nodes=3, requested_tres="cpu=3,node=3", tres_per_node="gres/gpu=4")
    fake.add_job(3, requested_tres="cpu=3,node=3", tres_per_job="gres/gpu=5")
    fake.add_job(4, memory=2048, requested_tres="cpu=1,node=1")
    gpus = {j.job_id: j.num_gpus for j in client.jobs()}
    assert gpus == {1: 3, 2: 12, 3: 5, 4: 0}
    assert {j.job_id: j.mem_mb for j in client.jobs()}[4] == 2048


def test_array_ids(client):
    fake.add_job(101, array_id=100, array_task_id=1, state="RUNNING")
    # pyslurm's u32_parse turns array task 0 into None
    fake.add_job(102, array_id=100, array_task_id=None, state="RUNNING")
    # the pending remainder of the array: no task id, tasks still waiting
    fake.add_job(100, array_id=100, array_task_id=None, array_tasks_waiting="2-9")
    ids = {j.job_id: (j.array_job_id, j.array_task_id) for j in client.jobs()}
    assert ids == {101: (100, 1), 102: (100, 0), 100: (100, None)}


def test_state_filter_and_flag_states(client):
    fake.add_job(1, state="PENDING")
    fake.add_job(2, state="RUNNING")
    fake.add_job(3, state="CONFIGURING", allocated_nodes="n1")  # a running job booting nodes
    fake.add_job(4, state="COMPLETING")
    fake.add_job(5, state="COMPLETED")
    assert sorted(j.job_id for j in client.jobs()) == [1, 2, 3]
    assert [j.job_id for j in client.pending_jobs()] == [1]
    running = client.running_jobs()
    assert sorted(j.job_id for j in running) == [2, 3]
    assert all(j.state == RUNNING for j in running)
    assert [j.job_id for j in client.jobs(["completing"])] == [4]


# ------------------------------------------------------------------ nodes
def test_nodes(client):
    fake.STATE.nodes = [
        fake.Node(
            "gpu01", state="MIXED+DRAIN", total_cpus=64, effective_cpus=64, allocated_cpus=16,
            configured_gres={"gpu:a100": 8}, allocated_tres={"cpu": 16, "mem": "64G",
                                                             "gres/gpu": 2, "gres/gpu:a100": 2},
            real_memory=512000, allocated_memory=65536, available_features=["a100", "ib"],
            active_features=["a100"], partitions=["gpu", "all"],
        ),
        fake.Node("cpu01", state="IDLE", total_cpus=32, real_memory=None),
    ]
    gpu01, cpu01 = client.nodes()
    assert gpu01.name == "gpu01" and gpu01.state == "MIXED" and gpu01.state_flags == ("DRAIN",)
    assert not gpu01.available
    assert (gpu01.cpus, gpu01.alloc_cpus, gpu01.gpus, gpu01.alloc_gpus) == (64, 16, 8, 2)
    assert (gpu01.real_memory_mb, gpu01.alloc_memory_mb) == (512000, 65536)
    assert gpu01.features == ("a100", "ib") and gpu01.active_features == ("a100",)
    assert gpu01.partitions == ("gpu", "all")
    assert cpu01.state == "IDLE" and cpu01.available and cpu01.gpus == 0
    assert cpu01.real_memory_mb == 0 and cpu01.state_flags == ()


def test_node_gres_with_index_detail(client):
    # cstr.to_gres_dict gives {"count": n, "indexes": ...} for GRES with IDX detail
    fake.STATE.nodes = [fake.Node("g", total_cpus=8, configured_gres={
        "gpu:h100": {"count": 4, "indexes": "0-3"}})]
    assert client.nodes()[0].gpus == 4


# ------------------------------------------------------------------ config / topology
def test_config(client):
    fake.STATE.config = fake.Config(
        cluster_name="c1", version="25.11.2", priority_weight_age=1000,
        priority_weight_fair_share=10000, priority_weight_qos=0, priority_weight_job_size=5,
        priority_weight_tres={"cpu": 1, "GRES/gpu": 100},
        priority_max_age=86400, priority_decay_half_life=None,
        scheduler_parameters={"bf_window": 2880, "bf_continue": True, "default_queue_depth": 50},
    )
    conf = client.config()
    assert conf.cluster_name == "c1" and conf.slurm_version == "25.11.2"
    assert conf.priority_type == "priority/multifactor"
    assert conf.priority_weights == {"age": 1000, "assoc": 0, "fairshare": 10000,
                                     "job_size": 5, "partition": 0, "qos": 0}
    assert conf.priority_max_age == 86400 and conf.priority_decay_half_life == 0
    assert conf.scheduler_type == "sched/backfill" and conf.select_type == "select/cons_tres"
    assert conf.scheduler_parameters == {"bf_window": "2880", "bf_continue": "",
                                         "default_queue_depth": "50"}
    assert conf.topology_plugin == "topology/tree"
    assert conf.raw["PriorityWeightTRES"] == "cpu=1,GRES/gpu=100"
    assert conf.raw["PriorityMaxAge"] == "1-00:00:00"
    assert conf.raw["SchedulerParameters"] == "bf_window=2880,bf_continue,default_queue_depth=50"


def test_topology_goes_through_scontrol(client, monkeypatch):
    cli = FakeCli(monkeypatch, {"scontrol": (
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[01-02]\n"
        "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=node[03-04]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[01-04] Switches=leaf[1-2]\n"
    )})
    tree = client.topology()
    assert cli.argv == [["scontrol", "show", "topology"]]
    assert tree.node_to_leaf() == {"node01": "leaf1", "node02": "leaf1", "node03": "leaf2",
                                   "node04": "leaf2"}
    assert tree.root is not None and tree.root.name == "spine"
    assert isinstance(client._cli, CliSlurmClient) and client._cli.timeout == client.timeout


# ------------------------------------------------------------------ accounting
def test_accounting_filter_and_conversion(client):
    fake.add_db_job(
        10, state="COMPLETED", time_limit=120, requested_tres="1=4,cpu=4,mem=8G,node=1,gres/gpu=2",
        allocated_tres="cpu=4,mem=8G,node=1,gres/gpu=2", nodelist="node[01-02]",
        exit_code=0, exit_code_signal=0, requeue_count=1, cluster="c1",
    )
    fake.add_db_job(
        11, state="CANCELLED", time_limit="PartitionLimit", start_time=None, end_time=None,
        requested_tres="cpu=1,node=1", allocated_tres=None, nodelist="None assigned",
        priority=None,
    )
    fake.add_db_job(12, state="TIMEOUT", time_limit=None, exit_code=0, exit_code_signal=9,
                    array_id=12, array_task_id=None, nodelist="node03",
                    requested_tres="cpu=1,node=1", allocated_tres="cpu=1,node=1")
    start = datetime(2023, 11, 14, 0, 0, 0)  # naive: UTC
    end = datetime(2023, 11, 15, 1, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    jobs = {j.job_id: j for j in client.accounting(start, end)}
    (flt,) = fake.STATE.db_filters
    assert flt.start_time == 1699920000 and flt.end_time == 1700006400
    assert flt.users is None
    done, cancelled, timeout = jobs[10], jobs[11], jobs[12]
    assert done.state == "COMPLETED" and done.time_limit == 7200
    assert (done.req.cpus, done.req.mem_mb, done.req.nodes, done.req.gpus) == (4, 8192, 1, 2)
    assert (done.alloc.cpus, done.alloc.mem_mb, done.alloc.nodes, done.alloc.gpus) == (
        4, 8192, 1, 2)
    assert done.node_list == "node[01-02]" and done.nodes == ("node01", "node02")
    assert done.start_time == 1_700_000_100 and done.end_time == 1_700_003_700
    assert done.exit_code == 0 and done.signal is None and done.restart_count == 1
    assert done.cluster == "c1" and done.priority == 1000 and done.user == "alice"
    assert cancelled.time_limit is None and cancelled.start_time is None
    assert cancelled.alloc.cpus is None and cancelled.alloc.gpus is None
    assert cancelled.req.gpus == 0 and cancelled.nodes == () and cancelled.priority is None
    assert timeout.time_limit is None and timeout.signal == 9
    assert (timeout.array_job_id, timeout.array_task_id) == (12, 0)


def test_accounting_window_end_rounds_up_to_the_second(client):
    # slurmdbd keeps jobs eligible strictly before the end second: a job eligible in the
    # same second as a sub-second end must stay in the window
    start = datetime(2023, 11, 14, 0, 0, 0, 900_000)
    client.accounting(start, datetime(2023, 11, 15, 0, 0, 0, 250_000, tzinfo=timezone.utc))
    client.accounting(start, datetime(2023, 11, 15, 0, 0, 0))
    flt, whole = fake.STATE.db_filters
    assert flt.start_time == 1699920000 and flt.end_time == 1700006401
    assert whole.end_time == 1700006400


def test_accounting_states_and_own_user(client, monkeypatch):
    monkeypatch.setattr(pyslurm_backend.os, "getuid", lambda: 1000)
    fake.add_db_job(1, state="COMPLETED", user_id=1000)
    fake.add_db_job(2, state="FAILED", user_id=1000)
    fake.add_db_job(3, state="COMPLETED", user_id=2000)
    t0, t1 = datetime(2023, 1, 1), datetime(2024, 1, 1)
    jobs = client.accounting(t0, t1, states=["completed"], all_users=False)
    assert [j.job_id for j in jobs] == [1]
    assert fake.STATE.db_filters[-1].users == [1000]
    assert sorted(j.job_id for j in client.accounting(t0, t1)) == [1, 2, 3]


# ------------------------------------------------------------------ changes
def test_set_site_factor_modifies_the_job(client):
    fake.add_job(5)
    client.set_site_factor(5, 1500)
    client.set_site_factor(5, -20)
    assert fake.STATE.modify_calls == [(5, {"site_factor": 1500}), (5, {"site_factor": -20})]
    assert fake.STATE.site_factors[5] == -20


def test_set_site_factor_zero_goes_through_scontrol(client, monkeypatch):
    # pyslurm drops a falsy site_factor from the update message, so 0 cannot be sent.
    assert fake.JobSubmitDescription(site_factor=0).sent_fields() == {}
    cli = FakeCli(monkeypatch)
    fake.add_job(5)
    client.set_site_factor(5, 0)
    assert cli.argv == [["scontrol", "update", "JobId=5", "SiteFactor=0"]]
    assert fake.STATE.modify_calls == []


def test_set_site_factor_rejects_non_ints(client):
    fake.add_job(5)
    for bad in (True, 1.5, "10"):
        with pytest.raises(TypeError):
            client.set_site_factor(5, bad)
    assert fake.STATE.modify_calls == []


def test_set_req_nodes_on_pending_job(client):
    fake.add_job(8, state="PENDING")
    client.set_req_nodes(8, ["node03", "node01", "node02"])
    names = [name for name, _ in fake.STATE.calls]
    assert names == ["Job.load", "Job.modify"]
    assert fake.STATE.modify_calls == [(8, {"required_nodes": "node[01-03]"})]
    (job,) = client.pending_jobs()
    assert job.required_nodes == ("node01", "node02", "node03")


@pytest.mark.parametrize("state", ["RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"])
def test_set_req_nodes_refuses_a_job_that_is_not_pending(client, state):
    fake.add_job(8, state=state, allocated_nodes="node01")
    with pytest.raises(SlurmError, match="refused: job 8 is .* not PENDING") as info:
        client.set_req_nodes(8, ["node01", "node02"])
    assert info.value.command == "pyslurm Job(8).modify(required_nodes=node[01-02])"
    assert fake.STATE.modify_calls == []
    assert "Job.modify" not in [name for name, _ in fake.STATE.calls]


def test_set_req_nodes_validates_names(client):
    fake.add_job(8)
    with pytest.raises(ValueError):
        client.set_req_nodes(8, [])
    with pytest.raises(ValueError, match="not a node name"):
        client.set_req_nodes(8, ["node01", "node[02-03]"])
    with pytest.raises(ValueError, match="not a node name"):
        client.set_req_nodes(8, ["-x"])
    assert fake.STATE.calls == []


def test_set_req_nodes_on_unknown_job(client):
    with pytest.raises(SlurmError, match="Invalid job id specified") as info:
        client.set_req_nodes(99, ["node01"])
    assert info.value.command.startswith("pyslurm Job(99).modify(")


def test_clear_req_nodes_goes_through_scontrol(client, monkeypatch):
    # pyslurm turns an empty required_nodes into "no change", so it cannot clear the list.
    assert fake.JobSubmitDescription(required_nodes="").sent_fields() == {}
    assert fake.JobSubmitDescription(required_nodes=[]).sent_fields() == {}
    cli = FakeCli(monkeypatch, {"squeue": "PENDING\n"})
    fake.add_job(8, required_nodes="node[01-02]")
    client.clear_req_nodes(8)
    assert [name for name, _ in fake.STATE.calls] == ["Job.load"]
    assert cli.argv[-1] == ["scontrol", "update", "JobId=8", "ReqNodeList="]
    assert fake.STATE.modify_calls == []


def test_clear_req_nodes_without_a_list_does_nothing(client, monkeypatch):
    cli = FakeCli(monkeypatch)
    fake.add_job(8, required_nodes=None)
    client.clear_req_nodes(8)
    assert cli.argv == [] and fake.STATE.modify_calls == []


def test_clear_req_nodes_refuses_a_running_job(client, monkeypatch):
    cli = FakeCli(monkeypatch)
    fake.add_job(8, state="RUNNING", required_nodes="node01", allocated_nodes="node01")
    with pytest.raises(SlurmError, match="not PENDING"):
        client.clear_req_nodes(8)
    assert cli.argv == []


# ------------------------------------------------------------------ errors and timeouts
@pytest.mark.parametrize(
    ("call", "method", "args"),
    [
        ("Jobs.load", "jobs", ()),
        ("Nodes.load", "nodes", ()),
        ("Config.load", "config", ()),
        ("db.Jobs.load", "accounting", (datetime(2024, 1, 1), datetime(2024, 1, 2))),
        ("Job.modify", "set_site_factor", (5, 10)),
        ("Job.load", "set_req_nodes", (5, ["node01"])),
        ("Job.modify", "set_req_nodes", (5, ["node01"])),
        ("Job.load", "clear_req_nodes", (5,)),
    ],
)
def test_pyslurm_errors_become_slurm_errors(client, call, method, args):
    fake.add_job(5)
    fake.STATE.config = fake.Config()
    fake.STATE.fail[call] = fake.RPCError(msg="Unable to contact slurm controller")
    with pytest.raises(SlurmError) as info:
        getattr(client, method)(*args)
    assert info.value.command.startswith("pyslurm ")
    assert info.value.reason == "Unable to contact slurm controller"
    assert isinstance(info.value.__cause__, fake.RPCError)


def test_error_commands_name_the_call(client):
    fake.STATE.fail["Jobs.load"] = RuntimeError("boom")
    with pytest.raises(SlurmError) as info:
        client.jobs()
    assert info.value.command == "pyslurm Jobs.load" and info.value.reason == "boom"
    fake.add_job(3)
    fake.STATE.fail["Job.modify"] = fake.RPCError(msg="Access/permission denied")
    with pytest.raises(SlurmError) as info:
        client.set_site_factor(3, 7)
    assert info.value.command == "pyslurm Job(3).modify(site_factor=7)"
    assert str(info.value) == "pyslurm Job(3).modify(site_factor=7): Access/permission denied"


def test_bad_data_becomes_slurm_error(client):
    fake.add_job(1, required_nodes="node[01-")
    with pytest.raises(SlurmError, match="unbalanced") as info:
        client.jobs()
    assert info.value.command == "pyslurm Jobs.load"


def test_exception_without_message(client):
    fake.STATE.fail["Nodes.load"] = MemoryError()
    with pytest.raises(SlurmError) as info:
        client.nodes()
    assert info.value.reason == "MemoryError"


def _wait_until(cond, limit=5.0):
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_timeout_and_hung_call_limit():
    client = PySlurmClient(timeout=0.05, module=fake)
    gate = threading.Event()
    fake.STATE.gates["Jobs.load"] = gate
    fake.add_job(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(SlurmError, match=r"timed out after 0.05 s") as info:
            client.jobs()
        assert time.monotonic() - t0 < 2
        assert info.value.command == "pyslurm Jobs.load"
        for _ in range(pyslurm_backend.MAX_HUNG_CALLS - 1):
            with pytest.raises(SlurmError, match="timed out"):
                client.jobs()
        loads = sum(1 for name, _ in fake.STATE.calls if name == "Jobs.load")
        with pytest.raises(SlurmError, match="refused: 4 earlier pyslurm calls"):
            client.jobs()
        # refused at once: pyslurm was not called again
        assert sum(1 for name, _ in fake.STATE.calls if name == "Jobs.load") == loads
    finally:
        gate.set()
    _wait_until(lambda: client._hung == 0)
    assert [j.job_id for j in client.jobs()] == [1]


def test_calls_run_in_a_daemon_worker_thread(client):
    seen = []
    client.call("pyslurm test", lambda: seen.append(threading.current_thread()))
    (worker,) = seen
    assert worker is not threading.current_thread() and worker.daemon


def test_slurm_errors_from_inside_pass_unchanged(client):
    err = SlurmError("x", "y")

    def fail():
        raise err

    with pytest.raises(SlurmError) as info:
        client.call("pyslurm other", fail)
    assert info.value is err
