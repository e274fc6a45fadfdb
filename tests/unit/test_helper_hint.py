"""The job_submit hint: request parsing (fuzzed) and the Unix-socket server for real.

Clients below are real sockets: well-formed, slow, garbage, oversized and concurrent.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin import features as F
from slurm_plugin.helper import hint as H
from slurm_plugin.helper.decide import SiteFactorRule, quantize, rank_values
from slurm_plugin.scorer import OnnxScorer

from .helper_fakes import linear_model


def test_parse_a_full_request():
    r = H.parse_request(b"v1 nodes=2 cpus=128 gpus=16 mem_mb=1024 limit_s=3600 uid=1000\n")
    assert r == H.HintRequest(nodes=2, cpus=128, gpus=16, mem_mb=1024, limit_s=3600, uid=1000)
    assert H.parse_request(b"v1") == H.HintRequest()


@pytest.mark.parametrize("line", [
    b"", b"v2 nodes=1", b"v1 nodes=one", b"v1 nodes=-1", b"v1 nodes=0", b"v1 name=abc",
    b"v1 nodes=1 nodes=2", b"v1 nodes=1234567890123", b"v1  nodes=1", b"v1 nodes=\xd9\xa3",
    b"v1 nodes=1; rm -rf /", b"v1 " + b"x" * 300, b"v1 nodes=+1", b"v1 nodes=1 uid",
])
def test_bad_requests_are_refused(line):
    with pytest.raises(ValueError):
        H.parse_request(line)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_parse_or_raise_value_error(data):
    try:
        r = H.parse_request(data)
    except ValueError:
        return
    assert r.nodes >= 1 and all(v is None or v >= 0 for v in
                                (r.cpus, r.gpus, r.mem_mb, r.limit_s, r.uid))


# ---------------------------------------------------------------------------- advice
def _context():
    jobs = F.JobsRaw.build(job_id=[1, 2, 3], eligible=[0, 0, 0], limit=[60, 600, 7200],
                           nodes=[1, 1, 1], cpus=[1, 1, 1], gpus=[0, 0, 0], mem=[0, 0, 0],
                           exclusive=[False] * 3, user=[0, 0, 0], est_run=[1, 1, 1],
                           usage_share=[0] * 3, locality=[0] * 3)
    nodes = F.NodesRaw.build(cap_c=[8] * 2, cap_g=[0] * 2, cap_m=[0] * 2, free_c=[8] * 2,
                             free_g=[0] * 2, free_m=[0] * 2, idle=[1] * 2, up=[1] * 2,
                             remaining=[0] * 2, leaf=[0, 0])
    rule = SiteFactorRule(lo=0, hi=300)
    scorer = OnnxScorer(linear_model())
    obs = F.featurize(1000, jobs, nodes)
    scores = scorer.score(obs, job_mask=np.ones(3, dtype=bool))[:-1]
    return H.HintContext(1000, nodes, obs.globals, scores, F.Normalisation(), scorer, rule, {})


def test_advice_ranks_the_new_job_among_the_queue():
    ctx = _context()
    # limits 60, 600, 7200 and the new job's: 4 jobs over 0..300 -> step 100
    assert H.advise(ctx, H.HintRequest(limit_s=1)) == 300      # shortest of all
    assert H.advise(ctx, H.HintRequest(limit_s=3600)) == 100   # between 600 and 7200
    assert H.advise(ctx, H.HintRequest(limit_s=10**6)) == 0    # longest
    # unknown limit counts as unknown_limit (1 day): longest too
    assert H.advise(ctx, H.HintRequest()) == 0
    # the same as ranking the four limits directly
    limits = np.array([60, 600, 7200, 3600.0])
    assert rank_values(-np.log1p(limits / 3600), ctx.rule)[-1] == 100


def test_advice_puts_a_job_of_the_express_lane_at_the_top():
    ctx = _context()
    lane = dataclasses.replace(ctx, rule=SiteFactorRule(lo=0, hi=300,
                                                        starvation_order="policy",
                                                        express_limit=900.0))
    # the model ranks a 15-minute job between 600 and 7200 s; the lane lifts it
    assert H.advise(ctx, H.HintRequest(limit_s=900)) == 100
    assert H.advise(lane, H.HintRequest(limit_s=900)) == 300
    assert H.advise(lane, H.HintRequest(limit_s=901)) == 100  # outside the lane
    assert H.advise(lane, H.HintRequest()) == 0  # unknown limit: never in the lane
    # in age order the band is split: the lane's top for an express job, the rest of
    # the queue below S = (300 - 1) * 3 // 4 = 224, where the cycle ranks it
    aged = dataclasses.replace(ctx, rule=SiteFactorRule(lo=0, hi=300, express_limit=900.0))
    assert H.advise(aged, H.HintRequest(limit_s=900)) == 300
    assert H.advise(aged, H.HintRequest(limit_s=901)) == 75  # third of four in [0, 224]
    assert H.advise(aged, H.HintRequest()) == 0


def test_advice_rounds_the_new_jobs_score_as_the_cycle_rounds_the_queues():
    ctx = _context()
    # a resolution coarser than every score: the queue's scores (rounded by the cycle)
    # and the new job's tie, so it gets the queue's shared top value, as the cycle
    # would give it; unrounded it would be last
    coarse = SiteFactorRule(lo=0, hi=300, score_resolution=1e6)
    tied = dataclasses.replace(ctx, rule=coarse, scores=quantize(ctx.scores, 1e6))
    assert H.advise(ctx, H.HintRequest(limit_s=10**6)) == 0
    assert H.advise(tied, H.HintRequest(limit_s=10**6)) == 300


# ---------------------------------------------------------------------------- the server
@pytest.fixture()
def sock_path(tmp_path):
    # AF_UNIX paths are limited to ~107 bytes: keep it short
    d = f"/tmp/rlsched-hint-{os.getpid()}-{time.monotonic_ns()}"
    os.makedirs(d)
    yield os.path.join(d, "h.sock")
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


def serve(path, answer, **kw):
    results: list[str] = []
    lock = threading.Lock()

    def on_result(r):
        with lock:
            results.append(r)

    srv = H.HintServer(path, answer, on_result=on_result, **kw)
    srv.start()
    return srv, results


def ask(path, payload: bytes, *, timeout=2.0, delay=0.0) -> bytes:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(timeout)
    c.connect(path)
    try:
        if delay:
            time.sleep(delay)
        if payload:
            try:
                c.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                return b""  # closed by the server before the request was sent
        out = b""
        while True:
            try:
                chunk = c.recv(100)
            except (ConnectionResetError, BrokenPipeError):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        c.close()


def wait_for(results, n, timeout=5.0):
    deadline = time.time() + timeout
    while len(results) < n and time.time() < deadline:
        time.sleep(0.01)
    return list(results)


def test_server_answers_a_number_per_request(sock_path):
    seen = []

    def answer(req):
        seen.append(req)
        return req.nodes * 10

    srv, results = serve(sock_path, answer)
    try:
        assert ask(sock_path, b"v1 nodes=3 uid=7\n") == b"30\n"
        assert seen == [H.HintRequest(nodes=3, uid=7)]
        assert oct(os.stat(sock_path).st_mode & 0o777) == oct(0o660)
    finally:
        srv.stop()
    assert not os.path.exists(sock_path)
    assert results == ["answered"]


def test_garbage_oversized_and_slow_clients_get_nothing(sock_path):
    srv, results = serve(sock_path, lambda req: 1, timeout=0.3)
    try:
        assert ask(sock_path, b"GET / HTTP/1.0\n") == b""
        assert ask(sock_path, b"v1 " + b"nodes=1 " * 100 + b"\n") == b""
        assert ask(sock_path, b"v1 nodes=1") == b""           # no newline, then silence
        assert ask(sock_path, b"", delay=0.0) == b""            # says nothing at all
        assert ask(sock_path, b"v1 nodes=2\n") == b"1\n"        # still serving
    finally:
        srv.stop()
    assert sorted(results) == sorted(["bad_request", "bad_request", "timeout", "timeout",
                                      "answered"])


def test_no_advice_and_errors_close_without_reply(sock_path):
    def answer(req):
        if req.nodes == 1:
            return None
        raise RuntimeError("model failed")

    srv, results = serve(sock_path, answer)
    try:
        assert ask(sock_path, b"v1 nodes=1\n") == b""
        assert ask(sock_path, b"v1 nodes=2\n") == b""
    finally:
        srv.stop()
    assert results == ["no_advice", "error"]


def test_concurrent_clients_are_all_served(sock_path):
    srv, results = serve(sock_path, lambda req: req.cpus, workers=4, timeout=2.0)
    got: dict[int, bytes] = {}

    def client(i):
        got[i] = ask(sock_path, f"v1 cpus={i}\n".encode(), timeout=5.0)

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        srv.stop()
    answered = {i for i, v in got.items() if v}
    # every reply that came is the right one; a client beyond the pool gets nothing
    assert all(got[i] == f"{i}\n".encode() for i in answered)
    assert len(answered) + results.count("busy") == 40
    assert len(answered) >= 4


def test_a_full_pool_closes_new_connections_at_once(sock_path):
    release = threading.Event()
    entered = threading.Event()

    def slow(req):
        entered.set()
        release.wait(5)
        return 5

    srv, results = serve(sock_path, slow, workers=1, timeout=5.0)
    try:
        first: list[bytes] = []
        t = threading.Thread(target=lambda: first.append(ask(sock_path, b"v1\n", timeout=6)))
        t.start()
        assert entered.wait(5)  # the only worker is busy now
        assert ask(sock_path, b"v1\n") == b""  # closed at once, not queued
        release.set()
        t.join()
        assert first == [b"5\n"]
    finally:
        srv.stop()
    assert "busy" in results


def test_stale_socket_is_replaced_but_a_file_is_not(sock_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.close()
    srv, _ = serve(sock_path, lambda req: 3)
    try:
        assert ask(sock_path, b"v1\n") == b"3\n"
    finally:
        srv.stop()
    with open(sock_path, "w") as f:
        f.write("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        H.HintServer(sock_path, lambda req: 1).start()
    assert open(sock_path).read() == "not a socket"
