"""Metrics of a replay: per job, per run, over time; as JSON and as a table.

Per job (times from the job's eligible time, which is the submit time for traces):

- ``wait`` = start - eligible; ``run`` = end - start; ``jct`` = wait + run;
- bounded slowdown ``bsld = max(1, (wait + run) / max(run, tau))``, ``tau`` = 10 s;
- execution effectiveness (SCHED², eq. 2) ``E = T_ideal / (T_wait + T_actual)``: the
  ideal run time is the recorded one (what the speed models read as the job's run time
  on its best placement), the actual one ``end - start``; with the ``none`` speed model
  both are the recorded run time, so ``E = run / (wait + run)`` (1 for a zero-length job
  that did not wait, 0 if it did).

Per run: mean/median/p95/p99/max of wait, run, JCT and bsld; makespan (last end - first
arrival); node, CPU and GPU utilisation over time (time-weighted means and a series),
and ``own_work``: the run's jobs' own node- and GPU-seconds over the capacity from their
first arrival to their last end (the same as the time mean for a whole replay; for a
test period replayed after a warm-up, :func:`trainer.evaluate.restrict`, the time mean
also counts warm-up jobs still running in the period, ``own_work`` does not), and
``to_last_arrival``: the time mean from the first to the last arrival only. The time
mean runs to the run's own last end, so on a finite stretch of jobs it is the work over
the makespan: a run that holds a wide job to the end and drains the machine for it
scores lower, one that keeps the machine half idle while work waits and ends sooner
scores higher. Every run of the same jobs shares the span to the last arrival, so
``to_last_arrival`` reads how busy each kept the machine while jobs were still coming;
the drain after the last arrival does not count; and ``idle_waiting``: the share of
the machine idle while some job waited (arrived, not started), a time mean over the
same span as the utilisation: capacity stranded while work queued, the part of
``1 - utilisation`` a scheduler could have used (the rest is idle with no job waiting).
Node-sharing jobs leave GPUs that a waiting whole-node job cannot use; this reads them.
For a test period replayed after a warm-up the waiting jobs include the warm-up's
(:attr:`~trainer.sim.engine.SimResult.util_waiting`);
``jct_floor_s``: the mean recorded run time, the mean JCT of a schedule in which no job
waits and every job runs at its recorded speed (the speed models only ever slow a job
down: :mod:`trainer.sim.speed`), a floor no schedule of these jobs goes below;
the fragmentation index over time; mean execution effectiveness; the share of
multi-node jobs kept within one leaf switch (only when the cluster has a switch tree);
fairness: Jain's index ``(sum x)^2 / (n sum x^2)`` of the users' mean bounded
slowdowns (1: every user equally slowed down).

Fragmentation (SCHED², eq. 1): ``frag = 1 - (sum x_i)^2 / (n sum x_i^2)`` over the ``n``
GPUs of a server, ``x_i`` the remaining run time of the job on GPU ``i`` (0 when free;
the replay knows the actual remaining time); the cluster's value is the mean over its
GPU servers (an idle server counts 0). On a cluster without GPUs the units are nodes
and the groups are leaf switches: ``x_i`` is node ``i``'s remaining time, ``n`` the
nodes of the leaf (the whole cluster when there is no tree).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .state import Cluster, JobTable, NodeState

if TYPE_CHECKING:
    from .engine import SimResult

__all__ = [
    "TAU",
    "compare_rows",
    "compute",
    "fragmentation",
    "jain",
    "job_metrics",
    "plot",
    "span_means",
    "summary",
    "table_rows",
    "waiting_at",
    "write_json",
]

#: Bounded-slowdown threshold, seconds.
TAU = 10

#: Points kept per series in the JSON output.
SERIES_POINTS = 500


# ---------------------------------------------------------------------------- over time
def fragmentation(cluster: Cluster, state: NodeState, now: int) -> float:
    """SCHED²'s fragmentation index of the cluster at ``now`` (see the module docstring)."""
    if cluster.total_gpus > 0:
        gpus = cluster.cap_g.astype(np.float64)
        n = cluster.num_nodes
        sx = np.zeros(n)
        sxx = np.zeros(n)
        ex = state.excl
        if ex.any():  # a whole-node job: every GPU has the same remaining time
            rem = np.maximum(state.node_aend[ex] - now, 0).astype(np.float64)
            sx[ex] = gpus[ex] * rem
            sxx[ex] = gpus[ex] * rem * rem
        rows = state.live_rows()
        if rows.size:
            rem = np.maximum(state.row_aend[rows] - now, 0).astype(np.float64)
            g = state.row_g[rows].astype(np.float64)
            node = state.row_node[rows]
            sx += np.bincount(node, weights=g * rem, minlength=n)
            sxx += np.bincount(node, weights=g * rem * rem, minlength=n)
        has = (gpus > 0)
        ok = has & (sxx > 0)
        frag = np.zeros(n)
        frag[ok] = 1.0 - sx[ok] ** 2 / (gpus[ok] * sxx[ok])
        return float(frag[has].mean())
    # (np.maximum, not np.clip: the same values, without clip's cost per call; the
    # engine samples this a thousand times per replay)
    rem = np.where(state.idle, 0, np.maximum(state.node_aend - now, 0)).astype(np.float64)
    sx = np.add.reduceat(rem, cluster.leaf_start)
    sxx = np.add.reduceat(rem * rem, cluster.leaf_start)
    size = cluster.leaf_size.astype(np.float64)
    frag = np.zeros(sx.size)
    ok = sxx > 0
    frag[ok] = 1.0 - sx[ok] ** 2 / (size[ok] * sxx[ok])
    return float(frag.mean())


# ---------------------------------------------------------------------------- per job
def job_metrics(result: SimResult) -> dict[str, np.ndarray]:
    """Per-job arrays: ``wait``, ``run``, ``jct``, ``bsld``, ``effectiveness``."""
    jobs = result.jobs
    wait = (result.start - jobs.eligible).astype(np.float64)
    run = (result.end - result.start).astype(np.float64)
    jct = wait + run
    bsld = np.maximum(1.0, jct / np.maximum(run, TAU))
    ideal = jobs.run.astype(np.float64)
    eff = np.where(jct > 0, ideal / np.where(jct > 0, jct, 1.0), 1.0)
    return {"wait": wait, "run": run, "jct": jct, "bsld": bsld, "effectiveness": eff}


def summary(x: np.ndarray) -> dict[str, float]:
    """Mean, median, p95, p99 and max of ``x`` (zeros when empty)."""
    if x.size == 0:
        return {"mean": 0.0, "median": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    p50, p95, p99 = np.percentile(x, [50, 95, 99])
    return {"mean": float(x.mean()), "median": float(p50), "p95": float(p95),
            "p99": float(p99), "max": float(x.max())}


def jain(x: np.ndarray) -> float:
    """Jain's fairness index of ``x`` (1.0 for an empty or all-zero vector)."""
    if x.size == 0:
        return 1.0
    sq = float((x * x).sum())
    return 1.0 if sq == 0 else float(x.sum()) ** 2 / (x.size * sq)


def _time_mean(t: np.ndarray, v: np.ndarray, t_end: int) -> float:
    if t.size == 0 or t_end <= t[0]:
        return 0.0
    d = np.diff(np.append(t, t_end)).astype(np.float64)
    return float((v * d).sum() / d.sum())


def span_means(t: np.ndarray, v: np.ndarray, edges: Sequence[float]) -> list[float]:
    """Time means of a step function over the spans between consecutive ``edges``.

    ``v[i]`` holds from ``t[i]`` to ``t[i + 1]`` (the last value on to the last edge;
    the first back to the first edge, as :func:`trainer.evaluate.restrict` moves the
    series' first point to the first arrival). An empty span's mean is 0.
    """
    e = np.asarray(edges, dtype=np.float64)
    if t.size == 0 or e.size < 2:
        return [0.0] * max(0, e.size - 1)
    vals = np.asarray(v, dtype=np.float64)
    cum = np.concatenate(([0.0], np.cumsum(vals[:-1] * np.diff(t).astype(np.float64))))
    k = np.clip(np.searchsorted(t, e, side="right") - 1, 0, t.size - 1)
    integral = cum[k] + vals[k] * (e - t[k])
    width = np.diff(e)
    return [float(a / w) if w > 0 else 0.0 for a, w in zip(np.diff(integral), width,
                                                          strict=True)]


def waiting_at(jobs: JobTable, start: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Jobs of ``jobs`` waiting after the events at each time ``t``.

    Arrived (eligible at or before ``t``) and not started by then (``start`` after ``t``,
    or negative: never started). A job that arrives and starts at the same time never
    waits.
    """
    elig = np.sort(jobs.eligible)
    began = np.sort(np.where(start >= 0, start, np.iinfo(np.int64).max))
    out: np.ndarray = (np.searchsorted(elig, t, side="right")
                       - np.searchsorted(began, t, side="right")).astype(np.int64)
    return out


def _series(t: np.ndarray, v: np.ndarray, t_end: int, points: int) -> tuple[list[int],
                                                                            list[float]]:
    """Time-weighted bucket means of a step function (at most ``points`` buckets)."""
    if t.size == 0 or t_end <= t[0]:
        return [], []
    edges = np.linspace(float(t[0]), float(t_end), points + 1)
    d = np.diff(np.append(t, t_end)).astype(np.float64)
    cum = np.concatenate(([0.0], np.cumsum(v * d)))
    k = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, t.size - 1)
    integral = cum[k] + v[k] * (edges - t[k])
    means = np.diff(integral) / np.diff(edges)
    return [int(e) for e in edges[:-1]], [float(m) for m in means]


# ---------------------------------------------------------------------------- per run
def compute(result: SimResult, *, series_points: int = SERIES_POINTS) -> dict[str, Any]:
    """Every metric of a replay as a JSON-able dict (see the module docstring)."""
    jobs = result.jobs
    cl = result.cluster
    pj = job_metrics(result)
    n = jobs.n
    t0 = int(jobs.eligible.min()) if n else 0
    t_end = int(result.end.max()) if n else 0
    multi = jobs.nodes > 1
    n_multi = int(multi.sum())
    users = jobs.user
    if n:
        counts = np.bincount(users)
        sums = np.bincount(users, weights=pj["bsld"])
        per_user = sums[counts > 0] / counts[counts > 0]
    else:
        per_user = np.zeros(0)
    total_g = cl.total_gpus
    util: dict[str, Any] = {
        "nodes": _time_mean(result.util_t, result.util_nodes / cl.num_nodes, t_end),
        "cpus": _time_mean(result.util_t, result.util_cpus / cl.total_cpus, t_end),
        "gpus": (_time_mean(result.util_t, result.util_gpus / total_g, t_end)
                 if total_g else None),
    }
    span = float(t_end - t0)
    ran = (result.start >= 0) & (result.end >= result.start)
    secs = np.where(ran, result.end - result.start, 0).astype(np.float64)
    node_s = secs * jobs.nodes
    per = 1.0 / span if span > 0 else 0.0
    util["own_work"] = {
        "nodes": float(node_s.sum() / cl.num_nodes * per),
        "gpus": float((node_s * jobs.gpus).sum() / total_g * per) if total_g else None,
    }
    last = int(jobs.eligible.max()) if n else 0
    before = result.util_t < last
    ut = result.util_t[before]

    def to_last(v: np.ndarray) -> float:
        return _time_mean(ut, v[before], last)

    util["to_last_arrival"] = {
        "nodes": to_last(result.util_nodes / cl.num_nodes),
        "gpus": to_last(result.util_gpus / total_g) if total_g else None,
    }
    waiting = (result.util_waiting if result.util_waiting is not None
               else waiting_at(jobs, result.start, result.util_t)) > 0

    def idle_waiting(used: np.ndarray) -> float:
        return _time_mean(result.util_t, np.where(waiting, 1.0 - used, 0.0), t_end)

    util["idle_waiting"] = {
        "nodes": idle_waiting(result.util_nodes / cl.num_nodes),
        "gpus": idle_waiting(result.util_gpus / total_g) if total_g else None,
    }
    st, sn = _series(result.util_t, result.util_nodes / cl.num_nodes, t_end, series_points)
    _, sc = _series(result.util_t, result.util_cpus / cl.total_cpus, t_end, series_points)
    sg = (_series(result.util_t, result.util_gpus / total_g, t_end, series_points)[1]
          if total_g else [])
    return {
        "policy": result.policy,
        "cluster": cl.name,
        "nodes": cl.num_nodes,
        "gpus": total_g,
        "jobs": n,
        "skipped": dict(sorted(jobs.skipped.items())),
        "backfilled": int(result.backfilled.sum()),
        "wait_s": summary(pj["wait"]),
        "run_s": summary(pj["run"]),
        "jct_s": summary(pj["jct"]),
        "bsld": summary(pj["bsld"]),
        "bsld_tau_s": TAU,
        "makespan_s": t_end - t0,
        "jct_floor_s": float(jobs.run.mean()) if n else 0.0,
        "utilisation": util,
        "fragmentation": {
            "mean": float(result.frag.mean()) if result.frag.size else 0.0,
            "unit": "gpu" if total_g else "leaf",
        },
        "execution_effectiveness": float(pj["effectiveness"].mean()) if n else 0.0,
        "multi_node_jobs": n_multi,
        "single_leaf_share": (float((result.leaves[multi] == 1).mean())
                              if cl.has_tree and n_multi else None),
        "fairness": {"users": int(per_user.size), "jain_bsld": jain(per_user)},
        "sim": dict(result.stats),
        "series": {
            "t": st, "nodes": sn, "cpus": sc, "gpus": sg,
            "frag_t": result.frag_t.tolist(), "frag": result.frag.tolist(),
        },
    }


# ---------------------------------------------------------------------------- output
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0 or 0.001 <= abs(v) < 1e6:
            return f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table_rows(m: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One run's metrics as ``(metric, value)`` rows."""
    rows: list[tuple[str, str]] = [
        ("policy", m["policy"]), ("cluster", f"{m['cluster']} ({m['nodes']} nodes,"
                                             f" {m['gpus']} GPUs)"),
        ("jobs", _fmt(m["jobs"])),
        ("skipped", ", ".join(f"{k}: {v}" for k, v in m["skipped"].items()) or "0"),
        ("backfilled", _fmt(m["backfilled"])),
    ]
    for key, label in (("wait_s", "wait (s)"), ("jct_s", "JCT (s)"), ("bsld", "bsld"),
                       ("run_s", "run (s)")):
        s = m[key]
        rows.append((label, "  ".join(f"{k} {_fmt(s[k])}" for k in
                                      ("mean", "median", "p95", "p99", "max"))))
    u = m["utilisation"]
    rows += [
        ("makespan (s)", _fmt(m["makespan_s"])),
        ("utilisation", f"nodes {_fmt(u['nodes'])}  cpus {_fmt(u['cpus'])}"
                        f"  gpus {_fmt(u['gpus'])}"),
        ("fragmentation", f"{_fmt(m['fragmentation']['mean'])} (per"
                          f" {m['fragmentation']['unit']})"),
        ("exec. effectiveness", _fmt(m["execution_effectiveness"])),
        ("multi-node in 1 leaf", _fmt(m["single_leaf_share"])),
        ("fairness (Jain bsld)", f"{_fmt(m['fairness']['jain_bsld'])} over"
                                 f" {m['fairness']['users']} users"),
        ("sim wall (s)", _fmt(float(m["sim"].get("wall_s", 0.0)))),
    ]
    return rows


#: Columns of :func:`compare_rows`.
COMPARE_HEADERS = ("policy", "jobs", "wait mean", "wait p95", "bsld mean", "bsld p99",
                   "jct mean", "makespan", "util nodes", "util gpus", "frag", "exec eff",
                   "1-leaf", "jain", "wall s")


def compare_rows(ms: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """Several runs' headline metrics, one row each (see :data:`COMPARE_HEADERS`)."""
    out: list[tuple[str, ...]] = []
    for m in ms:
        out.append((
            str(m["policy"]), _fmt(m["jobs"]), _fmt(m["wait_s"]["mean"]), _fmt(m["wait_s"]["p95"]),
            _fmt(m["bsld"]["mean"]), _fmt(m["bsld"]["p99"]), _fmt(m["jct_s"]["mean"]),
            _fmt(m["makespan_s"]), _fmt(m["utilisation"]["nodes"]),
            _fmt(m["utilisation"]["gpus"]), _fmt(m["fragmentation"]["mean"]),
            _fmt(m["execution_effectiveness"]), _fmt(m["single_leaf_share"]),
            _fmt(m["fairness"]["jain_bsld"]), _fmt(float(m["sim"].get("wall_s", 0.0))),
        ))
    return out


def write_json(data: Any, path: str | Path) -> Path:
    """Write ``data`` as indented, key-sorted JSON; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return p


def _util_series(r: SimResult) -> tuple[np.ndarray, np.ndarray]:
    if r.cluster.total_gpus:
        return r.util_t, r.util_gpus / r.cluster.total_gpus
    return r.util_t, r.util_nodes / r.cluster.num_nodes


def _frag_series(r: SimResult) -> tuple[np.ndarray, np.ndarray]:
    return r.frag_t, r.frag


def _style(name: str, emphasis: Sequence[str], reference: str | None) -> dict[str, Any]:
    """Line style: emphasised runs thick, the reference dashed black, the rest thin."""
    if name in emphasis:
        return {"linewidth": 2.0, "zorder": 3}
    if name == reference:
        return {"linewidth": 1.4, "color": "black", "linestyle": "--", "zorder": 2}
    return {"linewidth": 0.9, "alpha": 0.85, "zorder": 1}


def plot(results: Mapping[str, SimResult], out_dir: str | Path, *,
         emphasis: Sequence[str] = (), reference: str | None = None) -> list[Path] | None:
    """Wait CDF, utilisation and fragmentation over time as PNGs (``None``: no matplotlib).

    Utilisation is the share of busy GPUs on a cluster with GPUs, else of busy nodes.
    Runs named in ``emphasis`` are drawn thick, ``reference`` dashed black.
    """
    try:  # optional (the ``train`` extra): imported by name, not needed by the runtime
        mpl: Any = importlib.import_module("matplotlib")
        mpl.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    gpus = any(r.cluster.total_gpus for r in results.values())
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        w = np.sort(job_metrics(r)["wait"])
        if w.size:
            ax.step(np.maximum(w, 1), np.arange(1, w.size + 1) / w.size, where="post",
                    label=name, **_style(name, emphasis, reference))
    ax.set_xscale("log")
    ax.set_xlabel("wait (s, log; 0 shown as 1)")
    ax.set_ylabel("share of jobs waiting at most this")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    paths.append(out / "wait_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    for fname, ylabel, get in (
        ("utilisation.png", "busy GPUs (share)" if gpus else "busy nodes (share)",
         _util_series),
        ("fragmentation.png", "fragmentation index", _frag_series),
    ):
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, r in results.items():
            t, v = get(r)
            if t.size:
                ax.step((t - t[0]) / 3600.0, v, where="post", label=name,
                        **_style(name, emphasis, reference))
        ax.set_xlabel("hours since first arrival")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        paths.append(out / fname)
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
