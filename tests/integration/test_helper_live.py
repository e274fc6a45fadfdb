"""The helper against the real test cluster: enforce reorders, steering, faults fail open.

Each test builds a tiny ONNX policy with torch (the train/export extras, installed in CI):
job score = -log1p(time limit / 1 h), i.e. shortest time limit first; placement prefers
candidate node sets within one leaf switch. The store is a fresh SQLite file.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_plugin.helper.hint import HintServer
from slurm_plugin.helper.state import HelperState
from slurm_plugin.model import card_path

from .conftest import Submit, wait_for
from .helper_util import (
    ROOT,
    events,
    job_of,
    make_helper,
    recorded_starts,
    running,
    scancel,
    site_factors,
    write_config,
)

pytestmark = pytest.mark.integration

LEAVES = [{f"node{i:02d}" for i in range(k, k + 4)} for k in (1, 5, 9, 13)]


def test_enforce_reorders_the_queue_into_the_policys_order(slurm, submit: Submit, model,
                                                          tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    # submitted longest limit first: Slurm alone (age) would start them in this order
    limits = [50, 40, 30, 20, 10]
    ids = [submit("-N", "16", "--exclusive", "-t", str(m), sleep=2, name=f"q{m}")
           for m in limits]
    wait_for(lambda: all(job_of(slurm, i) and job_of(slurm, i).site_factor is not None
                         for i in ids), what="sprio to list the queue")
    helper, log = make_helper(tmp_path, model)
    rep = helper.run_once()
    assert rep.ok, (rep.error, log.getvalue())
    policy = list(reversed(ids))  # shortest limit first
    want = dict(zip(policy, [100000, 75000, 50000, 25000, 0], strict=True))
    got = {i: job_of(slurm, i).site_factor for i in ids}
    assert got == want
    entries = helper.audit.store().audit_log(None, mode="enforce")
    assert {(e.job_id, e.new_value) for e in entries} == {
        (i, str(v)) for i, v in want.items() if v}
    assert all(e.model_sha == helper.model.sha256 for e in entries)
    scancel(blocker)
    wait_for(lambda: not any(job_of(slurm, i) for i in ids), timeout=120,
             what="the queue to drain")
    starts = recorded_starts(ids)
    assert sorted(ids, key=lambda i: (starts[i], i)) == policy


@pytest.mark.parametrize("order, want", [
    # policy: evenly ranked, the lane on top; age: the band split around Slurm's
    # PriorityWeightAge (1000 on the test cluster, read by the helper): the starving job
    # and the rest's best share S = (100000 - 1001) * 3 // 4, the lane from S + 1001 up
    ("policy", {"short": (100000, "express"), "old": (50000, "starvation"), "mid": (0, None)}),
    ("age", {"short": (100000, "express"), "old": (74249, "starvation"),
             "mid": (74249, "policy")}),
])
def test_express_lane_starts_a_short_job_before_a_starving_one(slurm, submit: Submit, model,
                                                               tmp_path, order, want):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    old = submit("-N", "16", "--exclusive", "-t", "50", sleep=2, name="old")
    time.sleep(12)  # past the 8 s starvation limit below
    short = submit("-N", "16", "--exclusive", "-t", "5", sleep=2, name="short")
    mid = submit("-N", "16", "--exclusive", "-t", "20", sleep=2, name="mid")
    ids = [old, short, mid]
    wait_for(lambda: all(job_of(slurm, i) and job_of(slurm, i).site_factor is not None
                         for i in ids), what="sprio to list the queue")
    # the 5-minute job takes the lane (at most 10 min) above the starving 50-minute one;
    # the 20-minute job, the policy's second, stays below it
    helper, log = make_helper(tmp_path, model, starvation_limit=8.0,
                              starvation_order=order, express_limit=600.0)
    rep = helper.run_once()
    assert rep.ok, (rep.error, log.getvalue())
    by = {"short": short, "old": old, "mid": mid}
    assert {c.job_id: c.reason for c in rep.changes} == {
        by[k]: why for k, (_, why) in want.items() if why}
    assert site_factors(slurm, ids) == {by[k]: v for k, (v, _) in want.items()}
    scancel(blocker)
    wait_for(lambda: not any(job_of(slurm, i) for i in ids), timeout=120,
             what="the queue to drain")
    starts = recorded_starts(ids)
    assert sorted(ids, key=lambda i: (starts[i], i)) == [short, old, mid]


def test_steered_multinode_job_lands_within_one_leaf(slurm, submit: Submit, model, tmp_path):
    a = submit("-N", "8", "--exclusive", "-w", "node[01-08]", "-t", "10", name="half")
    wait_for(lambda: running(slurm, a), what="the half-cluster job to start")
    b = submit("-N", "16", "--exclusive", "-t", "5", name="whole")       # waits for a
    c = submit("-N", "4", "--exclusive", "-t", "30", sleep=60, name="four")  # fits, but
    # backfill may not start it: it would delay b
    wait_for(lambda: job_of(slurm, c) and job_of(slurm, c).is_pending, what="c pending")
    helper, log = make_helper(tmp_path, model, steering="reqnodes", steer_jobs=2,
                              steer_min_nodes=2, rollback_cycles=50)
    rep = helper.run_once()
    assert rep.ok, (rep.error, log.getvalue())
    job_c = job_of(slurm, c)
    if job_c.is_running:  # Slurm started it in between: the helper must not have touched it
        assert c not in helper.state.enforced.steer
        pytest.skip("the backfill scheduler started the job before the helper could steer it")
    req = set(job_c.required_nodes)
    assert len(req) == 4 and any(req == leaf for leaf in LEAVES[2:]), req
    scancel(b)
    scancel(a)
    run_c = wait_for(lambda: running(slurm, c), timeout=60, what="c to start")
    assert set(run_c.nodes) == req  # landed where it was steered: one leaf switch
    helper.run_once()
    assert c not in helper.state.enforced.steer  # started: forgotten, never touched again


def test_switches_steering_makes_a_job_wait_for_one_leaf(slurm, submit: Submit, model,
                                                        tmp_path):
    # node04 (leaf1) and node08 (leaf2) stay free: a 2-node job could start only across both
    held = [submit("-N", "3", "--exclusive", "-w", "node[01-03]", "-t", "10", name="l1"),
            submit("-N", "3", "--exclusive", "-w", "node[05-07]", "-t", "10", name="l2"),
            submit("-N", "8", "--exclusive", "-w", "node[09-16]", "-t", "10", name="l34")]
    for h in held:
        wait_for(lambda h=h: running(slurm, h), what="the blockers to start")
    b = submit("-N", "16", "--exclusive", "-t", "5", name="whole")  # waits for them all
    c = submit("-N", "2", "--exclusive", "-t", "30", sleep=60, name="two")  # fits now, but
    # backfill does not start it: it would delay b
    wait_for(lambda: job_of(slurm, c) and job_of(slurm, c).is_pending, what="c pending")
    helper, log = make_helper(tmp_path, model, steering="switches", steer_jobs=2,
                              switch_wait=240.0)
    rep = helper.run_once()
    assert rep.ok, (rep.error, log.getvalue())
    job_c = job_of(slurm, c)
    if job_c.is_running:  # Slurm started it in between: the helper must not have touched it
        assert c not in helper.state.enforced.switches
        pytest.skip("the backfill scheduler started the job before the helper could act")
    assert (job_c.switches, job_c.switches_wait) == (1, 240)
    assert c in helper.state.enforced.switches
    entries = helper.audit.store().audit_log(None, mode="enforce")
    assert (c, "switches", "1@240") in {(e.job_id, e.field, e.new_value) for e in entries}
    scancel(b)  # c could now start across node04 and node08 at once: it waits instead
    time.sleep(4)
    assert job_of(slurm, c).is_pending
    scancel(held[1])  # leaf2 frees up
    run_c = wait_for(lambda: running(slurm, c), timeout=60, what="c to start")
    assert set(run_c.nodes) <= LEAVES[1], run_c.nodes
    helper.run_once()
    assert c not in helper.state.enforced.switches  # started: forgotten


def _bad_model(kind: str, model: Path, d: Path) -> tuple[Path, dict, str]:
    """A broken copy of ``model``: (path, extra configuration, what the refusal says)."""
    path, card = d / "model.onnx", json.loads(card_path(model).read_text())
    data, extra = model.read_bytes(), {}
    if kind == "missing":
        return d / "absent.onnx", {}, "not found"
    if kind == "corrupt":  # the card matches, the file is no ONNX model
        data = b"\x08\x07 not an ONNX model \xff" * 40
        card["sha256"] = hashlib.sha256(data).hexdigest()
        want = "is not an ONNX file"
    elif kind == "wrong-sha":  # the file changed after its card was written
        data += b"\x00"
        want = "the card says"
    elif kind == "pinned-sha":  # a valid model, but not the one the configuration pins
        extra = {"model_sha256": "0" * 64}
        want = "the configuration pins"
    else:  # trained with another feature schema version
        card["schema_version"] += 1
        want = "feature schema version"
    path.write_bytes(data)
    card_path(path).write_text(json.dumps(card))
    return path, extra, want


@pytest.mark.parametrize("kind", ["missing", "corrupt", "wrong-sha", "pinned-sha",
                                  "schema-version"])
def test_bad_model_changes_nothing_and_slurm_keeps_scheduling(slurm, submit: Submit, model,
                                                              tmp_path, kind):
    bad, extra, want = _bad_model(kind, model, tmp_path)
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m), sleep=1) for m in (30, 10)]
    wait_for(lambda: all(job_of(slurm, i).site_factor is not None for i in ids), what="sprio")
    helper, log = make_helper(tmp_path, bad, **extra)
    for _ in range(2):
        rep = helper.run_once()
        assert not rep.ok and want in rep.error, rep.error
    refused = events(log.getvalue(), "model_refused")
    assert len(refused) == 1 and want in refused[0]["reason"]  # once per model file
    assert len(events(log.getvalue(), "cycle_failed")) == 2
    assert helper.next_delay() == 8.0  # backing off
    # `helper run` in enforce mode refuses to enforce and says why, then stays idle
    cfg = write_config(tmp_path / "cli", bad, mode="enforce", interval=0.2, **extra)
    err = tmp_path / "run.err"
    with err.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "slurm_plugin", "helper", "run",
                                 "--config", str(cfg)], cwd=ROOT, stderr=f)
    try:
        wait_for(lambda: len(events(err.read_text(), "cycle_failed")) >= 2, timeout=60,
                 what="two idle cycles of `helper run`")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    refusal = events(err.read_text(), "enforce_refused")
    assert len(refusal) == 1 and want in refusal[0]["reason"], err.read_text()
    assert all(v == 0 for v in site_factors(slurm, ids).values())
    assert helper.audit.store().audit_log(None) == []
    scancel(blocker)
    for i in ids:  # Slurm schedules on its own
        wait_for(lambda i=i: job_of(slurm, i) is None or job_of(slurm, i).is_running, timeout=60,
                 what=f"job {i} to start")


def test_slurm_commands_timing_out_fail_open(slurm, submit: Submit, model, tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m)) for m in (30, 10)]
    helper, log = make_helper(tmp_path, model, slurm_timeout=0.001)
    rep = helper.run_once()
    assert not rep.ok and "timed out" in rep.error
    assert helper.next_delay() == 4.0  # backing off
    assert all((job_of(slurm, i).site_factor or 0) == 0 for i in ids)
    assert all(job_of(slurm, i).is_pending for i in ids)  # nothing cancelled or held
    helper.client.timeout = 30.0
    rep = helper.run_once()
    assert rep.ok, rep.error
    assert helper.next_delay() == 2.0


def test_killed_mid_run_loses_nothing(slurm, submit: Submit, model, tmp_path):
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m)) for m in (40, 30, 20, 10)]
    cfg = write_config(tmp_path, model, mode="enforce", interval=0.2)
    proc = subprocess.Popen([sys.executable, "-m", "slurm_plugin", "helper", "run", "--config",
                             str(cfg)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    state = tmp_path / "state.json"
    try:
        # a first whole cycle (the state file is written ahead of it, with 0 cycles: on a
        # loaded machine, 0.5 s after it appears the first cycle may still be applying)
        wait_for(lambda: state.exists() and HelperState.load(state).cycles >= 1,
                 what="a first cycle")
        time.sleep(0.5)  # killed mid run: in a later cycle
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
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    ids = [submit("-N", "1", "-t", str(m)) for m in (30, 10)]
    cfg = write_config(tmp_path, model)
    out = subprocess.run([sys.executable, "-m", "slurm_plugin", "helper", "once", "--config",
                          str(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "would be made" in out.stdout
    assert all((job_of(slurm, i).site_factor or 0) == 0 for i in ids)


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
        return wait_for(lambda: job_of(slurm, job_id) and job_of(slurm, job_id).site_factor
                        is not None and (job_of(slurm, job_id).site_factor,), what="sprio")[0]

    # up: the helper's answer becomes the job's site factor. The server starts before the
    # first submission: a failed connection makes the script skip the helper for BACKOFF
    # (30 s), by design, so the blocker must not be the one to find the helper down.
    srv = HintServer(lua_script, lambda req: 4242)
    srv.start()
    try:
        blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
        wait_for(lambda: running(slurm, blocker), what="blocker to start")
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
