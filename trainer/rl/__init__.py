"""Reinforcement learning in the simulator: improve a policy beyond the site's scheduler.

Pieces (one module each):

- :mod:`trainer.rl.config`: :class:`TrainConfig` (the loop) and one config per
  algorithm (:class:`PPOConfig`, :class:`A2CConfig`, :class:`DQNConfig`,
  :class:`ReinforceConfig`, :class:`CEMConfig`), the single source of the defaults;
- :mod:`trainer.rl.acting`: the one action space of both env phases, batched
  lockstep rollouts (:func:`run_group`), DL²'s job-aware exploration, heuristic agents;
- :mod:`trainer.rl.algorithms`: :data:`ALGORITHMS` by name: ``ppo`` (default), ``a2c``
  (DL²), ``dqn`` (SCHED²), ``reinforce`` (RL-TAPS), ``cem`` (Chic);
- :mod:`trainer.rl.workers`: where rollouts run (in process, local processes, Ray);
- :mod:`trainer.rl.trainer`: the loop (validation picks the checkpoint, resume,
  determinism), :func:`train`;
- :mod:`trainer.rl.report`: the summary on the validation window against the
  simulator's baselines.

Design for 100+ workers
    Rollouts are the cost (an env step and a forward pass per decision); learning is
    a few batched passes. The same task/group contract scales out through Ray
    (``--ray-address``): the job table and cluster are put once in the object store
    (each node keeps one shared copy), the weights once per round; each actor keeps
    its environments between rounds and runs groups of ``group`` episodes in lockstep
    (batched inference, one CPU each); :class:`ray.util.ActorPool` hands groups to idle
    actors, so slow windows do not stall the others, and results come back in order.
    Because every task carries its window and seed, a lost actor's group is simply
    resubmitted and the run stays reproducible. For the learner to keep up with 100+
    actors: rounds must hold at least ``workers x group`` episodes (``--algo-opt
    episodes=...``); trajectories should travel compactly (the node table is the bulk:
    float16, or the raw state to re-featurize on the learner); and beyond that, an
    asynchronous actor-learner split (IMPALA-style, V-trace correcting the policy lag,
    or Ape-X for DQN, where actors already fill a shared prioritised replay) would
    replace the synchronous rounds, at the price of bit-exact determinism.
"""

from .acting import AGENTS, EnvSpec, Task, Trajectory
from .algorithms import ALGORITHMS, Algorithm
from .config import (
    A2CConfig,
    AlgoConfig,
    CEMConfig,
    DQNConfig,
    PPOConfig,
    ReinforceConfig,
    TrainConfig,
)
from .trainer import (
    FlatValidationWarning,
    Trainer,
    TrainResult,
    flat_validation,
    make_spec,
    train,
)

__all__ = [
    "AGENTS",
    "ALGORITHMS",
    "A2CConfig",
    "AlgoConfig",
    "Algorithm",
    "CEMConfig",
    "DQNConfig",
    "EnvSpec",
    "FlatValidationWarning",
    "PPOConfig",
    "ReinforceConfig",
    "Task",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "Trajectory",
    "flat_validation",
    "make_spec",
    "train",
]
