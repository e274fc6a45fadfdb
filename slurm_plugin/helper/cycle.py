"""One helper cycle, and the loop that runs it with backoff.

A cycle (:meth:`Helper.cycle`):

1. reads pending and running jobs, nodes and the switch tree (one ``squeue``, one
   ``sinfo``, one ``scontrol show topology``, plus ``sprio`` for the site factors);
2. looks after the jobs it steered: forgets those that started or left, rolls back
   (clears ``ReqNodeList``) those still pending after ``rollback_cycles`` cycles and does
   not steer them again (real steering is rolled back in shadow mode too, and while the
   model is unusable: that only undoes the helper's own changes);
3. checks the model (re-verified whenever its file or card changes; a bad model
   leaves the helper idle: no scoring, no new changes, one error line per attempt);
4. builds the observation from the schedulable pending jobs (held jobs, jobs waiting
   on a dependency or a begin time are left alone) and scores it;
5. turns the ranking into site factors (:mod:`.decide`), keeps those that moved beyond
   the hysteresis, and picks node sets for the head of the queue (only with a model
   whose card says its placement head was trained to place jobs:
   :func:`slurm_plugin.model.place_head_trained`; else Slurm places them, and one
   ``steering_off`` line per model says why);
6. records every change in the audit log (write-ahead), saves the state, and, in
   ``enforce`` mode only, applies the changes; failures are recorded again as
   ``failed``.

:meth:`Helper.run_once` runs a cycle and never raises: any error is logged in one JSON
line, counted, and leaves Slurm as it was (fail open). :func:`run_forever` repeats it
every ``interval`` seconds, doubling the wait after each failed cycle up to
``backoff_max``, on a monotonic clock. Wall-clock jumps (an NTP step, ``date -s``) are
detected by :class:`ClockWatch` and kept out of the ages of jobs seen before them: a
forward jump of hours does not make every job look starved, a backward one gives no
negative waits; rollbacks count cycles, not seconds.

Slurm's configuration (``scontrol show config``: ``PriorityWeightAge`` for the express
lane in ``age`` order, ``max_switch_wait``, the cluster's name) is read again when the
helper's copy is :data:`SLURM_CONFIG_TTL` seconds old, so a ``scontrol reconfigure``
reaches it without a restart; when that read fails the last copy is kept (one warning)
and the read is tried again next cycle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..features import Normalisation, Observation, UserHistory, featurize, raw_from_slurm
from ..model import (
    LoadedModel,
    ModelError,
    card_path,
    file_signature,
    load_model,
    place_head_trained,
)
from ..scorer import OnnxScorer
from ..slurm.client import SlurmClient
from ..slurm.errors import SlurmError
from ..slurm.types import PENDING, RUNNING, SchedulerConfig, SlurmJob, SwitchTree
from . import decide
from .actuate import Actuator, AuditSink, Change
from .config import HelperConfig
from .hint import HintContext, HintRequest, advise
from .logs import EventLog
from .metrics import Metrics, idle_share
from .state import HelperState, Section, Steering

__all__ = ["MIN_APPLY_BUDGET", "NOT_SCHEDULABLE", "SLURM_CONFIG_TTL", "ClockWatch",
           "CycleReport", "Helper", "ModelUnavailable", "apply_budget", "run_forever",
           "schedulable"]

#: Seconds a cycle's changes may take at the least, whatever the interval: with a
#: short interval (a test cluster's 0.5 s) a loaded slurmctld would otherwise cut most
#: batches short (fails open, the rest waits: correct, but little gets applied).
MIN_APPLY_BUDGET = 5.0


def apply_budget(interval: float) -> float:
    """Seconds one cycle's batch of changes may take.

    The cycle's ``interval``, but at least :data:`MIN_APPLY_BUDGET`; what is left
    over waits for the next cycle.
    """
    return max(float(interval), MIN_APPLY_BUDGET)


#: Seconds the helper keeps its copy of Slurm's configuration before reading it again
#: (a ``scontrol reconfigure`` reaches the next cycle after that, with no restart).
SLURM_CONFIG_TTL = 300.0
#: What of :class:`SchedulerConfig` a reread reports when it changed (``slurm_config_changed``).
_CONFIG_WATCHED = ("priority_weights", "priority_max_age", "scheduler_parameters",
                   "cluster_name")


#: Pending reasons under which the helper leaves a job alone (held or not yet eligible).
NOT_SCHEDULABLE = frozenset({
    "JobHeldUser", "JobHeldAdmin", "Dependency", "DependencyNeverSatisfied", "BeginTime",
    "JobArrayTaskLimit",
})


class ModelUnavailable(RuntimeError):
    """No verified model: the helper stays idle (the message says why).

    Attributes:
        report: The cycle's report so far (rollbacks it still made).
    """

    def __init__(self, reason: str, report: CycleReport) -> None:
        super().__init__(reason)
        self.report = report


def schedulable(job: SlurmJob) -> bool:
    """A pending job the helper may rank: not held, not waiting on a dependency or time."""
    return job.is_pending and job.priority > 0 and job.state_reason not in NOT_SCHEDULABLE


class ClockWatch:
    """Wall-clock jumps between cycles, and the job times they displaced.

    Between two cycles the wall clock and the monotonic clock advance alike; a
    difference beyond ``tolerance`` seconds is a jump of the wall clock, added to
    :attr:`total`. Each job remembers :attr:`total` when first seen: its timestamps
    (submit, eligible, start) were taken on the clock of then, so ``total - seen`` moves
    them onto today's clock and its wait stays the real one. Jobs first seen after a
    helper restart (the memory is not saved), or in the cycle that sees the jump, carry
    no correction.

    Args:
        tolerance: Smallest difference counted as a jump, seconds (NTP slewing moves the
            wall clock by at most 0.5 ms/s, far below it).
    """

    def __init__(self, tolerance: float = 10.0) -> None:
        self.tolerance = tolerance
        #: Sum of the jumps seen so far, seconds.
        self.total = 0.0
        self._last: tuple[float, float] | None = None
        self._seen: dict[int, float] = {}

    def observe(self, wall: float, mono: float) -> float:
        """Record the clocks at the start of a cycle; return the jump since the last one."""
        jump = 0.0
        if self._last is not None:
            drift = (wall - self._last[0]) - (mono - self._last[1])
            if abs(drift) >= self.tolerance:
                jump = drift
                self.total += drift
        self._last = (wall, mono)
        return jump

    def shifts(self, job_ids: Iterable[int]) -> dict[int, int]:
        """Seconds to add to each job's timestamps (non-zero ones only); forgets the rest."""
        seen = {j: self._seen.get(j, self.total) for j in job_ids}
        self._seen = seen
        return {j: d for j, t in seen.items() if (d := round(self.total - t))}

    def correct(self, jobs: Sequence[SlurmJob]) -> list[SlurmJob]:
        """The jobs with their timestamps moved onto the current wall clock."""
        shift = self.shifts(j.job_id for j in jobs)
        if not shift:
            return list(jobs)
        return [_shifted(j, shift[j.job_id]) if j.job_id in shift else j for j in jobs]


def _shifted(job: SlurmJob, d: int) -> SlurmJob:
    return replace(job, submit_time=job.submit_time + d,
                   eligible_time=None if job.eligible_time is None else job.eligible_time + d,
                   start_time=None if job.start_time is None else job.start_time + d)


@dataclass
class CycleReport:
    """What one cycle saw and did.

    Attributes:
        at: Start of the cycle, epoch s.
        mode: ``shadow`` or ``enforce``.
        model_sha: The model used, if any.
        ok: The cycle completed.
        error: One line saying why it did not.
        hint: What to check next, when the error says (e.g. slurmctld not answering).
        pending: Pending jobs seen; ``scored``: of them, scored.
        running: Running jobs seen; ``nodes``: nodes seen.
        changes: Changes decided (applied in enforce mode, would-be in shadow mode).
        applied: Changes Slurm accepted (enforce mode).
        failed: Changes Slurm refused, with the reason.
        deferred: Site factor changes left for later cycles (``max_changes``).
        timings: Seconds per phase (read, featurize, score, decide, apply, total).
    """

    at: int
    mode: str
    model_sha: str | None = None
    ok: bool = False
    error: str | None = None
    hint: str | None = None
    pending: int = 0
    scored: int = 0
    running: int = 0
    nodes: int = 0
    changes: list[Change] = field(default_factory=list)
    applied: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)
    deferred: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary (log line, state file, ``helper once --json``)."""
        by: dict[str, int] = {}
        for c in self.changes:
            key = f"{c.field}:{c.reason}"
            by[key] = by.get(key, 0) + 1
        return {
            "at": self.at, "mode": self.mode, "model": self.model_sha, "ok": self.ok,
            "error": self.error, "pending": self.pending, "scored": self.scored,
            "running": self.running, "nodes": self.nodes, "changes": len(self.changes),
            "by_kind": by, "applied": len(self.applied), "failed": len(self.failed),
            "deferred": self.deferred,
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }


class Helper:
    """The helper: its configuration, the Slurm client, the model, the state.

    Args:
        cfg: The configuration.
        client: The Slurm client.
        audit: Where changes are recorded.
        log: Structured log.
        metrics: Metrics to update (optional).
        history_source: ``(cluster name, since epoch s) -> finished jobs`` as tuples
            ``(user, end, run, limit, cpus, nodes)``, for the per-user estimates
            (``None``: no history).
        clock: Wall clock (ages, audit times).
        monotonic: Monotonic clock (intervals; detects jumps of ``clock``).
        loader: Model loader (:func:`slurm_plugin.model.load_model`).
    """

    def __init__(self, cfg: HelperConfig, *, client: SlurmClient, audit: AuditSink,
                 log: EventLog | None = None, metrics: Metrics | None = None,
                 history_source: Callable[[str, int], Sequence[tuple[Any, ...]]] | None = None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 loader: Callable[..., LoadedModel] = load_model) -> None:
        self.cfg = cfg
        self.client = client
        self.audit = audit
        self.log = log or EventLog(level=cfg.log_level)
        self.metrics = metrics or Metrics()
        self.history_source = history_source
        self.clock = clock
        self.monotonic = monotonic
        self.clock_watch = ClockWatch()
        self.loader = loader
        self.state = HelperState.load(cfg.state_file)
        self.model: LoadedModel | None = None
        self.scorer: OnnxScorer | None = None
        self.model_error: str | None = None
        self._model_sig: tuple[Any, ...] | None = None
        self._cluster: str | None = cfg.cluster or None
        self._history: UserHistory | None = None
        self._history_at: float | None = None
        self._history_norm: Normalisation | None = None
        self.hint_context: HintContext | None = None
        self._last_nodes: list[Any] = []
        self._steer_off_sha: str | None = None  # model whose steering_off was logged
        self._switch_cap_checked = False  # max_switch_wait compared with switch_wait
        self._slurm_config: SchedulerConfig | None = None  # scontrol show config, cached
        self._slurm_config_at = 0.0  # (monotonic) when it was read
        self._slurm_config_stale = False  # the last reread failed (warned once)
        #: The last cycle's observation (for inspection and benchmarks).
        self.last_observation: Observation | None = None
        self._lock = threading.Lock()
        self.state.started_at = int(clock())
        self.metrics.set("enforce", 1.0 if cfg.enforce else 0.0)

    @property
    def cluster_name(self) -> str | None:
        """The cluster's name (configured, or learnt from Slurm in the first cycle)."""
        return self._cluster

    # ------------------------------------------------------------------ model
    def ensure_model(self) -> OnnxScorer | None:
        """The scorer of a verified model; re-verified when the file or card changed.

        A model that fails verification leaves ``None`` and :attr:`model_error`; the
        same files are not re-verified until they change.
        """
        sig = file_signature(self.cfg.model) + file_signature(card_path(self.cfg.model))
        if sig == self._model_sig:
            return self.scorer
        self._model_sig = sig
        try:
            model = self.loader(self.cfg.model, pin=self.cfg.model_sha256 or None,
                                threads=self.cfg.threads)
        except ModelError as exc:
            self.model, self.scorer, self.model_error = None, None, str(exc)
            self.hint_context = None
            self.metrics.set("model_ok", 0.0)
            self.log.error("model_refused", model=self.cfg.model, reason=str(exc),
                           effect="idle: no scoring, no changes; Slurm schedules on its own")
            return None
        self.model, self.scorer, self.model_error = model, OnnxScorer(model), None
        self.metrics.set("model_ok", 1.0)
        self.log.info("model_loaded", model=str(model.path), sha256=model.sha256,
                      opset=model.opset, inputs=list(model.input_names))
        return self.scorer

    # ------------------------------------------------------------------ history
    def _refresh_history(self, norm: Normalisation, tree: SwitchTree) -> UserHistory:
        now, mono = self.clock(), self.monotonic()
        due = (self._history is None or self._history_norm != norm or self._history_at is None
               or mono - self._history_at >= self.cfg.history_refresh)
        if not due and self._history is not None:
            return self._history
        hist = UserHistory(norm)
        if self.history_source is not None and self.cfg.history_days > 0 and self._cluster:
            since = int(now - self.cfg.history_days * 86400)
            try:
                rows = sorted(self.history_source(self._cluster, since), key=lambda r: r[1])
                leaf_of = tree.node_to_leaf()
                for user, end, run, limit, cpus, nodes in rows:
                    leaves = len({leaf_of.get(n, n) for n in nodes}) if nodes else 1
                    hist.record(user, int(end), int(run), int(limit or 0), int(cpus or 1),
                                leaves)
            except Exception as exc:  # noqa: BLE001 - history is an estimate, never fatal
                self.log.warning("history_unavailable", error=_one_line(exc),
                                 effect="per-user estimates use defaults this cycle")
                if self._history is not None and self._history_norm == norm:
                    return self._history
        self._history, self._history_at, self._history_norm = hist, mono, norm
        return hist

    # ------------------------------------------------------------------ steering upkeep
    def _upkeep(self, sec: Section, jobs: dict[int, SlurmJob], real: bool) -> list[Change]:
        """Age the steered jobs of one section; return the rollbacks due."""
        out: list[Change] = []
        for job_id in list(sec.steer):
            st = sec.steer[job_id]
            job = jobs.get(job_id)
            if job is None or not job.is_pending:
                started = job is not None and job.is_running
                hit = started and sorted(job.nodes) == st.nodes if job else False
                self.log.info("steering_done", job=job_id, started=started, on_chosen=hit,
                              cycles=st.cycles, real=real)
                del sec.steer[job_id]
                continue
            if real and sorted(job.required_nodes) != st.nodes:
                self.log.info("steering_changed_elsewhere", job=job_id,
                              effect="no longer tracked")
                del sec.steer[job_id]
                continue
            st.cycles += 1
            if st.cycles >= self.cfg.rollback_cycles:
                out.append(Change(job_id, "req_nodes", tuple(st.nodes), None, "rollback"))
        return out

    # ------------------------------------------------------------------ the cycle
    def cycle(self) -> CycleReport:
        """One cycle (see the module docstring); raises on any failure."""
        t0 = time.perf_counter()
        wall = self.clock()
        now = int(wall)
        jump = self.clock_watch.observe(wall, self.monotonic())
        if jump:
            self.log.warning("clock_jump", seconds=round(jump, 1),
                             effect="ages of jobs seen before it are corrected by it")
        cfg = self.cfg
        enforce = cfg.enforce
        rep = CycleReport(at=now, mode=cfg.mode)
        timings = rep.timings

        jobs = self.clock_watch.correct(self.client.jobs((PENDING, RUNNING)))
        nodes = self.client.nodes()
        self._last_nodes = nodes
        tree = self.client.topology()
        if self._cluster is None:
            self._cluster = self._config().cluster_name or None
        by_id = {j.job_id: j for j in jobs}
        running = [j for j in jobs if j.is_running]
        pending = [j for j in jobs if schedulable(j)]
        rep.pending = sum(1 for j in jobs if j.is_pending)
        rep.running, rep.nodes = len(running), len(nodes)
        timings["read"] = time.perf_counter() - t0

        sec = self.state.section(enforce)
        if self.state.mode and self.state.mode != cfg.mode:
            self.log.info("mode_changed", old=self.state.mode, new=cfg.mode)
        self.state.mode = cfg.mode
        if enforce:
            self.state.shadow = Section()
            sec = self.state.enforced
        # the helper's own real steering is rolled back in any mode (it undoes its changes)
        rollbacks = self._upkeep(self.state.enforced, by_id, real=True)
        real_rollbacks = list(rollbacks)
        if not enforce:
            rollbacks += self._upkeep(self.state.shadow, by_id, real=False)
        live = {j.job_id for j in jobs if j.is_pending}
        self.state.enforced.prune(live)
        self.state.shadow.prune(live)

        scorer = self.ensure_model()
        changes: list[Change] = []
        if scorer is None or self.model is None:
            # idle: only the rollbacks of real steering (undoing the helper's own changes)
            self._commit(rep, real_rollbacks, real_rollbacks, model_sha=None)
            self.state.model_status = f"invalid: {self.model_error}"
            raise ModelUnavailable(self.model_error or "no model", rep)
        model = self.model
        rep.model_sha = model.sha256
        self.state.model, self.state.model_sha = str(model.path), model.sha256
        self.state.model_status = "ok"

        t1 = time.perf_counter()
        hist = self._refresh_history(model.norm, tree)
        jobs_raw, nodes_raw, names = raw_from_slurm(now, pending, running, nodes, tree, hist)
        idle = idle_share(nodes_raw)  # (watched: capacity left idle while jobs wait)
        self.metrics.set("idle_share", idle)
        self.metrics.set("idle_waiting_share", idle if pending else 0.0)
        obs = featurize(now, jobs_raw, nodes_raw, model.norm)
        timings["featurize"] = time.perf_counter() - t1
        rep.scored = obs.n_jobs
        self.last_observation = obs

        scores = np.zeros(0)
        rule = self._rule() if obs.n_nodes else None  # (one per cycle: scoring and the hint)
        if obs.n_jobs and rule is not None:
            t2 = time.perf_counter()
            mask = np.ones(obs.n_jobs, dtype=bool) if cfg.rank_all else None
            scores = decide.quantize(scorer.score(obs, job_mask=mask)[:-1],
                                     rule.score_resolution)
            timings["score"] = time.perf_counter() - t2

            t3 = time.perf_counter()
            waited = np.maximum(now - jobs_raw.eligible, 0).astype(np.float64)
            order = decide.policy_order(scores, jobs_raw.eligible, jobs_raw.job_id)
            values, lifted = decide.targets(scores, waited, rule, jobs_raw.limit)
            current = np.array([self._current(sec, pending[i], enforce)
                                for i in range(len(pending))], dtype=np.int64)
            site, rep.deferred = decide.plan_site_factors(
                jobs_raw.job_id, values, lifted, current, order, rule,
                decide.express_jobs(jobs_raw.limit, rule))
            changes += [Change(c.job_id, "site_factor", c.old, c.new, c.reason) for c in site]
            if cfg.steering == "reqnodes" and cfg.steer_jobs > 0 and self._head_steers(model):
                changes += self._steer(obs, scorer, jobs_raw, nodes_raw, names, pending,
                                       order, sec)
            elif cfg.steering == "switches" and cfg.steer_jobs > 0:
                changes += self._leaf_waits(obs, jobs_raw, nodes_raw, names, pending, order,
                                            sec)
            timings["decide"] = time.perf_counter() - t3
        if rule is not None:
            self._publish_hint(now, obs, scores, nodes_raw, model, scorer, hist, rule)
        changes = rollbacks + changes
        self._commit(rep, changes, real_rollbacks, model_sha=model.sha256)
        rep.ok = rep.error is None
        timings["total"] = time.perf_counter() - t0
        return rep

    def _head_steers(self, model: LoadedModel) -> bool:
        """The model's placement head was trained to place jobs (logged once if not)."""
        if place_head_trained(model.card):
            return True
        if self._steer_off_sha != model.sha256:
            self._steer_off_sha = model.sha256
            self.log.info("steering_off", model=model.short_sha,
                          reason="the model's placement head was not trained to place jobs"
                                 " (train with --place); Slurm places them")
        return False

    def _current(self, sec: Section, job: SlurmJob, enforce: bool) -> int:
        """The site factor the hysteresis compares with."""
        if enforce:
            if job.site_factor is not None:
                return int(job.site_factor)
            return sec.site.get(job.job_id, 0)
        if job.job_id in sec.site:
            return sec.site[job.job_id]
        return int(job.site_factor or 0)

    def _allowed(self, names: list[str], pending: list[SlurmJob]
                 ) -> Callable[[int], np.ndarray]:
        """Row -> mask of the nodes the job may use (its partition, not excluded)."""
        pos = {n: k for k, n in enumerate(names)}
        part_nodes: dict[str, np.ndarray] = {}
        node_parts = None

        def allowed(row: int) -> np.ndarray:
            nonlocal node_parts
            job = pending[row]
            mask = part_nodes.get(job.partition)
            if mask is None:
                if node_parts is None:
                    node_parts = self._node_partitions(names)
                mask = np.array([not parts or job.partition in parts for parts in node_parts],
                                dtype=bool)
                part_nodes[job.partition] = mask
            if job.excluded_nodes:
                mask = mask.copy()
                for n in job.excluded_nodes:
                    k = pos.get(n)
                    if k is not None:
                        mask[k] = False
            return mask

        return allowed

    def _steer(self, obs: Any, scorer: OnnxScorer, jobs_raw: Any, nodes_raw: Any,
               names: list[str], pending: list[SlurmJob], order: np.ndarray,
               sec: Section) -> list[Change]:
        may = np.array([self._may_steer(j, sec) for j in pending], dtype=bool)
        choices = decide.steer(
            jobs_raw, nodes_raw, order, may, obs.job_mask, self._allowed(names, pending),
            lambda r, c: scorer.place(obs, r, c), max_jobs=self.cfg.steer_jobs,
            min_nodes=self.cfg.steer_min_nodes, max_sets=self.cfg.steer_candidates)
        out = []
        for ch in choices:
            job = pending[ch.row]
            chosen = tuple(sorted(names[i] for i in ch.nodes))
            out.append(Change(job.job_id, "req_nodes", None, chosen, "steer"))
            self.log.debug("steer", job=job.job_id, kind=ch.kind, leaves=ch.leaves,
                           nodes=len(chosen))
        return out

    def _leaf_waits(self, obs: Any, jobs_raw: Any, nodes_raw: Any, names: list[str],
                    pending: list[SlurmJob], order: np.ndarray, sec: Section) -> list[Change]:
        """``Switches=1@switch_wait`` for the jobs :func:`decide.leaf_waits` picks."""
        may = np.array([self._may_steer(j, sec) and j.job_id not in sec.switches
                        for j in pending], dtype=bool)
        rows = decide.leaf_waits(jobs_raw, nodes_raw, order, may, obs.job_mask,
                                 self._allowed(names, pending), max_jobs=self.cfg.steer_jobs,
                                 min_nodes=self.cfg.steer_min_nodes,
                                 max_sets=self.cfg.steer_candidates)
        wait = int(self.cfg.switch_wait)
        self._check_switch_wait(wait)
        return [Change(pending[r].job_id, "switches", None, (1, wait), "locality")
                for r in rows]

    def _rule(self) -> decide.SiteFactorRule:
        """The configured rule, with Slurm's ``PriorityWeightAge`` where it matters.

        For the express lane in ``age`` order :func:`decide.lane_levels` keeps the lane
        that far above the starving jobs.
        """
        rule = self.cfg.rule()
        if rule.split:
            age = int(self._config().priority_weights.get("age", 0))
            rule = replace(rule, age_weight=age)
        return rule

    def _config(self) -> SchedulerConfig:
        """Slurm's configuration, read again when the copy is :data:`SLURM_CONFIG_TTL` old.

        A reread that fails keeps the last copy (one ``slurm_config_stale`` warning until
        a read succeeds again; it is retried every cycle); with no copy yet the error
        fails the cycle. A reread that differs in what the helper uses is logged
        (``slurm_config_changed``), and ``max_switch_wait`` is checked again.
        """
        now = self.monotonic()
        old = self._slurm_config
        if old is not None and now - self._slurm_config_at < SLURM_CONFIG_TTL:
            return old
        try:
            fresh = self.client.config()
        except Exception as exc:  # noqa: BLE001 - fail open on the last copy
            if old is None:
                raise
            if not self._slurm_config_stale:
                self._slurm_config_stale = True
                self.log.warning("slurm_config_stale", error=_one_line(exc),
                                 age_s=round(now - self._slurm_config_at),
                                 effect="the last copy of Slurm's configuration is used;"
                                        " the read is tried again next cycle")
            return old
        if self._slurm_config_stale:
            self.log.info("slurm_config_read", effect="Slurm's configuration is current again")
        self._slurm_config_stale = False
        if old is not None:
            changed = [k for k in _CONFIG_WATCHED if getattr(old, k) != getattr(fresh, k)]
            if changed:
                self.log.info("slurm_config_changed", fields=changed,
                              effect="the helper uses the new values from this cycle")
                self._switch_cap_checked = False
        self._slurm_config, self._slurm_config_at = fresh, now
        return fresh

    def _check_switch_wait(self, wait: int) -> None:
        """Warn once when Slurm's ``max_switch_wait`` cuts the helper's wait short."""
        if self._switch_cap_checked:
            return
        self._switch_cap_checked = True
        cap = 300
        try:
            params = self._config().scheduler_parameters
            cap = int(float(params.get("max_switch_wait", cap)))
        except Exception as exc:  # noqa: BLE001 - only a warning depends on it
            self.log.info("switch_wait_unchecked", error=_one_line(exc))
            return
        if cap < wait:
            self.log.warning("switch_wait_capped", switch_wait=wait, max_switch_wait=cap,
                             effect=f"Slurm lets jobs wait only {cap} s for one leaf",
                             fix=f"add max_switch_wait={wait} to SchedulerParameters in"
                                 " slurm.conf (then scontrol reconfigure)")

    def _node_partitions(self, names: list[str]) -> list[tuple[str, ...]]:
        parts = {n.name: n.partitions for n in self._last_nodes}
        return [parts.get(n, ()) for n in names]

    def _may_steer(self, job: SlurmJob, sec: Section) -> bool:
        """Steer only jobs with no node list, constraint or switch request of their own."""
        return (job.job_id not in sec.steer and job.job_id not in sec.rolled_back
                and not job.required_nodes and not job.features and job.switches is None)

    def _publish_hint(self, now: int, obs: Observation, scores: np.ndarray, nodes_raw: Any,
                      model: LoadedModel, scorer: OnnxScorer, hist: UserHistory,
                      rule: decide.SiteFactorRule) -> None:
        users = list(hist.to_dict())
        est = {}
        if users:
            ratio, share, loc = hist.estimates(users, [1] * len(users), now)
            est = {u: (float(ratio[i]), float(share[i]), float(loc[i]))
                   for i, u in enumerate(users)}
        self.hint_context = HintContext(now, nodes_raw, obs.globals.copy(), scores.copy(),
                                        model.norm, scorer, rule, est)

    # ------------------------------------------------------------------ committing
    def _commit(self, rep: CycleReport, changes: list[Change], real: list[Change],
                model_sha: str | None) -> None:
        """Audit, save the state, apply (enforce mode, or real rollbacks), record failures."""
        rep.changes = changes
        enforce = self.cfg.enforce
        to_apply = changes if enforce else real
        would = [c for c in changes if c not in to_apply] if not enforce else []
        at = int(self.clock())
        if to_apply:
            self.audit.record(to_apply, mode="enforce", model_sha=model_sha, at=at)
        if would:
            self.audit.record(would, mode="shadow", model_sha=model_sha, at=at)
        self._note(to_apply, self.state.enforced)
        self._note(would, self.state.shadow)
        self.state.save(self.cfg.state_file)  # write-ahead: the rollback knows what may be set
        if to_apply:
            t = time.perf_counter()
            act = Actuator(self.client, (self.cfg.band_lo, self.cfg.band_hi),
                           budget=apply_budget(self.cfg.interval))
            res = act.apply(to_apply)
            rep.timings["apply"] = time.perf_counter() - t
            rep.applied = res.applied
            rep.failed = res.failed
            undone = [c for c, _ in res.failed] + res.skipped
            if undone:
                self._unnote(undone, self.state.enforced)
                try:
                    self.audit.record([c for c, _ in res.failed], mode="failed",
                                      model_sha=model_sha, at=int(self.clock()))
                except Exception as exc:  # noqa: BLE001 - the changes failed already
                    self.log.error("audit_failed", error=_one_line(exc))
                for c, why in res.failed[:5]:
                    self.log.warning("change_failed", job=c.job_id, field=c.field,
                                     error=why)
            if res.aborted:
                rep.error = f"applying changes stopped: {res.aborted}"
                self.log.error("apply_aborted", reason=res.aborted, skipped=len(res.skipped),
                               effect="the rest waits for the next cycle")
        for c in rep.applied:
            self.state.count(f"enforce:{c.field}")
            self.metrics.inc("changes_total", field=c.field, mode="enforce")
        for c in would:
            self.state.count(f"shadow:{c.field}")
            self.metrics.inc("changes_total", field=c.field, mode="shadow")
        self.state.count("failed", len(rep.failed))

    def _note(self, changes: Sequence[Change], sec: Section) -> None:
        """Record changes as made in a state section (before they are applied)."""
        now = int(self.clock())
        for c in changes:
            if c.field == "site_factor":
                sec.site[c.job_id] = int(c.new)
            elif c.field == "switches":
                if c.new is None:
                    sec.switches.pop(c.job_id, None)
                else:
                    sec.switches[c.job_id] = now
            elif c.new is None:
                sec.steer.pop(c.job_id, None)
                sec.rolled_back[c.job_id] = now
            else:
                sec.steer[c.job_id] = Steering(sorted(c.new), 0, now)

    def _unnote(self, changes: Sequence[Change], sec: Section) -> None:
        """Take back :meth:`_note` for changes not made (a failed rollback is retried)."""
        now = int(self.clock())
        for c in changes:
            if c.field == "site_factor":
                sec.site.pop(c.job_id, None)
            elif c.field == "switches":
                if c.new is not None:
                    sec.switches.pop(c.job_id, None)
            elif c.new is None:
                sec.rolled_back.pop(c.job_id, None)
                sec.steer[c.job_id] = Steering(sorted(c.old or ()),
                                               self.cfg.rollback_cycles - 1, now)
            else:
                sec.steer.pop(c.job_id, None)

    # ------------------------------------------------------------------ fail-open wrapper
    def run_once(self) -> CycleReport:
        """Run one cycle; never raises. Errors are logged, counted and saved."""
        start = time.perf_counter()
        rep: CycleReport
        with self._lock:
            try:
                rep = self.cycle()
            except ModelUnavailable as exc:
                rep = exc.report
                rep.ok, rep.error = False, f"model unusable: {exc}"
            except Exception as exc:  # noqa: BLE001 - fail open: Slurm stays in charge
                rep = CycleReport(at=int(self.clock()), mode=self.cfg.mode)
                rep.error = _one_line(exc)
                rep.hint = what_next(exc)
            rep.timings.setdefault("total", time.perf_counter() - start)
            self._finish(rep)
        return rep

    def _finish(self, rep: CycleReport) -> None:
        st = self.state
        now = int(self.clock())
        st.cycles += 1
        st.pid = _pid()
        st.last_cycle_at = now
        st.last_cycle_seconds = rep.timings.get("total")
        st.last_cycle = rep.summary()
        self.metrics.inc("cycles_total")
        self.metrics.set("cycle_seconds", rep.timings.get("total", 0.0))
        self.metrics.set("jobs_scored", float(rep.scored))
        self.metrics.set("last_cycle_timestamp_seconds", float(now))
        if self.model is not None and self.model.age(now) is not None:
            self.metrics.set("model_age_seconds", float(self.model.age(now) or 0.0))
        if rep.ok:
            st.last_cycle_ok_at = now
            st.consecutive_errors = 0
            self.log.info("cycle", **rep.summary())
        else:
            st.errors += 1
            st.consecutive_errors += 1
            st.last_error, st.last_error_at = rep.error, now
            self.metrics.inc("cycle_errors_total")
            extra = {"hint": rep.hint} if rep.hint else {}
            self.log.error("cycle_failed", error=rep.error, mode=self.cfg.mode,
                           consecutive=st.consecutive_errors,
                           effect="no further changes this cycle; Slurm schedules on its own",
                           **extra)
        try:
            st.save(self.cfg.state_file)
        except OSError as exc:
            self.log.error("state_not_saved", path=self.cfg.state_file,
                           error=exc.strerror or str(exc))

    # ------------------------------------------------------------------ hints
    def answer_hint(self, req: HintRequest) -> int | None:
        """The hint server's answer: a site factor in enforce mode, else no advice."""
        ctx = self.hint_context
        if ctx is None or not self.cfg.enforce:
            return None
        from .hint import _user_name

        user = _user_name(req.uid) if req.uid is not None else None
        return advise(ctx, req, user)

    def next_delay(self) -> float:
        """Seconds until the next cycle: ``interval``, doubled per consecutive failure."""
        n = self.state.consecutive_errors
        if n <= 0:
            return self.cfg.interval
        return float(min(self.cfg.backoff_max, self.cfg.interval * 2 ** min(n, 30)))


def _pid() -> int:
    import os

    return os.getpid()


#: What a Slurm error's text says, and what to check then (first match wins)
_SLURM_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    # (22.05's squeue/sinfo --json print an error document with no cause when slurmctld
    # is down: "Failed while looking for jobs", "Unspecified error")
    (("unable to contact slurm controller", "connect failure", "connection refused",
      "zero bytes were transmitted", "socket timed out", "failed while looking for",
      "unspecified error"),
     "slurmctld does not answer: is it up? (`scontrol ping`); the helper retries on its"
     " own and Slurm's queued jobs are untouched"),
    (("timed out after",),
     "Slurm answered too slowly: check slurmctld's load (`sdiag`), or raise"
     " slurm_timeout in helper.toml if it is only busy"),
    (("could not run",),
     "Slurm's commands could not be run: install Slurm's client commands on this host"
     " or put them on the helper's PATH"),
    (("permission denied", "access/permission denied", "access denied"),
     "Slurm refused the request: run the helper as SlurmUser or as a Slurm operator"
     " (`sacctmgr add user rlsched account=root adminlevel=Operator`)"),
)


def what_next(exc: BaseException) -> str | None:
    """A hint for a failed cycle's log line, from a :class:`SlurmError`'s text.

    ``None`` for other errors and Slurm errors without a known cause. An output that
    could not be parsed points at ``rlsched slurm check`` and the supported versions.
    """
    if not isinstance(exc, SlurmError):
        return None
    text = f"{exc.reason}\n{exc.stderr}".lower()
    for needles, hint in _SLURM_HINTS:
        if any(n in text for n in needles):
            return hint
    if exc.field is not None:
        return ("Slurm printed something rlsched could not read: run `rlsched slurm check`"
                " (Slurm 22.05 to 25.11 are supported)")
    return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500] if first else type(exc).__name__


def run_forever(helper: Helper, stop: threading.Event,
                on_cycle: Callable[[CycleReport], None] | None = None) -> None:
    """Run cycles until ``stop`` is set, waiting ``helper.next_delay()`` between them."""
    while not stop.is_set():
        rep = helper.run_once()
        if on_cycle is not None:
            on_cycle(rep)
        delay = helper.next_delay()
        if not rep.ok:
            helper.log.info("retry_scheduled", retry_in=delay)
        stop.wait(delay)
