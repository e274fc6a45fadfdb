"""Where rollouts run: in the trainer's process, in local processes, or on Ray actors.

Every pool runs *groups* of :class:`~trainer.rl.acting.Task` (each group in lockstep,
:func:`~trainer.rl.acting.run_group`) with the current weights, and returns the
trajectories in the order of the groups. A group's result depends only on the weights
and its tasks (each task carries its own seed), so the three pools, and any number of
workers, give identical trajectories.

- :class:`InlinePool` (``--workers 1``): in the trainer's process, no copies.
- :class:`ProcessPool` (``--workers N``): ``N`` local processes (``spawn``), each
  building its own environments once from the pickled :class:`~trainer.rl.acting.EnvSpec`;
  every round sends the weights (numpy arrays) with each group and gets the
  trajectories back.
- :class:`RayPool` (``--ray-address``): ``N`` Ray actors, the spec put once in the
  object store, the weights once per round; groups are handed to idle actors
  (:class:`ray.util.ActorPool`), results come back in order. Ray is imported only
  here, only then (``pip install 'rlsched[dist]'``).
"""

from __future__ import annotations

import multiprocessing
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import torch

from ..env import SchedEnv
from ..policy import PolicyConfig, PolicyNet
from .acting import EnvSpec, Task, Trajectory, run_group

__all__ = ["InlinePool", "ProcessPool", "RayPool", "RolloutPool", "make_pool"]

Weights = dict[str, np.ndarray]


def _weights(net: PolicyNet | None) -> Weights | None:
    if net is None:
        return None
    return {k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}


def _load(net: PolicyNet, w: Weights | None) -> PolicyNet | None:
    if w is None:
        return None
    net.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()})
    net.eval()
    return net


class RolloutPool(ABC):
    """Runs groups of tasks with the current weights (module docstring)."""

    workers: int = 1

    @abstractmethod
    def run(self, net: PolicyNet | None, groups: Sequence[Sequence[Task]]
            ) -> list[list[Trajectory]]:
        """The trajectories of each group, in order."""

    def close(self) -> None:  # noqa: B027 (nothing to stop by default)
        """Stop the workers (idempotent)."""

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlinePool(RolloutPool):
    """Rollouts in the calling process (environments are reused between rounds)."""

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self._envs: dict[bool, list[SchedEnv]] = {}

    def run(self, net: PolicyNet | None, groups: Sequence[Sequence[Task]]
            ) -> list[list[Trajectory]]:
        """Each group in turn, here."""
        if net is not None:
            net.eval()
        return [run_group(net, self.spec, g, self._envs) for g in groups]


# ---------------------------------------------------------------------------- processes
_W: dict[str, Any] = {}


def _init_worker(spec: EnvSpec, net_config: dict[str, int]) -> None:
    torch.set_num_threads(1)  # inference only: CPU kernels are deterministic as they are
    _W["spec"] = spec
    _W["net"] = PolicyNet(PolicyConfig.from_dict(net_config))
    _W["envs"] = {}


def _ping() -> int:
    return len(_W)


def _run_in_worker(weights: Weights | None, tasks: Sequence[Task]) -> list[Trajectory]:
    net = _load(_W["net"], weights)
    return run_group(net, _W["spec"], tasks, _W["envs"])


class ProcessPool(RolloutPool):
    """``workers`` local processes (module docstring).

    Raises:
        ValueError: If ``workers`` is below 1.
    """

    def __init__(self, spec: EnvSpec, net_config: PolicyConfig, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        ctx = multiprocessing.get_context("spawn")
        self._ex: ProcessPoolExecutor | None = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init_worker,
            initargs=(spec, net_config.to_dict()))
        # start every process now (and fail here if the spec cannot be sent)
        for f in [self._ex.submit(_ping) for _ in range(workers)]:
            f.result()

    def run(self, net: PolicyNet | None, groups: Sequence[Sequence[Task]]
            ) -> list[list[Trajectory]]:
        """The groups spread over the processes; results in order."""
        if self._ex is None:
            raise RuntimeError("the pool is closed")
        w = _weights(net)
        futs = [self._ex.submit(_run_in_worker, w, list(g)) for g in groups]
        return [f.result() for f in futs]

    def close(self) -> None:
        """Shut the processes down."""
        if self._ex is not None:
            self._ex.shutdown(wait=True, cancel_futures=True)
            self._ex = None


# ---------------------------------------------------------------------------- Ray
class _RayWorker:
    """The body of a Ray actor (wrapped by ``ray.remote`` at run time)."""

    def __init__(self, spec: EnvSpec, net_config: dict[str, int]) -> None:
        _init_worker(spec, net_config)

    def run(self, weights: Weights | None, tasks: Sequence[Task]) -> list[Trajectory]:
        return _run_in_worker(weights, tasks)


class RayPool(RolloutPool):
    """``workers`` Ray actors on the cluster at ``address`` (module docstring).

    Raises:
        RuntimeError: If Ray is not installed.
    """

    def __init__(self, spec: EnvSpec, net_config: PolicyConfig, workers: int,
                 address: str) -> None:
        try:
            import ray  # type: ignore[import-not-found,unused-ignore]
            from ray.util import ActorPool  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise RuntimeError("--ray-address needs Ray: pip install 'rlsched[dist]'"
                               " (or drop --ray-address to use local processes)") from None
        self._ray = ray
        self.workers = workers
        ray.init(address=address, ignore_reinit_error=True)
        actor = ray.remote(num_cpus=1)(_RayWorker)
        spec_ref = ray.put(spec)
        self._actors = [actor.remote(spec_ref, net_config.to_dict()) for _ in range(workers)]
        self._pool_cls = ActorPool

    def run(self, net: PolicyNet | None, groups: Sequence[Sequence[Task]]
            ) -> list[list[Trajectory]]:
        """Groups handed to idle actors; results in order."""
        w = self._ray.put(_weights(net))
        pool = self._pool_cls(self._actors)
        return list(pool.map(lambda a, g: a.run.remote(w, g), [list(g) for g in groups]))

    def close(self) -> None:
        """Release the actors."""
        for a in getattr(self, "_actors", []):
            self._ray.kill(a)
        self._actors = []


def make_pool(spec: EnvSpec, net_config: PolicyConfig, workers: int = 1,
              ray_address: str | None = None) -> RolloutPool:
    """The pool for ``workers`` and ``ray_address`` (module docstring)."""
    if ray_address:
        return RayPool(spec, net_config, workers, ray_address)
    if workers <= 1:
        return InlinePool(spec)
    return ProcessPool(spec, net_config, workers)
