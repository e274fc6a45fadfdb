"""Replay buffers: the latest rounds' samples (DL²) and proportional prioritised replay.

:class:`PrioritizedReplay` is Schaul et al.'s proportional variant (the one SCHED²
cites): item ``i`` is drawn with probability ``p_i^alpha / sum_j p_j^alpha``, its
importance weight is ``(n P(i))^-beta`` divided by the largest weight of the sample,
new items get the largest priority seen so far, and after a learning step an item's
priority becomes ``|td error| + eps``. Draws come from the caller's generator
(:meth:`numpy.random.Generator.choice`), so sampling is reproducible. A buffer holds
Python objects (steps) and pickles with the trainer's state, for an exact resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

__all__ = ["PrioritizedReplay", "RoundReplay"]

T = TypeVar("T")


class RoundReplay(Generic[T]):
    """The samples of the latest ``rounds`` rounds (DL²'s "latest time slots").

    Sampling is uniform with replacement over every sample held.

    Raises:
        ValueError: If ``rounds`` is not positive.
    """

    def __init__(self, rounds: int) -> None:
        if rounds < 1:
            raise ValueError("replay rounds must be >= 1")
        self.rounds = rounds
        self.held: list[list[T]] = []

    def __len__(self) -> int:
        """Samples held."""
        return sum(len(r) for r in self.held)

    def add(self, items: Sequence[T]) -> None:
        """One round's samples; the oldest round goes beyond ``rounds``."""
        self.held.append(list(items))
        del self.held[:-self.rounds]

    def sample(self, k: int, rng: np.random.Generator) -> list[T]:
        """``k`` samples drawn uniformly with replacement.

        Raises:
            ValueError: If the buffer is empty.
        """
        flat = [x for r in self.held for x in r]
        if not flat:
            raise ValueError("the replay buffer is empty")
        idx = rng.integers(0, len(flat), size=k)
        return [flat[i] for i in idx.tolist()]


class PrioritizedReplay(Generic[T]):
    """Proportional prioritised replay (module docstring).

    Args:
        capacity: Items kept (the oldest is overwritten).
        alpha: How much the priorities count (0: uniform).
        eps: Added to ``|td error|`` so that no item starves.

    Raises:
        ValueError: On a non-positive capacity or a negative alpha / eps.
    """

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-3) -> None:
        if capacity < 1 or alpha < 0 or eps < 0:
            raise ValueError("capacity >= 1, alpha >= 0 and eps >= 0 are required")
        self.capacity = capacity
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.items: list[T] = []
        self.prio = np.zeros(capacity, dtype=np.float64)
        self.max_prio = 1.0
        self._next = 0

    def __len__(self) -> int:
        """Items held."""
        return len(self.items)

    def add(self, items: Sequence[T]) -> None:
        """Add items with the largest priority seen so far."""
        for it in items:
            i = self._next
            if len(self.items) < self.capacity:
                self.items.append(it)
            else:
                self.items[i] = it
            self.prio[i] = self.max_prio
            self._next = (i + 1) % self.capacity

    def probabilities(self) -> np.ndarray:
        """Draw probability of each held item."""
        p = self.prio[:len(self.items)] ** self.alpha
        total = p.sum()
        out: np.ndarray = p / total if total > 0 else np.full(p.size, 1.0 / max(1, p.size))
        return out

    def sample(self, k: int, beta: float, rng: np.random.Generator
               ) -> tuple[np.ndarray, list[T], np.ndarray]:
        """``(indices, items, importance weights)`` of ``k`` draws with replacement.

        Raises:
            ValueError: If the buffer is empty.
        """
        n = len(self.items)
        if not n:
            raise ValueError("the replay buffer is empty")
        p = self.probabilities()
        idx = rng.choice(n, size=k, replace=True, p=p)
        w = (n * p[idx]) ** (-float(beta))
        w = w / w.max()
        return idx, [self.items[i] for i in idx.tolist()], w

    def update(self, idx: np.ndarray, td: np.ndarray) -> None:
        """Set the priorities of ``idx`` to ``|td| + eps``."""
        pr = np.abs(np.asarray(td, dtype=np.float64)) + self.eps
        self.prio[np.asarray(idx, dtype=np.int64)] = pr
        if pr.size:
            self.max_prio = max(self.max_prio, float(pr.max()))
