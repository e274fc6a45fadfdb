"""``rlsched replay-live`` on the test cluster: 60 Theta jobs, Slurm alone then with the helper.

The small version of ``benchmarks/replay_live.py``: the command itself (its click entry
point) runs 60 jobs of ``theta.swf`` (from job #10000, a stretch where queues form on
the 16 nodes: 10 multi-node jobs, 5.8 s mean wait forecast), times divided by 600
(94 s of arrivals, about 100 s per run), as 4 local users, with a policy trained in the
command on the 1,000 jobs before the window (imitation + 2,048 RL steps, about 15 s).
About 4-5 minutes in all.

Checks, each against Slurm's own records (sacct, squeue) or the store:

- every job accounted for: 60 submitted per run, 60 in sacct, all COMPLETED, none left
  in the queue; submitted as the mapped local users;
- the helper really acted (site factors in effect, queue samples showing them) and its
  audit log matches what Slurm recorded (:func:`trainer.replay_live.check_audit`: no
  foreign job, no change in effect after a job's start, steered jobs on their steered
  nodes, every site factor squeue/sprio showed was one the audit log set, nothing left
  for ``helper reset``);
- both runs' records are in the store;
- the helper run is not worse than Slurm alone beyond :data:`trainer.replay_live.
  TOLERANCE` (10 % + 0.25 bsld / 3 s wait): two runs of these jobs under Slurm alone
  differ by about that much (starts move by Slurm's 1-2 s reaction time on runs of
  2-54 s).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from db.store import Store
from slurm_plugin.slurm.cli_backend import CliSlurmClient

from .conftest import JOBDIR

pytestmark = pytest.mark.integration

THETA = Path(__file__).resolve().parents[3] / "shared" / "traces" / "theta.swf"
#: Submit time of theta.swf's job #10000 (submit order): the window's start.
SINCE = 1679677206
USERS = [f"rlschedu{k}" for k in range(4)]


@pytest.fixture()
def no_user_jobs(slurm: CliSlurmClient):
    """Cancel what the run's users may have left in the queue (the slurm fixture only
    cancels root's jobs)."""
    yield slurm
    for u in USERS:
        subprocess.run(["scancel", f"--user={u}"], capture_output=True, timeout=30)


def test_replay_live_both_runs_complete_and_the_audit_matches_slurm(no_user_jobs, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    if not THETA.is_file():
        pytest.skip(f"{THETA} not found: the shared traces folder is needed")
    from trainer.replay_live import TOLERANCE, replay_live

    slurm = no_user_jobs
    out = tmp_path / "out"
    db = tmp_path / "store.db"
    args = ["--trace", str(THETA), "--since", str(SINCE), "--jobs", "60", "--speedup", "600",
            "--train-jobs", "1000", "--budget", "2000", "--users", "4", "--create-users",
            "--interval", "2", "--out", str(out), "--db", str(db), "--jobdir", JOBDIR,
            "--timeout", "400"]
    result = CliRunner().invoke(replay_live, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    res = json.loads((out / "results.json").read_text())
    print(json.dumps({w: {"real": r["real"], "audit": r.get("audit")}
                      for w, r in res["runs"].items()}, indent=1))
    print(json.dumps(res["forecast"], indent=1))
    runs = res["runs"]
    assert set(runs) == {"slurm", "helper"} and set(res["forecast"]) == {"slurm", "helper"}

    # every job accounted for, from sacct and squeue themselves
    ids = {w: {int(i) for i in r["job_ids"]} for w, r in runs.items()}
    assert all(len(v) == 60 for v in ids.values()) and not ids["slurm"] & ids["helper"]
    began = min(r["began"] for r in runs.values())
    from datetime import datetime, timezone
    recs = {r.job_id: r for r in slurm.accounting(
        datetime.fromtimestamp(began - 300, timezone.utc), datetime.now(timezone.utc))}
    for w, r in runs.items():
        assert r["submitted"] == r["accounted"] == 60 and r["lost"] == 0
        assert r["states"] == {"COMPLETED": 60}
        mine = [recs[i] for i in ids[w]]
        assert all(x.state == "COMPLETED" and x.end_time is not None for x in mine)
        assert {x.user for x in mine} <= set(USERS) and len({x.user for x in mine}) > 1
    assert not {j.job_id for j in slurm.jobs()} & (ids["slurm"] | ids["helper"])

    # the helper acted, and its audit log matches what Slurm recorded
    audit = runs["helper"]["audit"]
    assert audit["ok"], audit
    assert audit["changes"].get("site_factor", 0) >= 10, audit
    assert audit["samples"] >= 20 and audit["shown"] >= 10, audit  # squeue saw its values
    with Store.open(str(db)) as store:
        entries = store.audit_log(None)
        assert entries and {e.job_id for e in entries} <= ids["helper"]
        cid = store.cluster_id("testcluster")
        stored = {r.job_id for r in store.jobs(cid)}
    assert ids["slurm"] | ids["helper"] <= stored

    # not worse than Slurm alone beyond the stated tolerance
    nw = res["not_worse"]
    assert nw["tolerance"] == dict(zip(("relative", "bsld", "wait_s"), TOLERANCE, strict=True))
    assert nw["ok"], (runs["helper"]["real"], runs["slurm"]["real"], nw)
