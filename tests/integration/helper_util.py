"""Shared pieces of the helper's live tests (test_helper_live.py, test_helper_faults_live.py).

``model_file`` builds the tiny ONNX policy of :mod:`tests.onnx_fixture` (shortest time
limit first; placement prefers one leaf switch); ``make_helper`` a helper in enforce
mode on the test cluster, with a fresh SQLite store; the rest reads the queue.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from db.session import init_db
from slurm_plugin.helper.actuate import StoreAudit
from slurm_plugin.helper.config import HelperConfig
from slurm_plugin.helper.cycle import Helper
from slurm_plugin.helper.logs import EventLog
from slurm_plugin.slurm.cli_backend import CliSlurmClient
from slurm_plugin.slurm.types import SlurmJob

ROOT = Path(__file__).resolve().parents[2]


def model_file(directory: Path) -> Path:
    """The tiny ONNX policy and its card in ``directory`` (skips without torch/onnx)."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from tests.onnx_fixture import build_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_model(directory)


def make_helper(tmp_path: Path, model: Path, *, client: CliSlurmClient | None = None,
                helper_kw: dict[str, Any] | None = None, **cfg: Any
                ) -> tuple[Helper, io.StringIO]:
    """A helper (enforce mode, no steering, 2 s interval) with its log in a StringIO.

    ``cfg`` overrides configuration keys; ``client`` replaces the CLI client; ``helper_kw``
    goes to :class:`Helper` (clocks).
    """
    store = cfg.get("store") or str(tmp_path / "store.db")
    if "store" not in cfg:
        init_db(f"sqlite:///{store}")
    base = dict(model=str(model), state_file=str(tmp_path / "state.json"), store=store,
                mode="enforce", steering="none", interval=2.0, history_days=0)
    base.update(cfg)
    conf = HelperConfig(**base).validate()
    client = client or CliSlurmClient(timeout=conf.slurm_timeout)
    audit = StoreAudit(conf.store, cluster="testcluster", timeout=conf.store_timeout)
    log = io.StringIO()
    return Helper(conf, client=client, audit=audit, log=EventLog(log, level="debug"),
                  **(helper_kw or {})), log


def write_config(tmp_path: Path, model: Path, **keys: Any) -> Path:
    """A helper TOML file (state and SQLite store in ``tmp_path``, initialised)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    init_db(f"sqlite:///{tmp_path / 'store.db'}")
    base: dict[str, Any] = dict(model=str(model), state_file=f"{tmp_path}/state.json",
                                store=f"{tmp_path}/store.db", history_days=0)
    base.update(keys)
    lines = [f'{k} = "{v}"' if isinstance(v, str) else
             f"{k} = {str(v).lower()}" if isinstance(v, bool) else f"{k} = {v!r}"
             for k, v in base.items()]
    cfg = tmp_path / "helper.toml"
    cfg.write_text("\n".join(lines) + "\n")
    cfg.chmod(0o640)
    return cfg


def job_of(slurm: CliSlurmClient, job_id: int) -> SlurmJob | None:
    """The job as squeue shows it now, ``None`` once it left the queue."""
    return next((j for j in slurm.jobs() if j.job_id == job_id), None)


def running(slurm: CliSlurmClient, job_id: int) -> SlurmJob | None:
    """The job if it runs now."""
    j = job_of(slurm, job_id)
    return j if j is not None and j.is_running else None


def site_factors(slurm: CliSlurmClient, ids: list[int]) -> dict[int, int]:
    """Current site factors of pending jobs (0 where sprio shows none)."""
    jobs = {j.job_id: j for j in slurm.jobs()}
    return {i: int(jobs[i].site_factor or 0) for i in ids if i in jobs}


def start_times(ids: list[int]) -> dict[int, int]:
    """Start times (epoch s) of finished or running jobs, from sacct."""
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,Start", "-j",
                          ",".join(map(str, ids))], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="%s"))
    got = {}
    for line in out.stdout.splitlines():
        jid, _, start = line.partition("|")
        if jid.isdigit() and start.strip().isdigit():
            got[int(jid)] = int(start)
    return got


def recorded_starts(ids: list[int], timeout: float = 60.0) -> dict[int, int]:
    """:func:`start_times` once accounting shows every job of ``ids`` (what it has then).

    slurmctld sends job records to slurmdbd asynchronously, and after a slurmctld
    restart its queue of them drains late: a job Slurm started can be missing from
    sacct for a while. At ``timeout`` it returns what sacct has, so a job that really
    never ran still fails the caller's check.
    """
    deadline = time.monotonic() + timeout
    while True:
        got = start_times(ids)
        if set(ids) <= set(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def scancel(job_id: int) -> None:
    """Cancel one job."""
    subprocess.run(["scancel", str(job_id)], capture_output=True, timeout=30)


def events(text: str, name: str | None = None) -> list[dict[str, Any]]:
    """The helper's JSON log lines in ``text`` (those of event ``name`` if given).

    Every line must be one JSON object: a log line split over several lines fails here.
    """
    out = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [e for e in out if name is None or e["event"] == name]
