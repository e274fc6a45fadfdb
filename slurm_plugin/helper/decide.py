"""The helper's decisions, as pure functions of arrays (no Slurm, no model, no clock).

**Ranking to site factors.** Slurm's multifactor priority is a sum of weighted factors
(age, fair-share, partition, QOS...) plus the job's ``SiteFactor``. The helper writes
only the site factor, inside a configured band ``[lo, hi]``, so the other factors keep
counting. Two mappings (:data:`MAPPINGS`):

- ``rank`` (default): evenly spaced by rank. The policy's best job gets ``hi``, its
  worst ``lo``, the ``k``-th (0-based) ``hi - round(k * (hi - lo) / (J - 1))``. Jobs with
  equal scores get the value of the best rank among them, so Slurm's own factors (age,
  fair-share) decide between them. Two neighbours differ by ``(hi - lo) / (J - 1)``: the
  policy's order holds wherever that step exceeds the spread of the other weighted
  factors, and age or fair-share can overturn it only between jobs whose site factors
  are closer than their own difference. A wide band makes the policy dominate, a
  narrow one blends it with Slurm's order.
- ``logit``: affine in the model's logits, clipped to the band:
  ``lo + center * (hi - lo) + scale * logit``. A job's value does not move when other
  jobs come and go (fewer changes), and a strong preference gets a larger boost.

Masked jobs (logit ``-1e9``) get ``lo`` with ``logit`` and tie at the bottom with
``rank``.

**Score resolution.** With ``score_resolution`` > 0 the scores are first rounded to
multiples of it (:func:`quantize`): jobs the policy scores that close are equals, and
Slurm's own factors (age first) order them, as they order exact ties. A net that orders
by one estimate ties every job with the same estimate, and those ties break by age;
without a resolution, any small change to the net (a few RL steps) breaks them by
whatever else it reads. Measured on Theta's validation period (2,338 jobs, behind a
14-day guard) with a net ordering by ``sef``'s estimate alone: noise of 1e-3 on its job
head moves the mean bounded slowdown from 5.64 to 6.57-6.59 and drops utilisation below
Slurm's; with a resolution of 0.2 the same nets give 5.53-5.74, utilisation kept.
Default 0 (exact scores).

**Starvation guard.** A job that has waited (since eligible, else since submitted) longer
than ``starvation_limit`` seconds goes above every job that has not, whatever the policy
says. How the starving jobs are ordered among themselves is ``starvation_order``
(:data:`STARVATION_ORDERS`):

- ``age`` (default): they all get ``hi`` and Slurm's age factor puts the oldest first
  (the tightest bound on the longest wait);
- ``policy``: they keep the policy's order, ranked at the top of the band above every
  other job (``rank`` mapping only). On a loaded machine this keeps most of the
  policy's gain (measured on Theta's validation period with ``sef``'s order: mean
  bounded slowdown 19.6 against 25.5 with ``age``), but the longest wait grows (6.8
  against 4.1 days; Slurm's own 4.0), as a long job keeps yielding to shorter starving
  ones.

**Express lane.** With ``express_limit`` > 0, a job whose time limit is known and at
most that many seconds goes above every other job, starving ones included; express jobs
keep the policy's order among themselves (starving ones first). With ``starvation_order
= "policy"`` the lane is the top of the policy's ranking. With ``age`` the band is
split (:func:`lane_levels`): the express jobs get its top part (the starving ones among
them ``hi``, where Slurm's age factor orders them, the others ranked below), the other
starving jobs one level ``S`` more than Slurm's ``PriorityWeightAge`` (``age_weight``,
which the helper reads from Slurm) below the lane's floor, so that no difference in age
lifts a starving job above a younger express one, and the rest of the queue is ranked
in ``[lo, S]``. On an overloaded machine the
guard releases starving whole-machine jobs back to back, and every small job that
arrives meanwhile waits behind them; the lane lets the short ones through first, and a
lifted wide job then waits at most about ``express_limit`` for them to end. Measured in
the simulator (:class:`trainer.evaluate.StarvationGuard`) on Lublin's test period with
``seaf``'s order (the imitation net's) behind 2 days ``policy``: mean bounded slowdown
285 without the lane, 116 with a 10-minute lane and 107 with 15 minutes (Slurm: 676),
utilisation 0.879 without and 0.877 with either (Slurm's 0.876), p99 wait unchanged
(104 hours), the longest wait 20.5 and 20.7 days. Behind 2 days ``age`` with a
15-minute lane, under conservative backfill: 282.8 against Slurm's 960.8, the longest
wait 7.0 days against Slurm's 8.8 (``policy`` order with the same lane: 145.2, but 20.2
days). Default 0 (off).

**Hysteresis.** A new value is written only when it differs from the job's current site
factor by more than ``hysteresis``, or when a starving job is not yet where it must be
(``age``: at ``hi``; ``policy``: above every job that is not starving or express).
Changes are issued head of the queue first (express and starving jobs, then the
policy's order), at most
``max_changes`` per cycle; the rest follow in later cycles.

**Steering.** The first ``steer_jobs`` jobs in the policy's order that can start now
(and may be steered: no user node list or constraint, at least ``steer_min_nodes``
nodes) get candidate node sets from :func:`slurm_plugin.placement.candidates`, restricted
to the nodes of their partition and not excluded; the model's place head picks one. The
chosen nodes are taken out of the free resources before the next job is placed.

**Waiting for one leaf switch** (``steering = "switches"``). The first ``steer_jobs``
steerable jobs of at least two nodes (and ``steer_min_nodes``) in the policy's order that
can start now are looked at in turn (:func:`leaf_waits`). One that a single leaf switch
can hold now is left to Slurm (its topology/tree selection puts it there) and its nodes
are taken out before the next; one that no leaf can hold now, but that one leaf could
hold once its jobs end (enough usable nodes of the job's partition, not excluded, in
one leaf), is asked to wait for one: the helper sets ``Switches=1@switch_wait``, and
Slurm keeps it pending until one leaf can take it, for at most that long (capped by
Slurm's ``max_switch_wait``). Measured in the simulator on Philly
(:class:`trainer.evaluate.SwitchWait`): a 30-minute wait raised the share of multi-node
jobs within one leaf in 4 of 5 stretches of the trace, the mean JCT within -3% to +2%.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..features import JobsRaw, NodesRaw
from ..placement import Candidates, candidates, usable_nodes

__all__ = [
    "MAPPINGS",
    "STARVATION_ORDERS",
    "check_express_limit",
    "check_score_resolution",
    "check_starvation_order",
    "Choice",
    "SiteChange",
    "SiteFactorRule",
    "logit_values",
    "plan_site_factors",
    "policy_order",
    "express_jobs",
    "in_lane",
    "lane_levels",
    "quantize",
    "rank_values",
    "rest_rule",
    "leaf_waits",
    "steer",
    "starving_first",
    "targets",
]

#: Logits at or below this count as masked.
_MASKED_BELOW = -1e8


@dataclass(frozen=True)
class SiteFactorRule:
    """How scores become site factors (see the module docstring).

    Attributes:
        lo: Bottom of the band.
        hi: Top of the band.
        mapping: Key of :data:`MAPPINGS`.
        logit_scale: Site factor per logit unit (``logit`` mapping).
        logit_center: Where logit 0 lands, as a fraction of the band (``logit`` mapping).
        hysteresis: Minimum change worth writing.
        starvation_limit: Seconds of waiting after which a job goes above every job
            that has not waited as long.
        starvation_order: How starving jobs are ordered among themselves, a key of
            :data:`STARVATION_ORDERS`.
        max_changes: Site factor changes issued per cycle, at most.
        score_resolution: Scores are rounded to multiples of this before anything else
            (:func:`quantize`); 0: exact.
        express_limit: Seconds; a job with a known time limit at most this goes above
            every other job, starving ones included (module docstring); 0: off.
        age_weight: Slurm's ``PriorityWeightAge`` (>= 0): with ``age`` order and the
            express lane, the lane's floor stays more than this above the starving jobs'
            level (:func:`lane_levels`). The helper reads it from Slurm.
    """

    lo: int = 0
    hi: int = 100_000
    mapping: str = "rank"
    logit_scale: float = 10_000.0
    logit_center: float = 0.5
    hysteresis: int = 1_000
    starvation_limit: float = 2 * 86400.0
    max_changes: int = 500
    starvation_order: str = "age"
    score_resolution: float = 0.0
    express_limit: float = 0.0
    age_weight: int = 0

    def __post_init__(self) -> None:
        if self.lo >= self.hi:
            raise ValueError(f"band_lo ({self.lo}) must be below band_hi ({self.hi})")
        check_score_resolution(self.score_resolution)
        if self.mapping not in MAPPINGS:
            raise ValueError(f"unknown mapping {self.mapping!r}: use one of {sorted(MAPPINGS)}")
        check_starvation_order(self.starvation_order, self.mapping)
        check_express_limit(self.express_limit, self.starvation_order, self.starvation_limit)
        if self.age_weight < 0:
            raise ValueError(f"age_weight (Slurm's PriorityWeightAge) must be >= 0 (got"
                             f" {self.age_weight})")
        if self.split and self.hi - self.lo < self.age_weight + 3:
            raise ValueError(
                f"the express lane with starvation_order = \"age\" needs a band wider than"
                f" Slurm's PriorityWeightAge ({self.age_weight}) + 2: band_hi - band_lo is"
                f" {self.hi - self.lo}; widen the band (e.g. band_hi ="
                f" {self.lo + 100 * (self.age_weight + 3)}), or use starvation_order ="
                " \"policy\" or express_limit = 0")

    @property
    def split(self) -> bool:
        """Whether the band is split for the express lane in ``age`` order (module docstring)."""
        return self.express_limit > 0 and self.starvation_order == "age"


#: How starving jobs are ordered among themselves (module docstring).
STARVATION_ORDERS: dict[str, str] = {
    "age": "all at the top of the band; Slurm's age factor puts the oldest first",
    "policy": "ranked at the top of the band in the policy's order ('rank' mapping)",
}


def check_starvation_order(order: str, mapping: str = "rank") -> None:
    """Raise ``ValueError`` unless ``order`` is a known starvation order fitting ``mapping``.

    Known: the keys of :data:`STARVATION_ORDERS`. ``policy`` needs the ``rank`` mapping:
    ``logit`` values are clipped at ``hi``, which leaves no room above the band for
    starving jobs.
    """
    if order not in STARVATION_ORDERS:
        raise ValueError(f"unknown starvation_order {order!r}: the starvation order must be"
                         f" one of {sorted(STARVATION_ORDERS)}")
    if order == "policy" and mapping != "rank":
        raise ValueError("starvation_order 'policy' needs mapping 'rank' (the 'logit'"
                         " mapping has no room above the band for starving jobs):"
                         " set mapping = \"rank\" or starvation_order = \"age\"")


def check_express_limit(limit: float, order: str, starvation_limit: float) -> None:
    """Raise ``ValueError`` unless ``limit`` fits the guard it is part of.

    ``limit`` is 0 (no express lane) or a finite number of seconds > 0, which needs the
    starvation guard (``starvation_limit`` > 0), in either ``order`` (module docstring).
    """
    if not (np.isfinite(limit) and limit >= 0):
        raise ValueError(f"express_limit must be a finite number of seconds >= 0 (got {limit})")
    if limit > 0 and not starvation_limit > 0:
        raise ValueError("express_limit needs the starvation guard (starvation_limit > 0):"
                         " the lane is part of it")


def in_lane(limits: np.ndarray | float, express_limit: float) -> np.ndarray:
    """Which time limits (s; 0 or less: unknown) the express lane takes.

    Those known and at most ``express_limit``; none when it is 0.
    """
    lim = np.asarray(limits, dtype=np.float64)
    out: np.ndarray = (lim > 0) & (lim <= express_limit)
    return out


def express_jobs(limits: np.ndarray | None, rule: SiteFactorRule) -> np.ndarray:
    """Which jobs take the express lane (:func:`in_lane`; none when ``limits`` is ``None``)."""
    if limits is None:
        return np.zeros(0, dtype=bool)
    return in_lane(limits, rule.express_limit)


def rank_values(scores: np.ndarray, rule: SiteFactorRule) -> np.ndarray:
    """``rank`` mapping: evenly spaced by rank, ties share the best rank's value."""
    s = np.asarray(scores, dtype=np.float64)
    j = s.size
    if j == 0:
        return np.zeros(0, dtype=np.int64)
    asc = np.sort(s)
    better = j - np.searchsorted(asc, s, side="right")  # jobs with a strictly higher score
    step = (rule.hi - rule.lo) / (j - 1) if j > 1 else 0.0
    out: np.ndarray = np.clip(rule.hi - np.rint(better * step).astype(np.int64),
                              rule.lo, rule.hi)
    return out


def logit_values(scores: np.ndarray, rule: SiteFactorRule) -> np.ndarray:
    """``logit`` mapping: affine in the logits, clipped to the band; masked jobs get ``lo``."""
    s = np.asarray(scores, dtype=np.float64)
    base = rule.lo + rule.logit_center * (rule.hi - rule.lo)
    raw = np.clip(base + rule.logit_scale * np.where(s > _MASKED_BELOW, s, 0.0),
                  rule.lo, rule.hi)
    out: np.ndarray = np.where(s > _MASKED_BELOW, np.rint(raw), rule.lo).astype(np.int64)
    return out


#: Score-to-site-factor mappings by name.
MAPPINGS: dict[str, Callable[[np.ndarray, SiteFactorRule], np.ndarray]] = {
    "rank": rank_values,
    "logit": logit_values,
}


def check_score_resolution(resolution: float) -> None:
    """Raise ``ValueError`` unless ``resolution`` is a finite number >= 0."""
    if not (np.isfinite(resolution) and resolution >= 0):
        raise ValueError(f"score_resolution must be a finite number >= 0 (got {resolution})")


def quantize(scores: np.ndarray, resolution: float) -> np.ndarray:
    """``scores`` rounded to the nearest multiple of ``resolution`` (module docstring).

    Masked scores (at or below ``-1e8``) and a ``resolution`` of 0 leave the scores as
    they are; rounding keeps their order, only jobs closer than ``resolution`` may tie.
    """
    s = np.asarray(scores, dtype=np.float64)
    if resolution <= 0:
        return s
    out: np.ndarray = np.where(s > _MASKED_BELOW, np.round(s / resolution) * resolution, s)
    return out


def policy_order(scores: np.ndarray, eligible: np.ndarray, job_ids: np.ndarray) -> np.ndarray:
    """Row indices in the policy's order: score descending, then arrival, then job id."""
    order: np.ndarray = np.lexsort((np.asarray(job_ids), np.asarray(eligible),
                                    -np.asarray(scores, dtype=np.float64)))
    return order


def lane_levels(rule: SiteFactorRule) -> tuple[int, int]:
    """``(S, X)`` of the band split for the express lane in ``age`` order.

    The starving jobs outside the lane get ``S``, the rest of the queue ``[lo, S]``, the
    lane ``[X, hi]``, ``X = S + age_weight + 1``: three quarters of what the gap leaves
    go to the rest of the queue, where the policy's order needs the room.
    """
    gap = rule.age_weight + 1
    s = rule.lo + (rule.hi - rule.lo - gap) * 3 // 4
    return s, s + gap


def rest_rule(rule: SiteFactorRule) -> SiteFactorRule:
    """The rule the jobs neither in the lane nor starving are ranked by.

    With the band split (:attr:`SiteFactorRule.split`) its part below ``S``
    (:func:`lane_levels`); else ``rule`` itself. The cycle (:func:`targets`) and the hint
    socket rank the queue with it alike.
    """
    if not rule.split:
        return rule
    return replace(rule, hi=lane_levels(rule)[0], express_limit=0.0)


def targets(scores: np.ndarray, waited: np.ndarray, rule: SiteFactorRule,
            limits: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Target site factor per job and which jobs the guard lifts.

    Args:
        scores: Per job (the hold score removed).
        waited: Seconds each job has waited.
        rule: The rule.
        limits: Time limit per job, s (0 or less: unknown), for the express lane
            (:func:`express_jobs`); ``None``: no lane.

    Returns:
        ``(values, lifted)``: int64 values inside ``[lo, hi]``, and a bool mask of the
        jobs above the policy's order: the starving ones and the express ones.
    """
    s = np.asarray(scores, dtype=np.float64)
    starving = np.asarray(waited, dtype=np.float64) > rule.starvation_limit
    express = express_jobs(limits, rule)
    if rule.split:  # (the levels hold whether or not a job is in the lane now)
        return _split_targets(s, starving, express, rule)
    if express.any():  # (policy order)
        values = MAPPINGS[rule.mapping](starving_first(starving_first(s, starving),
                                                       express), rule)
        starving = starving | express
    elif rule.starvation_order == "policy":
        values = MAPPINGS[rule.mapping](starving_first(s, starving), rule)
    else:
        values = np.where(starving, rule.hi, MAPPINGS[rule.mapping](s, rule))
    out: np.ndarray = np.clip(values, rule.lo, rule.hi).astype(np.int64)
    return out, starving


def _split_targets(s: np.ndarray, starving: np.ndarray, express: np.ndarray,
                   rule: SiteFactorRule) -> tuple[np.ndarray, np.ndarray]:
    """:func:`targets` for the express lane in ``age`` order (module docstring)."""
    lvl, floor = lane_levels(rule)
    mapping = MAPPINGS[rule.mapping]
    ex = express if express.size else np.zeros(s.size, dtype=bool)
    values = np.full(s.size, lvl, dtype=np.int64)  # the starving jobs outside the lane
    rest = ~starving & ~ex
    values[rest] = mapping(s[rest], rest_rule(rule))
    if ex.any():
        st = starving[ex]
        lane = mapping(starving_first(s[ex], st), replace(rule, lo=floor, express_limit=0.0))
        values[ex] = np.where(st, rule.hi, lane)
    out: np.ndarray = np.clip(values, rule.lo, rule.hi).astype(np.int64)
    return out, starving | ex


def starving_first(scores: np.ndarray, starving: np.ndarray) -> np.ndarray:
    """Scores shifted so that every starving job is above every other, orders kept.

    The starving jobs' scores are raised by one more than the gap between the lowest of
    them and the highest of the others (exact in float64 for scores within ±1e12).
    """
    s = np.asarray(scores, dtype=np.float64)
    st = np.asarray(starving, dtype=bool)
    if not st.any() or st.all():
        return s
    lift = float(s[~st].max() - s[st].min()) + 1.0
    out: np.ndarray = np.where(st, s + max(lift, 0.0), s)
    return out


@dataclass(frozen=True)
class SiteChange:
    """One site factor to write.

    Attributes:
        job_id: The job.
        old: Its current site factor (as the helper knows it).
        new: The value to write (inside the band).
        reason: ``"policy"``, ``"starvation"`` or ``"express"``.
    """

    job_id: int
    old: int
    new: int
    reason: str


def plan_site_factors(job_ids: np.ndarray, values: np.ndarray, starving: np.ndarray,
                      current: np.ndarray, order: np.ndarray, rule: SiteFactorRule,
                      express: np.ndarray | None = None) -> tuple[list[SiteChange], int]:
    """The site factor changes worth writing this cycle, head of the queue first.

    Args:
        job_ids: Per job.
        values: Target values (:func:`targets`).
        starving: The jobs the guard lifts (:func:`targets`' mask: starving or express).
        current: Current site factor per job.
        order: The policy's order (:func:`policy_order`).
        rule: The rule (hysteresis, max_changes, band).
        express: The express jobs among them (their changes' reason), if any.

    Returns:
        ``(changes, deferred)``: at most ``max_changes`` changes (lifted jobs first, then
        in the policy's order) and the number of further changes left for later cycles.
    """
    vals = np.clip(np.asarray(values, dtype=np.int64), rule.lo, rule.hi)
    cur = np.asarray(current, dtype=np.int64)
    st = np.asarray(starving, dtype=bool)
    ex = (np.zeros(len(st), dtype=bool) if express is None or len(express) == 0
          else np.asarray(express, dtype=bool))
    move = np.abs(vals - cur) > rule.hysteresis
    if rule.starvation_order == "policy":
        floor = int(vals[~st].max()) if (~st).any() else rule.lo - 1
        move |= st & (cur <= floor) & (cur != vals)  # not yet above every other job
    elif rule.split:
        # exact where age orders the jobs (the starving ones, at S or at hi); the lane's
        # others until they are in its part of the band, the rest until they are at or
        # below S (a value left from before the lane, within the hysteresis, would
        # otherwise sit above the starving jobs)
        lvl, floor = lane_levels(rule)
        move |= ((st & ~ex) | (ex & (vals == rule.hi))) & (cur != vals)
        move |= ex & (cur < floor) & (cur != vals)
        move |= ~st & (cur > lvl) & (cur != vals)
    else:
        move |= st & (cur != vals)
    pos = np.empty(len(order), dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    rows = np.flatnonzero(move)
    rows = rows[np.lexsort((pos[rows], ~st[rows]))]
    limit = max(0, rule.max_changes)
    chosen = rows[:limit]
    changes = [SiteChange(int(job_ids[r]), int(cur[r]), int(vals[r]),
                          "express" if ex[r] else "starvation" if st[r] else "policy")
               for r in chosen.tolist()]
    return changes, int(rows.size - chosen.size)


@dataclass(frozen=True)
class Choice:
    """A steering decision: job row, chosen node indices and how they were proposed."""

    row: int
    nodes: tuple[int, ...]
    kind: str
    leaves: int


def _take(nodes: NodesRaw, idx: np.ndarray, jobs: JobsRaw, row: int) -> NodesRaw:
    """The node table with job ``row``'s request taken from nodes ``idx``."""
    free_c = nodes.free_c.copy()
    free_g = nodes.free_g.copy()
    free_m = nodes.free_m.copy()
    idle = nodes.idle.copy()
    if jobs.exclusive[row]:
        free_c[idx] = 0
        free_g[idx] = 0
        free_m[idx] = 0
    else:
        free_c[idx] = np.maximum(0, free_c[idx] - jobs.cpus[row])
        free_g[idx] = np.maximum(0, free_g[idx] - jobs.gpus[row])
        free_m[idx] = np.maximum(0, free_m[idx] - jobs.mem[row])
    idle[idx] = False
    return replace(nodes, free_c=free_c, free_g=free_g, free_m=free_m, idle=idle)


def steer(jobs: JobsRaw, nodes: NodesRaw, order: Sequence[int] | np.ndarray, may_steer: np.ndarray,
          fits: np.ndarray, allowed: Callable[[int], np.ndarray],
          place: Callable[[int, Candidates], int], *, max_jobs: int, min_nodes: int = 1,
          max_sets: int = 8) -> list[Choice]:
    """Choose node sets for the first ``max_jobs`` steerable jobs that fit now.

    Args:
        jobs: The pending jobs' raw table.
        nodes: The node table.
        order: Rows in the policy's order.
        may_steer: Per row, whether the job may be steered at all.
        fits: Per row, whether it can start now (the observation's job mask).
        allowed: Row -> bool mask of the nodes the job may use (partition, exclusions).
        place: ``(row, candidates) -> index`` (the model's place head).
        max_jobs: How many jobs to steer, at most.
        min_nodes: Only jobs asking for at least this many nodes.
        max_sets: Candidate sets per job, at most.

    Returns:
        The choices, in the policy's order.
    """
    out: list[Choice] = []
    work = nodes
    for row in order:
        if len(out) >= max_jobs:
            break
        r = int(row)
        if not (may_steer[r] and fits[r]) or int(jobs.nodes[r]) < min_nodes:
            continue
        view = replace(work, up=work.up & allowed(r))
        cands = candidates(view, int(jobs.nodes[r]), int(jobs.cpus[r]), int(jobs.gpus[r]),
                           int(jobs.mem[r]), bool(jobs.exclusive[r]), max_sets=max_sets)
        if not len(cands):
            continue
        k = place(r, cands)
        if not 0 <= k < len(cands):
            raise ValueError(f"place head chose candidate {k} of {len(cands)}")
        idx = cands.nodes(k)
        out.append(Choice(r, tuple(int(i) for i in idx), cands.kinds[k],
                          int(cands.leaves[k])))
        work = _take(work, idx, jobs, r)
    return out


def _one_leaf_holds(nodes: NodesRaw, n: int, cpus: int, gpus: int, mem: int,
                    exclusive: bool) -> bool:
    """Whether one leaf switch has ``n`` usable nodes for the request once they are idle."""
    if nodes.n_leaves <= 1:
        return False
    empty = replace(nodes, free_c=nodes.cap_c, free_g=nodes.cap_g, free_m=nodes.cap_m,
                    idle=np.ones_like(nodes.idle))
    ok = usable_nodes(empty, cpus, gpus, mem, exclusive)
    if not ok.any():
        return False
    return int(np.bincount(nodes.leaf[ok], minlength=nodes.n_leaves).max()) >= n


def leaf_waits(jobs: JobsRaw, nodes: NodesRaw, order: Sequence[int] | np.ndarray,
               may_steer: np.ndarray, fits: np.ndarray, allowed: Callable[[int], np.ndarray],
               *, max_jobs: int, min_nodes: int = 2, max_sets: int = 8) -> list[int]:
    """Rows of the jobs to give ``Switches=1@wait`` (module docstring).

    Args:
        jobs: The pending jobs' raw table.
        nodes: The node table.
        order: Rows in the policy's order.
        may_steer: Per row, whether the job may be steered at all.
        fits: Per row, whether it can start now (the observation's job mask).
        allowed: Row -> bool mask of the nodes the job may use (partition, exclusions).
        max_jobs: How many jobs to look at, at most.
        min_nodes: Only jobs asking for at least this many nodes (2 at least).
        max_sets: Candidate sets per job, at most.

    Returns:
        The rows, in the policy's order.
    """
    out: list[int] = []
    work = nodes
    seen = 0
    for row in order:
        if seen >= max_jobs:
            break
        r = int(row)
        n = int(jobs.nodes[r])
        if not (may_steer[r] and fits[r]) or n < max(2, min_nodes):
            continue
        seen += 1
        mask = allowed(r)
        req = (int(jobs.cpus[r]), int(jobs.gpus[r]), int(jobs.mem[r]), bool(jobs.exclusive[r]))
        cands = candidates(replace(work, up=work.up & mask), n, *req, max_sets=max_sets)
        if not len(cands):
            continue
        one = np.flatnonzero(cands.leaves == 1)
        if one.size:  # Slurm puts it in one leaf: its nodes are taken
            work = _take(work, cands.nodes(int(one[0])), jobs, r)
        elif _one_leaf_holds(replace(nodes, up=nodes.up & mask), n, *req):
            out.append(r)  # waits: takes nothing now
        else:  # no leaf ever holds it: it starts across leaves as Slurm places it
            work = _take(work, cands.nodes(0), jobs, r)
    return out
