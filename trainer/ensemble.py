"""One ensemble from several RL runs: ``rlsched train ensemble RUN [RUN ...]``.

``train rl --ensemble K`` averages the ``K`` checkpoints of one run that validated best.
Checkpoints of one run are near one another, so they tend to err alike on the test
period; runs of other seeds are more independent. This module ranks the validations of
several runs, trained on one history and validated alike (the same validation period,
guard, metric and bounds, so that their figures compare), in one list as ``best.pt`` is
chosen (:func:`trainer.rl.trainer.pooled_members`), takes the ``K`` first with at most
``per_run`` from any one run (by default ``K`` shared out evenly), and writes the mean
of their nets (:class:`trainer.policy.PolicyEnsemble`), which ``evaluate``, ``export``
and the helper read like one net.

A run is the ``--out`` folder of ``train rl`` with its checkpoints kept
(``--keep-checkpoints``, or ``--ensemble``, which keeps them): ``config.json``,
``curves.json`` (every validation's figures) and ``checkpoints/update-NNNNN.pt``. A
validation without its checkpoint is not a candidate.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .policy import Checkpoint, load_ensemble
from .rl.config import VAL_METRICS
from .rl.trainer import pooled_members

__all__ = ["ALIKE_SECTIONS", "ALIKE_TRAIN", "RunFolder", "check_alike", "combine",
           "read_run"]

#: Sections of a run's ``config.json`` that must be equal for validations to compare:
#: the history, the cluster, Slurm's settings and the periods.
ALIKE_SECTIONS = ("input", "cluster", "scheduler", "priority", "periods")
#: ``train`` settings that must be equal: the validation period and warm-up, the guard
#: behind which it was read, and how validations rank.
ALIKE_TRAIN = ("train_share", "val_share", "val_jobs", "val_warmup", "val_deployed",
               "val_metric", "val_bounds", "val_p99_slack", "val_util_slack",
               "starvation_limit", "starvation_order", "express_limit", "rank_all",
               "score_resolution", "speed_model")
#: ``env.eval`` settings (the validation replays) that must be equal.
ALIKE_EVAL = ("bf_plan", "episode_jobs", "warmup_jobs")


@dataclass(frozen=True)
class RunFolder:
    """A ``train rl`` output folder, read: its settings and validations."""

    path: Path
    config: dict[str, Any]
    val: list[dict[str, Any]]
    """``curves.json``'s validation points whose checkpoint was kept."""

    @property
    def seed(self) -> int | None:
        """The run's ``--seed``."""
        s = self.config.get("train", {}).get("seed")
        return int(s) if s is not None else None

    def checkpoint(self, update: int) -> Path:
        """The kept checkpoint of ``update``."""
        return self.path / "checkpoints" / f"update-{update:05d}.pt"


def read_run(path: str | os.PathLike[str]) -> RunFolder:
    """Read a ``train rl`` output folder.

    Raises:
        ValueError: Saying what to give, when it is not a finished run with kept
            checkpoints.
    """
    root = Path(path)
    files = {name: root / name for name in ("config.json", "curves.json")}
    for name, f in files.items():
        if not f.is_file():
            raise ValueError(f"{root}: no {name}; give the --out folder of a finished"
                             " 'rlsched train rl' run")
    try:
        config = json.loads(files["config.json"].read_text())
        curves = json.loads(files["curves.json"].read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{root}: {exc}") from None
    if not isinstance(config, dict) or not isinstance(curves, dict) or "train" not in config:
        raise ValueError(f"{root}: config.json or curves.json is not a train rl run's")
    run = RunFolder(root, config, [])
    kept = [dict(p) for p in curves.get("val", [])
            if isinstance(p, Mapping) and "update" in p
            and run.checkpoint(int(p["update"])).is_file()]
    if not any(int(p["update"]) > 0 for p in kept):
        raise ValueError(f"{root}: no checkpoint kept after the start; train with"
                         " --keep-checkpoints (or --ensemble K)")
    return RunFolder(root, config, kept)


def check_alike(runs: Sequence[RunFolder]) -> None:
    """Refuse runs whose validations do not compare (:data:`ALIKE_SECTIONS` and the rest).

    Raises:
        ValueError: Naming the first setting that differs and the two runs.
    """
    first = runs[0]

    def views(r: RunFolder) -> dict[str, Any]:
        c = r.config
        out = {s: c.get(s) for s in ALIKE_SECTIONS}
        out.update({f"train.{k}": c["train"].get(k) for k in ALIKE_TRAIN})
        ev = (c.get("env") or {}).get("eval") or {}
        out.update({f"env.eval.{k}": ev.get(k) for k in ALIKE_EVAL})
        return out

    want = views(first)
    for r in runs[1:]:
        got = views(r)
        for key, value in want.items():
            if got[key] != value:
                raise ValueError(
                    f"{r.path} and {first.path} were not validated alike ({key}: "
                    f"{_short(got[key])} against {_short(value)}), so their validation"
                    " figures do not compare: combine runs of one history, validation"
                    " period and guard")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def combine(runs: Sequence[RunFolder], k: int, per_run: int | None = None
            ) -> tuple[Checkpoint, list[dict[str, Any]]]:
    """The ensemble of the ``k`` best validations of ``runs``; and its members.

    ``per_run``: the most members from one run (``None``: ``k`` shared out evenly, the
    ceiling of ``k / len(runs)``; ``k`` or more: no cap). The checkpoint's ``extra`` is
    the first member's, with ``ensemble``: its members (run folder, seed, update and
    validation figures), the metric and the rule. Each member is a dict of ``run``,
    ``seed``, ``update`` and its validation point's figures.

    Raises:
        ValueError: With no run, ``k`` < 1, runs not validated alike
            (:func:`check_alike`) or checkpoints that do not combine
            (:func:`trainer.policy.load_ensemble`).
    """
    if not runs:
        raise ValueError("give at least one run")
    if k < 1:
        raise ValueError(f"the ensemble needs at least one member, not {k}")
    check_alike(runs)
    cap = math.ceil(k / len(runs)) if per_run is None else per_run
    if cap < 1:
        raise ValueError(f"at most {cap} members per run leaves none")
    metric = str(runs[0].config["train"].get("val_metric", "bsld_mean"))
    picked = pooled_members([r.val for r in runs], k, metric, VAL_METRICS.get(metric, True),
                            per_run=cap)
    if not picked:
        raise ValueError("no validation after the start to take")
    by_update = [{int(p["update"]): p for p in r.val} for r in runs]
    members = [{"run": str(runs[i].path), "seed": runs[i].seed, "update": u,
                **{key: v for key, v in by_update[i][u].items() if key != "update"}}
               for i, u in picked]
    ck = load_ensemble([runs[i].checkpoint(u) for i, u in picked])
    extra = {**ck.extra, "ensemble": {
        "members": [{"run": m["run"], "seed": m["seed"], "update": m["update"]}
                    for m in members],
        "val_metric": metric, "per_run": cap, "runs": [str(r.path) for r in runs],
        "validation": members}}
    return Checkpoint(ck.net, ck.config, ck.norm, ck.schema, ck.version, extra), members
