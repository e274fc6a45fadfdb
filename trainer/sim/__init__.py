"""trainer/sim: the event-driven cluster replay; no torch, no gymnasium.

A compiled build of the engine's modules (mypyc, same sources) is used when one matches
the sources: see :mod:`trainer.sim.native` (``RLSCHED_SIM``, ``rlsched build-sim``).
"""

from . import native as _native

NATIVE = _native.activate(__path__)
