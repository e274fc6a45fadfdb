"""Synthetic workloads: determinism, calibration to the papers' figures, accounting records."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from functools import cache

import numpy as np
import pytest

from db.records import check
from slurm_plugin.slurm import parse
from trainer.sim.workload import (
    DEFAULT_START_EPOCH,
    MAX_LOCALITY,
    STATES,
    TIME_LIMIT_STEPS,
    JobClass,
    Model,
    Partition,
    SyntheticJob,
    WorkloadConfig,
    default_cluster,
    describe,
    generate,
)

N = 20_000


@cache
def jobs_of(kind: str = "gpu", n: int = N, seed: int = 7) -> tuple[SyntheticJob, ...]:
    return tuple(generate(WorkloadConfig(kind=kind, num_jobs=n, seed=seed)))


# ----------------------------------------------------------------------------- determinism
def test_same_seed_same_jobs_other_seed_different():
    a = generate(WorkloadConfig(num_jobs=2000, seed=3))
    b = generate(WorkloadConfig(num_jobs=2000, seed=3))
    c = generate(WorkloadConfig(num_jobs=2000, seed=4))
    assert a == b
    assert a != c
    assert [j.submit_time for j in a] != [j.submit_time for j in c]
    assert [j.run_time for j in a] != [j.run_time for j in c]


def test_hpc_deterministic_and_prefix_independent_of_count():
    a = generate(WorkloadConfig(kind="hpc", num_jobs=500, seed=11))
    assert a == generate(WorkloadConfig(kind="hpc", num_jobs=500, seed=11))
    assert a != generate(WorkloadConfig(kind="hpc", num_jobs=500, seed=12))


def test_ids_and_submit_times_ascend_from_start():
    cfg = WorkloadConfig(num_jobs=1000, seed=1, first_job_id=5000)
    jobs = generate(cfg)
    assert [j.job_id for j in jobs] == list(range(5000, 6000))
    submits = [j.submit_time for j in jobs]
    assert submits == sorted(submits)
    assert submits[0] >= DEFAULT_START_EPOCH


def test_zero_jobs():
    assert generate(WorkloadConfig(num_jobs=0)) == []
    assert describe([]) == {"num_jobs": 0}


# ----------------------------------------------------------------------------- calibration
def test_gpu_calibration_sched2():
    jobs = jobs_of()
    d = describe(jobs)
    assert abs(d["one_gpu_share"] - 0.68) <= 0.02  # SCHED2 Fig. 3a
    assert abs(d["mean_interarrival_s"] - 172) <= 0.05 * 172  # SCHED2 §IV-A
    assert set(d["size_shares"]) <= {"1", "2", "4", "8", "16", "32", "64"}
    # heavy-tailed run times, minutes to days
    assert d["run_time"]["p99_p50"] >= 10
    assert d["run_time"]["p10"] < 600 < 3600 < d["run_time"]["p90"]
    # mean run time of the order of SCHED2's 5,422 s (Fig. 10a)
    assert 3500 <= d["run_time"]["mean"] <= 7500


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gpu_calibration_holds_across_seeds(seed):
    d = describe(jobs_of("gpu", N, seed))
    assert abs(d["one_gpu_share"] - 0.68) <= 0.02
    assert abs(d["mean_interarrival_s"] - 172) <= 0.05 * 172


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_time_limits_overestimate_and_timeouts_run_to_the_limit(kind):
    jobs = jobs_of(kind)
    assert all(0 < j.run_time <= j.time_limit for j in jobs)
    d = describe(jobs)
    assert d["overestimation"]["median"] > 1
    assert 2 <= d["overestimation"]["median"] <= 10
    timeouts = [j for j in jobs if j.state == "TIMEOUT"]
    assert timeouts and all(j.run_time == j.time_limit for j in timeouts)
    max_time = {p.name: p.max_time for p in WorkloadConfig(kind=kind).partitions or ()}
    # limits are round values (or the partition's MaxTime), never above MaxTime
    assert all(j.time_limit in TIME_LIMIT_STEPS or j.time_limit == max_time[j.partition]
               for j in jobs)
    assert all(j.time_limit <= max_time[j.partition] for j in jobs)


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_state_shares_and_exit_codes(kind):
    jobs = jobs_of(kind)
    shares = describe(jobs)["state_shares"]
    assert set(shares) == set(STATES)
    assert abs(shares["FAILED"] - 0.10) <= 0.02
    assert abs(shares["CANCELLED"] - 0.10) <= 0.02
    assert 0.04 <= shares["TIMEOUT"] <= 0.09
    for j in jobs:
        assert (j.exit_code != 0) == (j.state == "FAILED")


def test_class_shares_gpu():
    shares = describe(jobs_of())["class_shares"]
    assert set(shares) == {"cv", "nlp", "speech"}
    for name, want in (("cv", 0.10), ("nlp", 0.60), ("speech", 0.30)):
        assert abs(shares[name] - want) <= 0.02


def test_locality_sensitivity_per_class():
    jobs = jobs_of()
    classes = {jc.name: jc for jc in WorkloadConfig().classes or ()}
    by_class: dict[str, list[float]] = {}
    for j in jobs:
        by_class.setdefault(j.job_class, []).append(j.locality_sensitivity)
        assert 0.0 <= j.locality_sensitivity <= MAX_LOCALITY
    for name, values in by_class.items():
        lo, hi = classes[name].locality_range
        assert lo - 1e-4 <= min(values) and max(values) <= hi + 1e-4, name
    mean = {k: float(np.mean(v)) for k, v in by_class.items()}
    # Speech (DeepSpeech 1.6x) is the least locality-sensitive class, CV (VGG16 5.9x) and
    # NLP (Transformer 2.7x) much more so.
    assert mean["speech"] < 0.4 < mean["nlp"] and mean["speech"] < 0.4 < mean["cv"]
    # a model's jobs stay around its measured slowdown: VGG16 5.9x +- 20% of the excess
    vgg = [j.locality_sensitivity for j in jobs if j.name == "vgg16"]
    slowdown = 1 / (1 - np.asarray(vgg))
    assert vgg and 1 + 4.9 * 0.8 - 0.01 <= slowdown.min() <= slowdown.max() <= 1 + 4.9 * 1.2 + 0.01
    names = {jc.name: {m.name for m in jc.models} for jc in classes.values()}
    assert all(j.name in names[j.job_class] for j in jobs)


def test_users_are_zipf_like_with_one_account_each():
    jobs = jobs_of()
    counts = Counter(j.user for j in jobs)
    assert len(counts) == 50
    assert counts.most_common(1)[0][0] == "user01"
    assert counts["user01"] > 5 * counts["user50"]
    accounts: dict[str, set[str]] = {}
    for j in jobs:
        accounts.setdefault(j.user, set()).add(j.account)
    assert all(len(a) == 1 for a in accounts.values())


def test_diurnal_and_weekly_modulation():
    jobs = jobs_of()
    hours = Counter(datetime.fromtimestamp(j.submit_time, timezone.utc).hour for j in jobs)
    day = sum(hours[h] for h in range(10, 19))
    night = sum(hours[h] for h in (22, 23, 0, 1, 2, 3, 4, 5, 6))
    assert day > 2 * night
    days = Counter(datetime.fromtimestamp(j.submit_time, timezone.utc).weekday() for j in jobs)
    weekday_rate = sum(days[d] for d in range(5)) / 5
    weekend_rate = (days[5] + days[6]) / 2
    assert weekend_rate < 0.8 * weekday_rate
    flat = generate(WorkloadConfig(num_jobs=N, seed=7, diurnal=False))
    flat_hours = Counter(datetime.fromtimestamp(j.submit_time, timezone.utc).hour for j in flat)
    assert max(flat_hours.values()) < 1.3 * min(flat_hours.values())


def test_interarrival_is_burstier_than_poisson_and_configurable():
    jobs = generate(WorkloadConfig(num_jobs=N, seed=5, diurnal=False))
    gaps = np.diff([j.submit_time for j in jobs])
    assert gaps.std() / gaps.mean() > 1.3
    poisson = generate(WorkloadConfig(num_jobs=N, seed=5, diurnal=False, interarrival_cv=1.0))
    pgaps = np.diff([j.submit_time for j in poisson])
    assert 0.9 < pgaps.std() / pgaps.mean() < 1.1
    slow = describe(generate(WorkloadConfig(num_jobs=N, seed=5, mean_interarrival_s=600)))
    assert abs(slow["mean_interarrival_s"] - 600) <= 30


def test_offered_load_is_busy_but_not_saturated():
    for kind in ("gpu", "hpc"):
        cfg = WorkloadConfig(kind=kind, num_jobs=N, seed=7)
        load = describe(jobs_of(kind), default_cluster(cfg))["offered_load"]
        assert 0.5 <= load <= 0.9, (kind, load)


# ----------------------------------------------------------------------------- HPC
def test_hpc_has_no_gpus_and_node_based_sizes():
    cfg = WorkloadConfig(kind="hpc")
    jobs = jobs_of("hpc")
    assert all(j.req_gpus == 0 for j in jobs)
    sizes = {s for s, _ in cfg.sizes or ()}
    assert {j.req_nodes for j in jobs} <= sizes
    d = describe(jobs)
    assert d["one_gpu_share"] == 0.0
    assert 0.4 <= d["one_node_share"] <= 0.75
    assert d["size_shares"]["1"] > d["size_shares"]["2"] > d["size_shares"]["16"]
    mpi = [j for j in jobs if j.job_class == "mpi"]
    serial = [j for j in jobs if j.job_class == "serial"]
    assert mpi and all(j.req_cpus == 64 * j.req_nodes for j in mpi)  # whole nodes
    assert serial and all(j.req_nodes == 1 and 1 <= j.req_cpus <= 32 for j in serial)
    assert all(j.locality_sensitivity == 0.0 for j in serial)
    # seconds to a day
    runs = np.asarray([j.run_time for j in jobs])
    assert runs.min() < 60 and runs.max() <= 86_400
    assert describe(jobs)["run_time"]["p99_p50"] >= 10
    assert set(d["partition_shares"]) == {"batch", "debug"}
    assert all(j.time_limit <= 1800 for j in jobs if j.partition == "debug")


# ----------------------------------------------------------------------------- cluster fit
@cache
def cluster_of(cfg: WorkloadConfig):
    return default_cluster(cfg)


def fits(job: SyntheticJob, cfg: WorkloadConfig) -> bool:
    spec = cluster_of(cfg)
    node = spec.nodes[0]
    return (1 <= job.req_nodes <= spec.num_nodes
            and job.req_gpus <= min(spec.total_gpus, job.req_nodes * node.gpus)
            and 1 <= job.req_cpus <= job.req_nodes * node.cpus
            and 1 <= job.req_mem_mb <= job.req_nodes * node.mem_mb
            and job.partition in spec.partitions)


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_all_jobs_fit_the_default_cluster(kind):
    cfg = WorkloadConfig(kind=kind, num_jobs=N, seed=7)
    assert all(fits(j, cfg) for j in jobs_of(kind))


def test_default_clusters():
    gpu = default_cluster(WorkloadConfig())
    assert gpu.num_nodes == 16 and gpu.total_gpus == 128
    assert [len(s.nodes) for s in gpu.switches.leaves] == [4, 4, 4, 4]
    assert gpu.switches.root is not None and gpu.switches.root.name == "spine"
    assert gpu.nodes[0].name == "gpu01" and list(gpu.partitions) == ["gpu"]
    hpc = default_cluster(WorkloadConfig(kind="hpc"), name="hpc-test")
    assert hpc.name == "hpc-test" and hpc.num_nodes == 64 and hpc.total_gpus == 0
    assert hpc.total_cpus == 64 * 64 and len(hpc.switches.leaves) == 4
    assert set(hpc.partitions) == {"batch", "debug"}
    assert all(n.partitions == ("batch", "debug") for n in hpc.nodes)


def test_requests_are_clamped_to_a_small_cluster():
    cfg = WorkloadConfig(num_jobs=5000, seed=2, num_nodes=2, nodes_per_leaf=2)
    jobs = generate(cfg)
    assert max(j.req_gpus for j in jobs) == 16
    assert all(fits(j, cfg) for j in jobs)
    hcfg = WorkloadConfig(kind="hpc", num_jobs=5000, seed=2, num_nodes=8, cpus_per_node=16,
                          mem_mb_per_node=32_000)
    hjobs = generate(hcfg)
    assert max(j.req_nodes for j in hjobs) == 8
    assert all(fits(j, hcfg) for j in hjobs)


# ----------------------------------------------------------------------------- records
@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_every_record_passes_check_and_round_trips(kind):
    cfg = WorkloadConfig(kind=kind, num_jobs=3000, seed=9)
    names = [n.name for n in default_cluster(cfg).nodes]
    for j in generate(cfg):
        start = j.submit_time + 17
        rec = j.to_record(start, names[: j.req_nodes], cluster="demo")
        assert check(rec) is None
        assert (rec.job_id, rec.name, rec.user, rec.account, rec.partition, rec.state) == (
            j.job_id, j.name, j.user, j.account, j.partition, j.state)
        assert rec.submit_time == rec.eligible_time == j.submit_time
        assert rec.start_time == start and rec.end_time == start + j.run_time
        assert rec.time_limit == j.time_limit and rec.exit_code == j.exit_code
        assert rec.req == rec.alloc == j.req
        assert (rec.req.nodes, rec.req.gpus, rec.req.cpus, rec.req.mem_mb) == (
            j.req_nodes, j.req_gpus, j.req_cpus, j.req_mem_mb)
        assert rec.nodes == tuple(names[: j.req_nodes]) and rec.cluster == "demo"
        assert rec.signal == (15 if j.state == "CANCELLED" else None)


def test_spread_placement_and_slowdown():
    cfg = WorkloadConfig(num_jobs=2000, seed=4)
    job = next(j for j in generate(cfg) if j.req_gpus == 4 and j.state == "COMPLETED")
    rec = job.to_record(job.submit_time, ["gpu05", "gpu02"])
    assert rec.node_list == "gpu[02,05]" and rec.nodes == ("gpu02", "gpu05")
    assert rec.alloc.nodes == 2 and rec.req.nodes == 1 and rec.alloc.gpus == 4
    slowed = round(job.run_time / (1 - job.locality_sensitivity))
    rec = job.to_record(job.submit_time + 5, ["gpu01", "gpu09"], run_time=slowed)
    if slowed >= job.time_limit:
        assert rec.state == "TIMEOUT" and rec.end_time - rec.start_time == job.time_limit
    else:
        assert rec.state == "COMPLETED" and rec.end_time - rec.start_time == slowed
    rec = job.to_record(job.submit_time, ["gpu01"], run_time=job.time_limit + 100)
    assert rec.state == "TIMEOUT" and rec.exit_code == 0
    assert rec.end_time - rec.start_time == job.time_limit
    assert check(rec) is None


def test_to_record_rejects_impossible_schedules():
    cfg = WorkloadConfig(num_jobs=3000, seed=4)
    jobs = generate(cfg)
    job = next(j for j in jobs if j.req_nodes == 2)
    with pytest.raises(ValueError, match="before submit"):
        job.to_record(job.submit_time - 1, ["gpu01", "gpu02"])
    with pytest.raises(ValueError, match="distinct nodes"):
        job.to_record(job.submit_time, ["gpu01"])
    with pytest.raises(ValueError, match="distinct nodes"):
        job.to_record(job.submit_time, ["gpu01", "gpu01"])
    with pytest.raises(ValueError, match="distinct nodes"):
        job.to_record(job.submit_time, [])
    timeout = next(j for j in jobs if j.state == "TIMEOUT")
    names = [n.name for n in default_cluster(cfg).nodes][: timeout.req_nodes]
    with pytest.raises(ValueError, match="runs to its limit"):
        timeout.to_record(timeout.submit_time, names, run_time=timeout.time_limit - 1)


@pytest.mark.parametrize("kind", ["gpu", "hpc"])
def test_records_survive_the_sacct_parser(kind):
    cfg = WorkloadConfig(kind=kind, num_jobs=500, seed=6)
    names = [n.name for n in default_cluster(cfg).nodes]
    recs = [j.to_record(j.submit_time + 60, names[-j.req_nodes:], cluster="synth")
            for j in generate(cfg)]
    text = "\n".join([parse.sacct_header()] + [parse.format_sacct_row(r) for r in recs])
    assert parse.parse_sacct_parsable(text) == recs


# ----------------------------------------------------------------------------- config
def test_config_fills_kind_defaults_and_serialises():
    gpu, hpc = WorkloadConfig(), WorkloadConfig(kind="hpc")
    assert gpu.mean_interarrival_s == 172 and gpu.gpus_per_node == 8 and gpu.num_nodes == 16
    assert hpc.gpus_per_node == 0 and hpc.num_nodes == 64
    assert WorkloadConfig(kind="hpc", num_nodes=32).num_nodes == 32
    data = dataclasses.asdict(gpu)
    assert json.loads(json.dumps(data))["classes"][1]["name"] == "nlp"
    assert hash(gpu) == hash(WorkloadConfig())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "tpu"},
        {"num_jobs": -1},
        {"mean_interarrival_s": 0},
        {"diurnal_amplitude": 1.0},
        {"failed_share": 0.6, "cancelled_share": 0.5},
        {"sizes": ((1, 0.0),)},
        {"sizes": ()},
        {"classes": ()},
        {"classes": (JobClass("x", 1.0, 100.0, 1.0, ()),)},
        {"classes": (JobClass("x", 1.0, 100.0, 1.0, (Model("m", 1.0, 1.5),)),)},
        {"partitions": (Partition("a", 1.0, 60), Partition("a", 1.0, 60))},
        {"time_limit_steps": (600, 300)},
        {"time_limit_steps": (90, 300)},
        {"partitions": (Partition("a", 1.0, 100),)},
        {"gpus_per_node": 0},
        {"limit_factor_median": 0.5},
    ],
)
def test_bad_configs_are_refused(kwargs):
    with pytest.raises(ValueError):
        WorkloadConfig(**kwargs)


def test_custom_classes_and_partitions():
    cfg = WorkloadConfig(
        num_jobs=4000, seed=1,
        classes=(JobClass("only", 1.0, 600.0, 1.0, (Model("toy", 1.0, 0.5),), sizes=((2, 1.0),)),),
        partitions=(Partition("long", 1.0, 86400), Partition("short", 3.0, 3600)),
    )
    jobs = generate(cfg)
    assert {j.job_class for j in jobs} == {"only"} and {j.req_gpus for j in jobs} == {2}
    parts = Counter(j.partition for j in jobs)
    assert set(parts) == {"long", "short"}
    assert all(j.time_limit <= 3600 for j in jobs if j.partition == "short")
    assert set(default_cluster(cfg).partitions) == {"long", "short"}


# ----------------------------------------------------------------------------- speed
def test_generates_100k_jobs():
    # speed is measured on demand (about 0.35 s here), not asserted in tests
    jobs = generate(WorkloadConfig(num_jobs=100_000, seed=1))
    assert len(jobs) == 100_000 and len({j.job_id for j in jobs}) == 100_000


def test_imports_no_torch_or_gymnasium():
    code = ("import sys, trainer.sim.workload; "
            "print(sorted(k for k in sys.modules if k.split('.')[0] in "
            "('torch', 'gymnasium', 'sqlalchemy', 'onnx')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
