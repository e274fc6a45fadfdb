"""contrib/job_submit.lua run by a real Lua 5.1 (as slurmctld embeds it) against the server.

The script is loaded with a stand-in ``slurm`` table and a plain job descriptor; it talks
to the helper's real HintServer (or to a raw socket answering garbage). Skipped where
``lua5.1`` or lua-socket is missing (Debian: apt install lua5.1 lua-socket).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from slurm_plugin.helper.hint import HintServer

ROOT = Path(__file__).resolve().parents[2]
LUA = shutil.which("lua5.1")

# contrib/testcluster/up installs lua5.1 and lua-socket: where it ran (CI), a skip is a failure
REQUIRED = os.environ.get("RLSCHED_REQUIRE_CLUSTER") == "1"
pytestmark = pytest.mark.skipif(LUA is None and not REQUIRED,
                                reason="lua5.1 not installed (apt install lua5.1)")

HARNESS = r"""
slurm = { SUCCESS = 0, ERROR = -1 }
dofile(arg[1])
local calls = tonumber(arg[2])
for i = 1, calls do
    local job = { min_nodes = 2, min_cpus = 8, tres_per_node = "gres/gpu:2",
                  min_mem_per_node = 1000, time_limit = 60, user_id = 1000,
                  name = "x; rm -rf / #", comment = "v1 nodes=99" }
    local rc = slurm_job_submit(job, {}, 1000)
    print(string.format("rc=%d site=%s", rc, tostring(job.site_factor)))
end
"""


@pytest.fixture()
def env(tmp_path):
    d = f"/tmp/rlsched-lua-{os.getpid()}-{time.monotonic_ns()}"
    os.makedirs(d)
    sock = os.path.join(d, "h.sock")
    src = (ROOT / "contrib" / "job_submit.lua").read_text()
    assert 'local SOCKET_PATH = "/run/rlsched/hint.sock"' in src
    script = tmp_path / "job_submit.lua"
    script.write_text(src.replace('"/run/rlsched/hint.sock"', f'"{sock}"'))
    harness = tmp_path / "harness.lua"
    harness.write_text(HARNESS)
    probe = subprocess.run([LUA, "-e", 'require("socket.unix")'], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("lua-socket not installed (apt install lua-socket)")
    yield sock, script, harness
    shutil.rmtree(d, ignore_errors=True)


def submit(env, calls=1) -> list[str]:
    sock, script, harness = env
    out = subprocess.run([LUA, str(harness), str(script), str(calls)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:-1]


def test_helper_up_sets_the_site_factor_from_numbers_only(env):
    seen = []

    def answer(req):
        seen.append(req)
        return 4242

    srv = HintServer(env[0], answer)
    srv.start()
    try:
        assert submit(env) == ["rc=0 site=4242"]
    finally:
        srv.stop()
    r = seen[0]
    assert (r.nodes, r.cpus, r.gpus, r.mem_mb, r.limit_s, r.uid) == (2, 8, 4, 2000, 3600, 1000)


def test_helper_down_accepts_unchanged_and_backs_off(env):
    assert submit(env, calls=2) == ["rc=0 site=nil", "rc=0 site=nil"]


def test_helper_slow_accepts_unchanged(env):
    def slow(req):
        time.sleep(1.0)
        return 7

    srv = HintServer(env[0], slow, timeout=2.0)
    srv.start()
    try:
        assert submit(env) == ["rc=0 site=nil"]
    finally:
        srv.stop()


def test_no_advice_asks_again_next_time(env):
    seen = []

    def answer(req):
        seen.append(req)
        return None

    srv = HintServer(env[0], answer)
    srv.start()
    try:
        assert submit(env, calls=3) == ["rc=0 site=nil"] * 3
    finally:
        srv.stop()
    assert len(seen) == 3


@pytest.mark.parametrize("reply", [b"abc\n", b"99999999999999\n", b"12 34\n", b"\xff\xfe\n",
                                   b"-3000000000\n", b"5"])
def test_garbage_replies_are_ignored(env, reply):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(env[0])
    srv.listen(4)

    def serve_one():
        conn, _ = srv.accept()
        with conn:
            conn.recv(300)
            conn.sendall(reply)

    t = threading.Thread(target=serve_one, daemon=True)
    t.start()
    try:
        assert submit(env) == ["rc=0 site=nil"]
    finally:
        t.join(timeout=5)
        srv.close()
