"""Acting in :class:`~trainer.env.SchedEnv` with a :class:`~trainer.policy.PolicyNet`.

One action space for both phases
    The env's actions are ``0..max_jobs`` (hold is ``max_jobs``) in the job phase and
    ``0..K-1`` (candidate node sets) in the placement phase. :func:`action_logits` maps
    the net's outputs onto that space: in the job phase column ``k < J`` is job ``k``'s
    logit and column ``max_jobs`` the hold logit; in the placement phase column ``k <
    K`` is candidate ``k``'s logit; every column outside ``info["action_mask"]`` is
    :data:`~trainer.policy.MASKED`. The actor is the masked categorical over these
    logits (softmax), the critic the value head; DQN reads the same logits as
    Q-values. One function serves acting, learning and evaluation.

Rollouts (:func:`run_group`)
    A :class:`Task` names an episode: the window (first row), the acting mode
    (:data:`ACT_MODES`), its own seed, and whether it runs on the training or the
    evaluation env. A *group* of tasks runs in lockstep in one process: every tick,
    the envs still running are scored in one :meth:`~trainer.policy.PolicyNet.forward_batch`
    call (batched inference), then each draws its action from its own generator. The
    result of a group depends only on the weights, the tasks and the group's
    composition, never on which worker ran it or how many workers there are.

Heuristic agents (:data:`AGENTS`) act in the same env without a net: the references
the learning tests and the validation curves compare with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from slurm_plugin.features import JOB_FEATURES, Normalisation, Observation

from ..env import EnvConfig, SchedEnv
from ..policy import MASKED, PolicyNet, batch_tensors
from ..sim.state import Cluster, JobTable

__all__ = [
    "ACT_MODES",
    "AGENTS",
    "EnvSpec",
    "State",
    "Step",
    "Task",
    "Trajectory",
    "action_logits",
    "dl2_explore",
    "masked_argmax",
    "run_group",
    "sample_masked",
    "state_batch",
]

#: How a task picks its actions.
#:
#: - ``sample``: from the policy (softmax over the masked logits);
#: - ``greedy``: the most likely legal action (ties: the lowest index);
#: - ``uniform``: uniformly among the legal actions (Chic's extra sample);
#: - ``epsilon``: uniform with probability ``eps``, else greedy (SCHED²'s DQN);
#: - ``explore``: DL²'s job-aware exploration: sample; if the state is a poor one
#:   for the sampled action (:func:`dl2_explore`), take the specified action instead
#:   with probability ``eps``;
#: - ``agent``: the heuristic agent ``Task.agent`` (:data:`AGENTS`), no net.
ACT_MODES = ("sample", "greedy", "uniform", "epsilon", "explore", "agent")

_EST = JOB_FEATURES.index("log_est_run")


# ---------------------------------------------------------------------------- data
@dataclass(frozen=True)
class EnvSpec:
    """What a rollout worker needs to build its environments (picklable).

    Attributes:
        jobs: The job table (training and validation periods; never the test period).
        cluster: The cluster.
        train: Env settings of the training episodes (windows of ``episode_jobs``).
        eval: Env settings of the validation episodes (one window, the whole
            validation period or its first jobs).
        norm: Feature normalisation.
        train_rows: Rows ``[0, train_rows)`` are the training period.
        incumbent: ``(start, end)`` per job of ``jobs`` in the Slurm baseline's replay,
            where the training episodes warm-start from it (``train.warm_start``).
    """

    jobs: JobTable
    cluster: Cluster
    train: EnvConfig
    eval: EnvConfig
    norm: Normalisation
    train_rows: int
    incumbent: tuple[np.ndarray, np.ndarray] | None = None

    def make(self, evaluation: bool = False) -> SchedEnv:
        """A fresh environment (training or evaluation settings)."""
        return SchedEnv(self.jobs, self.cluster, self.eval if evaluation else self.train,
                        self.norm, incumbent=self.incumbent)


@dataclass(frozen=True)
class Task:
    """One episode to roll out.

    Attributes:
        start: First row of the window in :attr:`EnvSpec.jobs`.
        seed: Seed of this episode's action draws.
        mode: One of :data:`ACT_MODES`.
        eps: Exploration probability (``epsilon`` and ``explore`` modes).
        ratio: ``explore`` mode: the run-time ratio that makes a job a poor choice.
        agent: Heuristic agent name (``agent`` mode).
        eval: Run on the evaluation env settings.
        keep_steps: Return the steps (else only the return and the metrics).
    """

    start: int
    seed: int
    mode: str = "sample"
    eps: float = 0.0
    ratio: float = 10.0
    agent: str | None = None
    eval: bool = False
    keep_steps: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ACT_MODES:
            raise ValueError(f"unknown acting mode {self.mode!r}: {ACT_MODES}")
        if self.mode == "agent" and self.agent not in AGENTS:
            raise ValueError(f"mode 'agent' needs an agent among {sorted(AGENTS)}")
        if not 0.0 <= self.eps <= 1.0:
            raise ValueError("eps must lie in [0, 1]")


@dataclass
class State:
    """A decision as the net sees it.

    Attributes:
        obs: The observation (:attr:`info["observation"]`).
        cands: ``(K, N)`` candidate node sets in the placement phase, else ``None``.
        place_job: Row of the job being placed (placement phase), else ``None``.
        mask: The env's legal actions (``max_jobs + 1`` bools).
    """

    obs: Observation
    cands: np.ndarray | None
    place_job: int | None
    mask: np.ndarray

    @property
    def placing(self) -> bool:
        """The decision is a placement."""
        return self.cands is not None


@dataclass
class Step(State):
    """A :class:`State`, the action taken there and the reward that followed.

    Attributes:
        action: The env action.
        reward: The reward of the step (unscaled).
        explored: The action was DL²'s specified action, not the policy's.
    """

    action: int = 0
    reward: float = 0.0
    explored: bool = False


@dataclass
class Trajectory:
    """One episode.

    Attributes:
        task: The task that made it.
        steps: The steps (empty unless ``task.keep_steps``).
        ret: Sum of the rewards.
        length: Number of steps.
        terminated: Every job of the window finished.
        truncated: Cut at ``max_steps``.
        last: The state after the last step when truncated (to bootstrap from).
        metrics: The env's ``episode_metrics`` (when terminated).
    """

    task: Task
    steps: list[Step]
    ret: float
    length: int
    terminated: bool
    truncated: bool
    last: State | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def rewards(self) -> np.ndarray:
        """Rewards per step."""
        return np.array([s.reward for s in self.steps], dtype=np.float64)


def _state(obs_dict: dict[str, Any], info: dict[str, Any]) -> State:
    cands = info["candidates"]
    place_job = int(np.argmax(obs_dict["selected"])) if cands is not None else None
    return State(info["observation"], None if cands is None else np.asarray(cands.sets),
                 place_job, np.asarray(info["action_mask"], dtype=bool))


# ---------------------------------------------------------------------------- logits
def state_batch(states: Sequence[State]) -> tuple[Any, Tensor, Tensor]:
    """``(Batch, masks [B, A] bool, placing [B] bool)`` for :func:`action_logits`.

    The batch's job mask is the env's (legal jobs), so that the net's pooled context
    sees exactly what the env allows.
    """
    b = batch_tensors([(s.obs, s.cands, s.place_job) for s in states])
    masks = torch.from_numpy(np.stack([s.mask for s in states]))
    jmax = int(b.jobs.shape[1])
    env_jobs = masks[:, :jmax] & b.job_valid
    b.job_mask = torch.where(torch.tensor([s.placing for s in states]).unsqueeze(1),
                             b.job_mask, env_jobs)
    placing = torch.tensor([s.placing for s in states], dtype=torch.bool)
    return b, masks, placing


def action_logits(net: PolicyNet, states: Sequence[State]) -> tuple[Tensor, Tensor]:
    """Masked logits over the env's action space, and the values.

    Returns:
        ``logits [B, max_jobs + 1]`` (illegal actions :data:`~trainer.policy.MASKED`)
        and ``values [B]``.
    """
    b, masks, placing = state_batch(states)
    jl, pl, value = net.forward_batch(b)
    bsz, n_act = masks.shape
    jmax, kmax = int(b.jobs.shape[1]), int(pl.shape[1])
    if kmax > n_act:
        raise ValueError(f"{kmax} candidates do not fit an action space of {n_act}")
    fill = torch.full((bsz, n_act), MASKED, dtype=jl.dtype)
    job = torch.cat((jl[:, :jmax], fill[:, jmax:n_act - 1], jl[:, jmax:]), 1)
    place = torch.cat((pl, fill[:, kmax:]), 1)
    logits = torch.where(placing.unsqueeze(1), place, job)
    logits = torch.where(masks, logits, fill)
    return logits, value


def sample_masked(logits: np.ndarray, mask: np.ndarray, u: float) -> int:
    """The action a uniform draw ``u`` in [0, 1) picks from the masked softmax."""
    legal = np.flatnonzero(mask)
    if not legal.size:
        raise ValueError("no legal action")
    z = logits[legal].astype(np.float64)
    p = np.exp(z - z.max())
    c = np.cumsum(p)
    k = int(np.searchsorted(c, u * c[-1], side="right"))
    return int(legal[min(k, legal.size - 1)])


def masked_argmax(logits: np.ndarray, mask: np.ndarray) -> int:
    """The legal action with the largest logit (ties: the lowest index)."""
    legal = np.flatnonzero(mask)
    if not legal.size:
        raise ValueError("no legal action")
    return int(legal[int(np.argmax(logits[legal]))])


# ---------------------------------------------------------------------------- DL² exploration
def dl2_explore(state: State, action: int, node_leaf: np.ndarray | None = None,
                ratio: float = 10.0) -> int | None:
    """DL²'s job-aware exploration: the specified action if ``action`` is a poor one.

    DL² (§4, "Job-aware exploration") lists input states where the policy's action is
    known to waste resources and, with probability ``eps``, takes a specified action
    there instead. Translated to picking jobs and node sets (the policy's features
    only, as the live helper would have them):

    - *hold while a job fits* (resources left idle while jobs wait, like DL²'s
      workers without a parameter server): start the fitting job with the shortest
      estimated run time (``log_est_run``, from the user's history; ties: the oldest);
    - *a job whose estimated run time is more than* ``ratio`` *times the shortest
      fitting one's* (DL²'s "differ too much", threshold 10): start that shortest job;
    - *placement on more leaf switches than the fewest any candidate spans*: the first
      candidate spanning the fewest.

    Returns:
        The specified action, or ``None`` when ``action`` is not a poor one.
    """
    obs, mask = state.obs, state.mask
    if state.placing:
        assert state.cands is not None
        leaf = obs.node_leaf if node_leaf is None else node_leaf
        spans = np.array([np.unique(leaf[row]).size for row in state.cands])
        best = int(np.argmin(spans))
        return best if spans[action] > spans[best] else None
    n = obs.n_jobs
    fits = mask[:n]
    if not fits.any():
        return None
    est = np.expm1(obs.jobs[:, _EST].astype(np.float64))
    idx = np.flatnonzero(fits)
    best = int(idx[int(np.argmin(est[idx]))])
    if action == mask.size - 1:
        return best
    if est[action] > ratio * max(est[best], 1e-9) and action != best:
        return best
    return None


# ---------------------------------------------------------------------------- agents
class Agent(Protocol):
    """A heuristic agent: ``(env, info, rng) -> action``."""

    def __call__(self, env: SchedEnv, info: dict[str, Any], rng: np.random.Generator
                 ) -> int: ...


def _fitting(info: dict[str, Any]) -> np.ndarray:
    mask = info["action_mask"]
    return np.flatnonzero(mask[:-1])


def _sjf(env: SchedEnv, info: dict[str, Any], rng: np.random.Generator) -> int:
    """Start the fitting job with the shortest time limit (first candidate to place)."""
    if info["phase"] == 1:
        return 0
    fit = _fitting(info)
    if not fit.size:
        return int(info["action_mask"].size - 1)
    limits = env.stepper.jobs.limit[info["rows"][fit]]
    return int(fit[int(np.argmin(limits))])


def _fifo(env: SchedEnv, info: dict[str, Any], rng: np.random.Generator) -> int:
    """Start the oldest fitting job (first candidate to place)."""
    if info["phase"] == 1:
        return 0
    fit = _fitting(info)
    return int(fit[0]) if fit.size else int(info["action_mask"].size - 1)


def _random(env: SchedEnv, info: dict[str, Any], rng: np.random.Generator) -> int:
    """Any legal action, uniformly (hold included)."""
    legal = np.flatnonzero(info["action_mask"])
    return int(legal[int(rng.integers(legal.size))])


#: Heuristic agents acting in the env, by name. ``sjf`` and ``fifo`` never hold while
#: a job fits (greedy); ``sjf`` reads the true time limit from the job table (the
#: recorded run time when the record has none: an oracle).
AGENTS: dict[str, Callable[[SchedEnv, dict[str, Any], np.random.Generator], int]] = {
    "sjf": _sjf,
    "fifo": _fifo,
    "random": _random,
}


# ---------------------------------------------------------------------------- rollouts
class _Running:
    """One episode in progress inside a group."""

    def __init__(self, env: SchedEnv, task: Task) -> None:
        self.env = env
        self.task = task
        self.rng = np.random.default_rng(task.seed)
        obs, info = env.reset(seed=task.seed, options={"start": task.start})
        self.obs, self.info = obs, info
        self.steps: list[Step] = []
        self.ret = 0.0
        self.length = 0
        self.done = False
        self.terminated = False
        self.truncated = False
        self.metrics: dict[str, float] = {}

    @property
    def needs_net(self) -> bool:
        return self.task.mode not in ("agent", "uniform")

    def state(self) -> State:
        return _state(self.obs, self.info)

    def act(self, logits: np.ndarray | None) -> None:
        t, rng = self.task, self.rng
        st = self.state()
        mask = st.mask
        explored = False
        u1, u2 = rng.random(2)  # the same draws whatever the mode does with them
        if t.mode == "agent":
            assert t.agent is not None
            a = AGENTS[t.agent](self.env, self.info, rng)
        elif t.mode == "uniform":
            legal = np.flatnonzero(mask)
            a = int(legal[min(int(u1 * legal.size), legal.size - 1)])
        else:
            assert logits is not None
            if t.mode == "greedy":
                a = masked_argmax(logits, mask)
            elif t.mode == "epsilon":
                if u2 < t.eps:
                    legal = np.flatnonzero(mask)
                    a = int(legal[min(int(u1 * legal.size), legal.size - 1)])
                else:
                    a = masked_argmax(logits, mask)
            else:  # sample, explore
                a = sample_masked(logits, mask, float(u1))
                if t.mode == "explore" and u2 < t.eps:
                    alt = dl2_explore(st, a, self.env.cluster.leaf_of, t.ratio)
                    if alt is not None and mask[alt]:
                        a, explored = alt, True
        obs, r, term, trunc, info = self.env.step(a)
        if "invalid_action" in info:
            raise RuntimeError(f"rollout took a masked action: {info['invalid_action']}")
        self.ret += r
        self.length += 1
        if t.keep_steps:
            self.steps.append(Step(st.obs, st.cands, st.place_job, mask, a, float(r),
                                   explored))
        self.obs, self.info = obs, info
        if term or trunc:
            self.done = True
            self.terminated, self.truncated = bool(term), bool(trunc)
            self.metrics = dict(info.get("episode_metrics", {}))

    def result(self) -> Trajectory:
        last = self.state() if self.truncated and self.info["observation"] is not None else None
        return Trajectory(self.task, self.steps, self.ret, self.length, self.terminated,
                          self.truncated, last, self.metrics)


def run_group(net: PolicyNet | None, spec: EnvSpec, tasks: Sequence[Task],
              envs: dict[bool, list[SchedEnv]] | None = None) -> list[Trajectory]:
    """Roll out ``tasks`` in lockstep with batched inference (module docstring).

    Args:
        net: The policy (may be ``None`` when every task is ``agent`` or ``uniform``).
        spec: How to build the environments.
        tasks: The episodes.
        envs: Environments to reuse, by ``evaluation`` flag (filled as needed).

    Returns:
        One trajectory per task, in order.
    """
    pool: dict[bool, list[SchedEnv]] = envs if envs is not None else {}
    used: dict[bool, int] = {False: 0, True: 0}
    running = []
    for t in tasks:
        lst = pool.setdefault(t.eval, [])
        if used[t.eval] == len(lst):
            lst.append(spec.make(t.eval))
        running.append(_Running(lst[used[t.eval]], t))
        used[t.eval] += 1
    for r in running:  # a window may end at once (nothing to decide)
        if r.info["observation"] is None and not r.env.stepper.done:
            raise RuntimeError("an episode started without a decision")
    while True:
        live = [r for r in running if not r.done]
        if not live:
            break
        need = [r for r in live if r.needs_net]
        logits: dict[int, np.ndarray] = {}
        if need:
            if net is None:
                raise ValueError("tasks that act with the policy need a net")
            with torch.no_grad():
                lg, _ = action_logits(net, [r.state() for r in need])
            arr = lg.double().numpy()
            for i, r in enumerate(need):
                logits[id(r)] = arr[i]
        for r in live:
            r.act(logits.get(id(r)))
    return [r.result() for r in running]


def discounted(rewards: np.ndarray, gamma: float, last: float = 0.0) -> np.ndarray:
    """Discounted returns ``G_t = r_t + gamma G_{t+1}``, ``G_T = last``."""
    out = np.zeros(rewards.size, dtype=np.float64)
    g = float(last)
    for i in range(rewards.size - 1, -1, -1):
        g = float(rewards[i]) + gamma * g
        out[i] = g
    return out


def entropy_of(logits: Tensor) -> Tensor:
    """Entropy of each row's masked categorical (masked entries contribute 0)."""
    logp = torch.log_softmax(logits, -1)
    p = logp.exp()
    return -(p * torch.where(logits > MASKED / 2, logp, torch.zeros_like(logp))).sum(-1)


def finite_mean(xs: Sequence[float]) -> float:
    """Mean of the finite values (NaN when none)."""
    v = [x for x in xs if math.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")
