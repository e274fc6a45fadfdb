"""The slurmdbd database reader against sacct, on the real test cluster.

Runs a varied set of short jobs, then reads them twice: through ``sacct -X -P``
(``CliSlurmClient.accounting(..., use_json=False)``) and straight from slurmdbd's
MariaDB (``db.ingest.slurmdbd.read_slurmdbd``), and checks that both give the same
records, every field of every job. The one legitimate difference: rows sacct's window
leaves out (never eligible, or eligible after ``-E``) are only in the reader's output,
and the test checks that exactly those are. (The pending remainder of an array, which
sacct prints as ``N_[1-3]``, names its array in both.)

The database URL: ``RLSCHED_SLURMDBD_URL``, default root over the local MariaDB socket.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from db.ingest import slurmdbd as sd
from db.records import JobRecord, Rejected
from slurm_plugin.slurm.cli_backend import CliSlurmClient
from tests.integration.conftest import JOBDIR, wait_for
from tests.unit.test_slurmdbd import field_diffs

pytestmark = pytest.mark.integration

DB_URL = os.environ.get(
    "RLSCHED_SLURMDBD_URL",
    "mysql+pymysql://root@localhost/slurm_acct_db?unix_socket=/run/mysqld/mysqld.sock",
)

Key = tuple[int, int]


@pytest.fixture(scope="module")
def db_url(cluster: str) -> str:
    """The slurmdbd database URL, once checked to answer."""
    try:
        with sd.open_readonly(DB_URL) as conn:
            sd.job_table_columns(conn, cluster)
    except sd.SlurmdbdError as exc:
        if os.environ.get("RLSCHED_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"RLSCHED_REQUIRE_CLUSTER=1 but slurmdbd's database: {exc}")
        pytest.skip(f"slurmdbd's database cannot be read: {exc}")
    return DB_URL


def sbatch(*args: str, wrap: str, name: str) -> int:
    argv = ["sbatch", "--parsable", f"--chdir={JOBDIR}", "--output=/dev/null",
            f"--job-name={name}", *args, "--wrap", wrap]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"sbatch failed: {out.stderr}"
    return int(out.stdout.strip().split(";")[0])


def scontrol(*args: str) -> None:
    out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"scontrol {' '.join(args)}: {out.stderr}"


def squeue_state(job_id: int) -> str:
    out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip().split("\n")[0]


def db_records(url: str, cluster: str, since: int, until: int | None,
               ids: set[int]) -> dict[Key, JobRecord]:
    """Our jobs' records from the database (rows submitted since ``since``)."""
    out: dict[Key, JobRecord] = {}
    for item in sd.read_slurmdbd(url, cluster, since=since, until=until, batch_size=50):
        assert not isinstance(item, Rejected), item
        if (item.job_id in ids or item.array_job_id in ids) and item.submit_time >= since:
            out[(item.job_id, item.submit_time)] = item
    return out


# Labels of the scenario and the states accounting must show before comparing (a
# requeued or resized job gets a second row, with a new submit time).
EXPECTED = {
    "ok": {"COMPLETED"},
    "gpus": {"COMPLETED"},
    "mem-per-cpu": {"COMPLETED"},
    "fail3": {"FAILED"},
    "fail130": {"FAILED"},
    "sig9": {"FAILED"},
    "weird": {"COMPLETED"},
    "cancel-running": {"CANCELLED"},
    "cancel-held": {"CANCELLED"},
    "cancel-pending": {"CANCELLED"},
    "cancel-pending-array": {"CANCELLED"},
    "running": {"RUNNING"},
    "unlimited": {"PENDING"},
    "requeue": {"REQUEUED", "PENDING"},
    "resize": {"RESIZING", "RUNNING"},
}
WEIRD_NAME = "weird \"dq\" 'sq' |pipe;semi"


def run_scenario(submit: Callable[..., int]) -> dict[str, int]:
    """Submit the jobs, act on some, return label -> job id."""
    ids = {
        "ok": submit("-t", "1", sleep=1, name="ok"),
        "gpus": submit("-N", "2", "--gpus=4", "--mem=2048", "-t", "2", sleep=1, name="gpus"),
        "mem-per-cpu": submit("-n", "3", "--mem-per-cpu=1000", "-t", "2:30", sleep=1,
                              name="mem-per-cpu"),
        "fail3": sbatch("-t", "1", wrap="exit 3", name="fail3"),
        "fail130": sbatch("-t", "1", wrap="exit 130", name="fail130"),
        "sig9": sbatch("-t", "1", wrap="kill -9 $$", name="sig9"),
        "weird": submit("-t", "1", sleep=1, name=WEIRD_NAME),
        "array": submit("--array=1-3", "-t", "1", sleep=1, name="array"),
        "cancel-held": submit("--hold", "-t", "1", sleep=1, name="cancel-held"),
        "cancel-running": submit("-t", "2", sleep=120, name="cancel-running"),
        "running": submit("-t", "3", "--gres=gpu:2", sleep=120, name="running"),
        "unlimited": submit("-t", "UNLIMITED", sleep=1, name="unlimited"),
        "cancel-pending": submit("-t", "UNLIMITED", sleep=1, name="cancel-pending"),
        "cancel-pending-array": submit("--array=1-3", "-t", "UNLIMITED", sleep=1,
                                       name="cancel-pending-array"),
        "requeue": submit("-t", "2", sleep=120, name="requeue"),
        "resize": submit("-N", "2", "-t", "2", sleep=120, name="resize"),
    }
    for label in ("cancel-held", "cancel-pending", "cancel-pending-array"):
        subprocess.run(["scancel", str(ids[label])], check=True, timeout=30)
    running = [ids[label] for label in ("cancel-running", "running", "requeue", "resize")]
    wait_for(lambda: all(squeue_state(j) == "RUNNING" for j in running), 60,
             f"jobs {running} running")
    subprocess.run(["scancel", str(ids["cancel-running"])], check=True, timeout=30)
    # A requeued job and a resized allocation each get a new row keyed (id_job, time of
    # the change): changed within its submit second, the new row would collide with
    # the old one's (id_job, time_submit) and slurmdbd keeps one row for both (seen on
    # 22.05 for a resize). Let a second pass first.
    time.sleep(1.1)
    scontrol("requeue", str(ids["requeue"]))
    nodes = subprocess.run(["squeue", "-h", "-j", str(ids["resize"]), "-o", "%N"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
    first = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True,
                           text=True, timeout=30).stdout.split()[0]
    scontrol("update", f"JobId={ids['resize']}", f"ReqNodeList={first}")
    return ids


def settled(url: str, cluster: str, since: int, ids: dict[str, int]) -> bool:
    """True when accounting shows every job in its expected state (array: 3 tasks)."""
    recs = db_records(url, cluster, since, None, set(ids.values()))
    states: dict[int, set[str]] = {}
    for r in recs.values():
        states.setdefault(r.job_id, set()).add(r.state)
    for label, want in EXPECTED.items():
        if states.get(ids[label], set()) != want:
            return False
    tasks = [r for r in recs.values() if r.array_job_id == ids["array"]]
    return len(tasks) == 3 and all(t.state == "COMPLETED" for t in tasks)


def unexpected_cancel(url: str, cluster: str, since: int, ids: dict[str, int]) -> bool:
    """Another test's scancel hit our jobs (then the scenario is run again)."""
    recs = db_records(url, cluster, since, None, set(ids.values()))
    ours = {j for label, j in ids.items() if not label.startswith("cancel")}
    return any(r.state == "CANCELLED" and r.job_id in ours for r in recs.values())


def recorded_scenario(
    submit: Callable[..., int], url: str, cluster: str
) -> tuple[int, dict[str, int]]:
    """Run the scenario until accounting shows it undisturbed; (start time, job ids)."""
    for _attempt in range(3):
        since = int(time.time()) - 1
        ids = run_scenario(submit)

        def done(since: int = since, ids: dict[str, int] = ids) -> bool:
            return (settled(url, cluster, since, ids)
                    or unexpected_cancel(url, cluster, since, ids))

        wait_for(done, 90, "accounting to record every job")
        if not unexpected_cancel(url, cluster, since, ids):
            return since, ids
        subprocess.run(["scancel", *map(str, ids.values())], timeout=30)  # and again
    pytest.fail("our jobs were cancelled by someone else three times")


def test_database_and_sacct_give_the_same_jobs(
    slurm: CliSlurmClient, submit: Callable[..., int], db_url: str, cluster: str
) -> None:
    since, ids = recorded_scenario(submit, db_url, cluster)
    assert settled(db_url, cluster, since, ids)

    # Snapshot: database, sacct, database again; retry while slurmdbd is still writing.
    until = int(time.time()) + 1
    start = datetime.fromtimestamp(since, timezone.utc)
    end = datetime.fromtimestamp(until, timezone.utc)
    wanted = set(ids.values())
    for _ in range(5):
        db1 = db_records(db_url, cluster, since, until, wanted)
        acct = slurm.accounting(start, end, use_json=False)
        db2 = db_records(db_url, cluster, since, until, wanted)
        if db1 == db2:
            break
        time.sleep(1)
    assert db1 == db2, "the database kept changing"
    db = db1
    sacct = {(r.job_id, r.submit_time): r for r in acct
             if (r.job_id in wanted or r.array_job_id in wanted) and r.submit_time >= since}

    # Same set of jobs, except what sacct's window leaves out (eligible unset or >= -E).
    assert not set(sacct) - set(db), f"only in sacct: {sorted(set(sacct) - set(db))}"
    outside = {k for k, r in db.items() if r.eligible_time is None or r.eligible_time >= until}
    assert set(db) - set(sacct) == outside
    by_id = {k[0] for k in outside}
    assert ids["cancel-held"] in by_id and ids["requeue"] in by_id  # new row: eligible later

    # Field for field: every JobRecord field of every job.
    diffs = {k: field_diffs(db[k], sacct[k]) for k in sacct}
    assert not {k: d for k, d in diffs.items() if d}
    # The pending remainder of an array ("N_[1-3]" in sacct) names its array in both.
    (arr,) = [k for k in sacct if k[0] == ids["cancel-pending-array"]]
    assert (db[arr].array_job_id, db[arr].array_task_id) == (arr[0], None)
    assert (sacct[arr].array_job_id, sacct[arr].array_task_id) == (arr[0], None)
    assert sorted((r.name, r.state) for r in sacct.values()) == sorted([
        *[("array", "COMPLETED")] * 3, ("cancel-running", "CANCELLED"),
        ("cancel-pending", "CANCELLED"), ("cancel-pending-array", "CANCELLED"),
        ("fail130", "FAILED"),
        ("fail3", "FAILED"), ("gpus", "COMPLETED"), ("mem-per-cpu", "COMPLETED"),
        ("ok", "COMPLETED"), ("requeue", "REQUEUED"), ("resize", "RESIZING"),
        ("resize", "RUNNING"), ("running", "RUNNING"), ("sig9", "FAILED"),
        ("unlimited", "PENDING"), (WEIRD_NAME.replace('"', "`"), "COMPLETED"),
    ])

    # What the comparison covered, decoded as expected.
    def only(label: str, state: str) -> JobRecord:
        (rec,) = [r for r in db.values() if r.job_id == ids[label] and r.state == state]
        return rec

    assert (only("fail3", "FAILED").exit_code, only("fail3", "FAILED").signal) == (3, None)
    assert only("fail130", "FAILED").exit_code == 2  # as sacct: 130 - 128
    assert (only("sig9", "FAILED").exit_code, only("sig9", "FAILED").signal) == (0, 9)
    gpus = only("gpus", "COMPLETED")
    assert (gpus.req.gpus, gpus.alloc.gpus, gpus.req.nodes, gpus.req.mem_mb) == (4, 4, 2, 4096)
    assert only("mem-per-cpu", "COMPLETED").req.mem_mb == 3000
    assert only("weird", "COMPLETED").name == WEIRD_NAME.replace('"', "`")
    assert only("unlimited", "PENDING").time_limit is None
    assert only("running", "RUNNING").end_time is None
    assert only("resize", "RUNNING").alloc.nodes == 1
    assert {r.array_task_id for r in db.values() if r.array_job_id == ids["array"]} == {1, 2, 3}

    # Incremental: a window starting after all of this still holds what has not ended.
    later = [r for r in sd.read_slurmdbd(db_url, cluster, since=int(time.time()) + 5)
             if isinstance(r, JobRecord) and r.job_id in wanted and r.submit_time >= since]
    assert {r.job_id for r in later} == {ids["running"], ids["unlimited"], ids["requeue"],
                                         ids["resize"]}
    assert all(r.end_time is None for r in later)


def test_session_is_read_only(db_url: str, cluster: str) -> None:
    with sd.open_readonly(db_url) as conn:
        table = f"{cluster}_job_table"
        assert conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar() is not None
        with pytest.raises(sa.exc.OperationalError, match="1792|READ ONLY"):
            conn.execute(sa.text(f"UPDATE {table} SET mod_time = mod_time WHERE job_db_inx = 0"))


def test_unknown_cluster_and_bad_credentials(db_url: str, cluster: str) -> None:
    with pytest.raises(sd.SlurmdbdError, match=f"no readable table nosuch_job_table.*{cluster}"):
        list(sd.read_slurmdbd(db_url, "nosuch"))
    url = sa.engine.make_url(db_url).set(username="rlsched_nobody", password="wrong")
    with pytest.raises(sd.SlurmdbdError, match="access denied: check the user") as err:
        list(sd.read_slurmdbd(url.render_as_string(hide_password=False), cluster))
    assert "wrong" not in str(err.value)
