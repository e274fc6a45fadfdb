"""Fakes for the helper's pure-logic tests: a Slurm client and a model without onnxruntime.

``FakeSlurm`` keeps jobs, nodes and a switch tree in memory and implements exactly the
changes a SlurmClient offers (site factor, ReqNodeList set/clear), refusing node-list
changes on jobs that are not pending as the real clients do. ``linear_model`` builds a
``LoadedModel`` whose session scores jobs with a fixed linear function in numpy and
candidates by the leaf switches they span (fewer is better).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from slurm_plugin import features as F
from slurm_plugin.model import INPUTS, OUTPUTS, LoadedModel
from slurm_plugin.slurm.client import SlurmClient, req_nodes_hostlist, switches_text
from slurm_plugin.slurm.errors import SlurmError
from slurm_plugin.slurm.types import SchedulerConfig, SlurmJob, SlurmNode, Switch, SwitchTree

NOW = 1_800_000_000


def mk_job(job_id: int, *, state: str = "PENDING", nodes: int = 1, cpus: int = 1,
           gpus: int = 0, limit: int | None = 3600, age: int = 600, user: str = "alice",
           priority: int = 1000, site: int | None = None, reason: str = "Priority",
           partition: str = "gpu", on: tuple[str, ...] = (), required: tuple[str, ...] = (),
           features: str = "", start: int | None = None) -> SlurmJob:
    t = NOW - age
    return SlurmJob(
        job_id=job_id, name=f"job{job_id}", user=user, account="acct", partition=partition,
        qos="normal", state=state, state_reason=reason if state == "PENDING" else "None",
        submit_time=t, eligible_time=t, start_time=start, time_limit=limit, num_nodes=nodes,
        num_cpus=cpus, num_gpus=gpus, mem_mb=None, priority=priority, site_factor=site,
        nice=0, required_nodes=required, features=features, nodes=on)


def cluster(n_nodes: int = 8, per_leaf: int = 4, cpus: int = 64, gpus: int = 8
            ) -> tuple[list[SlurmNode], SwitchTree]:
    names = [f"node{i:02d}" for i in range(1, n_nodes + 1)]
    nodes = [SlurmNode(name=n, state="IDLE", state_flags=(), cpus=cpus, alloc_cpus=0,
                       gpus=gpus, alloc_gpus=0, real_memory_mb=512000, alloc_memory_mb=0,
                       partitions=("gpu",)) for n in names]
    leaves = [Switch(f"leaf{k + 1}", 0, tuple(names[i:i + per_leaf]))
              for k, i in enumerate(range(0, n_nodes, per_leaf))]
    tree = SwitchTree.from_switches([*leaves, Switch("spine", 1, tuple(names),
                                                     tuple(s.name for s in leaves))])
    return nodes, tree


class FakeSlurm(SlurmClient):
    """In-memory Slurm: reads return the lists; the allowed changes update them."""

    backend = "fake"

    def __init__(self, jobs: list[SlurmJob], nodes: list[SlurmNode] | None = None,
                 tree: SwitchTree | None = None) -> None:
        super().__init__(timeout=1.0)
        n, t = cluster()
        self._jobs = {j.job_id: j for j in jobs}
        self._nodes = nodes if nodes is not None else n
        self._tree = tree if tree is not None else t
        self.calls: list[tuple[str, int, object]] = []
        self.fail_reads: str | None = None
        self.fail_writes: set[int] | None = None  # job ids; empty set: every write fails
        self.write_error = "timed out after 1 s"
        self.priority_weights: dict[str, int] = {}  # Slurm's PriorityWeight*, by factor
        self.fail_config: str | None = None  # scontrol show config fails with this
        self.config_reads = 0

    # reading
    def jobs(self, states=("PENDING", "RUNNING")):
        if self.fail_reads:
            raise SlurmError("squeue --all --json", self.fail_reads)
        want = set(states)
        return [j for j in self._jobs.values() if j.state in want]

    def nodes(self):
        if self.fail_reads:
            raise SlurmError("sinfo --json", self.fail_reads)
        return list(self._nodes)

    def topology(self):
        return self._tree

    def config(self):
        self.config_reads += 1
        if self.fail_config:
            raise SlurmError("scontrol show config", self.fail_config)
        return SchedulerConfig("testcluster", "22.05.8", "priority/multifactor",
                               dict(self.priority_weights), 86400, 0,
                               "sched/backfill", {}, "select/cons_tres", "topology/tree")

    def accounting(self, start, end, *, states=(), all_users=True):  # pragma: no cover
        return []

    # changing
    def _check_write(self, job_id: int, what: str) -> None:
        if self.fail_writes is not None and (not self.fail_writes or job_id in self.fail_writes):
            raise SlurmError(f"scontrol update JobId={job_id} {what}", self.write_error)

    def set_site_factor(self, job_id: int, value: int) -> None:
        self._check_write(job_id, f"SiteFactor={value}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError("site factor must be an int")
        self.calls.append(("set_site_factor", job_id, value))
        self._jobs[job_id] = dataclasses.replace(self._jobs[job_id], site_factor=value)

    def _pending(self, job_id: int, what: str) -> SlurmJob:
        """The job, if a write may change it: writes can fail; only pending jobs change."""
        self._check_write(job_id, what)
        job = self._jobs.get(job_id)
        if job is None or not job.is_pending:
            raise SlurmError(f"scontrol update JobId={job_id} {what}",
                             "refused: job is not PENDING")
        return job

    def set_req_nodes(self, job_id: int, nodes) -> None:
        job = self._pending(job_id, f"ReqNodeList={req_nodes_hostlist(nodes)}")
        self.calls.append(("set_req_nodes", job_id, tuple(sorted(nodes))))
        self._jobs[job_id] = dataclasses.replace(job, required_nodes=tuple(sorted(nodes)))

    def clear_req_nodes(self, job_id: int) -> None:
        job = self._pending(job_id, "ReqNodeList=")
        self.calls.append(("clear_req_nodes", job_id, None))
        self._jobs[job_id] = dataclasses.replace(job, required_nodes=())

    def set_switches(self, job_id: int, count: int, wait: int) -> None:
        job = self._pending(job_id, f"Switches={switches_text(count, wait)}")
        self.calls.append(("set_switches", job_id, (count, wait)))
        self._jobs[job_id] = dataclasses.replace(job, switches=count, switches_wait=wait)

    def clear_switches(self, job_id: int) -> None:
        job = self._pending(job_id, "Switches=0")
        self.calls.append(("clear_switches", job_id, None))
        self._jobs[job_id] = dataclasses.replace(job, switches=None, switches_wait=None)

    # test helpers
    def job(self, job_id: int) -> SlurmJob:
        return self._jobs[job_id]

    def start(self, job_id: int, nodes: tuple[str, ...]) -> None:
        self._jobs[job_id] = dataclasses.replace(self._jobs[job_id], state="RUNNING",
                                                 nodes=nodes, start_time=NOW)

    def add(self, job: SlurmJob) -> None:
        self._jobs[job.job_id] = job

    def remove(self, job_id: int) -> None:
        del self._jobs[job_id]


class _Arg:
    def __init__(self, name: str, typ: str) -> None:
        self.name, self.type = name, typ


class LinearSession:
    """An onnxruntime-like session: job logit = features @ weights; place = -leaves spanned."""

    def __init__(self, weights: np.ndarray, hold: float = -50.0) -> None:
        self.w = np.asarray(weights, dtype=np.float64)
        self.hold = hold
        self.runs = 0

    def get_inputs(self):
        return [_Arg(k, v) for k, v in INPUTS.items()]

    def get_outputs(self):
        return [_Arg(k, "tensor(float)") for k in OUTPUTS]

    def run(self, names, feed):
        self.runs += 1
        jl = feed["jobs"].astype(np.float64) @ self.w
        jl = np.where(feed["job_mask"], jl, -1e9)
        job_logits = np.append(jl, self.hold).astype(np.float32)
        sets = feed["cand_sets"]
        leaf = feed["node_leaf"]
        pl = np.array([-len(np.unique(leaf[row])) if row.any() else 0.0 for row in sets],
                      dtype=np.float32)
        pl = np.where(feed["cand_mask"], pl, -1e9).astype(np.float32)
        out = {"job_logits": job_logits, "place_logits": pl, "value": np.float32(0)}
        return [out[n] for n in names]


def linear_model(weights: list[float] | None = None, sha: str = "ab" * 32,
                 path: str = "/nonexistent/model.onnx") -> LoadedModel:
    w = np.zeros(len(F.JOB_FEATURES))
    if weights is None:
        w[F.JOB_FEATURES.index("log_limit")] = -1.0  # shortest limit first
    else:
        w[:] = weights
    return LoadedModel(path=Path(path), sha256=sha, card={}, norm=F.Normalisation(), opset=17,
                       session=LinearSession(w), input_names=tuple(INPUTS), created=NOW - 86400)
