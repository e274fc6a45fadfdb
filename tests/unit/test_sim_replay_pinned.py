"""Whole replays pinned to the results the engine gave before its speed work.

The replay engine keeps incremental state (sorted running-job ends, standing
reservations, cached node masks, skipped passes) to be fast; none of it may change a
result. Each case replays a small synthetic workload, squeezed so that a queue builds
up and backfill has work to do, and compares a digest of every job's start, end, leaf
count and backfill flag with the value recorded from the engine as it was before
(commit 9963636). A case that fails means a change altered a schedule: find out why
before updating its digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import cache

import numpy as np
import pytest

from db.records import TresCounts
from trainer.sim import workload
from trainer.sim.engine import EngineOptions, Simulator
from trainer.sim.policies import make_policy
from trainer.sim.slurm import PrioritySettings, SchedulerOptions
from trainer.sim.state import Cluster, JobTable, build_jobs

#: Priority settings by name: fair-share (re-scored every period), Slurm's baseline as
#: the test cluster has it (age and partition: one static part, re-scorings deferred),
#: and age plus job size (static parts differ from job to job).
SETTINGS = {
    "fs": PrioritySettings(weight_age=1000, weight_fairshare=2000, weight_job_size=500,
                           max_age=7200),
    "slurm": PrioritySettings(weight_age=1000, weight_partition=1000, max_age=3600),
    "size": PrioritySettings(weight_age=1000, weight_job_size=5000, max_age=3600),
}


@cache
def table(kind: str) -> tuple[JobTable, Cluster]:
    """400 synthetic jobs, arrivals squeezed 8 times; ``whole``: HPC jobs by node count."""
    cfg = workload.WorkloadConfig(kind="gpu" if kind == "gpu" else "hpc", num_jobs=400,
                                  seed=11)
    spec = workload.default_cluster(cfg)
    recs = workload.replay_records(workload.generate(cfg), spec)
    t0 = min(r.submit_time for r in recs)
    out = []
    for r in recs:
        t = t0 + (r.submit_time - t0) // 8
        r = dataclasses.replace(r, submit_time=t, eligible_time=t)
        if kind == "whole":  # nodes only: whole-node requests
            tres = TresCounts(r.req.nodes, None, None, None)
            r = dataclasses.replace(r, req=tres, alloc=tres)
        out.append(r)
    cl = Cluster.from_spec(spec)
    return build_jobs(out, cl), cl


def digest(kind: str, policy: str, placement: str, speed: str, bf_interval: int,
           backfill: bool = True, settings: str = "fs") -> str:
    """Digest of the replay's starts, ends, leaves and backfill flags."""
    jobs, cl = table(kind)
    opts = SchedulerOptions(bf_interval=bf_interval, priority_calc_period=60,
                            backfill=backfill)
    r = Simulator(jobs, cl, make_policy(policy, SETTINGS[settings], placement), opts,
                  EngineOptions(speed_model=speed, seed=3)).run()
    cols = [r.start, r.end, r.leaves.astype(np.int64), r.backfilled.astype(np.int64)]
    return hashlib.sha256(np.concatenate(cols).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize(("kind", "policy", "placement", "speed", "bf_interval", "expected"), [
    ("gpu", "fifo", "tree", "none", 0, "f1317bea8787adf2"),
    ("gpu", "multifactor", "tree", "none", 60, "c4753e647be545fd"),
    ("gpu", "sjf", "pack", "none", 0, "5b4ce500332881f3"),
    ("gpu", "saf", "gandiva", "locality", 0, "75d891a6fe35758a"),
    ("gpu", "dsif", "tree", "bandwidth", 30, "7f849f36884fed5e"),
    ("gpu", "tetris", "random", "none", 0, "ab63a5337425bb9e"),
    ("gpu", "drf", "linear", "none", 0, "1e56f7b2837bb311"),
    ("hpc", "fifo", "tree", "none", 0, "95c3d5527b269652"),
    ("hpc", "multifactor", "tree", "none", 0, "d0e298fa38f4579d"),
    ("hpc", "random", "pack", "none", 30, "2e33db2c510b8143"),
    ("whole", "fifo", "tree", "none", 0, "222f587464536a35"),
    ("whole", "multifactor", "tree", "none", 0, "fd6956afa4924a70"),
    ("whole", "multifactor", "tree", "none", 30, "a3869dbed172c4c8"),
    ("whole", "sjf", "pack", "none", 0, "8680a21395554961"),
    ("whole", "fifo", "random", "locality", 0, "b05bdcdf81bb93b3"),
])
def test_replay_matches_the_pinned_schedule(kind: str, policy: str, placement: str,
                                            speed: str, bf_interval: int,
                                            expected: str) -> None:
    assert digest(kind, policy, placement, speed, bf_interval) == expected


@pytest.mark.parametrize(("kind", "expected"), [
    ("gpu", "babac4c1f60d135a"), ("whole", "4009a17596894d22"),
])
def test_replay_without_backfill_matches_the_pinned_schedule(kind: str,
                                                             expected: str) -> None:
    assert digest(kind, "fifo", "tree", "none", 0, backfill=False) == expected


@pytest.mark.parametrize(("kind", "settings", "bf_interval", "expected"), [
    ("gpu", "slurm", 0, "f1317bea8787adf2"), ("gpu", "slurm", 30, "c0584b118cb6554d"),
    ("gpu", "size", 0, "60f09486d12bce4c"), ("hpc", "slurm", 0, "95c3d5527b269652"),
    ("whole", "slurm", 0, "222f587464536a35"), ("whole", "slurm", 30, "cb6a24bd94a203d0"),
    ("whole", "size", 0, "de333722093108da"),
])
def test_multifactor_without_fair_share_matches_the_pinned_schedule(
        kind: str, settings: str, bf_interval: int, expected: str) -> None:
    assert digest(kind, "multifactor", "tree", "none", bf_interval,
                  settings=settings) == expected


def test_a_deferred_rescoring_still_sees_a_younger_job_overtake() -> None:
    """Static parts differ: re-scorings are not deferred, so the overtake is seen.

    One node, busy until t=200. A (site factor 0) arrives at t=1, B (site factor 300)
    at t=50: B scores below A then (A has aged 490 of its 1000), so the queue stays in
    arrival order. A's age stops at max_age (t=101, score 1000) while B's goes on
    (300 + 10 per second from t=50): B overtakes A at t=120, so B starts first at 200.
    """
    from tests.unit.test_sim_engine import job, run, spec, starts

    recs = [job(1, 0, 200), job(2, 1, 10, limit=10), job(3, 50, 10, limit=10)]
    settings = PrioritySettings(weight_age=1000, max_age=100)
    opts = SchedulerOptions(bf_interval=0, bf_resolution=1, priority_calc_period=10)
    r = run(spec(1), recs, "multifactor", settings=settings, options=opts,
            site={3: 300.0})
    assert starts(r) == {1: 0, 3: 200, 2: 210}
