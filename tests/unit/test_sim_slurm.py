"""Slurm settings for the replay: scontrol show config, multifactor priority, fair-share."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from slurm_plugin.slurm.parse import parse_config
from trainer.sim.slurm import (
    PrioritySettings,
    SchedulerOptions,
    decay_usage,
    fairshare_factor,
    from_config,
    multifactor_priority,
    read_config,
    static_priority,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "22.05" / "scontrol-show-config.txt"


def test_golden_config():
    opts, prio, cfg = read_config(GOLDEN)
    assert cfg.scheduler_type == "sched/backfill"
    assert opts.backfill is True
    assert opts.bf_interval == 1  # SchedulerParameters=...,bf_interval=1
    assert opts.bf_resolution == 60 and opts.bf_window == 86400  # Slurm's defaults
    assert opts.bf_max_job_test == 500
    assert opts.priority_calc_period == 60  # PriorityCalcPeriod = 00:01:00
    assert (prio.weight_age, prio.weight_partition, prio.weight_fairshare) == (1000, 1000, 0)
    assert prio.max_age == 86400 and prio.decay_half_life == 7 * 86400
    assert prio.favor_small is False
    assert prio.time_dependent and not prio.uses_usage


def test_config_overrides_and_builtin():
    text = GOLDEN.read_text()
    text = text.replace("sched/backfill", "sched/builtin").replace(
        "bf_interval=1", "bf_interval=45,bf_window=120,bf_max_job_test=50,bf_resolution=30")
    opts, _ = from_config(parse_config(text))
    assert opts.backfill is False
    assert (opts.bf_interval, opts.bf_window, opts.bf_max_job_test, opts.bf_resolution) == (
        45, 7200, 50, 30)
    with pytest.raises(ValueError, match="bf_window"):
        from_config(parse_config(text.replace("bf_window=120", "bf_window=soon")))
    with pytest.raises(ValueError):
        SchedulerOptions(bf_interval=-1)
    assert SchedulerOptions().to_dict()["bf_interval"] == 30


def test_read_config_rejects_other_text(tmp_path):
    p = tmp_path / "x.txt"
    p.write_text("not a config\n")
    with pytest.raises(ValueError):
        read_config(p)


def test_multifactor_formula():
    s = PrioritySettings(weight_age=1000, weight_job_size=100, weight_partition=10,
                         weight_qos=50, max_age=100)
    nodes = np.array([1, 10])
    static = static_priority(s, nodes=nodes, cpus=nodes * 4, part_factor=np.array([1.0, 0.5]),
                             qos_factor=np.array([0.0, 1.0]), nice=np.array([0, 3]),
                             total_nodes=10, total_cpus=40)
    # size: 0.1 and 1.0; partition 10 and 5; qos 0 and 50; nice 0 and -3
    assert static.tolist() == pytest.approx([10 + 10, 100 + 5 + 50 - 3])
    p = multifactor_priority(s, now=1000, eligible=np.array([950, 500]), static=static,
                             fair_share=None, site_factor=np.array([0.0, 7.0]))
    # age: 50/100 and capped at 1
    assert p.tolist() == [np.floor(500 + 20), np.floor(1000 + 152 + 7)]
    small = dataclasses.replace(s, favor_small=True)
    st2 = static_priority(small, nodes=nodes, cpus=nodes * 4, part_factor=np.ones(2),
                          qos_factor=np.zeros(2), nice=np.zeros(2, dtype=np.int64),
                          total_nodes=10, total_cpus=40)
    assert st2.tolist() == pytest.approx([90 + 10, 0 + 10])


def test_fairshare_and_decay():
    assert fairshare_factor(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    f = fairshare_factor(np.array([3.0, 1.0, 0.0, 0.0]))  # shares 1/4 each
    assert f.tolist() == pytest.approx([2 ** (-3.0), 2 ** (-1.0), 1.0, 1.0])
    u = decay_usage(np.array([100.0]), np.array([2.0]), 10.0, 10)
    assert u.tolist() == pytest.approx([50.0 + 20.0])
    assert decay_usage(np.array([100.0]), np.array([2.0]), 10.0, 0).tolist() == [120.0]
