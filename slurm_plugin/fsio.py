"""Atomic file writes: the one way rlsched replaces a file another process may read.

The helper reads its state file and model card while the trainer, the exporter or the
demo may be rewriting them: a reader must see the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, rename).

    The file gets ``mode`` before it appears under its name; on any error the temp file
    is removed and an existing file at ``path`` is left as it was.
    """
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
