"""Free nodes over time: the plan conservative backfill makes, for a step-by-step replay.

Slurm's conservative backfill plans every pending job of its window in priority order:
each takes the earliest start where its node count stays free for its time limit, given
the running jobs' expected ends and the jobs planned before it. The batch engine makes
that plan in one pass (:meth:`trainer.sim.engine.Simulator._backfill_plan`); the RL
environment makes it one pick at a time, as the agent orders the queue
(``trainer/env.py``, ``actions="queue"``), with a :class:`FreeProfile`.

Counts are exact under the engine's condition (:func:`trainer.sim.engine.conservative_unfit`):
every job takes whole nodes and every partition holds every node, so a span planned in
order of start always finds the nodes its count promises.
"""

from __future__ import annotations

import numpy as np

from .state import BIG

__all__ = ["FreeProfile"]


class FreeProfile:
    """Nodes free over time, in segments.

    Segment ``i`` begins at ``times[i]`` and runs to the next, with ``free[i]`` nodes
    free; the last runs on.

    Args:
        times: Segment starts, ascending; ``times[0]`` is now.
        free: Free nodes per segment.
    """

    def __init__(self, times: np.ndarray, free: np.ndarray) -> None:
        self.times = np.asarray(times, dtype=np.int64)
        self.free = np.asarray(free, dtype=np.int64)

    @classmethod
    def of(cls, ready: np.ndarray, now: int) -> FreeProfile:
        """From each node's earliest idle time (``now`` for idle ones, ``BIG``: never)."""
        r = ready[ready < BIG].astype(np.int64)
        times, counts = np.unique(np.maximum(r, now), return_counts=True)
        free = np.cumsum(counts)
        if not times.size or times[0] > now:
            times = np.concatenate(([now], times))
            free = np.concatenate(([0], free))
        return cls(times, free)

    def _after(self) -> np.ndarray:
        return np.append(self.times, BIG)

    def earliest(self, n: int, span: int) -> int | None:
        """The earliest start where ``n`` nodes stay free for ``span`` s; ``None``: never."""
        short = self.free < n
        k = self.free.size
        # per segment, the first short one at or after it (k: none)
        nxt = np.minimum.accumulate(np.where(short, np.arange(k), k)[::-1])[::-1]
        ok = ~short & (self._after()[nxt] >= self.times + span)
        if not ok.any():
            return None
        return int(self.times[int(np.argmax(ok))])

    def starts_now(self, n: np.ndarray, span: np.ndarray) -> np.ndarray:
        """Per job (``n`` nodes for ``span`` s), whether its earliest start is now."""
        low = np.minimum.accumulate(self.free)  # non-increasing
        first_short = np.searchsorted(-low, -np.asarray(n, dtype=np.int64), side="right")
        ok: np.ndarray = (low[0] >= n) & (self._after()[first_short] >= self.times[0] + span)
        return ok

    def take(self, start: int, end: int, n: int) -> None:
        """Plan ``n`` nodes busy over ``[start, end)``."""
        for x in (start, end):
            k = int(np.searchsorted(self.times, x))
            if k == self.times.size or self.times[k] != x:
                self.times = np.insert(self.times, k, x)
                self.free = np.insert(self.free, k, self.free[k - 1])
        self.free[(self.times >= start) & (self.times < end)] -= n
