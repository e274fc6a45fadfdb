"""The job_submit hint: an initial site factor for a job being submitted.

``contrib/job_submit.lua`` asks the helper over a local Unix socket, with a hard
timeout (50 ms by default), and returns ``slurm.SUCCESS`` unchanged on timeout, error or
garbage. The protocol (version 1) is line-based and carries only numbers:

- request: one line of at most :data:`MAX_REQUEST` bytes, ``v1`` then space-separated
  ``key=value`` tokens, each key at most once, from :data:`REQUEST_KEYS`, each value 1 to
  12 decimal digits; for example ``v1 nodes=2 cpus=128 gpus=16 mem_mb=0 limit_s=3600
  uid=1000``. Anything else (unknown key, letters in a value, a longer line, no newline
  within the connection timeout) is refused.
- reply: one line holding a decimal integer (the site factor, inside the configured
  band), or nothing at all: the helper closes the connection without a reply when it
  has no advice (shadow mode, no verified model yet, a refused request, too busy).

Job strings never reach the helper: the Lua side sends only numbers it read from the job
descriptor. The server runs in its own thread with a bounded pool of workers; a
connection beyond the pool is closed at once, and every connection has a timeout.

The advice is the value the job would get if it joined the queue now, computed in a few
milliseconds whatever the queue length: the new job's row is featurized against the
last cycle's node table, given that cycle's queue-wide features (``globals``, and its
arrival rank: last), scored alone, and mapped together with the last cycle's scores of
the queue. This is exact for a policy whose job scores depend on the job, the nodes and
the global features (the DESIGN's per-job network); for a model that also pools over the
other jobs' rows it is an approximation (the next cycle scores the job exactly).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..features import JOB_FEATURES, JobsRaw, NodesRaw, Normalisation, featurize
from ..scorer import OnnxScorer
from .decide import MAPPINGS, SiteFactorRule, in_lane, quantize, rest_rule

__all__ = [
    "MAX_REQUEST",
    "REQUEST_KEYS",
    "HintContext",
    "HintRequest",
    "HintServer",
    "advise",
    "parse_request",
]

#: Longest request line, newline included (bytes).
MAX_REQUEST = 256
#: Keys a request may carry (all numbers).
REQUEST_KEYS = ("nodes", "cpus", "gpus", "mem_mb", "limit_s", "uid")
_MAX_DIGITS = 12
_ARRIVAL_RANK = JOB_FEATURES.index("arrival_rank")


@dataclass(frozen=True)
class HintRequest:
    """A parsed request: the job's size and limit (0 where the submitter gave none)."""

    nodes: int = 1
    cpus: int = 0
    gpus: int = 0
    mem_mb: int = 0
    limit_s: int = 0
    uid: int | None = None


def parse_request(line: bytes) -> HintRequest:
    """Parse one request line (newline optional).

    Raises:
        ValueError: For anything but ``v1`` and known ``key=digits`` tokens.
    """
    if len(line) > MAX_REQUEST:
        raise ValueError("request too long")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("request is not ASCII") from None
    tokens = text.rstrip("\n").split(" ")
    if not tokens or tokens[0] != "v1":
        raise ValueError("request must start with 'v1'")
    values: dict[str, int] = {}
    for tok in tokens[1:]:
        key, sep, val = tok.partition("=")
        if not sep or key not in REQUEST_KEYS:
            raise ValueError("unknown token")
        if key in values:
            raise ValueError("repeated key")
        if not (0 < len(val) <= _MAX_DIGITS and val.isascii() and val.isdigit()):
            raise ValueError("value must be 1 to 12 decimal digits")
        values[key] = int(val)
    nodes = values.get("nodes", 1)
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    return HintRequest(nodes=nodes, cpus=values.get("cpus", 0), gpus=values.get("gpus", 0),
                       mem_mb=values.get("mem_mb", 0), limit_s=values.get("limit_s", 0),
                       uid=values.get("uid"))


# ---------------------------------------------------------------------------- advice
@dataclass(frozen=True, eq=False)
class HintContext:
    """What the last successful cycle leaves for the hints (never mutated).

    Attributes:
        now: Time of that cycle, epoch s.
        nodes: Its node table.
        globals: Its observation's global features.
        scores: Its pending jobs' scores (as ranked, hold score removed).
        norm: The model's normalisation.
        scorer: The model.
        rule: The site factor rule.
        user_estimates: User name -> ``(run/limit ratio, usage share, locality)``.
    """

    now: int
    nodes: NodesRaw
    globals: np.ndarray
    scores: np.ndarray
    norm: Normalisation
    scorer: OnnxScorer
    rule: SiteFactorRule
    user_estimates: Mapping[str, tuple[float, float, float]]


@lru_cache(maxsize=4096)
def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def advise(ctx: HintContext, req: HintRequest, user: str | None = None) -> int:
    """The site factor a job like ``req`` would get in the queue of ``ctx`` now.

    The per-node request is derived as :func:`slurm_plugin.features.raw_from_slurm`
    derives it for a pending job (totals over nodes, rounded up; neither CPUs nor GPUs
    means whole nodes). A job the express lane takes (a time limit of at most
    ``express_limit``) gets the top of the band, as the lane puts it above every job
    outside it; the next cycle ranks it among the lane's other jobs. With the lane in
    ``age`` order another job is ranked in the band's part below the starving jobs
    (:func:`~slurm_plugin.helper.decide.lane_levels`), as the cycle ranks it.
    """
    if in_lane(req.limit_s, ctx.rule.express_limit):
        return int(ctx.rule.hi)
    k = max(1, req.nodes)
    c, g = req.cpus, req.gpus
    excl = not c and not g
    ratio, share, loc = ctx.user_estimates.get(user or "", (ctx.norm.default_ratio, 0.0, 0.0))
    lim = req.limit_s if req.limit_s > 0 else ctx.norm.unknown_limit
    row = JobsRaw.build(
        job_id=[0], eligible=[ctx.now], limit=[req.limit_s], nodes=[k],
        cpus=[0 if excl else max(1, _ceil(c, k)) if c else 1],
        gpus=[0 if excl else _ceil(g, k) if g else 0],
        mem=[0 if excl or not req.mem_mb else _ceil(req.mem_mb, k)],
        exclusive=[excl], user=[0], est_run=[ratio * lim], usage_share=[share],
        locality=[loc])
    obs = featurize(ctx.now, row, ctx.nodes, ctx.norm)
    jobs = obs.jobs.copy()
    j = ctx.scores.size
    jobs[0, _ARRIVAL_RANK] = j / (j + 1)  # the newest job of J + 1
    obs = replace(obs, jobs=jobs, globals=ctx.globals)
    score = quantize(ctx.scorer.score(obs, job_mask=np.ones(1, dtype=bool))[:1],
                     ctx.rule.score_resolution)  # (as the cycle rounds the queue's)
    rule = rest_rule(ctx.rule)  # (with the lane in age order: the band below S)
    values = MAPPINGS[rule.mapping](np.append(ctx.scores, score), rule)
    return int(np.clip(values[-1], rule.lo, rule.hi))


# ---------------------------------------------------------------------------- server
class HintServer:
    """The Unix-socket server (see the module docstring).

    Args:
        path: Socket path (a stale socket there is replaced; any other file is refused).
        answer: ``request -> site factor`` or ``None`` for no advice; exceptions count as
            no advice.
        timeout: Seconds a connection may take in all.
        workers: Connections served at once; more are closed unanswered.
        mode: Permissions of the socket file.
        on_result: Called with ``"answered"``, ``"no_advice"``, ``"bad_request"``,
            ``"timeout"``, ``"busy"`` or ``"error"`` for each connection (metrics).
    """

    def __init__(self, path: str, answer: Callable[[HintRequest], int | None], *,
                 timeout: float = 0.5, workers: int = 4, mode: int = 0o660,
                 on_result: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.answer = answer
        self.timeout = timeout
        self.workers = workers
        self.mode = mode
        self.on_result = on_result
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._slots = threading.BoundedSemaphore(workers)
        self._stop = threading.Event()

    def _result(self, what: str) -> None:
        if self.on_result is not None:
            with contextlib.suppress(Exception):
                self.on_result(what)

    def start(self) -> None:
        """Bind the socket and serve in a background thread.

        Raises:
            OSError: If the path exists and is not a socket, or binding fails.
        """
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise OSError(f"{self.path} exists and is not a socket: not replacing it")
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(self.path)
            finally:
                os.umask(old)
            os.chmod(self.path, self.mode)
            sock.listen(64)
            sock.settimeout(0.2)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._stop.clear()
        self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                        thread_name_prefix="rlsched-hint")
        self._thread = threading.Thread(target=self._accept_loop, name="rlsched-hint-accept",
                                        daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None and self._pool is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()
                self._result("busy")
                continue
            try:
                self._pool.submit(self._serve, conn)
            except RuntimeError:  # pool shut down
                self._slots.release()
                conn.close()
                return

    def _read_line(self, conn: socket.socket, deadline: float) -> bytes | None:
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            conn.settimeout(left)
            chunk = conn.recv(MAX_REQUEST + 1 - len(buf))
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_REQUEST:
                raise ValueError("request too long")
        line, _, _ = buf.partition(b"\n")
        return line

    def _serve(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.timeout
        try:
            with conn:
                try:
                    line = self._read_line(conn, deadline)
                except TimeoutError:
                    line = None
                if line is None:
                    self._result("timeout")
                    return
                req = parse_request(line)
                try:
                    value = self.answer(req)
                except Exception:  # noqa: BLE001 - no advice is the only failure mode
                    self._result("error")
                    return
                if value is None:
                    self._result("no_advice")
                    return
                conn.settimeout(max(0.001, deadline - time.monotonic()))
                conn.sendall(f"{int(value)}\n".encode("ascii"))
                self._result("answered")
        except ValueError:
            self._result("bad_request")
        except OSError:
            self._result("error")
        finally:
            self._slots.release()

    def stop(self) -> None:
        """Stop accepting, finish the connections in flight, remove the socket file."""
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._sock is not None:
            with contextlib.suppress(OSError):
                st = os.lstat(self.path)
                if stat.S_ISSOCK(st.st_mode):
                    os.unlink(self.path)
            self._sock = None
