"""Prometheus text metrics of the helper, optionally served on localhost.

:class:`Metrics` holds counters and gauges (thread-safe) and renders them in the
Prometheus text exposition format (version 0.0.4). :class:`MetricsServer` serves them
at ``http://127.0.0.1:PORT/metrics`` from a daemon thread (``http.server``); it binds
to loopback addresses only and answers nothing but ``GET /metrics``.

Metrics (all prefixed ``rlsched_helper_``): ``cycle_seconds`` (last cycle),
``cycles_total``, ``cycle_errors_total``, ``jobs_scored`` (last cycle),
``changes_total{field,mode}``, ``model_age_seconds``, ``model_ok``, ``enforce``,
``last_cycle_timestamp_seconds``, ``hints_total{result}``, ``idle_share`` and
``idle_waiting_share`` (:func:`idle_share`: the machine's free share in the last cycle,
and the same while jobs waited, else 0; the time mean of the latter is the simulator's
``idle_waiting``, :mod:`trainer.sim.metrics`: capacity stranded while work queued).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from slurm_plugin.features import NodesRaw

__all__ = ["PREFIX", "Metrics", "MetricsServer", "idle_share"]

#: Name prefix of every metric.
PREFIX = "rlsched_helper_"

_HELP: dict[str, tuple[str, str]] = {
    "cycle_seconds": ("gauge", "Duration of the last cycle in seconds."),
    "cycles_total": ("counter", "Cycles run."),
    "cycle_errors_total": ("counter", "Cycles that failed (Slurm, model, store...)."),
    "jobs_scored": ("gauge", "Pending jobs scored in the last cycle."),
    "changes_total": ("counter", "Changes issued (mode=shadow: would have been issued)."),
    "model_age_seconds": ("gauge", "Age of the loaded model (since its card's created time)."),
    "model_ok": ("gauge", "1 when a verified model is loaded."),
    "enforce": ("gauge", "1 in enforce mode, 0 in shadow mode."),
    "last_cycle_timestamp_seconds": ("gauge", "End of the last cycle (epoch seconds)."),
    "hints_total": ("counter", "job_submit hint requests by result."),
    "idle_share": ("gauge", "Share of the GPUs (of the nodes, without GPUs) free in the"
                   " last cycle, on nodes that can take jobs."),
    "idle_waiting_share": ("gauge", "idle_share when jobs were waiting in the last cycle,"
                           " else 0: its time mean is the capacity left idle while work"
                           " queued."),
}


def idle_share(nodes: NodesRaw) -> float:
    """Share of the machine free now: GPUs, or whole idle nodes on a cluster without GPUs.

    Over the nodes that can take jobs (``up``), as the simulator reads utilisation
    (:func:`trainer.sim.metrics.compute`); 0 when none can.
    """
    up = np.asarray(nodes.up, dtype=bool)
    gpus = int(np.asarray(nodes.cap_g)[up].sum())
    if gpus:
        return float(np.asarray(nodes.free_g)[up].sum()) / gpus
    n = int(up.sum())
    return float(np.asarray(nodes.idle)[up].sum()) / n if n else 0.0


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in sorted(labels.items()))
    return "{" + inner + "}"


class Metrics:
    """Counters and gauges by name and labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge."""
        if name not in _HELP:
            raise KeyError(f"unknown metric {name!r}")
        with self._lock:
            self._values.setdefault(name, {})[tuple(sorted(labels.items()))] = float(value)

    def inc(self, name: str, n: float = 1.0, **labels: str) -> None:
        """Add ``n`` to a counter."""
        if name not in _HELP:
            raise KeyError(f"unknown metric {name!r}")
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._values.setdefault(name, {})
            series[key] = series.get(key, 0.0) + float(n)

    def get(self, name: str, **labels: str) -> float | None:
        """A value, ``None`` if never set."""
        with self._lock:
            return self._values.get(name, {}).get(tuple(sorted(labels.items())))

    def render(self) -> str:
        """All metrics in the Prometheus text format."""
        lines: list[str] = []
        with self._lock:
            snapshot = {k: dict(v) for k, v in self._values.items()}
        for name, (kind, text) in _HELP.items():
            series = snapshot.get(name)
            if not series:
                continue
            full = PREFIX + name
            lines.append(f"# HELP {full} {text}")
            lines.append(f"# TYPE {full} {kind}")
            for key, value in sorted(series.items()):
                lines.append(f"{full}{_labels(dict(key))} {value:.17g}")
        return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    metrics: Metrics

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served")
            return
        body = self.metrics.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        """Silence the per-request log (the helper logs in JSON)."""


class MetricsServer:
    """Serves :class:`Metrics` on ``http://address:port/metrics`` from a daemon thread.

    Args:
        metrics: What to serve.
        address: A loopback address.
        port: TCP port (0: any free port; see :attr:`port` after :meth:`start`).
    """

    def __init__(self, metrics: Metrics, address: str = "127.0.0.1", port: int = 0) -> None:
        self.metrics = metrics
        self.address = address
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve in the background."""
        handler = type("MetricsHandler", (_Handler,), {"metrics": self.metrics})
        self._server = ThreadingHTTPServer((self.address, self.port), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="rlsched-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
