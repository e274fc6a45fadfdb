"""The helper's faults against the real test cluster: each one fails open.

slurmctld down, ``squeue --json`` malformed, the store locked or unreachable, the
helper's clock jumping, and the runtime-only install (no torch) running the helper. In
every case: no job lost, cancelled or held, submissions keep working, Slurm schedules on
its own, the helper logs one line per failed cycle, backs off and recovers by itself.
The policy is the tiny ONNX model of :mod:`tests.onnx_fixture` (shortest time limit
first); the store is a fresh SQLite file unless the test says otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from db.session import init_db
from slurm_plugin.helper.cycle import CycleReport, Helper, run_forever
from slurm_plugin.slurm.cli_backend import CliSlurmClient

from .conftest import Slurmctld, Submit, wait_for
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

#: Site factors the policy gives three pending jobs with limits 30, 20 and 10 minutes.
POLICY = [0, 50000, 100000]


def _queue(slurm: CliSlurmClient, submit: Submit, *args: str, limits=(30, 20, 10),
           sleep: int = 300) -> tuple[int, list[int]]:
    """A whole-cluster blocker running, and jobs pending behind it (longest limit first)."""
    blocker = submit("-N", "16", "--exclusive", "-t", "10", name="blocker")
    wait_for(lambda: running(slurm, blocker), what="blocker to start")
    ids = [submit(*args, "-t", str(m), sleep=sleep, name=f"q{m}") for m in limits]
    wait_for(lambda: all(job_of(slurm, i) and job_of(slurm, i).site_factor is not None
                         for i in ids), what="sprio to list the queue")
    return blocker, ids


def _all_there(slurm: CliSlurmClient, blocker: int, ids: list[int]) -> None:
    """The blocker still runs; the queued jobs are all pending, none held or cancelled."""
    jobs = {j.job_id: j for j in slurm.jobs()}
    assert jobs[blocker].is_running
    for i in ids:
        assert i in jobs and jobs[i].is_pending, (i, jobs.get(i))
        assert jobs[i].priority > 0 and "Held" not in jobs[i].state_reason


def _drain_and_starts(slurm: CliSlurmClient, blocker: int, ids: list[int]) -> list[int]:
    """Cancel the blocker, wait until Slurm ran every job; ids in the order they started."""
    scancel(blocker)
    wait_for(lambda: not any(job_of(slurm, i) for i in ids), timeout=120,
             what="the queue to drain")
    starts = recorded_starts(ids)
    assert set(starts) == set(ids), starts  # every job ran: none lost
    return sorted(ids, key=lambda i: (starts[i], i))


def _all_start(slurm: CliSlurmClient, blocker: int, ids: list[int]) -> None:
    """Cancel the blocker; Slurm starts every queued job (they all fit at once)."""
    scancel(blocker)
    for i in ids:
        wait_for(lambda i=i: job_of(slurm, i) is None or job_of(slurm, i).is_running,
                 timeout=60, what=f"job {i} to start")
    assert set(recorded_starts(ids)) == set(ids)  # every one ran


class Loop:
    """``run_forever`` in a thread, the way ``helper run`` drives it; reports kept."""

    def __init__(self, helper: Helper, on_cycle: Callable[[int], None] | None = None) -> None:
        self.helper = helper
        self.reports: list[tuple[float, CycleReport]] = []  # (monotonic start, report)
        self._on = on_cycle
        self._stop = threading.Event()
        self._t0 = 0.0
        self._thread = threading.Thread(target=run_forever, daemon=True,
                                        args=(helper, self._stop, self._record))
        real = helper.run_once

        def timed() -> CycleReport:
            self._t0 = time.monotonic()
            return real()

        helper.run_once = timed  # type: ignore[method-assign]

    def _record(self, rep: CycleReport) -> None:
        self.reports.append((self._t0, rep))
        if self._on is not None:
            self._on(len(self.reports))

    def __enter__(self) -> Loop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        assert not self._thread.is_alive()

    def since(self, k: int) -> list[CycleReport]:
        """Reports from the ``k``-th on."""
        return [r for _, r in self.reports[k:]]


# ---------------------------------------------------------------------------- slurmctld
def test_slurmctld_down_fails_open_backs_off_and_recovers(slurm, submit: Submit, model,
                                                          tmp_path, slurmctld: Slurmctld):
    blocker, ids = _queue(slurm, submit, "-N", "1")
    # Slurm's commands take ~9 s to give up on a stopped slurmctld (squeue then prints a
    # JSON document with an error and no jobs): slurm_timeout lets them.
    helper, log = make_helper(tmp_path, model, interval=0.5, backoff_max=2.0,
                              slurm_timeout=20.0)
    with Loop(helper) as loop:
        wait_for(lambda: loop.reports and loop.reports[-1][1].ok, what="a first good cycle")
        assert site_factors(slurm, ids) == dict(zip(ids, POLICY, strict=True))
        audited = len(helper.audit.store().audit_log(None))
        slurmctld.stop()
        k = len(loop.reports)
        wait_for(lambda: sum(not r.ok for r in loop.since(k)) >= 3, timeout=120,
                 what="three failed cycles")
        slurmctld.start()
        wait_for(lambda: loop.reports[-1][1].ok, timeout=120, what="the helper to recover")
    down = loop.reports[k:]
    failed = [(t, r) for t, r in down if not r.ok]
    assert all(r.applied == [] and r.changes == [] for _, r in failed)  # no change made
    assert all(re.match(r"SlurmError: (squeue|sprio|sinfo|scontrol) ", r.error)
               for _, r in failed), [r.error for _, r in failed]  # which command, and why
    lines = events(log.getvalue())
    # (on a loaded machine a cycle before the stop may overrun its apply budget, the
    # interval: it stops applying, fails open and says so; counted with the others)
    everyone = [r for _, r in loop.reports if not r.ok]
    errors = [e for e in lines if e["event"] == "cycle_failed"]
    assert len(errors) == len(everyone)  # one line per failed cycle, nothing else at error
    down_errors = [e for e in errors if e["error"].startswith("SlurmError")]
    assert len(down_errors) == len(failed)
    assert all("scontrol ping" in e.get("hint", "") for e in down_errors), errors  # what next
    aborted = [e for e in lines if e["event"] == "apply_aborted"]
    assert len(aborted) == sum(r.error.startswith("applying changes stopped")
                               for r in everyone)
    assert [e for e in lines if e["level"] == "error" and e["event"] != "apply_aborted"] \
        == errors
    # (the retries after failed cycles before the stop, if any, come first)
    retry = [e["retry_in"] for e in lines
             if e["event"] == "retry_scheduled"][len(everyone) - len(failed):]
    assert retry[:3] == [1.0, 2.0, 2.0]  # doubling from interval, bounded by backoff_max
    waits = iter(retry)  # the i-th failed cycle overall was followed by the i-th retry
    for (t0, r0), (t1, _) in zip(down, down[1:], strict=False):
        if not r0.ok:
            assert t1 - t0 >= r0.timings["total"] + next(waits) - 0.05  # it really waited
    assert helper.next_delay() == 0.5 and helper.state.consecutive_errors == 0
    assert len(helper.audit.store().audit_log(None)) == audited  # nothing audited while down
    # nothing lost, cancelled or held; factors as set; submissions work; Slurm schedules
    _all_there(slurm, blocker, ids)
    assert site_factors(slurm, ids) == dict(zip(ids, POLICY, strict=True))
    late = submit("-N", "1", "-t", "5", name="after-restart")
    assert job_of(slurm, late) is not None
    _all_start(slurm, blocker, [*ids, late])


# ---------------------------------------------------------------------------- squeue
MALFORMED = {
    "truncated": '"$REAL" "$@" | head -c 400',
    "garbage": "printf 'Segmentation fault (core dumped)\\n<html>oops'",
    "wrong-types": ("printf '%s' '{\"meta\": {}, \"errors\": [], \"jobs\": [{\"job_id\":"
                    " \"seven\", \"job_state\": 42}]}'"),
}


def _wrapped_slurm(bindir: Path, squeue_json: str) -> None:
    """Slurm's commands in ``bindir``, except that ``squeue --json`` prints bad output."""
    bindir.mkdir(exist_ok=True)
    for cmd in ("sinfo", "scontrol", "sprio", "sacct"):
        link = bindir / cmd
        if not link.exists():
            link.symlink_to(shutil.which(cmd) or f"/usr/bin/{cmd}")
    script = bindir / "squeue"
    script.write_text(f'#!/bin/sh\nREAL={shutil.which("squeue")}\n'
                      f'case " $* " in *" --json "*) {squeue_json}; exit 0 ;; esac\n'
                      'exec "$REAL" "$@"\n')
    script.chmod(0o755)


def test_malformed_squeue_json_fails_open(slurm, submit: Submit, model, tmp_path):
    blocker, ids = _queue(slurm, submit, "-N", "16", "--exclusive", sleep=1)
    bindir = tmp_path / "bin"
    helper, log = make_helper(tmp_path, model,
                              client=CliSlurmClient(timeout=30, bindir=str(bindir)))
    for n, (kind, body) in enumerate(MALFORMED.items(), start=1):
        _wrapped_slurm(bindir, body)
        rep = helper.run_once()
        assert not rep.ok and rep.error.startswith("SlurmError: squeue --all --json:"), (
            kind, rep.error)
        assert rep.changes == [] and helper.next_delay() == 2.0 * 2 ** n
    errors = events(log.getvalue(), "cycle_failed")
    assert len(errors) == len(MALFORMED)
    assert all(v == 0 for v in site_factors(slurm, ids).values())
    assert helper.audit.store().audit_log(None) == []
    _all_there(slurm, blocker, ids)
    # Slurm keeps its own order (age): the policy would have run them in reverse
    assert _drain_and_starts(slurm, blocker, ids) == ids


# ---------------------------------------------------------------------------- the store
def test_store_locked_changes_nothing_until_it_can_audit(slurm, submit: Submit, model,
                                                         tmp_path):
    blocker, ids = _queue(slurm, submit, "-N", "1")
    helper, log = make_helper(tmp_path, model, store_timeout=1.0)
    locker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another writer holds the store (e.g. an ingest)
    try:
        for n in (1, 2):
            t = time.monotonic()
            rep = helper.run_once()
            assert time.monotonic() - t < 10.0  # store_timeout, not SQLite's 30 s
            assert not rep.ok and "database is locked" in rep.error, rep.error
            assert rep.applied == [] and helper.next_delay() == 2.0 * 2 ** n
            assert all(v == 0 for v in site_factors(slurm, ids).values())  # no unaudited change
        assert helper.state.enforced.site == {}
        assert len(events(log.getvalue(), "cycle_failed")) == 2
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    rep = helper.run_once()  # the store is back: the helper catches up
    assert rep.ok, rep.error
    want = dict(zip(ids, POLICY, strict=True))
    assert site_factors(slurm, ids) == want
    got = {(e.job_id, e.new_value) for e in helper.audit.store().audit_log(None)}
    assert got == {(i, str(v)) for i, v in want.items() if v}
    _all_there(slurm, blocker, ids)


class Relay:
    """A TCP relay in front of a database server: closed, the server is unreachable."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._srv: socket.socket | None = None
        self._conns: list[socket.socket] = []

    def open(self) -> None:
        """Listen (the server is reachable through :attr:`port`)."""
        self._srv = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._srv,), daemon=True).start()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                a, _ = srv.accept()
            except OSError:
                return
            b = socket.create_connection(self.target)
            self._conns += [a, b]
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(x, y), daemon=True).start()

    @staticmethod
    def _pipe(x: socket.socket, y: socket.socket) -> None:
        try:
            while data := x.recv(65536):
                y.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                y.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop listening and cut every connection."""
        if self._srv is not None:
            self._srv.close()
            self._srv = None
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()
        self._conns.clear()


def test_store_server_down_changes_nothing_and_catches_up(slurm, submit: Submit, model,
                                                          tmp_path):
    from tests.db.conftest import server_url, wipe

    real = make_url(server_url("postgresql"))  # contrib/testdb's PostgreSQL
    wipe(real.render_as_string(hide_password=False))
    init_db(real.render_as_string(hide_password=False))
    relay = Relay(real.host or "127.0.0.1", real.port or 5432)
    url = real.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    blocker, ids = _queue(slurm, submit, "-N", "1")
    helper, log = make_helper(tmp_path, model, store=url, store_timeout=2.0)
    try:
        for n in (1, 2):  # the server is down: refused
            t = time.monotonic()
            rep = helper.run_once()
            assert time.monotonic() - t < 10.0
            assert not rep.ok and "cannot open the database" in rep.error, rep.error
            assert rep.applied == [] and helper.next_delay() == 2.0 * 2 ** n
        assert all(v == 0 for v in site_factors(slurm, ids).values())  # no unaudited change
        assert len(events(log.getvalue(), "cycle_failed")) == 2
        relay.open()  # back: the next cycle re-opens the store and catches up
        rep = helper.run_once()
        assert rep.ok, rep.error
        want = dict(zip(ids, POLICY, strict=True))
        assert site_factors(slurm, ids) == want
        got = {(e.job_id, e.new_value) for e in helper.audit.store().audit_log(None)}
        assert got == {(i, str(v)) for i, v in want.items() if v}
    finally:
        helper.audit.close()
        relay.close()
        wipe(real.render_as_string(hide_password=False))
    _all_there(slurm, blocker, ids)


# ---------------------------------------------------------------------------- clock
def test_clock_jumps_change_no_ages_and_the_helper_keeps_cycling(slurm, submit: Submit,
                                                                 model, tmp_path):
    blocker, ids = _queue(slurm, submit, "-N", "1")
    offset = [0.0]
    jumps = {2: 3 * 3600.0, 4: -5 * 3600.0}  # after cycle 2: +3 h; after 4: 2 h behind

    def on_cycle(n: int) -> None:
        offset[0] += jumps.get(n, 0.0)

    # (1.5 s: cycles far enough apart for the gaps below to be read on a loaded machine;
    # applying changes may take 5 s whatever the interval, cycle.MIN_APPLY_BUDGET)
    helper, log = make_helper(tmp_path, model, interval=1.5, starvation_limit=3600.0,
                              helper_kw={"clock": lambda: time.time() + offset[0]})
    with Loop(helper, on_cycle) as loop:
        wait_for(lambda: len(loop.reports) >= 6, what="six cycles")
        k = len(loop.reports)
        late = submit("-N", "1", "-t", "1", name="late")  # 2 h ahead of the helper's clock
        wait_for(lambda: any(r.ok and r.changes for r in loop.since(k)), what="a late cycle")
    reps = [r for _, r in loop.reports]
    assert all(r.ok for r in reps), [r.error for r in reps if not r.ok]
    assert all(c.reason == "policy" for r in reps for c in r.changes)  # nobody starved
    assert len(reps[0].changes) == 2 and all(not r.changes for r in reps[1:k])
    moved = {c.job_id for r in reps[k:] for c in r.changes}
    assert late in moved  # the new job was ranked first (shortest limit), old ones moved
    got = [e["seconds"] for e in events(log.getvalue(), "clock_jump")]
    assert len(got) == 2 and abs(got[0] - 10800) < 5 and abs(got[1] + 18000) < 5
    gaps = [b[0] - a[0] - a[1].timings["total"] for a, b in zip(loop.reports,
                                                                 loop.reports[1:], strict=False)]
    assert all(1.4 < g < 6.0 for g in gaps), gaps  # slept the interval, whatever the clock
    assert helper.state.consecutive_errors == 0 and helper.state.cycles == len(reps)
    _all_there(slurm, blocker, ids)


# ---------------------------------------------------------------------------- runtime
RUNTIME_SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "slurm_plugin", "trainer",
                   "exporter", "db")


@pytest.fixture(scope="session")
def runtime_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with rlsched installed without extras (runtime dependencies only).

    Built from a copy of the sources (pip builds in the tree) once per session; pip uses
    this machine's configuration (its index or wheel directory).
    """
    base = tmp_path_factory.mktemp("runtime")
    src = base / "src"
    for name in RUNTIME_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", str(src)], capture_output=True,
                         text=True, timeout=900, env=_clean_env())
    assert out.returncode == 0, ("pip install of the runtime failed (no index or wheels"
                                 f" reachable?):\n{out.stderr[-3000:]}")
    return venv


def _clean_env() -> dict[str, str]:
    """The environment without what would bring this checkout or its venv in."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_runtime_install_without_torch_runs_the_helper(slurm, submit: Submit, model,
                                                       tmp_path, runtime_venv: Path):
    py, rlsched = runtime_venv / "bin" / "python", runtime_venv / "bin" / "rlsched"
    env = _clean_env()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(rlsched), *args], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path)

    for heavy in ("torch", "onnx", "gymnasium"):
        out = subprocess.run([str(py), "-c", f"import {heavy}"], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=60)
        assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, heavy
    where = subprocess.run([str(py), "-c", "import slurm_plugin; print(slurm_plugin.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert str(runtime_venv) in where.stdout  # the installed copy, not this checkout
    blocker, ids = _queue(slurm, submit, "-N", "1")
    cfg = write_config(tmp_path, model, mode="enforce")
    assert run("db", "--db", str(tmp_path / "store.db"), "init").returncode == 0
    out = run("helper", "once", "--config", str(cfg), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["applied"] == 2
    want = dict(zip(ids, POLICY, strict=True))
    assert site_factors(slurm, ids) == want
    out = run("helper", "status", "--config", str(cfg), "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["cycles"] == 1 and status["changes"] == {"enforce:site_factor": 2}
    out = run("helper", "log", "--config", str(cfg), "--json")
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)
    assert {(e["job_id"], e["new_value"], e["mode"]) for e in entries} == {
        (i, str(v), "enforce") for i, v in want.items() if v}
    out = run("helper", "reset", "--config", str(cfg), "--yes")
    assert out.returncode == 0, out.stderr
    assert all(v == 0 for v in site_factors(slurm, ids).values())
    out = run("helper", "log", "--config", str(cfg), "--json", "--mode", "reset")
    assert len(json.loads(out.stdout)) == 2
    _all_there(slurm, blocker, ids)
