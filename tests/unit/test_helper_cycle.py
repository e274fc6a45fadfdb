"""The helper cycle on a fake Slurm and a numpy model: pure logic, hand-computed values.

Model: job logit = -log1p(time limit / 1 h) (shortest limit first); candidate logit =
-(leaf switches spanned). Band 0..100000 with the rank mapping: for J jobs, the k-th in
the policy's order gets 100000 - k * 100000 / (J - 1).
"""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from slurm_plugin.helper.actuate import MemoryAudit
from slurm_plugin.helper.config import HelperConfig
from slurm_plugin.helper.cycle import SLURM_CONFIG_TTL, ClockWatch, Helper
from slurm_plugin.helper.logs import EventLog
from slurm_plugin.helper.state import HelperState
from slurm_plugin.model import ModelError

from .helper_fakes import NOW, FakeSlurm, cluster, linear_model, mk_job

ALLOWED_CALLS = {"set_site_factor", "set_req_nodes", "clear_req_nodes", "set_switches",
                 "clear_switches"}


def make(tmp_path, jobs, *, client=None, audit=None, loader=None, **cfg):
    base = dict(state_file=str(tmp_path / "state.json"), steering="none", band_lo=0,
                band_hi=100_000, hysteresis=1000, interval=10.0, backoff_max=80.0)
    base.update(cfg)
    conf = HelperConfig(**base).validate()
    client = client or FakeSlurm(jobs)
    audit = audit if audit is not None else MemoryAudit()
    stream = io.StringIO()
    model = linear_model()
    h = Helper(conf, client=client, audit=audit, log=EventLog(stream, level="debug"),
               clock=lambda: NOW, loader=loader or (lambda *a, **k: model))
    return h, client, audit, stream


def three_jobs():
    return [mk_job(1, limit=7200), mk_job(2, limit=60), mk_job(3, limit=600)]


def site_calls(client):
    return [(c[1], c[2]) for c in client.calls if c[0] == "set_site_factor"]


def test_shadow_changes_nothing_and_audits_what_it_would_do(tmp_path):
    h, client, audit, _ = make(tmp_path, three_jobs())
    rep = h.run_once()
    assert rep.ok, rep.error
    assert client.calls == []
    # order 2 > 3 > 1 -> 100000, 50000, 0; job 1 already at 0: no change
    assert [(e[1], e[3], e[5], e[6]) for e in audit.entries] == [
        ("shadow", 2, "0", "100000"), ("shadow", 3, "0", "50000")]
    assert all(e[2] == "ab" * 32 for e in audit.entries)
    assert h.state.shadow.site == {2: 100000, 3: 50000}
    assert h.state.enforced.site == {}
    # the would-be values are the base of the hysteresis: nothing new next cycle
    rep2 = h.run_once()
    assert rep2.ok and rep2.changes == [] and len(audit.entries) == 2
    assert h.state.changes == {"shadow:site_factor": 2}


def test_enforce_sets_site_factors_head_first_and_only_once(tmp_path):
    h, client, audit, _ = make(tmp_path, three_jobs(), mode="enforce")
    rep = h.run_once()
    assert rep.ok, rep.error
    assert site_calls(client) == [(2, 100000), (3, 50000)]
    assert [e[1] for e in audit.entries] == ["enforce", "enforce"]
    assert {c[0] for c in client.calls} <= ALLOWED_CALLS
    assert h.run_once().changes == []  # Slurm now shows the values: nothing moves
    assert len(client.calls) == 2
    saved = HelperState.load(tmp_path / "state.json")
    assert saved.enforced.site == {2: 100000, 3: 50000}
    assert saved.cycles == 2 and saved.errors == 0
    assert saved.changes == {"enforce:site_factor": 2}


def test_hysteresis_writes_only_moves_beyond_the_threshold(tmp_path):
    h, client, _, _ = make(tmp_path, three_jobs(), mode="enforce", hysteresis=20_000)
    h.run_once()
    client.calls.clear()
    client.add(mk_job(4, limit=1800))
    # new order 2, 3, 4, 1 -> 100000, 66667, 33333, 0: job 3 moves 16667 (< 20000)
    rep = h.run_once()
    assert [(c.job_id, c.old, c.new) for c in rep.changes] == [(4, 0, 33333)]
    assert site_calls(client) == [(4, 33333)]


def test_score_resolution_ties_close_scores_and_leaves_them_to_slurms_age(tmp_path):
    # exact scores: three ranks; a resolution coarser than the model's spread: one tie,
    # every job at the top and Slurm's own factors order them
    h, client, _, _ = make(tmp_path, three_jobs(), mode="enforce", score_resolution=1e6)
    rep = h.run_once()
    assert rep.ok, rep.error
    assert sorted(site_calls(client)) == [(1, 100000), (2, 100000), (3, 100000)]
    h2, client2, _, _ = make(tmp_path / "fine", three_jobs(), mode="enforce",
                             score_resolution=1e-9)
    h2.run_once()
    assert site_calls(client2) == [(2, 100000), (3, 50000)]  # as without rounding


def test_starving_job_goes_to_the_top_of_the_band(tmp_path):
    jobs = [mk_job(1, limit=7200, age=3 * 86400), mk_job(2, limit=60), mk_job(3, limit=600)]
    h, client, _, _ = make(tmp_path, jobs, mode="enforce")
    rep = h.run_once()
    got = {c.job_id: (c.new, c.reason) for c in rep.changes}
    assert got == {1: (100000, "starvation"), 2: (100000, "policy"), 3: (50000, "policy")}
    assert rep.changes[0].job_id == 1  # starving jobs are written first


def test_starving_jobs_keep_the_model_order_with_starvation_order_policy(tmp_path):
    jobs = [mk_job(1, limit=7200, age=3 * 86400), mk_job(4, limit=86400, age=4 * 86400),
            mk_job(2, limit=60), mk_job(3, limit=600)]
    h, client, _, _ = make(tmp_path, jobs, mode="enforce", starvation_order="policy")
    rep = h.run_once()
    got = {c.job_id: (c.new, c.reason) for c in rep.changes}
    # both starving jobs above the others, the shorter one first although it is younger
    assert got == {1: (100000, "starvation"), 4: (66667, "starvation"), 2: (33333, "policy")}
    # (job 3, last at 0, already holds its value)
    assert [c.reason for c in rep.changes][:2] == ["starvation", "starvation"]
    assert site_calls(client)[:2] == [(1, 100000), (4, 66667)]


def _lane_jobs() -> list:
    """Two starving jobs (1: 2 h, 4: 1 day), two short ones (2: 1 min, 5: 20 min), job 3."""
    return [mk_job(1, limit=7200, age=3 * 86400), mk_job(4, limit=86400, age=4 * 86400),
            mk_job(2, limit=60), mk_job(5, limit=1200), mk_job(3, limit=3600)]


def test_express_lane_puts_short_jobs_above_the_starving_ones(tmp_path):
    # the model ranks by time limit, so pick one that puts a short job last: the lane
    # must lift it by its limit alone. Job 5 (20 min) would sit below starving job 1.
    jobs = _lane_jobs()
    h, client, _, _ = make(tmp_path, jobs, mode="enforce", starvation_order="policy",
                           express_limit=1200.0)
    rep = h.run_once()
    assert rep.ok, rep.error
    got = {c.job_id: (c.new, c.reason) for c in rep.changes}
    # express 2, 5 (in the model's order), then starving 1, 4, then job 3 (at 0 already)
    assert got == {2: (100000, "express"), 5: (75000, "express"),
                   1: (50000, "starvation"), 4: (25000, "starvation")}
    assert [c.reason for c in rep.changes] == ["express", "express", "starvation",
                                                "starvation"]
    # without the lane: the two starving jobs first, as before
    h2, _, _, _ = make(tmp_path / "off", jobs, mode="enforce", starvation_order="policy")
    off = {c.job_id: c.reason for c in h2.run_once().changes}
    assert off[1] == off[4] == "starvation" and "express" not in off.values()


def test_express_lane_in_age_order_keeps_slurms_age_weight_between_lane_and_starving(
        tmp_path):
    # the jobs above, the lane in age order: Slurm's PriorityWeightAge (1000, read from
    # its config) sets the gap. S = (100000 - 1001) * 3 // 4 = 74249, the lane from 75250
    jobs = _lane_jobs()
    client = FakeSlurm(jobs)
    client.priority_weights = {"age": 1000}
    h, _, _, _ = make(tmp_path, jobs, client=client, mode="enforce", express_limit=1200.0)
    rep = h.run_once()
    assert rep.ok, rep.error
    got = {c.job_id: (c.new, c.reason) for c in rep.changes}
    # express 2, 5 in the model's order; starving 1 and 4 share S (Slurm's age factor
    # puts 4, older, first), and job 3, the rest's best, ties with them at S
    assert got == {2: (100000, "express"), 5: (75250, "express"), 1: (74249, "starvation"),
                   4: (74249, "starvation"), 3: (74249, "policy")}
    assert [c.reason for c in rep.changes][-1] == "policy"
    # a band too narrow for Slurm's age weight: the cycle fails and changes nothing
    narrow = FakeSlurm(jobs)
    narrow.priority_weights = {"age": 100_000}
    h2, _, _, _ = make(tmp_path / "narrow", jobs, client=narrow, mode="enforce",
                       express_limit=1200.0)
    bad = h2.run_once()
    assert not bad.ok and "widen the band" in bad.error and not site_calls(narrow)


def test_slurm_config_is_read_again_after_its_ttl_and_a_failed_read_keeps_the_last(
        tmp_path):
    # a scontrol reconfigure that doubles PriorityWeightAge reaches the helper once its
    # copy is SLURM_CONFIG_TTL old, without a restart; until then the old gap holds
    jobs = _lane_jobs()
    client = FakeSlurm(jobs)
    client.priority_weights = {"age": 1000}
    h, _, _, stream = make(tmp_path, jobs, client=client, mode="enforce",
                           express_limit=1200.0)  # (as the test above)
    mono = [100.0]
    h.monotonic = lambda: mono[0]
    assert h.run_once().ok
    assert dict(site_calls(client))[3] == 74249
    assert client.config_reads == 1
    client.priority_weights = {"age": 2000}
    mono[0] += SLURM_CONFIG_TTL - 1
    rep = h.run_once()
    assert rep.ok and rep.changes == [] and client.config_reads == 1  # the copy still holds
    mono[0] += 1
    rep = h.run_once()
    assert rep.ok, rep.error
    # S = (100000 - 2001) * 3 // 4 = 73499, the lane from 75500
    assert {c.job_id: c.new for c in rep.changes} == {5: 75500, 1: 73499, 4: 73499,
                                                      3: 73499}
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    changed = [e for e in events if e.get("event") == "slurm_config_changed"]
    assert len(changed) == 1 and changed[0]["fields"] == ["priority_weights"]
    # a reread that fails: the cycle goes on with the last copy, one warning, retried
    # every cycle until a read succeeds
    client.fail_config = "Unable to contact slurm controller"
    for _ in range(3):
        mono[0] += SLURM_CONFIG_TTL
        rep = h.run_once()
        assert rep.ok and rep.changes == [], rep.error
    assert client.config_reads == 5
    client.fail_config = None
    mono[0] += 1
    assert h.run_once().ok and client.config_reads == 6
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    stale = [e for e in events if e.get("event") == "slurm_config_stale"]
    assert len(stale) == 1 and "controller" in stale[0]["error"]
    assert any(e.get("event") == "slurm_config_read" for e in events)
    # with no copy at all, the failed read fails the cycle and changes nothing
    fresh = FakeSlurm(jobs)
    fresh.fail_config = "Unable to contact slurm controller"
    h2, _, _, _ = make(tmp_path / "none", jobs, client=fresh, mode="enforce",
                       express_limit=1200.0)
    bad = h2.run_once()
    assert not bad.ok and "controller" in bad.error and not site_calls(fresh)


def test_held_and_dependent_jobs_are_left_alone(tmp_path):
    jobs = [*three_jobs(), mk_job(5, limit=1, priority=0, reason="JobHeldUser"),
            mk_job(6, limit=1, reason="Dependency"), mk_job(7, state="RUNNING", on=("node01",))]
    h, client, _, _ = make(tmp_path, jobs, mode="enforce")
    rep = h.run_once()
    assert rep.scored == 3 and rep.pending == 5 and rep.running == 1
    assert {j for j, _ in site_calls(client)} == {2, 3}


def test_max_changes_defers_the_rest_to_later_cycles(tmp_path):
    h, client, _, _ = make(tmp_path, three_jobs(), mode="enforce", max_changes=1)
    rep = h.run_once()
    assert site_calls(client) == [(2, 100000)] and rep.deferred == 1
    h.run_once()
    assert site_calls(client) == [(2, 100000), (3, 50000)]


@pytest.mark.parametrize("rank_all, want", [
    # 4 jobs over 0..100000: steps of 33333
    (True, {9: 100000, 2: 66667, 3: 33333}),  # job 9 (shortest limit) first, though blocked
    (False, {2: 100000, 3: 66667, 1: 33333}),  # job 9 masked: last, stays at 0
])
def test_rank_all_decides_whether_blocked_jobs_are_ranked(tmp_path, rank_all, want):
    jobs = [*three_jobs(), mk_job(9, nodes=100, limit=1)]  # 100 nodes: never fits
    h, client, _, _ = make(tmp_path, jobs, mode="enforce", rank_all=rank_all)
    h.run_once()
    assert dict(site_calls(client)) == want


def test_same_inputs_same_decisions(tmp_path):
    a = make(tmp_path / "a", three_jobs(), mode="enforce")[0].run_once()
    b = make(tmp_path / "b", three_jobs(), mode="enforce")[0].run_once()
    assert a.changes == b.changes


# ---------------------------------------------------------------------------- steering
def steer_jobs():
    # job 10 asks for whole nodes (no CPU or GPU count); job 11 shares nodes
    return [mk_job(10, nodes=4, cpus=0, limit=60), mk_job(11, nodes=2, cpus=2, limit=600),
            mk_job(12, nodes=1, limit=6000)]


def test_enforce_steers_the_head_of_the_queue_within_one_leaf(tmp_path):
    h, client, audit, _ = make(tmp_path, steer_jobs(), mode="enforce", steering="reqnodes",
                               steer_jobs=2, steer_min_nodes=2)
    rep = h.run_once()
    assert rep.ok, rep.error
    steer = [(c[1], c[2]) for c in client.calls if c[0] == "set_req_nodes"]
    # job 10 takes leaf1 (node01-04) whole; job 11 then fits only in leaf2
    assert steer == [(10, ("node01", "node02", "node03", "node04")), (11, ("node05", "node06"))]
    assert {c.reason for c in rep.changes if c.field == "req_nodes"} == {"steer"}
    assert ("enforce", 10, "req_nodes", None, "node[01-04]") in [
        (e[1], e[3], e[4], e[5], e[6]) for e in audit.entries]
    assert sorted(h.state.enforced.steer) == [10, 11]


def test_steering_is_rolled_back_after_n_cycles_and_not_redone(tmp_path):
    h, client, audit, _ = make(tmp_path, steer_jobs(), mode="enforce", steering="reqnodes",
                               steer_jobs=2, steer_min_nodes=2, rollback_cycles=2)
    h.run_once()   # steer 10, 11
    h.run_once()   # 1 cycle since
    assert not [c for c in client.calls if c[0] == "clear_req_nodes"]
    rep = h.run_once()   # 2 cycles since: roll back both
    cleared = sorted(c[1] for c in client.calls if c[0] == "clear_req_nodes")
    assert cleared == [10, 11]
    assert {(c.job_id, c.reason, c.new) for c in rep.changes if c.field == "req_nodes"} == {
        (10, "rollback", None), (11, "rollback", None)}
    assert client.job(10).required_nodes == ()
    h.run_once()
    assert len([c for c in client.calls if c[0] == "set_req_nodes"]) == 2  # not steered again


def test_started_jobs_are_never_touched_again(tmp_path):
    h, client, _, stream = make(tmp_path, steer_jobs(), mode="enforce", steering="reqnodes",
                                steer_jobs=1, steer_min_nodes=2, rollback_cycles=1)
    h.run_once()
    client.start(10, ("node01", "node02", "node03", "node04"))
    client.calls.clear()
    h.run_once()
    assert not [c for c in client.calls if c[0] in ("clear_req_nodes",) and c[1] == 10]
    assert 10 not in h.state.enforced.steer
    done = [json.loads(x) for x in stream.getvalue().splitlines() if "steering_done" in x]
    assert done[-1]["job"] == 10 and done[-1]["on_chosen"] is True


def test_a_job_that_started_before_the_update_is_refused_and_recorded(tmp_path):
    class RacingSlurm(FakeSlurm):
        def set_req_nodes(self, job_id, nodes):
            self.start(job_id, tuple(nodes))  # the job starts first
            super().set_req_nodes(job_id, nodes)

    client = RacingSlurm(steer_jobs())
    h, _, audit, _ = make(tmp_path, [], client=client, mode="enforce", steering="reqnodes",
                          steer_jobs=1, steer_min_nodes=2)
    rep = h.run_once()
    assert [(c.job_id, c.field) for c, _ in rep.failed] == [(10, "req_nodes")]
    assert "not PENDING" in rep.failed[0][1]
    assert [e[3] for e in audit.entries if e[1] == "failed"] == [10]
    assert 10 not in h.state.enforced.steer
    assert not [c for c in client.calls if c[0] == "set_req_nodes"]


def test_shadow_still_rolls_back_real_steering_left_by_enforce(tmp_path):
    h, client, _, _ = make(tmp_path, steer_jobs(), mode="enforce", steering="reqnodes",
                           steer_jobs=1, steer_min_nodes=2, rollback_cycles=2)
    h.run_once()
    h2, _, audit2, _ = make(tmp_path, [], client=client, mode="shadow", steering="reqnodes",
                            steer_jobs=1, steer_min_nodes=2, rollback_cycles=2)
    client.calls.clear()
    h2.run_once()
    h2.run_once()
    real = [c for c in client.calls]
    assert real == [("clear_req_nodes", 10, None)]  # the only real change in shadow mode
    assert ("enforce", 10, "req_nodes", "node[01-04]", None) in [
        (e[1], e[3], e[4], e[5], e[6]) for e in audit2.entries]


# ---------------------------------------------------------------------------- failing open
def test_slurm_timeouts_fail_open_with_backoff(tmp_path):
    h, client, audit, stream = make(tmp_path, three_jobs(), mode="enforce")
    client.fail_reads = "timed out after 10 s"
    rep = h.run_once()
    assert not rep.ok and "timed out" in rep.error
    assert client.calls == [] and audit.entries == []
    assert h.next_delay() == 20.0
    h.run_once()
    assert h.next_delay() == 40.0
    h.run_once()
    h.run_once()
    assert h.next_delay() == 80.0  # capped at backoff_max
    line = [x for x in stream.getvalue().splitlines() if "cycle_failed" in x][-1]
    rec = json.loads(line)
    assert rec["level"] == "error" and "timed out" in rec["error"]
    assert "slurm_timeout" in rec["hint"]  # what to check next
    client.fail_reads = None
    assert h.run_once().ok
    assert h.next_delay() == 10.0 and h.state.consecutive_errors == 0 and h.state.errors == 4


def test_failed_cycles_say_what_to_check():
    """A failed cycle's line carries a hint when Slurm's error says what went wrong."""
    from slurm_plugin.helper.cycle import what_next
    from slurm_plugin.slurm.errors import SlurmError

    down = SlurmError("squeue --all --json", "exit code 1", stderr="slurm_load_jobs error:"
                      " Unable to contact slurm controller (connect failure)")
    assert "scontrol ping" in (what_next(down) or "")
    doc = SlurmError("squeue --all --json", "Slurm reported an error: Failed while looking"
                     " for jobs", field="errors[0]")  # (22.05's document when it is down)
    assert "scontrol ping" in (what_next(doc) or "")
    assert "slurm_timeout" in (what_next(SlurmError("sinfo", "timed out after 10 s")) or "")
    missing = SlurmError("squeue", "could not run: No such file or directory")
    assert "PATH" in (what_next(missing) or "")
    denied = SlurmError("scontrol update", "exit code 1",
                        stderr="slurm_update error: Access/permission denied")
    assert "Operator" in (what_next(denied) or "")
    garbled = SlurmError("squeue --json", "bad value", field="jobs[3].job_id")
    assert "rlsched slurm check" in (what_next(garbled) or "")
    assert what_next(SlurmError("squeue", "exit code 2")) is None  # nothing known: no guess
    assert what_next(ValueError("x")) is None


def test_bad_model_means_idle_and_no_change(tmp_path):
    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise ModelError("sha256 of /m.onnx is 0000..., the card says 1111...")

    h, client, audit, stream = make(tmp_path, three_jobs(), mode="enforce", loader=refuse)
    rep = h.run_once()
    assert not rep.ok and "model unusable" in rep.error and "sha256" in rep.error
    h.run_once()
    assert client.calls == [] and audit.entries == []
    assert len(calls) == 1  # the same bad files are not re-verified every cycle
    assert h.state.model_status.startswith("invalid: sha256")
    assert any("model_refused" in x for x in stream.getvalue().splitlines())


def test_model_is_reloaded_when_its_file_changes(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"v1")
    loads = []

    def loader(p, **k):
        loads.append(p)
        return linear_model(path=str(p))

    h, _, _, _ = make(tmp_path, three_jobs(), loader=loader, model=str(path))
    h.run_once()
    h.run_once()
    assert len(loads) == 1
    path.write_bytes(b"version 2")
    h.run_once()
    assert len(loads) == 2


def test_store_failure_means_no_change_at_all(tmp_path):
    class DownAudit(MemoryAudit):
        def record(self, *a, **k):
            raise ConnectionError("database is locked")

    h, client, _, _ = make(tmp_path, three_jobs(), mode="enforce", audit=DownAudit())
    rep = h.run_once()
    assert not rep.ok and "database is locked" in rep.error
    assert client.calls == []
    assert h.state.enforced.site == {}


def test_scontrol_timeouts_stop_the_batch_and_are_recorded(tmp_path):
    jobs = [mk_job(i, limit=60 * i) for i in range(1, 7)]
    client = FakeSlurm(jobs)
    client.fail_writes = set()  # every write times out
    h, _, audit, _ = make(tmp_path, [], client=client, mode="enforce")
    rep = h.run_once()
    assert not rep.ok and "3 failures in a row" in rep.error
    assert len(rep.failed) == 3 and rep.applied == []
    assert [e[1] for e in audit.entries].count("failed") == 3
    assert h.state.enforced.site == {}  # nothing is believed set
    client.fail_writes = None
    rep = h.run_once()
    assert rep.ok and len(rep.applied) == 5  # job 6 (the last) stays at 0


def test_values_written_are_always_inside_the_band(tmp_path):
    jobs = [mk_job(i, limit=60 * i, age=(i % 3) * 86400 * 2) for i in range(1, 40)]
    h, client, _, _ = make(tmp_path, jobs, mode="enforce", band_lo=500, band_hi=900,
                           hysteresis=0, mapping="logit", logit_scale=1e6)
    h.run_once()
    values = [v for _, v in site_calls(client)]
    assert values and all(500 <= v <= 900 for v in values)


def test_mode_switch_keeps_would_be_values_apart(tmp_path):
    h, _, _, _ = make(tmp_path, three_jobs())
    h.run_once()
    client = FakeSlurm(three_jobs())
    h2, _, _, _ = make(tmp_path, [], client=client, mode="enforce")
    rep = h2.run_once()
    # shadow values are not mistaken for real ones: the changes are still made
    assert site_calls(client) == [(2, 100000), (3, 50000)]
    assert h2.state.shadow.site == {} and rep.ok


def test_state_survives_a_restart(tmp_path):
    h, client, _, _ = make(tmp_path, steer_jobs(), mode="enforce", steering="reqnodes",
                           steer_jobs=1, steer_min_nodes=2, rollback_cycles=2)
    h.run_once()
    h2, _, _, _ = make(tmp_path, [], client=client, mode="enforce", steering="reqnodes",
                       steer_jobs=1, steer_min_nodes=2, rollback_cycles=2)
    assert sorted(h2.state.enforced.steer) == [10]
    h2.run_once()
    h2.run_once()
    assert ("clear_req_nodes", 10, None) in client.calls


@pytest.mark.parametrize("mode", ["shadow", "enforce"])
def test_metrics_and_status_counters(tmp_path, mode):
    h, _, _, _ = make(tmp_path, three_jobs(), mode=mode)
    h.run_once()
    assert h.metrics.get("cycles_total") == 1.0
    assert h.metrics.get("jobs_scored") == 3.0
    assert h.metrics.get("changes_total", field="site_factor", mode=mode) == 2.0
    assert h.metrics.get("model_ok") == 1.0
    assert h.metrics.get("model_age_seconds") == 86400.0
    assert h.metrics.get("enforce") == (1.0 if mode == "enforce" else 0.0)


def test_idle_share_gauges_read_the_free_gpus_while_jobs_wait(tmp_path):
    nodes, tree = cluster()  # 8 nodes x 8 GPUs
    busy = [dataclasses.replace(n, state="MIXED", alloc_gpus=6, alloc_cpus=8) if k < 4 else n
            for k, n in enumerate(nodes)]
    # a drained node cannot take jobs: its free GPUs are not counted
    busy[7] = dataclasses.replace(busy[7], state="IDLE+DRAIN", state_flags=("DRAIN",))
    h, _, _, _ = make(tmp_path, three_jobs(), client=FakeSlurm(three_jobs(), busy, tree))
    assert h.run_once().ok
    free = 4 * 2 + 3 * 8  # four nodes with 2 GPUs free, three idle (one drained)
    assert h.metrics.get("idle_share") == pytest.approx(free / (7 * 8))
    assert h.metrics.get("idle_waiting_share") == pytest.approx(free / (7 * 8))
    # nothing waits: the machine is idle, but no capacity is stranded
    h2, _, _, _ = make(tmp_path, [], client=FakeSlurm([], busy, tree))
    assert h2.run_once().ok
    assert h2.metrics.get("idle_share") == pytest.approx(free / (7 * 8))
    assert h2.metrics.get("idle_waiting_share") == 0.0


def test_shadow_rollback_is_virtual(tmp_path):
    h, client, audit, _ = make(tmp_path, steer_jobs(), steering="reqnodes", steer_jobs=1,
                               steer_min_nodes=2, rollback_cycles=1)
    h.run_once()
    h.run_once()
    assert client.calls == []
    kinds = [(e[1], e[3], e[4], e[6]) for e in audit.entries if e[4] == "req_nodes"]
    # cycle 1 steers job 10; cycle 2 rolls it back (virtually) and steers the next job
    assert kinds == [("shadow", 10, "req_nodes", "node[01-04]"),
                     ("shadow", 10, "req_nodes", None), ("shadow", 11, "req_nodes", "node[01-02]")]
    assert dataclasses.asdict(h.state.enforced) == {"site": {}, "steer": {}, "rolled_back": {},
                                                    "switches": {}}


def test_clock_watch_moves_times_of_jobs_seen_before_a_jump():
    w = ClockWatch(tolerance=10.0)
    assert w.observe(1000.0, 5.0) == 0.0
    assert w.shifts([1, 2]) == {}
    assert w.observe(1015.0 + 3.0, 20.0) == 0.0  # 3 s of drift: below the tolerance
    assert w.observe(1033.0 + 7200.0, 35.0) == pytest.approx(7200.0)  # +2 h step
    assert w.shifts([1, 3]) == {1: 7200}  # 3 is new (no correction); 2 left: forgotten
    assert w.observe(1048.0, 50.0) == pytest.approx(-7200.0)  # and back again
    assert w.shifts([1, 3, 2]) == {3: -7200}
    job = mk_job(3, start=NOW - 5)
    moved = w.correct([job])[0]
    assert (moved.submit_time, moved.eligible_time, moved.start_time) == (
        job.submit_time - 7200, job.eligible_time - 7200, NOW - 5 - 7200)


def test_clock_jumps_cause_no_starvation_storm_and_no_negative_waits(tmp_path):
    wall, mono = [float(NOW)], [100.0]
    jobs = three_jobs()  # waited 600 s each
    h, client, _, stream = make(tmp_path, jobs, mode="enforce", starvation_limit=3600.0)
    h.clock, h.monotonic = (lambda: wall[0]), (lambda: mono[0])
    assert h.run_once().ok
    first = dict(site_calls(client))
    for step in (3 * 3600.0, -5 * 3600.0):  # forward 3 h, then 2 h behind the start
        wall[0] += 10.0 + step
        mono[0] += 10.0
        rep = h.run_once()
        assert rep.ok, rep.error
        assert rep.changes == []  # nobody starves, nothing moves
        assert h.next_delay() == 10.0
    assert dict(site_calls(client)) == first
    jumps = [json.loads(x) for x in stream.getvalue().splitlines() if "clock_jump" in x]
    assert [j["seconds"] for j in jumps] == [10800.0, -18000.0]
    # a job first seen now, stamped 2 h ahead of the helper's clock: waited 0, not -2 h
    client._jobs[4] = dataclasses.replace(mk_job(4, limit=30), submit_time=NOW + 7200,
                                          eligible_time=NOW + 7200)
    wall[0] += 10.0
    mono[0] += 10.0
    rep = h.run_once()
    assert rep.ok and all(c.reason == "policy" for c in rep.changes)
    # a real wait is still a real wait: 1 h later on both clocks, job 1 starves
    wall[0] += 3000.0
    mono[0] += 3000.0
    rep = h.run_once()
    assert {c.job_id for c in rep.changes if c.reason == "starvation"} == {1, 2, 3}


def spread_only():
    """node04 (leaf1) and node08 (leaf2) free, the rest busy; jobs 20 (2 nodes), 21 (1),
    22 (6 nodes: more than a leaf holds) pending."""
    nodes, tree = cluster()
    busy = {"node01", "node02", "node03", "node05", "node06", "node07"}
    nodes = [dataclasses.replace(n, state="ALLOCATED", alloc_cpus=n.cpus, alloc_gpus=n.gpus)
             if n.name in busy else n for n in nodes]
    running = [mk_job(1, state="RUNNING", nodes=6, cpus=6 * 64,
                      on=tuple(sorted(busy)), start=NOW - 60)]
    pending = [mk_job(20, nodes=2, cpus=2, limit=60), mk_job(21, nodes=1, limit=600),
               mk_job(22, nodes=6, cpus=6, limit=30)]
    return FakeSlurm(running + pending, nodes, tree)


def test_switches_steering_asks_a_spread_job_to_wait_for_one_leaf(tmp_path):
    from slurm_plugin.helper.actuate import plan_reset

    client = spread_only()
    h, _, audit, stream = make(tmp_path, [], client=client, mode="enforce",
                               steering="switches", switch_wait=1800.0, steer_jobs=4)
    rep = h.run_once()
    assert rep.ok, rep.error
    # job 20 fits now only over node04 + node08 and one leaf holds 2 nodes: it waits;
    # 21 is one node, 22 fits in no leaf (nor now)
    assert [c for c in client.calls if c[0].endswith("switches")] == [
        ("set_switches", 20, (1, 1800))]
    assert [(c.job_id, c.new, c.reason) for c in rep.changes if c.field == "switches"] == [
        (20, (1, 1800), "locality")]
    assert ("enforce", 20, "switches", None, "1@1800") in [
        (e[1], e[3], e[4], e[5], e[6]) for e in audit.entries]
    assert client.job(20).switches == 1 and h.state.enforced.switches == {20: NOW}
    capped = [json.loads(x) for x in stream.getvalue().splitlines() if "switch_wait_capped" in x]
    assert len(capped) == 1 and capped[0]["max_switch_wait"] == 300  # Slurm's default
    h.run_once()  # asked once: not again
    assert len([c for c in client.calls if c[0] == "set_switches"]) == 1
    assert len([x for x in stream.getvalue().splitlines() if "switch_wait_capped" in x]) == 1
    # reset clears what the helper set, and leaves a count someone else changed alone
    entries = [(e[3], e[4], e[1], e[5], e[6]) for e in audit.entries]
    changes, notes = plan_reset(entries, {j.job_id: j for j in client.jobs()})
    assert [(c.job_id, c.field, c.new) for c in changes if c.field == "switches"] == [
        (20, "switches", None)]
    other = {20: dataclasses.replace(client.job(20), switches=2)}
    changes, notes = plan_reset(entries, other)
    assert not [c for c in changes if c.field == "switches"] and "left alone" in notes[-1]


def test_switches_steering_in_shadow_mode_changes_nothing(tmp_path):
    client = spread_only()
    h, _, audit, _ = make(tmp_path, [], client=client, steering="switches", steer_jobs=4)
    for _ in range(2):
        assert h.run_once().ok
    assert not [c for c in client.calls]
    assert [(e[1], e[3], e[6]) for e in audit.entries if e[4] == "switches"] == [
        ("shadow", 20, "1@1800")]  # once: the shadow state remembers it
    assert h.state.shadow.switches == {20: NOW} and h.state.enforced.switches == {}


def test_a_model_whose_placement_head_was_not_trained_does_not_steer(tmp_path):
    model = dataclasses.replace(linear_model(), card={"place_trained": False})
    h, client, audit, stream = make(tmp_path, steer_jobs(), mode="enforce",
                                    steering="reqnodes", steer_jobs=2, steer_min_nodes=2,
                                    loader=lambda *a, **k: model)
    for _ in range(2):
        rep = h.run_once()
        assert rep.ok, rep.error
    assert not [c for c in client.calls if c[0] == "set_req_nodes"]  # Slurm places them
    assert [c for c in client.calls if c[0] == "set_site_factor"]  # the order still acts
    off = [json.loads(line) for line in stream.getvalue().splitlines()
           if '"steering_off"' in line]
    assert len(off) == 1 and "--place" in off[0]["reason"]  # once per model


@pytest.mark.parametrize(("interval", "budget"), [(0.5, 5.0), (15.0, 15.0)])
def test_a_short_interval_still_leaves_the_batch_five_seconds(tmp_path, monkeypatch,
                                                              interval, budget):
    import slurm_plugin.helper.cycle as cycle

    class SlowClock(cycle.Actuator):  # each write takes 1 s of the actuator's clock
        def __init__(self, *a, **k):
            t = iter(range(0, 1000))
            super().__init__(*a, **k, clock=lambda: float(next(t)))
            seen.append(self.budget)

    seen: list[float] = []
    monkeypatch.setattr(cycle, "Actuator", SlowClock)
    jobs = [mk_job(i, limit=60 * i) for i in range(1, 5)]
    h, client, _, _ = make(tmp_path, jobs, mode="enforce", interval=interval,
                           backoff_max=max(80.0, interval))
    rep = h.run_once()
    assert seen == [budget] and cycle.apply_budget(interval) == budget
    assert rep.ok, rep.error
    assert len(rep.applied) == 3 and len(site_calls(client)) == 3  # job 4 stays at 0
