"""Training curves: JSON always, a PNG when matplotlib is installed (Agg backend)."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["plot_curves", "write_curves"]


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def write_curves(curves: Mapping[str, Any], path: str | Path) -> Path:
    """Write the curves as JSON (non-finite numbers as ``null``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(_clean(curves), indent=1, sort_keys=True) + "\n")
    return p


def plot_curves(curves: Mapping[str, Any], path: str | Path, metric: str = "bsld_mean",
                title: str = "", val_label: str = "policy (greedy)") -> Path | None:
    """Training and validation curves against env steps (``None`` without matplotlib).

    Left: the mean ``metric`` of the training episodes of each update. Right: the
    policy's ``metric`` on the validation window (``val_label``: how it was validated),
    with the reference agents (in the env) as horizontal lines, the Slurm baseline's
    on the same window as deployed when the bounded choice read it (``slurm_val``), and
    the chosen checkpoint (``best``) circled.
    """
    try:
        mpl = importlib.import_module("matplotlib")
    except ImportError:
        return None
    mpl.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    train = curves.get("train", [])
    val = curves.get("val", [])
    refs = curves.get("references", {})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    xs = [p["steps"] for p in train if p.get(metric) is not None]
    ys = [p[metric] for p in train if p.get(metric) is not None]
    if xs:
        ax.plot(xs, ys, marker=".", ms=3, lw=1, color="tab:blue")
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"training episodes: {metric}")
    ax.grid(alpha=0.3)
    ax = axes[1]
    vx = [p["steps"] for p in val if p.get(metric) is not None]
    vy = [p[metric] for p in val if p.get(metric) is not None]
    if vx:
        ax.plot(vx, vy, marker="o", ms=3, lw=1, color="tab:red", label=val_label)
    best = curves.get("best") or {}
    chosen = [p for p in val if p.get("update") == best.get("update")
              and p.get(metric) is not None]
    if chosen:
        ax.plot([chosen[-1]["steps"]], [chosen[-1][metric]], marker="o", ms=10,
                mfc="none", mec="black", ls="none", label="chosen (best.pt)")
    sv = (curves.get("slurm_val") or {}).get(metric)
    if sv is not None and math.isfinite(sv):
        ax.axhline(sv, ls="-", lw=1.5, color="black", label="slurm (same window)")
    colors = ["tab:green", "tab:orange", "tab:gray", "tab:purple", "tab:brown"]
    for (name, m), c in zip(sorted(refs.items()), colors * 4, strict=False):
        v = m.get(metric) if isinstance(m, Mapping) else None
        if v is not None and math.isfinite(v):
            ax.axhline(v, ls="--", lw=1, color=c, label=f"{name} agent (in the env)")
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"validation window: {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p
