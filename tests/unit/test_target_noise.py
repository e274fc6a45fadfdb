"""benchmarks/target_noise.py's pure parts: the jitter of arrivals and the lines it reads."""

from __future__ import annotations

import numpy as np

from trainer.sim.state import Cluster, build_jobs
from trainer.sim.workload import WorkloadConfig, default_cluster, generate, replay_records

from .benchmark_module import load_benchmark


def _module():
    return load_benchmark("target_noise")


def test_jitter_moves_arrivals_within_bounds_and_keeps_their_order():
    tn = _module()
    wc = WorkloadConfig(num_jobs=300, seed=3, mean_interarrival_s=20.0)
    spec = default_cluster(wc)
    jobs = build_jobs(replay_records(generate(wc), spec), Cluster.from_spec(spec))
    moved = tn.jittered(jobs, 60, np.random.default_rng(0))
    assert (np.diff(moved.eligible) >= 0).all()  # still in arrival order
    assert (np.abs(moved.eligible - jobs.eligible) <= 60).all()
    assert (moved.eligible != jobs.eligible).mean() > 0.5
    assert np.array_equal(moved.eligible - moved.submit, jobs.eligible - jobs.submit)
    assert np.array_equal(moved.run, jobs.run) and np.array_equal(moved.nodes, jobs.nodes)
    assert tn.jittered(jobs, 0, np.random.default_rng(0)) is jobs
    again = tn.jittered(jobs, 60, np.random.default_rng(0))
    assert np.array_equal(again.eligible, moved.eligible)  # seeded


def test_lines_read_the_point_values_as_evaluate_does():
    tn = _module()

    def fig(bsld, p99, util):
        return {"bsld": bsld, "p99": p99, "util": util}

    m = {"net": fig(60.0, 110.0, 0.80), "slurm": fig(100.0, 100.0, 0.80),
         "spf": fig(61.0, 90.0, 0.9), "lrf": fig(59.0, 90.0, 0.9)}
    assert tn.lines(m, "net", ["spf"], 0.3, 0.1) == {
        "bsld -30%": True, "below best": True, "p99 +10%": True, "utilisation": True}
    assert tn.lines(m, "net", ["spf", "lrf"], 0.3, 0.1)["below best"] is False
    assert tn.lines(m, "net", [], 0.3, 0.1)["below best"] is None
    m["net"] = fig(71.0, 111.0, 0.79)
    assert tn.lines(m, "net", ["spf"], 0.3, 0.1) == {
        "bsld -30%": False, "below best": False, "p99 +10%": False, "utilisation": False}
