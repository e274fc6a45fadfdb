"""Fixtures for tests against the real Slurm test cluster (contrib/testcluster/up).

The tests skip, saying why, when the cluster is not up or the user is not root, unless
``RLSCHED_REQUIRE_CLUSTER=1`` (set by contrib/run-tests and so by CI), where they fail.
They only ever touch a cluster named ``testcluster`` (the test cluster's name): every
job on it may be cancelled between tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_plugin.slurm.cli_backend import CliSlurmClient

CLUSTER = os.environ.get("RLSCHED_TEST_CLUSTER", "testcluster")
JOBDIR = "/tmp/rlsched-testcluster/jobs"


def _why_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "integration tests need root (they submit and change jobs on the test cluster)"
    if shutil.which("scontrol") is None:
        return "Slurm client commands not installed: run contrib/testcluster/up"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "scontrol ping timed out: is the test cluster up? run contrib/testcluster/up"
    if "UP" not in ping.stdout:
        return "slurmctld is not up: run contrib/testcluster/up"
    cfg = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=10)
    name = next((ln.split("=", 1)[1].strip() for ln in cfg.stdout.splitlines()
                 if ln.startswith("ClusterName")), "")
    if name != CLUSTER:
        return f"the running cluster is {name!r}, not the test cluster {CLUSTER!r}: not touching it"
    return None


@pytest.fixture(scope="session")
def cluster() -> str:
    """The test cluster's name, once checked to be up and ours."""
    why = _why_unavailable()
    if why:
        if os.environ.get("RLSCHED_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"RLSCHED_REQUIRE_CLUSTER=1 but {why}")
        pytest.skip(why)
    os.makedirs(JOBDIR, exist_ok=True)
    return CLUSTER


def _queued() -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                         timeout=30).stdout
    return out.split()


def _cancel_all() -> None:
    """Cancel every job on the test cluster, whoever owns it (replay-live submits as
    the local users ``rlschedu*``, not only as root)."""
    ids = _queued()
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30)
    deadline = time.time() + 60
    while time.time() < deadline:
        out = _queued()
        if not out:
            return
        time.sleep(0.2)
    raise AssertionError(f"jobs still in the queue after scancel: {out}")


@pytest.fixture()
def slurm(cluster: str) -> Iterator[CliSlurmClient]:
    """A CLI client on an empty test cluster; jobs are cancelled again afterwards."""
    _cancel_all()
    yield CliSlurmClient(timeout=30)
    _cancel_all()


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The helper tests' tiny ONNX policy (shortest time limit first), built once."""
    from .helper_util import model_file

    return model_file(tmp_path_factory.mktemp("model"))


Submit = Callable[..., int]


@pytest.fixture()
def submit(slurm: CliSlurmClient) -> Submit:
    """``submit("-N", "2", sleep=60, name="x")`` runs sbatch and returns the job id."""

    def _submit(*args: str, sleep: int = 300, name: str = "rlsched-test") -> int:
        argv = ["sbatch", "--parsable", f"--chdir={JOBDIR}", "--output=/dev/null",
                f"--job-name={name}", *args, "--wrap", f"sleep {sleep}"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"sbatch failed: {out.stderr}"
        return int(out.stdout.strip().split(";")[0])

    return _submit


def wait_for(pred: Callable[[], object], timeout: float = 30.0, what: str = "") -> object:
    """Poll ``pred`` until it returns something truthy."""
    deadline = time.time() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


# ---------------------------------------------------------------------------- slurmctld
class Slurmctld:
    """The test cluster's slurmctld, stopped and started as contrib/testcluster/up does.

    Found from the running configuration, so it works on whichever test cluster
    ``SLURM_CONF`` points at: ``StateSaveLocation`` is ``$BASE/run/ctld``, and ``up``
    records the daemon it started in ``$BASE/run/pids/slurmctld.pid`` (``PID program``).
    Only that recorded process is ever signalled; :meth:`start` runs ``slurmctld -D -i``
    (recovering the saved jobs) in its own session and records it there again, so that
    ``contrib/testcluster/down`` still finds it.
    """

    def __init__(self) -> None:
        cfg = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                             timeout=30).stdout
        keys = dict(ln.split("=", 1) for ln in cfg.splitlines() if " = " in ln)
        keys = {k.strip(): v.strip() for k, v in keys.items()}
        self.conf = keys["SLURM_CONF"]
        run = Path(keys["StateSaveLocation"]).parent
        self.pid_file = run / "pids" / "slurmctld.pid"
        self.stdout = run / "log" / "slurmctld.stdout"
        self._proc: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        """The recorded slurmctld's PID if that process is alive and is slurmctld."""
        try:
            pid, prog = self.pid_file.read_text().split()[:2]
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError):
            return None
        ok = prog == "slurmctld" and Path(argv0).name == "slurmctld" and stat not in "ZXx"
        return int(pid) if ok else None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the recorded slurmctld and wait until it is gone."""
        pid = self.pid()
        assert pid is not None, f"no live slurmctld recorded in {self.pid_file}"
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: self.pid() is None, timeout, "slurmctld to stop")
        if self._proc is not None:
            self._proc.wait(timeout=5)  # one this object started: reap it

    def start(self, timeout: float = 60.0) -> None:
        """Start slurmctld as ``up`` does and wait until it answers and the nodes respond."""
        with self.stdout.open("ab") as out:
            self._proc = subprocess.Popen(
                ["/usr/sbin/slurmctld", "-D", "-i"], stdin=subprocess.DEVNULL, stdout=out,
                stderr=out, env=dict(os.environ, SLURM_CONF=self.conf),
                start_new_session=True)
        self.pid_file.write_text(f"{self._proc.pid} slurmctld\n")
        wait_for(lambda: "UP" in subprocess.run(["scontrol", "ping"], capture_output=True,
                                                text=True, timeout=10).stdout,
                 timeout, "slurmctld to answer")
        wait_for(_nodes_respond, timeout, "the nodes to respond")


def _nodes_respond() -> bool:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True,
                         timeout=30).stdout.split()
    return bool(out) and not any(s.endswith("*") or s.startswith(("down", "drain", "unk"))
                                 for s in out)


@pytest.fixture()
def slurmctld(cluster: str) -> Iterator[Slurmctld]:
    """Control of the cluster's slurmctld; it runs again after the test, whatever happened."""
    ctl = Slurmctld()
    if ctl.pid() is None:
        why = (f"{ctl.pid_file} names no live slurmctld: this test stops and restarts the"
               " slurmctld that contrib/testcluster/up started")
        if os.environ.get("RLSCHED_REQUIRE_CLUSTER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield ctl
    finally:
        if ctl.pid() is None:
            ctl.start()
