"""The helper against the real test cluster: enforce reorders, steering, faults fail open.

Each test builds a tiny ONNX policy with torch (the train/export extras, installed in CI):
job score = -log1p(time limit / 1 h), i.e. shortest time limit first; placement prefers
candidate node sets within one leaf switch. The store is a fresh SQLite file.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from db.session import init_db
from slurm_plugin.helper.actuate import StoreAudit
from slurm_plugin.helper.config import HelperConfig
from slurm_plugin.helper.cycle import Helper
from slurm_plugin.helper.hint import HintServer
from slurm_plugin.helper.logs import EventLog
from slurm_plugin.helper.state import HelperState
from slurm_plugin.slurm.cli_backend import CliSlurmClient

from .conftest import Submit, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LEAVES = [{f"node{i:02d}" for i in range(k, k + 4)} for k in (1, 5, 9, 13)]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from tests.onnx_fixture import build_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_model(tmp_path_factory.mktemp("model"))


def make_helper(tmp_path: Path, model: Path, **cfg) -> tuple[Helper, io.StringIO]:
    store = tmp_path / "store.db"
    init_db(f"sqlite:///{store}")
    base = dict(model=str(model), state_file=str(tmp_path / "state.json"), store=str(store),
                mode="enforce", steering="none", interval=2.0, history_days=0)
    base.update(cfg)
    conf = HelperConfig(**base).validate()
    client = CliSlurmClient(timeout=conf.slurm_timeout)
    audit = StoreAudit(conf.store, cluster="testcluster")
    log = io.StringIO()
    return Helper(conf, client=client, audit=audit, log=EventLog(log, level="debug")), log


def _job(slurm: CliSlurmClient, job_id: int):
    return next((j for j in slurm.jobs() if j.job_id == job_id), None)


def _running(slurm: CliSlurmClient, job_id: int):
    j = _job(slurm, job_id)
    return j if j is not None and j.is_running else None


def _start_times(ids: list[int]) -> dict[int, int]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Start", "-j",
                          ",".join(map(str, ids))], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="%s"))
    got = {}
    for line in out.stdout.splitlines():
        jid, _, start = line.partition("|")
        if jid.isdigit() and start.strip().isdigit():
            got[int(jid)] = int(start)
    return got


def _scancel(job_id: int) -> None:
    subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=30)


def test_enforce_reorders_the_queue_into_the_policys_order(slurm, submit: Submit, model,
                                                          tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    # submitted longest limit first: Slurm alone (age) would start them in this order
    limits = [50, 40, 30, 20, 10]
    ids = [submit("-N", "16", "--exclusive", "-t", str(m), sleep=2, name=f"q{m}")
           for m in limits]
    wait_for(lambda: all(_job(slurm, i) and _job(slurm, i).site_factor is not None
                         for i in ids), what="sprio to list the queue")
    helper, log = make_helper(tmp_path, model)
    rep = helper.run_once()
    assert rep.ok, (rep.error, log.getvalue())
    policy = list(reversed(ids))  # shortest limit first
    want = dict(zip(policy, [100000, 75000, 50000, 25000, 0], strict=True))
    got = {i: _job(slurm, i).site_factor for i in ids}
    assert got == want
    entries = helper.audit.store().audit_log(None, mode="enforce")
    assert {(e.job_id, e.new_value) for e in entries} == {
        (i, str(v)) for i, v in want.items() if v}
    assert all(e.model_sha == helper.model.sha256 for e in entries)
    _scancel(blocker)
    wait_for(lambda: not any(_job(slurm, i) for i in ids), timeout=120,
             what="the queue to drain")
    starts = _start_times(ids)
    assert sorted(ids, key=lambda i: (starts[i], i)) == policy


def test_steered_multinode_job_lands_within_one_leaf(slurm, submit: Submit, model, tmp_path):
    a = submit("-N", "8", "--exclusive", "-w", "node[01-08]", "-t", "10", name="half")
    wait_for(lambda: _running(slurm, a), what="the half-cluster job to start")
    b = submit("-N", "16", "--exclusive", "-t", "5", name="whole")       # waits for a
    c = submit("-N", "4", "--exclusive", "-t", "30", sleep=60, name="four")  # fits, but
    # backfill may not start it: it would delay b
    wait_for(lambda: _job(slurm, c) and _job(slurm, c).is_pending, what="c pending")
    helper, log = make_helper(tmp_path, model, steering="reqnodes", steer_jobs=2,
                              steer_min_nodes=2, rollback_cycles=50)
    rep = helper.run_once()
    assert rep.ok, (rep.error, log.getvalue())
    job_c = _job(slurm, c)
    if job_c.is_running:  # Slurm started it in between: the helper must not have touched it
        assert c not in helper.state.enforced.steer
        pytest.skip("the backfill scheduler started the job before the helper could steer it")
    req = set(job_c.required_nodes)
    assert len(req) == 4 and any(req == leaf for leaf in LEAVES[2:]), req
    _scancel(b)
    _scancel(a)
    run_c = wait_for(lambda: _running(slurm, c), timeout=60, what="c to start")
    assert set(run_c.nodes) == req  # landed where it was steered: one leaf switch
    helper.run_once()
    assert c not in helper.state.enforced.steer  # started: forgotten, never touched again


def test_bad_model_changes_nothing_and_slurm_keeps_scheduling(slurm, submit: Submit, model,
                                                              tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(model.read_bytes() + b"\x00")
    (tmp_path / "model.onnx.card.json").write_text(
        Path(str(model) + ".card.json").read_text())
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m), sleep=1) for m in (30, 10)]
    helper, log = make_helper(tmp_path, bad)
    rep = helper.run_once()
    assert not rep.ok and "sha256" in rep.error
    assert "model_refused" in log.getvalue()
    assert all((_job(slurm, i).site_factor or 0) == 0 for i in ids)
    assert helper.audit.store().audit_log(None) == []
    _scancel(blocker)
    for i in ids:  # Slurm schedules on its own
        wait_for(lambda i=i: _job(slurm, i) is None or _job(slurm, i).is_running, timeout=60,
                 what=f"job {i} to start")


def test_slurm_commands_timing_out_fail_open(slurm, submit: Submit, model, tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m)) for m in (30, 10)]
    helper, log = make_helper(tmp_path, model, slurm_timeout=0.001)
    rep = helper.run_once()
    assert not rep.ok and "timed out" in rep.error
    assert helper.next_delay() == 4.0  # backing off
    assert all((_job(slurm, i).site_factor or 0) == 0 for i in ids)
    assert all(_job(slurm, i).is_pending for i in ids)  # nothing cancelled or held
    helper.client.timeout = 30.0
    rep = helper.run_once()
    assert rep.ok, rep.error
    assert helper.next_delay() == 2.0


def test_killed_mid_run_loses_nothing(slurm, submit: Submit, model, tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m)) for m in (40, 30, 20, 10)]
    init_db(f"sqlite:///{tmp_path / 'store.db'}")
    cfg = tmp_path / "helper.toml"
    cfg.write_text(f'mode = "enforce"\nmodel = "{model}"\nstate_file = "{tmp_path}/state.json"\n'
                   f'store = "{tmp_path}/store.db"\ninterval = 0.2\nhistory_days = 0\n')
    cfg.chmod(0o640)
    proc = subprocess.Popen([sys.executable, "-m", "slurm_plugin", "helper", "run", "--config",
                             str(cfg)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "state.json").exists(), what="a first cycle")
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    jobs = {j.job_id: j for j in slurm.jobs()}
    assert all(i in jobs and jobs[i].is_pending and jobs[i].priority > 0 for i in ids)
    st = HelperState.load(tmp_path / "state.json")  # never torn
    assert st.cycles >= 1
    out = subprocess.run([sys.executable, "-m", "slurm_plugin", "helper", "once", "--config",
                          str(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_shadow_cli_changes_nothing(slurm, submit: Submit, model, tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: _running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m)) for m in (30, 10)]
    init_db(f"sqlite:///{tmp_path / 'store.db'}")
    cfg = tmp_path / "helper.toml"
    cfg.write_text(f'model = "{model}"\nstate_file = "{tmp_path}/state.json"\n'
                   f'store = "{tmp_path}/store.db"\nhistory_days = 0\n')
    cfg.chmod(0o640)
    out = subprocess.run([sys.executable, "-m", "slurm_plugin", "helper", "once", "--config",
                          str(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "would be made" in out.stdout
    assert all((_job(slurm, i).site_factor or 0) == 0 for i in ids)


# ---------------------------------------------------------------------------- job_submit
def _slurm_etc() -> Path:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         timeout=30).stdout
    conf = next(ln.split("=", 1)[1].strip() for ln in out.splitlines()
                if ln.startswith("SLURM_CONF"))
    return Path(conf).parent


@pytest.fixture()
def lua_script(cluster):
    """contrib/job_submit.lua installed in the cluster (pointing at a test socket)."""
    sock = f"/tmp/rlsched-hint-it-{os.getpid()}.sock"
    target = _slurm_etc() / "job_submit.lua"
    if not target.exists():
        pytest.skip("the test cluster runs without job_submit/lua (JOB_SUBMIT_LUA=none)")
    original = target.read_bytes()
    src = (ROOT / "contrib" / "job_submit.lua").read_text()
    target.write_text(src.replace('"/run/rlsched/hint.sock"', f'"{sock}"'))
    try:
        yield sock
    finally:
        target.write_bytes(original)
        os.utime(target)


def test_job_submit_hint_up_garbage_slow_down(slurm, submit: Submit, lua_script):
    def site(job_id):
        return wait_for(lambda: _job(slurm, job_id) and _job(slurm, job_id).site_factor
                        is not None and (_job(slurm, job_id).site_factor,), what="sprio")[0]

    # up: the helper's answer becomes the job's site factor. The server starts before the
    # first submission: a failed connection makes the script skip the helper for BACKOFF
    # (30 s), by design, so the blocker must not be the one to find the helper down.
    srv = HintServer(lua_script, lambda req: 4242)
    srv.start()
    try:
        blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
        wait_for(lambda: _running(slurm, blocker), what="blocker to start")
        assert site(submit("-N", "2", "-t", "5", name="hint-up")) == 4242
    finally:
        srv.stop()
    # garbage: accepted unchanged
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.bind(lua_script)
    raw.listen(4)

    def garbage():
        conn, _ = raw.accept()
        with conn:
            conn.recv(300)
            conn.sendall(b"lots\n")

    t = threading.Thread(target=garbage, daemon=True)
    t.start()
    try:
        assert site(submit("-N", "1", name="hint-garbage")) == 0
    finally:
        t.join(timeout=5)
        raw.close()
        os.unlink(lua_script)
    # slow: the 50 ms timeout wins (the helper would answer 7 after 2 s), submission succeeds
    release = threading.Event()
    srv = HintServer(lua_script, lambda req: release.wait(2) or 7, timeout=3)
    srv.start()
    try:
        assert site(submit("-N", "1", name="hint-slow")) == 0
    finally:
        release.set()
        srv.stop()
    # down: no socket at all
    assert site(submit("-N", "1", name="hint-down")) == 0
