"""What each ``RLSCHED_NUMERICS`` mode costs: one training command timed under each (a measurement).

    python benchmarks/numerics_cost.py [--modes portable,compatible,native] [--repeats 3]
        -- rlsched train imitate --trace lublin_256.swf --epochs 3 --out /tmp/x

Runs the command after ``--`` once per mode per round, the modes in turn within each
round (so that a machine's drift spreads over all of them), in fresh processes with
the mode's variables alone (the kernel variables of :data:`trainer.numerics.PORTABLE_ENV`
removed from the environment first, so that each mode pins its own), on one thread.
Prints each mode's median wall time and its ratio to the first mode's, and whether the
runs of one mode wrote the same ``.pt`` weights each time (the command's ``--out``
folder, read after each run: a mode that does not repeat itself is not deterministic
here). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer import numerics  # noqa: E402


def weights_digest(folder: Path) -> str:
    """A digest of the tensors of every ``.pt`` file under ``folder`` ("" without one)."""
    import torch

    h = hashlib.sha256()
    for f in sorted(folder.rglob("*.pt")):
        data = torch.load(f, map_location="cpu", weights_only=False)
        state = data.get("state_dict") if isinstance(data, dict) else None
        if not isinstance(state, dict):
            continue
        h.update(f.relative_to(folder).as_posix().encode())
        for k in sorted(state):
            h.update(k.encode())
            h.update(state[k].numpy().tobytes())
    return h.hexdigest()[:16] if folder.is_dir() else ""


def out_folder(cmd: Sequence[str]) -> Path | None:
    """The command's ``--out`` value, if any."""
    for i, a in enumerate(cmd):
        if a == "--out" and i + 1 < len(cmd):
            return Path(cmd[i + 1])
        if a.startswith("--out="):
            return Path(a.split("=", 1)[1])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Time the command under each mode; print the medians, ratios and digests."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        raise SystemExit("give the command to time after --")
    cut = args.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default=",".join(numerics.MODES))
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args(args[:cut])
    cmd = args[cut + 1:]
    modes = [m for m in opts.modes.split(",") if m]
    base = {k: v for k, v in os.environ.items()
            if k not in (*numerics.PORTABLE_ENV, numerics.ENV_MODE)}
    base.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    out = out_folder(cmd)
    times: dict[str, list[float]] = {m: [] for m in modes}
    digests: dict[str, set[str]] = {m: set() for m in modes}
    for r in range(opts.repeats):
        for m in modes:
            t0 = time.perf_counter()
            subprocess.run(cmd, env={**base, numerics.ENV_MODE: m}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[m].append(time.perf_counter() - t0)
            if out is not None:
                digests[m].add(weights_digest(out))
            print(f"round {r + 1} {m}: {times[m][-1]:.1f} s", flush=True)
    first = statistics.median(times[modes[0]])
    for m in modes:
        med = statistics.median(times[m])
        same = ("" if out is None else
                "; the same weights every run" if len(digests[m]) == 1 else
                f"; {len(digests[m])} different weights")
        print(f"{m}: median {med:.1f} s, {med / first:.2f}x {modes[0]}{same}"
              f" (weights {', '.join(sorted(digests[m])) or '-'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
