"""rlsched replay-live's pure parts on hand-made inputs: mapping, audit checks, metrics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from db.records import JobRecord, TresCounts
from db.store import AuditRecord
from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.helper.config import load_config
from trainer import fidelity_live as live
from trainer import replay_live as rl
from trainer.sim import fidelity, metrics
from trainer.sim.fidelity import LiveJob

T0 = 1_700_000_000


def rec(jid: int, submit: int, run: int, *, user: str = "u", nodes: int = 1,
        gpus: int | None = None, start: int | None = None, on: tuple[str, ...] = (),
        cpus: int | None = None) -> JobRecord:
    t = T0 + submit
    s = t if start is None else T0 + start
    tres = TresCounts(nodes, cpus, gpus, None)
    return JobRecord(
        job_id=jid, name="rl", user=user, account="", partition="", qos="",
        state="COMPLETED", submit_time=t, eligible_time=t, start_time=s, end_time=s + run,
        time_limit=3600, req=tres, alloc=tres, node_list="", nodes=on, priority=None,
        exit_code=0)


# ---------------------------------------------------------------------------- workload
def test_map_users_round_robin_in_order_of_first_appearance():
    recs = [rec(1, 5, 1, user="b"), rec(2, 0, 1, user="a"), rec(3, 9, 1, user="c"),
            rec(4, 7, 1, user="a")]
    assert fidelity.map_users(recs, ["p0", "p1"]) == {"a": "p0", "b": "p1", "c": "p0"}
    assert fidelity.map_users(recs, []) == {}


def test_scale_jobs_keeps_gpu_requests_and_sets_users():
    recs = [rec(1, 0, 600, gpus=16, user="x"),   # 2 nodes x 8 GPUs
            rec(2, 60, 600, gpus=3, user="y"),   # 1 node, 3 GPUs, 12 CPUs
            rec(3, 120, 600, gpus=20),           # 3 nodes x 7 GPUs
            rec(4, 180, 600, gpus=200),          # 25 nodes: capped at 16, 8 GPUs each
            rec(5, 240, 600, nodes=64)]          # no GPUs: scaled as nodes
    jobs, changed = fidelity.scale_jobs(recs, 60, cluster_nodes=16, trace_nodes=64,
                                        gpus_per_node=8, users={"x": "p0", "y": "p1"})
    got = [(j.nodes, j.gpus, j.cpus, j.user) for j in jobs]
    assert got == [(2, 8, 32, "p0"), (1, 3, 12, "p1"), (3, 7, 28, ""), (16, 8, 32, ""),
                   (16, 0, 0, "")]
    assert changed["nodes_capped"] == 1 and changed["gpus_capped"] == 0
    assert jobs[1].request == TresCounts(1, 12, 3, None)
    plain, _ = fidelity.scale_jobs(recs[:1], 60, cluster_nodes=16, trace_nodes=64)
    assert (plain[0].nodes, plain[0].gpus, plain[0].user) == (1, 0, "")  # GPUs ignored
    recs_nominal = fidelity.nominal_records(jobs, T0)
    assert [r.user for r in recs_nominal] == ["p0", "p1", "fidelity", "fidelity", "fidelity"]


def test_submit_argv_runs_sbatch_as_the_jobs_user_without_a_shell():
    job = LiveJob(0, 0.0, 5, 2, 1, user="rlschedu3")
    argv = live.submit_argv(job, "/j/s.sh", name="n", chdir="/j")
    assert argv[:4] == ["runuser", "-u", "rlschedu3", "--"]
    assert argv[4:] == fidelity.sbatch_argv(job, "/j/s.sh", name="n", chdir="/j")
    mine = dataclasses.replace(job, user="")
    assert live.submit_argv(mine, "/j/s.sh", name="n", chdir="/j")[0] == "sbatch"


def test_config_refuses_bad_values():
    rl.ReplayLiveConfig(trace="t")
    for bad in ({"speedup": 0}, {"runs": "twice"}, {"steering": "features"},
                {"user_prefix": "Bad-Name"}, {"jobs": 0}, {"switch_wait": 0}):
        with pytest.raises(ValueError):
            rl.ReplayLiveConfig(trace="t", **bad)
    assert rl.ReplayLiveConfig(trace="t", runs="helper").run_names == ("helper",)
    # the leaf-switch wait is a trace time: divided by the speedup, at least 1 s
    cfg = rl.ReplayLiveConfig(trace="t", steering="switches", switch_wait=1800, speedup=500)
    assert rl.live_switch_wait(cfg) == 3.6
    assert rl.live_switch_wait(dataclasses.replace(cfg, speedup=1e5)) == 1.0


def test_helper_configuration_file_is_what_the_helper_reads(tmp_path):
    hp = rl.HelperProcess(tmp_path / "h", {"mode": "enforce", "model": "/m/model.onnx",
                                           "interval": 2.0, "steering": "reqnodes",
                                           "steer_min_nodes": 2, "store": 'a"b'})
    assert hp.config.stat().st_mode & 0o777 == 0o600
    cfg, _ = load_config(str(hp.config))
    assert (cfg.mode, cfg.model, cfg.interval, cfg.steer_min_nodes, cfg.store) == (
        "enforce", "/m/model.onnx", 2.0, 2, 'a"b')
    assert cfg.state_file == str(hp.state_file)
    assert hp.cycles() == 0 and hp.stop() is None


# ---------------------------------------------------------------------------- audit
def entry(i: int, job: int, fld: str, new: str | None, at: int, mode: str = "enforce"
          ) -> AuditRecord:
    return AuditRecord(id=i, cluster_id=1, job_id=job, field=fld, old_value=None,
                       new_value=new, model_sha="m", created_at=at, mode=mode)


def acct(jid: int, start: int, nodes: tuple[str, ...]) -> JobRecord:
    return rec(jid, 0, 10, start=start, on=nodes)


def test_check_audit_passes_a_clean_run():
    recs = [acct(1, 100, ("n1",)), acct(2, 110, ("n2", "n3"))]
    entries = [entry(1, 1, "site_factor", "50000", T0 + 90),
               entry(2, 2, "site_factor", "100000", T0 + 90),
               entry(3, 2, "req_nodes", "n[2-3]", T0 + 108),
               entry(4, 2, "switches", "1@4", T0 + 108)]
    samples = [(T0 + 89.5, 1, 0, ()), (T0 + 91.0, 1, 50000, ()), (T0 + 95.0, 2, 100000, ())]
    chk = rl.check_audit(entries, recs, [1, 2], samples, interval=2.0)
    assert chk.ok, chk
    assert chk.changes == {"site_factor": 2, "req_nodes": 1, "switches": 1}
    assert chk.steered == 1 and chk.samples == 3 and chk.shown == 2
    assert chk.settled == 1.0  # the sample 5 s after the change shows it
    assert chk.to_dict()["ok"] is True


def test_check_audit_catches_each_kind_of_mismatch():
    recs = [acct(1, 100, ("n1",)), acct(2, 110, ("n4", "n5"))]
    base = [entry(1, 2, "req_nodes", "n[2-3]", T0 + 108)]
    off = rl.check_audit(base, recs, [1, 2], [], interval=2.0)
    assert off.off_steer == [2] and not off.ok  # ran outside its steered set
    rolled = base + [entry(2, 2, "req_nodes", None, T0 + 109)]
    assert rl.check_audit(rolled, recs, [1, 2], [], interval=2.0).ok  # rolled back first
    raced = rl.check_audit([entry(1, 1, "site_factor", "7000", T0 + 101)], recs, [1, 2], [],
                           interval=2.0)
    assert raced.ok and raced.raced == [1]  # set in the cycle during which it started
    late = [entry(1, 1, "site_factor", "7000", T0 + 104)]
    chk = rl.check_audit(late, recs, [1, 2], [], interval=2.0)
    assert chk.after_start == [1] and not chk.ok  # changed a cycle after its start
    refused = late + [entry(2, 1, "site_factor", "7000", T0 + 104, mode="failed")]
    assert rl.check_audit(refused, recs, [1, 2], [], interval=2.0).ok  # Slurm refused it
    moved = [entry(1, 2, "req_nodes", "n[4-5]", T0 + 111)]
    assert rl.check_audit(moved, recs, [1, 2], [], interval=2.0).after_start == [2]
    foreign = rl.check_audit([entry(1, 99, "site_factor", "1", T0)], recs, [1, 2], [],
                             interval=2.0)
    assert foreign.foreign == [99] and not foreign.ok
    odd = rl.check_audit([entry(1, 1, "site_factor", "5000", T0 + 50)], recs, [1, 2],
                         [(T0 + 49.0, 1, 5000, ()), (T0 + 60.0, 1, 4242, ())], interval=2.0)
    assert odd.unexplained == [(1, 4242)] and not odd.ok  # the audit never set 4242
    assert odd.settled == 0.0
    assert not rl.check_audit([], recs, [1, 2], [], interval=2.0, left_behind=1).ok


def test_not_worse_uses_the_stated_tolerance():
    slurm = {"bsld_mean": 2.0, "wait_mean": 10.0}
    rel, a_b, a_w = rl.TOLERANCE
    edge = {"bsld_mean": 2.0 * (1 + rel) + a_b, "wait_mean": 10.0 * (1 + rel) + a_w}
    assert rl.not_worse(edge, slurm)["ok"]
    assert not rl.not_worse({**edge, "bsld_mean": edge["bsld_mean"] + 0.01}, slurm)["ok"]
    assert not rl.not_worse({**edge, "wait_mean": edge["wait_mean"] + 0.1}, slurm)["ok"]


# ---------------------------------------------------------------------------- metrics
def test_observed_result_measures_a_real_run_with_the_simulators_metrics():
    spec = ClusterSpec.synthetic("c", 8, gpus_per_node=0, mem_mb_per_node=0)
    leaf = [n.name for n in spec.nodes]
    jobs = {11: LiveJob(0, 0.0, 10, 2, 1), 12: LiveJob(1, 1.0, 20, 2, 1),
            13: LiveJob(2, 2.0, 5, 1, 1)}
    records = [  # job 11 in one leaf, 12 across two, 13 waits 8 s
        rec(11, 0, 10, nodes=2, cpus=2, on=(leaf[0], leaf[1])),
        rec(12, 1, 20, nodes=2, cpus=2, on=(leaf[3], leaf[4])),
        rec(13, 2, 5, start=10, on=(leaf[0],), cpus=1)]
    run = live.LiveRun("rl", jobs, records, float(T0), 30.0)
    res = live.observed_result(run, spec)
    m = metrics.compute(res)
    assert m["jobs"] == 3
    assert m["wait_s"]["mean"] == pytest.approx(8 / 3)
    assert m["single_leaf_share"] == 0.5
    assert m["makespan_s"] == 21
    assert res.util_nodes.max() == 4
    wait = (res.start - res.jobs.eligible).tolist()
    assert sorted(wait) == [0, 0, 8]
    assert np.array_equal(res.end - res.start, res.jobs.run)
    h = rl.headline(m)
    assert h["bsld_mean"] == pytest.approx(np.mean([1.0, 1.0, 13 / 10]))
    bad = live.LiveRun("rl", jobs, [*records[:2], rec(13, 2, 5, on=("elsewhere",))],
                       float(T0), 1.0)
    with pytest.raises(ValueError, match="not a node"):
        live.observed_result(bad, spec)


def test_table_rows_show_real_simulated_and_the_gap():
    real = {k: 1.0 for _, k, _ in rl._COLUMNS}
    sim = {**real, "wait_mean": 0.5, "single_leaf_share": None}
    rows = rl.table_rows({"runs": {"slurm": {"real": real}}, "forecast": {"slurm": sim,
                                                                          "helper": sim}})
    assert [r[:2] for r in rows] == [["slurm", "real (sacct)"], ["slurm", "simulated"],
                                     ["slurm", "gap real-sim"], ["helper", "simulated"]]
    assert rows[2][2] == "+0.5" and rows[2][-1] == "-"


def test_train_policy_runs_the_demos_stages_without_the_teacher(tmp_path):
    """replay-live trains with the demo's imitation, rl, select and export stages only:
    RL starts from the imitation net (the teacher stage is the demo's, not run here)."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from trainer.policy import load_checkpoint
    from trainer.sim.slurm import PrioritySettings, SchedulerOptions
    from trainer.sim.workload import WorkloadConfig, default_cluster

    spec = default_cluster(WorkloadConfig(num_jobs=10))
    rng = np.random.default_rng(0)
    earlier = [LiveJob(k, 20.0 * k, int(rng.integers(30, 600)), int(rng.integers(1, 4)),
                       20, gpus=int(rng.integers(1, 9))) for k in range(120)]
    cfg = rl.ReplayLiveConfig(trace="t", budget="tiny")
    said: list[str] = []
    model = rl.train_policy(earlier, spec, SchedulerOptions(), PrioritySettings(), cfg,
                            tmp_path / "train", said.append)
    assert model.is_file() and model.name == "model.onnx"
    assert any("training: rl done" in s for s in said)
    ck = load_checkpoint(tmp_path / "train" / "rl" / "last.pt")
    assert ck.extra["training"]["algorithm"] == "imitation + ppo"


def test_the_forecast_runs_the_policy_as_the_live_helper_deploys_it(tiny_checkpoint):
    from trainer.evaluate import StarvationGuard

    cfg = rl.ReplayLiveConfig(speedup=600.0, interval=2.0)
    assert rl.live_starvation_limit(cfg) == 288.0  # 2 days of the trace
    assert rl.live_starvation_limit(rl.ReplayLiveConfig(speedup=1e6, interval=2.0)) == 2.0
    pol = rl.forecast_policy(tiny_checkpoint, "reqnodes", "tree", rescore=cfg.interval,
                             starvation_limit=rl.live_starvation_limit(cfg))
    assert isinstance(pol, StarvationGuard) and pol.limit == 288.0
    assert pol.rescore_period == 2  # every helper cycle of the sped-up run
