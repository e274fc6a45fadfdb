"""`rlsched ingest sacct` and `rlsched ingest slurmdbd` on the real test cluster."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from db.session import init_db
from db.store import Store
from slurm_plugin.cli import main
from slurm_plugin.slurm.cli_backend import CliSlurmClient

from .conftest import Submit, wait_for

pytestmark = pytest.mark.integration

DBD_URL = os.environ.get(
    "RLSCHED_SLURMDBD_URL",
    "mysql+pymysql://root@localhost/slurm_acct_db?unix_socket=/run/mysqld/mysqld.sock",
)


def rlsched(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def counts(out: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(read|inserted|updated|unchanged|quarantined)"
                                             r" (\d+)", out)}


def sacct_state(job_id: int) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"],
                         capture_output=True, text=True, timeout=30).stdout
    return out.strip().split(" ")[0]


def jobs_of(url: str, ids: set[int]) -> dict[tuple[int, int], object]:
    with Store.open(url) as store:
        cid = store.cluster("testcluster")
        return {(j.job_id, j.submit_time): j for j in store.jobs(cid) if j.job_id in ids}


def test_live_sacct_resumes_updates_and_matches_slurmdbd(
    slurm: CliSlurmClient, submit: Submit, tmp_path: Path
):
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    init_db(a)
    init_db(b)
    short = submit("-N", "1", "--gres=gpu:2", "-t", "2", sleep=1, name="short")
    wait_for(lambda: all(j.job_id != short for j in slurm.jobs()), what="short job to end")
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: any(j.job_id == blocker for j in slurm.running_jobs()), what="blocker")
    waiting = submit("-N", "2", "--gres=gpu:8", "-t", "5", sleep=1, name="waiting")
    ids = {short, blocker, waiting}
    # slurmctld hands records to slurmdbd a few seconds late
    wait_for(lambda: sacct_state(waiting) == "PENDING", what="sacct to record the pending job")

    # a window ending within the second the job became eligible keeps it (sacct -E is
    # exclusive to the second: the end is rounded up, else this job would be lost)
    # (slurmdbd's query likewise keeps jobs submitted strictly before --until)
    submitted, eligible = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", str(waiting), "-o", "Submit,Eligible"],
        capture_output=True, text=True, timeout=30, env=dict(os.environ, TZ="UTC"),
    ).stdout.strip().split("|")
    edge, edge_dbd = (f"sqlite:///{tmp_path / n}" for n in ("edge.db", "edge-dbd.db"))
    init_db(edge)
    init_db(edge_dbd)
    rlsched("ingest", "sacct", "--db", edge, "--since", "now-10m", "--until", f"{eligible}.5")
    assert waiting in {j for j, _ in jobs_of(edge, ids)}, eligible
    rlsched("ingest", "slurmdbd", DBD_URL, "--cluster", "testcluster", "--db", edge_dbd,
            "--since", "now-10m", "--until", f"{submitted}.5")
    assert waiting in {j for j, _ in jobs_of(edge_dbd, ids)}, submitted

    out = rlsched("ingest", "sacct", "--db", a, "--since", "now-10m", "--window", "2m")
    first = jobs_of(a, ids)
    states = {j.job_id: j.state for j in first.values()}
    assert states == {short: "COMPLETED", blocker: "RUNNING", waiting: "PENDING"}, out
    with Store.open(a) as store:
        assert store.cluster_spec("testcluster").num_nodes == 16

    subprocess.run(["scancel", str(blocker)], check=True)
    wait_for(lambda: not any(j.job_id in ids for j in slurm.jobs()), what="jobs to end")

    wait_for(lambda: sacct_state(waiting) == "COMPLETED", what="sacct to record the end")
    out = rlsched("ingest", "sacct", "--db", a)  # resumes from the watermark
    c = counts(out)
    assert c["updated"] >= 2 and c["quarantined"] == 0, out  # blocker and waiting ended
    again = jobs_of(a, ids)
    assert {j.job_id: j.state for j in again.values()} == {
        short: "COMPLETED", blocker: "CANCELLED", waiting: "COMPLETED"}
    assert len(again) == 3  # updated in place, not duplicated

    out = rlsched("ingest", "slurmdbd", DBD_URL, "--cluster", "testcluster", "--db", b,
                  "--since", "now-10m")
    assert counts(out)["quarantined"] == 0
    assert jobs_of(b, ids) == again  # field for field
