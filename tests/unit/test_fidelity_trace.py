"""benchmarks/fidelity_trace.py: each configuration replayed with either backfill plan."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from .benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("RLSCHED_TRACES", ROOT.parent / "shared" / "traces"))
THETA = TRACES / "theta.swf"


@pytest.mark.skipif(not THETA.is_file(), reason=f"{THETA} not found")
def test_a_configuration_replays_with_the_backfill_plan_asked_for():
    ft = load_benchmark("fidelity_trace")
    from trainer.sim import load

    inp = load.from_trace(THETA)
    inp = dataclasses.replace(inp, records=inp.records[:3000])  # a few weeks, in order
    gaps = [(inp.records[500].submit_time, inp.records[500].submit_time + 7200)]
    easy, _ = ft.run_config(ft.CONFIGS["age+maint"], inp, gaps)
    cons, _ = ft.run_config(ft.CONFIGS["age+maint"], inp, gaps, "conservative")
    assert easy.options.bf_plan == "easy" and cons.options.bf_plan == "conservative"
    assert len(easy.start) == len(cons.start) == 3001  # the jobs and one outage
    assert (easy.start >= 0).all() and (cons.start >= 0).all()
    assert not np.array_equal(easy.start, cons.start)  # the plan changes starts
    with pytest.raises(ValueError, match="partition holding only some nodes"):
        ft.run_config(ft.CONFIGS["age+maint+debug"], inp, gaps, "conservative")
