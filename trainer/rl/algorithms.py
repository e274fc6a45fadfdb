"""The RL algorithms, by name in :data:`ALGORITHMS`.

Each algorithm says which episodes to roll out (:meth:`Algorithm.plan`, a list of
:class:`~trainer.rl.acting.Task`) and learns from the trajectories that come back
(:meth:`Algorithm.learn`); the loop in :mod:`trainer.rl.trainer` does the rest
(rollouts on workers, validation, checkpoints). Actor and critic are the one
:class:`~trainer.policy.PolicyNet`: the masked categorical over
:func:`~trainer.rl.acting.action_logits` (job phase and placement phase alike) and
the value head. Rewards are multiplied by the loop's reward scale before learning.

- ``ppo`` (default): PPO-clip with GAE(lambda), an entropy bonus and a value loss,
  several epochs of minibatches over each round's steps (old log-probabilities are
  recomputed with the same batched forward before the first epoch, so the first
  ratio is exactly 1).
- ``a2c`` (DL²): advantage actor-critic whose minibatches are drawn from a replay
  buffer of the latest rounds' samples (Monte-Carlo discounted returns, bootstrapped from the
  critic at a truncation; advantage = return - V(s) under the current critic), with
  an entropy bonus and DL²'s job-aware exploration
  (:func:`~trainer.rl.acting.dl2_explore`).
- ``dqn`` (SCHED²): Q(s, a) are the masked action logits (job scores and hold, or the
  candidate scores); one-step targets from a target network (double DQN by default),
  proportional prioritised replay, epsilon-greedy rollouts with a linear decay.
- ``reinforce`` (RL-TAPS): several episodes on each of a few windows; the baseline
  at decision ``t`` is the mean over that window's episodes of their return from
  ``t`` (over the episodes that reach ``t``); one gradient step per round.
- ``cem`` (Chic): per window, N episodes from the policy plus one with uniformly
  random legal actions; the best ``elite_frac`` by return are the elites; the net is
  fitted to their actions by maximum likelihood (Adam), then smoothed with the
  previous weights (Chic's alpha). Chic's population is of trajectories drawn from
  the policy, not of parameter vectors: the policy is the sampling distribution the
  cross-entropy method updates (Chic eq. 3, 9), which keeps the whole network
  trainable at the cost of one rollout per sample.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ..policy import PolicyNet
from .acting import State, Step, Task, Trajectory, action_logits, discounted, entropy_of
from .config import A2CConfig, AlgoConfig, CEMConfig, DQNConfig, PPOConfig, ReinforceConfig
from .replay import PrioritizedReplay, RoundReplay

__all__ = [
    "ALGORITHMS",
    "A2C",
    "CEM",
    "DQN",
    "PPO",
    "Algorithm",
    "Reinforce",
    "TaskMaker",
    "elites",
    "gae",
    "per_step_baseline",
]


# ---------------------------------------------------------------------------- helpers
def gae(rewards: np.ndarray, values: np.ndarray, last_value: float, gamma: float,
        lam: float) -> np.ndarray:
    """Generalised advantage estimates of one trajectory.

    ``delta_t = r_t + gamma V(s_{t+1}) - V(s_t)`` with ``V(s_T) = last_value``;
    ``A_t = delta_t + gamma lam A_{t+1}``.
    """
    adv = np.zeros(rewards.size, dtype=np.float64)
    g = 0.0
    for t in range(rewards.size - 1, -1, -1):
        nv = values[t + 1] if t + 1 < rewards.size else last_value
        delta = rewards[t] + gamma * nv - values[t]
        g = delta + gamma * lam * g
        adv[t] = g
    return adv


def per_step_baseline(returns: Sequence[np.ndarray]) -> list[np.ndarray]:
    """RL-TAPS's baseline: at step ``t``, the mean of ``G_t`` over the episodes reaching ``t``."""
    if not returns:
        return []
    n = max(r.size for r in returns)
    tot = np.zeros(n)
    cnt = np.zeros(n)
    for r in returns:
        tot[:r.size] += r
        cnt[:r.size] += 1
    b = tot / np.maximum(cnt, 1)
    return [b[:r.size].copy() for r in returns]


def elites(returns: Sequence[float], frac: float) -> list[int]:
    """Indices of the best ``max(1, round(frac * n))`` returns (ties: the earlier first)."""
    n = len(returns)
    k = max(1, min(n, int(round(frac * n))))
    order = sorted(range(n), key=lambda i: (-returns[i], i))
    return sorted(order[:k])


def _gather(logits: Tensor, actions: Sequence[int]) -> Tensor:
    a = torch.tensor(list(actions), dtype=torch.int64).unsqueeze(1)
    return torch.log_softmax(logits, -1).gather(1, a).squeeze(1)


def _chunked(net: PolicyNet, states: Sequence[State], size: int = 512
             ) -> tuple[Tensor, Tensor]:
    """:func:`action_logits` without gradients, in chunks."""
    lg: list[Tensor] = []
    vs: list[Tensor] = []
    with torch.no_grad():
        for lo in range(0, len(states), size):
            a, v = action_logits(net, states[lo:lo + size])
            lg.append(a)
            vs.append(v)
    if not lg:
        return torch.zeros(0, 0), torch.zeros(0)
    width = max(x.shape[1] for x in lg)
    if any(x.shape[1] != width for x in lg):
        raise ValueError("states of one update must share an action space")
    return torch.cat(lg), torch.cat(vs)


class TaskMaker:
    """Draws windows and seeds for an algorithm's tasks from the loop's generator.

    Args:
        rng: The loop's generator (its state is saved with the trainer's).
        train_rows: Rows of the training period; windows lie inside it.
        window: Jobs per training window.
    """

    def __init__(self, rng: np.random.Generator, train_rows: int, window: int) -> None:
        self.rng = rng
        self.hi = max(0, train_rows - window)

    def start(self) -> int:
        """A random first row of a training window."""
        return int(self.rng.integers(0, self.hi + 1))

    def seed(self) -> int:
        """A fresh seed for an episode's action draws."""
        return int(self.rng.integers(0, 2**63 - 1))

    def tasks(self, windows: int, per_window: int, mode: str, eps: float = 0.0
              ) -> list[Task]:
        """``per_window`` episodes on each of ``windows`` random windows."""
        out: list[Task] = []
        for _ in range(windows):
            s = self.start()
            out.extend(Task(s, self.seed(), mode, eps) for _ in range(per_window))
        return out


# ---------------------------------------------------------------------------- base
class Algorithm(ABC):
    """An RL algorithm (module docstring).

    Args:
        net: The policy network, trained in place.
        config: The algorithm's config (:attr:`config_cls`).
        rng: The loop's generator (minibatch order, replay draws).

    Attributes:
        reward_scale: Rewards are multiplied by it before learning (set by the loop).
        env_steps: Env steps learnt from so far.
    """

    name: ClassVar[str] = ""
    config_cls: ClassVar[type[AlgoConfig]] = AlgoConfig

    def __init__(self, net: PolicyNet, config: AlgoConfig, rng: np.random.Generator) -> None:
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{self.name} needs a {self.config_cls.__name__}, "
                            f"got {type(config).__name__}")
        self.net = net
        self.cfg = config
        self.rng = rng
        self.reward_scale = 1.0
        self.opt = torch.optim.Adam(net.parameters(), lr=config.lr)
        self.env_steps = 0

    @abstractmethod
    def plan(self, tm: TaskMaker) -> list[Task]:
        """The episodes of the next round."""

    @abstractmethod
    def learn(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Learn from a round's trajectories; returns statistics for the curves."""

    def scaled(self, traj: Trajectory) -> np.ndarray:
        """The trajectory's rewards times the reward scale."""
        return traj.rewards() * self.reward_scale

    def set_progress(self, frac: float) -> float:
        """Set the step size of an update ``frac`` (0 to 1) of the way through the budget.

        ``lr``, annealed linearly to ``lr_final`` when that is set; returns it.
        """
        c = self.cfg
        lr = c.lr
        if c.lr_final is not None:
            lr += (c.lr_final - c.lr) * min(max(frac, 0.0), 1.0)
        for group in self.opt.param_groups:
            group["lr"] = lr
        return lr

    def _step(self, loss: Tensor) -> float:
        self.opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.max_grad_norm)
        self.opt.step()
        return float(norm)

    def _bootstrap(self, trajs: Sequence[Trajectory]) -> list[float]:
        """Value of each trajectory's state after its end (0 unless truncated)."""
        lasts = [t.last for t in trajs if t.truncated and t.last is not None]
        vals = _chunked(self.net, lasts)[1].double().numpy() if lasts else np.zeros(0)
        out: list[float] = []
        k = 0
        for t in trajs:
            if t.truncated and t.last is not None:
                out.append(float(vals[k]))
                k += 1
            else:
                out.append(0.0)
        return out

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs besides the net's weights."""
        return {"opt": self.opt.state_dict(), "env_steps": self.env_steps}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.opt.load_state_dict(d["opt"])
        self.env_steps = int(d["env_steps"])


# ---------------------------------------------------------------------------- PPO
class PPO(Algorithm):
    """PPO-clip with GAE (module docstring)."""

    name = "ppo"
    config_cls = PPOConfig
    cfg: PPOConfig

    def plan(self, tm: TaskMaker) -> list[Task]:
        """One sampled episode on each of ``episodes`` random windows."""
        return tm.tasks(self.cfg.episodes, 1, "sample")

    def learn(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """GAE, then ``epochs`` passes of clipped-surrogate minibatches."""
        cfg = self.cfg
        steps: list[Step] = [s for t in trajs for s in t.steps]
        self.env_steps += len(steps)
        if not steps:
            return {}
        actions = [s.action for s in steps]
        logits, values = _chunked(self.net, steps)
        old_logp = _gather(logits, actions)
        vals = values.double().numpy()
        lasts = self._bootstrap(trajs)
        adv_parts: list[np.ndarray] = []
        k = 0
        for t, last in zip(trajs, lasts, strict=True):
            n = len(t.steps)
            adv_parts.append(gae(self.scaled(t), vals[k:k + n], last, cfg.gamma,
                                 cfg.gae_lambda))
            k += n
        adv = np.concatenate(adv_parts)
        ret = torch.from_numpy(adv + vals).float()
        if cfg.norm_adv and adv.size > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        adv_t = torch.from_numpy(adv).float()
        stats: dict[str, list[float]] = {k: [] for k in ("pg_loss", "v_loss", "entropy",
                                                        "approx_kl", "clip_frac", "grad_norm")}
        n = len(steps)
        for _ in range(cfg.epochs):
            perm = self.rng.permutation(n)
            kls: list[float] = []
            for lo in range(0, n, cfg.minibatch):
                mb = perm[lo:lo + cfg.minibatch].tolist()
                lg, v = action_logits(self.net, [steps[i] for i in mb])
                logp = _gather(lg, [actions[i] for i in mb])
                ratio = torch.exp(logp - old_logp[mb])
                a = adv_t[mb]
                pg = -torch.min(ratio * a, torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * a
                                ).mean()
                vl = 0.5 * ((v - ret[mb]) ** 2).mean()
                ent = entropy_of(lg).mean()
                loss = pg + cfg.vf_coef * vl - cfg.ent_coef * ent
                gn = self._step(loss)
                with torch.no_grad():
                    kl = float(((ratio - 1) - torch.log(ratio)).mean())
                    cf = float(((ratio - 1).abs() > cfg.clip).float().mean())
                kls.append(kl)
                for key, val in (("pg_loss", pg.item()), ("v_loss", vl.item()),
                                 ("entropy", ent.item()), ("approx_kl", kl),
                                 ("clip_frac", cf), ("grad_norm", gn)):
                    stats[key].append(val)
            if cfg.target_kl is not None and float(np.mean(kls)) > cfg.target_kl:
                break
        return {k: float(np.mean(v)) for k, v in stats.items() if v}


# ---------------------------------------------------------------------------- A2C (DL²)
class A2C(Algorithm):
    """DL²'s actor-critic with experience replay and job-aware exploration."""

    name = "a2c"
    config_cls = A2CConfig
    cfg: A2CConfig

    def __init__(self, net: PolicyNet, config: AlgoConfig, rng: np.random.Generator) -> None:
        super().__init__(net, config, rng)
        self.replay: RoundReplay[tuple[Step, float]] = RoundReplay(self.cfg.buffer_rounds)

    def plan(self, tm: TaskMaker) -> list[Task]:
        """``episodes`` windows, sampled with job-aware exploration."""
        tasks = tm.tasks(self.cfg.episodes, 1, "explore", self.cfg.explore_eps)
        return [replace(t, ratio=self.cfg.explore_ratio) for t in tasks]

    def learn(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Store (step, discounted return); ``updates`` minibatches from the buffer."""
        cfg = self.cfg
        lasts = self._bootstrap(trajs)
        batch: list[tuple[Step, float]] = []
        for t, last in zip(trajs, lasts, strict=True):
            g = discounted(self.scaled(t), cfg.gamma, last)
            batch.extend(zip(t.steps, g.tolist(), strict=True))
        self.replay.add(batch)
        added = len(batch)
        self.env_steps += added
        if not len(self.replay):
            return {}
        stats: dict[str, list[float]] = {k: [] for k in ("pg_loss", "v_loss", "entropy",
                                                        "grad_norm")}
        for _ in range(cfg.updates):
            items = self.replay.sample(cfg.batch, self.rng)
            steps = [s for s, _ in items]
            ret = torch.tensor([r for _, r in items], dtype=torch.float32)
            lg, v = action_logits(self.net, steps)
            logp = _gather(lg, [s.action for s in steps])
            adv = (ret - v).detach()
            if cfg.norm_adv and adv.numel() > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = -(adv * logp).mean()
            vl = 0.5 * ((v - ret) ** 2).mean()
            ent = entropy_of(lg).mean()
            gn = self._step(pg + cfg.vf_coef * vl - cfg.ent_coef * ent)
            for key, val in (("pg_loss", pg.item()), ("v_loss", vl.item()),
                             ("entropy", ent.item()), ("grad_norm", gn)):
                stats[key].append(val)
        out = {k: float(np.mean(v)) for k, v in stats.items()}
        explored = sum(s.explored for t in trajs for s in t.steps)
        out["explored_share"] = explored / max(1, added)
        return out

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, counters and the replay buffer."""
        return {**super().state_dict(), "replay": self.replay}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        super().load_state_dict(d)
        self.replay = d["replay"]


# ---------------------------------------------------------------------------- DQN (SCHED²)
class DQN(Algorithm):
    """SCHED²'s DQN: Q from the action logits, target net, prioritised replay."""

    name = "dqn"
    config_cls = DQNConfig
    cfg: DQNConfig

    def __init__(self, net: PolicyNet, config: AlgoConfig, rng: np.random.Generator) -> None:
        super().__init__(net, config, rng)
        self.target = copy.deepcopy(net)
        self.target.eval()
        self.replay: PrioritizedReplay[tuple[Step, State | None, float]] = PrioritizedReplay(
            self.cfg.buffer, self.cfg.alpha)
        self.grad_steps = 0

    def epsilon(self) -> float:
        """Exploration probability after the env steps so far (linear decay)."""
        c = self.cfg
        f = min(1.0, self.env_steps / c.eps_decay_steps)
        return c.eps_start + f * (c.eps_end - c.eps_start)

    def beta(self) -> float:
        """Importance-sampling exponent (linear from ``beta_start`` to 1)."""
        c = self.cfg
        f = min(1.0, self.env_steps / c.eps_decay_steps)
        return c.beta_start + f * (1.0 - c.beta_start)

    def plan(self, tm: TaskMaker) -> list[Task]:
        """``episodes`` windows, epsilon-greedy."""
        return tm.tasks(self.cfg.episodes, 1, "epsilon", self.epsilon())

    def learn(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Add the transitions; then gradient steps on prioritised minibatches."""
        cfg = self.cfg
        added = 0
        for t in trajs:
            r = self.scaled(t)
            items: list[tuple[Step, State | None, float]] = []
            for i, s in enumerate(t.steps):
                nxt: State | None
                if i + 1 < len(t.steps):
                    nxt = t.steps[i + 1]
                else:
                    nxt = t.last if t.truncated else None
                items.append((s, nxt, float(r[i])))
            self.replay.add(items)
            added += len(items)
        self.env_steps += added
        if self.env_steps < cfg.learning_starts or not len(self.replay):
            return {"epsilon": self.epsilon()}
        n_updates = max(1, int(round(added * cfg.updates_per_step)))
        losses: list[float] = []
        qs: list[float] = []
        for _ in range(n_updates):
            idx, batch, w = self.replay.sample(cfg.batch, self.beta(), self.rng)
            states = [s for s, _, _ in batch]
            q_all, _ = action_logits(self.net, states)
            q = q_all.gather(1, torch.tensor([s.action for s in states]).unsqueeze(1)
                             ).squeeze(1)
            y = torch.tensor([r for _, _, r in batch], dtype=torch.float32)
            has_next = [i for i, item in enumerate(batch) if item[1] is not None]
            if has_next:
                nexts: list[State] = [s1 for _, s1, _ in batch if s1 is not None]
                with torch.no_grad():
                    qt, _ = action_logits(self.target, nexts)
                    masks = torch.from_numpy(np.stack([s1.mask for s1 in nexts]))
                    if cfg.double:
                        qo, _ = action_logits(self.net, nexts)
                        pick = torch.where(masks, qo, torch.full_like(qo, -math.inf)).argmax(1)
                    else:
                        pick = torch.where(masks, qt, torch.full_like(qt, -math.inf)).argmax(1)
                    boot = qt.gather(1, pick.unsqueeze(1)).squeeze(1)
                y[has_next] += cfg.gamma * boot
            td = y - q
            loss = (torch.from_numpy(w).float()
                    * torch.nn.functional.huber_loss(q, y, reduction="none", delta=cfg.huber)
                    ).mean()
            self._step(loss)
            self.replay.update(idx, td.detach().double().numpy())
            self.grad_steps += 1
            if self.grad_steps % cfg.target_every == 0:
                self.target.load_state_dict(self.net.state_dict())
            losses.append(loss.item())
            qs.append(q.detach().mean().item())
        return {"loss": float(np.mean(losses)), "q_mean": float(np.mean(qs)),
                "epsilon": self.epsilon(), "grad_steps": float(self.grad_steps)}

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, counters, target net and the replay buffer."""
        return {**super().state_dict(), "target": self.target.state_dict(),
                "replay": self.replay, "grad_steps": self.grad_steps}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        super().load_state_dict(d)
        self.target.load_state_dict(d["target"])
        self.replay = d["replay"]
        self.grad_steps = int(d["grad_steps"])


# ---------------------------------------------------------------------------- REINFORCE
class Reinforce(Algorithm):
    """RL-TAPS's REINFORCE with a per-timestep baseline over a window's episodes."""

    name = "reinforce"
    config_cls = ReinforceConfig
    cfg: ReinforceConfig

    def plan(self, tm: TaskMaker) -> list[Task]:
        """``episodes_per_window`` sampled episodes on each of ``windows`` windows."""
        return tm.tasks(self.cfg.windows, self.cfg.episodes_per_window, "sample")

    def learn(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """One policy-gradient step over the round (advantage ``G_t - b_t``)."""
        cfg = self.cfg
        groups: dict[int, list[Trajectory]] = {}
        for t in trajs:
            groups.setdefault(t.task.start, []).append(t)
        steps: list[Step] = []
        advs: list[np.ndarray] = []
        for group in groups.values():
            rets = [discounted(self.scaled(t), cfg.gamma) for t in group]
            for t, g, b in zip(group, rets, per_step_baseline(rets), strict=True):
                steps.extend(t.steps)
                advs.append(g - b)
        self.env_steps += len(steps)
        if not steps:
            return {}
        adv = np.concatenate(advs)
        if cfg.norm_adv and adv.size > 1:
            adv = adv / (adv.std() + 1e-8)
        n = len(steps)
        self.opt.zero_grad()
        pg_total = ent_total = 0.0
        for lo in range(0, n, 512):
            chunk = steps[lo:lo + 512]
            lg, _ = action_logits(self.net, chunk)
            logp = _gather(lg, [s.action for s in chunk])
            a = torch.from_numpy(adv[lo:lo + 512]).float()
            ent = entropy_of(lg)
            loss = (-(a * logp).sum() - cfg.ent_coef * ent.sum()) / n
            loss.backward()  # type: ignore[no-untyped-call]
            pg_total += -(a * logp).sum().item() / n
            ent_total += ent.sum().item() / n
        gn = float(torch.nn.utils.clip_grad_norm_(self.net.parameters(), cfg.max_grad_norm))
        self.opt.step()
        return {"pg_loss": pg_total, "entropy": ent_total, "grad_norm": gn}


# ---------------------------------------------------------------------------- CEM (Chic)
class CEM(Algorithm):
    """Chic's cross-entropy method with the uniform-policy extra sample."""

    name = "cem"
    config_cls = CEMConfig
    cfg: CEMConfig

    def plan(self, tm: TaskMaker) -> list[Task]:
        """Per window: ``episodes`` sampled episodes, then one uniform one."""
        out: list[Task] = []
        for _ in range(self.cfg.windows):
            s = tm.start()
            out.extend(Task(s, tm.seed(), "sample") for _ in range(self.cfg.episodes))
            if self.cfg.uniform_sample:
                out.append(Task(s, tm.seed(), "uniform"))
        return out

    def learn(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Elites per window; maximum likelihood of their actions; smoothing."""
        cfg = self.cfg
        self.env_steps += sum(len(t.steps) for t in trajs)
        groups: dict[int, list[Trajectory]] = {}
        for t in trajs:
            groups.setdefault(t.task.start, []).append(t)
        elite_steps: list[Step] = []
        uniform_elite = 0
        thresholds: list[float] = []
        for group in groups.values():
            rets = [t.ret for t in group]
            keep = elites(rets, cfg.elite_frac)
            thresholds.append(min(rets[i] for i in keep))
            for i in keep:
                elite_steps.extend(group[i].steps)
                uniform_elite += group[i].task.mode == "uniform"
        if not elite_steps:
            return {}
        prev = [p.detach().clone() for p in self.net.parameters()]
        n = len(elite_steps)
        losses: list[float] = []
        for _ in range(cfg.epochs):
            perm = self.rng.permutation(n)
            for lo in range(0, n, cfg.minibatch):
                mb = [elite_steps[i] for i in perm[lo:lo + cfg.minibatch].tolist()]
                lg, _ = action_logits(self.net, mb)
                loss = -_gather(lg, [s.action for s in mb]).mean()
                self._step(loss)
                losses.append(loss.item())
        if cfg.smoothing < 1:
            with torch.no_grad():
                for p, q in zip(self.net.parameters(), prev, strict=True):
                    p.mul_(cfg.smoothing).add_(q, alpha=1.0 - cfg.smoothing)
        return {"nll": float(np.mean(losses)), "elite_steps": float(n),
                "uniform_elite": float(uniform_elite),
                "elite_threshold": float(np.mean(thresholds))}


#: The algorithms by name (``--algo``).
ALGORITHMS: dict[str, type[Algorithm]] = {
    "ppo": PPO,
    "a2c": A2C,
    "dqn": DQN,
    "reinforce": Reinforce,
    "cem": CEM,
}
