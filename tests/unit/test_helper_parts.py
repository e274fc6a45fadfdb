"""Helper parts: actuator bounds, reset planning, state file, lock, metrics, log lines."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest

from slurm_plugin.helper import actuate as A
from slurm_plugin.helper.logs import EventLog
from slurm_plugin.helper.metrics import Metrics, MetricsServer
from slurm_plugin.helper.state import HelperState, LockedError, Section, Steering, lock
from slurm_plugin.slurm.client import switches_text

from .helper_fakes import FakeSlurm, mk_job


# ---------------------------------------------------------------------------- actuator
def test_actuator_never_writes_outside_the_band():
    client = FakeSlurm([mk_job(1), mk_job(2)])
    act = A.Actuator(client, (100, 200))
    res = act.apply([A.Change(1, "site_factor", 0, 250, "policy"),
                     A.Change(2, "site_factor", 0, 150, "policy"),
                     A.Change(1, "site_factor", 0, 0, "policy"),
                     A.Change(1, "site_factor", 5, 0, "reset"),
                     A.Change(1, "priority", 0, 10**6, "policy"),
                     A.Change(1, "site_factor", 0, True, "policy")])
    assert client.calls == [("set_site_factor", 2, 150), ("set_site_factor", 1, 0)]
    assert [why.split(" ")[0] for _, why in res.failed] == ["site", "site", "the", "site"]


def test_actuator_continues_after_one_failure_and_stops_after_a_streak():
    client = FakeSlurm([mk_job(i) for i in range(1, 8)])
    client.fail_writes = {2}
    res = A.Actuator(client, (0, 10)).apply(
        [A.Change(i, "site_factor", 0, 5, "policy") for i in range(1, 4)])
    assert [c.job_id for c in res.applied] == [1, 3] and res.aborted is None
    client.fail_writes = set()
    res = A.Actuator(client, (0, 10), max_consecutive_failures=2).apply(
        [A.Change(i, "site_factor", 0, 5, "policy") for i in range(1, 6)])
    assert len(res.failed) == 2 and [c.job_id for c in res.skipped] == [3, 4, 5]
    assert "2 failures in a row" in res.aborted


def test_actuator_time_budget():
    t = iter([0.0, 0.0, 0.5, 2.0, 3.0])
    client = FakeSlurm([mk_job(i) for i in range(1, 4)])
    res = A.Actuator(client, (0, 10), budget=1.0, clock=lambda: next(t)).apply(
        [A.Change(i, "site_factor", 0, 5, "policy") for i in range(1, 4)])
    assert [c.job_id for c in res.applied] == [1, 2]
    assert [c.job_id for c in res.skipped] == [3] and "budget" in res.aborted


def test_node_lists_go_to_slurm_as_names_and_audit_as_hostlists():
    client = FakeSlurm([mk_job(1, nodes=2)])
    c = A.Change(1, "req_nodes", None, ("node02", "node01"), "steer")
    assert c.as_audit() == (1, "req_nodes", None, "node[01-02]")
    A.Actuator(client, (0, 1)).apply([c, A.Change(1, "req_nodes", ("node01",), None, "x")])
    assert client.calls == [("set_req_nodes", 1, ("node01", "node02")),
                            ("clear_req_nodes", 1, None)]
    res = A.Actuator(client, (0, 1)).apply([A.Change(1, "req_nodes", None, "node01", "x")])
    assert "non-empty sequence" in res.failed[0][1]
    assert A.parse_nodes("node[03,01]") == ("node01", "node03")


def test_switch_requests_are_bounded_and_audit_as_count_at_seconds():
    client = FakeSlurm([mk_job(1, nodes=2)])
    c = A.Change(1, "switches", None, (1, 1800), "locality")
    assert c.as_audit() == (1, "switches", None, "1@1800")
    res = A.Actuator(client, (0, 1), max_consecutive_failures=9).apply([
        c, A.Change(1, "switches", (1, 1800), None, "reset"),
        A.Change(1, "switches", None, (2, 1800), "locality"),  # only one leaf is asked for
        A.Change(1, "switches", None, (1, 2 * 86400), "locality"),  # over a day
        A.Change(1, "switches", None, (1, 0), "locality"),
        A.Change(1, "switches", None, "1@1800", "locality")])
    assert client.calls == [("set_switches", 1, (1, 1800)), ("clear_switches", 1, None)]
    assert len(res.failed) == 4 and all("switch request" in why for _, why in res.failed)
    assert switches_text(1, 1800) == "1@00:30:00" and switches_text(1, 90061) == "1@1-01:01:01"
    with pytest.raises(ValueError, match="switch wait"):
        switches_text(1, 0)


def test_plan_reset_only_undoes_the_helpers_own_values():
    entries = [
        (1, "site_factor", "enforce", "0", "900"),
        (2, "site_factor", "enforce", "0", "800"),     # someone changed it since
        (3, "site_factor", "enforce", "0", "700"),
        (3, "site_factor", "failed", "0", "700"),      # never applied
        (4, "site_factor", "shadow", "0", "600"),      # would-be only
        (5, "site_factor", "enforce", "0", "500"),     # job finished
        (6, "req_nodes", "enforce", None, "node[01-02]"),
        (7, "req_nodes", "enforce", None, "node03"),
        (7, "req_nodes", "enforce", "node03", None),    # rolled back already
        (8, "req_nodes", "enforce", None, "node04"),    # user changed the list since
        (9, "site_factor", "enforce", "0", "400"),
        (9, "site_factor", "reset", "400", "0"),        # reset before
    ]
    jobs = {1: mk_job(1, site=900), 2: mk_job(2, site=55), 3: mk_job(3, site=0),
            4: mk_job(4, site=600), 6: mk_job(6, required=("node01", "node02")),
            7: mk_job(7), 8: mk_job(8, required=("node09",)), 9: mk_job(9, site=0)}
    changes, notes = A.plan_reset(entries, jobs)
    assert [(c.job_id, c.field, c.old, c.new) for c in changes] == [
        (1, "site_factor", 900, 0), (6, "req_nodes", ("node01", "node02"), None)]
    assert len(notes) == 2 and "job 2" in notes[0] and "job 8" in notes[1]


def test_memory_audit_keeps_entries():
    m = A.MemoryAudit()
    m.record([A.Change(1, "site_factor", 0, 5, "policy")], mode="shadow", model_sha="x", at=3)
    assert m.entries == [(3, "shadow", "x", 1, "site_factor", "0", "5")]


# ---------------------------------------------------------------------------- state
def test_state_round_trips_and_refuses_garbage(tmp_path):
    p = tmp_path / "d" / "state.json"
    st = HelperState(mode="enforce", cycles=3, errors=1, changes={"enforce:site_factor": 4})
    st.enforced = Section({1: 5}, {2: Steering(["n1", "n2"], 1, 9)}, {3: 10})
    st.save(p)
    back = HelperState.load(p)
    assert back.to_json() == st.to_json()
    assert oct(p.stat().st_mode & 0o777) == oct(0o640)
    assert HelperState.load(tmp_path / "none.json").cycles == 0
    p.write_text("{broken")
    with pytest.raises(ValueError, match="move it away"):
        HelperState.load(p)
    p.write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError):
        HelperState.load(p)


def test_section_prunes_jobs_that_left():
    sec = Section({1: 5, 2: 6}, {}, {1: 1, 3: 3})
    sec.prune({2, 3})
    assert sec.site == {2: 6} and sec.rolled_back == {3: 3}


def test_only_one_holder_of_the_lock(tmp_path):
    p = tmp_path / "state.json"
    with lock(p):
        with pytest.raises(LockedError, match="another 'rlsched helper'"):
            with lock(p):
                pass
    with lock(p):
        pass


# ---------------------------------------------------------------------------- metrics, logs
def test_metrics_render_in_prometheus_text():
    m = Metrics()
    m.inc("changes_total", field="site_factor", mode="enforce")
    m.inc("changes_total", 2, field="site_factor", mode="enforce")
    m.set("cycle_seconds", 0.25)
    m.inc("hints_total", result='we"ird')
    text = m.render()
    assert "# TYPE rlsched_helper_changes_total counter" in text
    assert 'rlsched_helper_changes_total{field="site_factor",mode="enforce"} 3' in text
    assert "rlsched_helper_cycle_seconds 0.25" in text
    assert 'result="we\\"ird"' in text
    with pytest.raises(KeyError):
        m.set("nonsense", 1)


def test_metrics_server_serves_only_metrics():
    m = Metrics()
    m.set("model_ok", 1)
    srv = MetricsServer(m, "127.0.0.1", 0)
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}"
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            body = r.read().decode()
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "rlsched_helper_model_ok 1" in body
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + "/admin", timeout=5)
        assert err.value.code == 404
    finally:
        srv.stop()


def test_log_lines_are_json_with_level_filter():
    out = io.StringIO()
    log = EventLog(out, level="info", clock=lambda: 0)
    log.debug("hidden")
    log.error("cycle_failed", error='squeue: "x"\nsecond line', job=3)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec == {"ts": "1970-01-01T00:00:00Z", "level": "error", "event": "cycle_failed",
                   "error": 'squeue: "x"\nsecond line', "job": 3}
    with pytest.raises(ValueError):
        EventLog(out, level="loud")
