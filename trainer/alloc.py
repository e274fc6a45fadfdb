"""Keep freed memory in a training process instead of handing it back to the kernel.

Torch on the CPU allocates and frees buffers of a few hundred KiB to tens of MiB on
every step (on Theta's 4,392 nodes one observation's node encodings are 1.1 MiB). Under
glibc's defaults such a buffer is mapped fresh (``mmap``) and unmapped when freed, or the
heap's top is trimmed back, so the next step faults every page in again: a
``train all`` on Theta took 276 million minor page faults and spent 35% of its CPU time in
the kernel. :func:`keep_freed_memory` raises glibc's mmap threshold (to 1 GiB; older glibc
versions allow at most 32 MiB, used there instead), its trim threshold and its top
pad, so those buffers come from the heap and are reused: on Theta 3 PPO updates then
took 0.5 million minor faults instead of 25 million (``benchmarks/malloc_speed.py``).

The price is memory: the process keeps what it freed (up to ``trim_threshold`` at the
heap's top) instead of returning it. Importing :mod:`trainer` calls it (as it pins the
numerics), so every command that trains or replays applies it, and so does every worker
process (local ones and Ray actors import :mod:`trainer` too); the helper never imports
:mod:`trainer`, so it keeps the C library's settings. ``RLSCHED_KEEP_FREED_MEMORY=0``
turns it off (the results are the same either way; only time and memory differ). Other C
libraries than glibc are left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["ENV_VAR", "keep_freed_memory"]

#: Set to ``0`` to keep the C library's own malloc settings.
ENV_VAR = "RLSCHED_KEEP_FREED_MEMORY"

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

_applied: bool | None = None


#: The largest mmap threshold older glibc versions accept (``HEAP_MAX_SIZE / 2``).
_OLD_GLIBC_MAX_MMAP_THRESHOLD = 32 << 20


def keep_freed_memory(*, mmap_threshold: int = 1 << 30, trim_threshold: int = 1 << 30,
                      top_pad: int = 256 << 20) -> bool:
    """Set glibc's malloc to keep and reuse freed memory (module docstring).

    Idempotent: the first call decides, later calls return its result.

    Args:
        mmap_threshold: Allocations at least this large are mapped on their own; if glibc
            refuses it (older versions refuse more than 32 MiB), 32 MiB.
        trim_threshold: Free memory at the heap's top kept before it is given back.
        top_pad: Extra address space requested whenever the heap grows (its pages are
            only backed by memory once used).

    Returns:
        True when glibc accepted every setting; False when turned off by
        ``RLSCHED_KEEP_FREED_MEMORY=0``, on another platform or C library, or when one
        setting was refused.
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get(ENV_VAR, "1").strip() == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: musl's mallopt does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mmap_ok = mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1 or (
        mmap_threshold > _OLD_GLIBC_MAX_MMAP_THRESHOLD
        and mallopt(_M_MMAP_THRESHOLD, _OLD_GLIBC_MAX_MMAP_THRESHOLD) == 1)
    rest = [mallopt(p, v) == 1 for p, v in ((_M_TRIM_THRESHOLD, trim_threshold),
                                            (_M_TOP_PAD, top_pad))]
    _applied = mmap_ok and all(rest)
    return _applied
