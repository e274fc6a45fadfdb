"""Ensembles across RL runs of other seeds on the test period (a measurement).

    python benchmarks/seed_ensembles.py RUN [RUN ...] --groups 2,4 --rules 4:2,8:4
        [--heuristics spf,lrf,sef] [--json FILE]

RUN is the ``--out`` folder of ``rlsched train rl --keep-checkpoints`` (or
``--ensemble K``); the runs must be validated alike (``rlsched train ensemble`` says
which setting differs otherwise), typically one command with other ``--seed`` values.
The runs are cut, in the order given, into consecutive groups of each ``--groups`` size
(a remainder too small for a group is left out of that size), and for every group and
every rule ``K:P`` the script builds what ``rlsched train ensemble GROUP --members K
--per-run P`` writes (:func:`trainer.ensemble.combine`). It then replays, in one
``evaluate`` on the first run's test period behind its guard (as
``checkpoint_choice.py`` does, Slurm and the ``--heuristics`` behind the same guard):
each run's ``best.pt`` and ``ensemble.pt`` (when it has one) and every group's
ensembles (``--only-groups``: these alone), and prints their test figures and the
issue-5 lines each keeps, with a row per kind over all runs or groups (mean test bsld,
how many keep every line).

The groups and rules should be fixed before looking at the figures: with a handful of
runs, any rule chosen after seeing them fits noise. Nothing here is timed. Stop 59, on
Lublin (8 runs, groups of 2, 4 and 8): about 12 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint_choice import (  # noqa: E402
    GUARD_KEYS,
    LINES,
    _figures,
    sim_config,
)
from checkpoint_choice import read_run as read_checkpoints  # noqa: E402

from slurm_plugin.output import table  # noqa: E402


def parse_rules(text: str) -> list[tuple[int, int]]:
    """``"4:2,8:4"`` -> ``[(4, 2), (8, 4)]``: members K, at most P per run.

    Raises:
        SystemExit: On a rule that is not ``K:P`` with ``K, P >= 1``.
    """
    rules = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        k, sep, p = part.partition(":")
        if not (sep and k.isdigit() and p.isdigit() and int(k) >= 1 and int(p) >= 1):
            raise SystemExit(f"--rules: {part!r} is not K:P (members, the most per run)")
        rules.append((int(k), int(p)))
    return rules


def groups(runs: Sequence[Path], size: int) -> list[list[Path]]:
    """``runs`` cut into consecutive groups of ``size`` (a shorter remainder left out)."""
    return [list(runs[i:i + size]) for i in range(0, len(runs) - size + 1, size)]


def name_of(group: Sequence[Path], k: int, p: int) -> str:
    """A group ensemble's name in the table: its runs' folder names, K and P."""
    return f"{'+'.join(g.name for g in group)} K{k}:P{p}"


def main(argv: Sequence[str] | None = None) -> int:
    """Build the group ensembles, replay everything on the test period, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--groups", default="2", help="group sizes, e.g. 2,4 (default 2)")
    ap.add_argument("--rules", default="4:2", help="K:P rules, e.g. 4:2,8:4 (default 4:2)")
    ap.add_argument("--heuristics", default="spf,lrf,sef")
    ap.add_argument("--trace", help="where the runs' trace is now (default: where it was)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--only-groups", action="store_true",
                    help="replay the group ensembles alone (not each run's own files)")
    args = ap.parse_args(argv)

    from trainer.cli import _prepare
    from trainer.ensemble import combine, read_run
    from trainer.evaluate import EvalConfig, check_targets, evaluate
    from trainer.policy import save_checkpoint

    sizes = sorted({int(s) for s in args.groups.split(",") if s.strip()})
    rules = parse_rules(args.rules)
    heur = [h for h in args.heuristics.split(",") if h]
    folders = {r: read_run(r) for r in args.runs}
    models: dict[str, str] = {}
    kind: dict[str, str] = {}
    members: dict[str, list[tuple[int | None, int]]] = {}
    for r in [] if args.only_groups else args.runs:
        models[f"{r.name} best.pt"], kind[f"{r.name} best.pt"] = str(r / "best.pt"), "best.pt"
        if (r / "ensemble.pt").is_file():
            models[f"{r.name} ensemble.pt"] = str(r / "ensemble.pt")
            kind[f"{r.name} ensemble.pt"] = "ensemble.pt"
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            for g in groups(args.runs, size):
                for k, p in rules:
                    ck, mem = combine([folders[r] for r in g], k, p)
                    name = name_of(g, k, p)
                    path = Path(tmp) / f"{len(models)}.pt"
                    save_checkpoint(path, ck.net, extra=ck.extra, norm=ck.norm)
                    models[name], kind[name] = str(path), f"groups of {size}, K{k}:P{p}"
                    members[name] = [(m["seed"], m["update"]) for m in mem]
        first = read_checkpoints(args.runs[0])
        sim = sim_config(first, args.trace)
        prep = _prepare(sim)
        guard = {k: first.train[k] for k in GUARD_KEYS if k in first.train}
        cfg = EvalConfig(baselines=("slurm", *heur), resamples=0, windows=1,
                         guard_heuristics=True, **guard)
        res = evaluate(prep.jobs, prep.cluster, models, cfg, options=prep.options,
                       priority=prep.priority, speed_model=sim.speed_model, seed=sim.seed)
    rows: dict[str, dict[str, Any]] = {}
    for name in models:
        t = check_targets(res.metrics, name, cfg, locality=False, heuristics=heur)
        lines = {c["name"]: c["ok"] for c in t["checks"] if c["name"] in LINES}
        rows[name] = {**_figures(res.metrics[name]), "lines": lines, "kind": kind[name],
                      "members": members.get(name),
                      "all": all(v is not False for v in lines.values())}
    base = {n: _figures(res.metrics[n]) for n in ("slurm", *heur)}
    print("baselines (behind the guard): " + ", ".join(
        f"{n} {f['bsld_mean']:.1f}" for n, f in base.items()))
    table(["model", "bsld", "p99 wait (s)", "utilisation", "lines missed", "members"],
          [[n, f"{r['bsld_mean']:.1f}", f"{r['wait_p99']:.0f}", f"{r['util']:.4f}",
            ", ".join(LINES[k] for k, v in r["lines"].items() if v is False) or "none",
            " ".join(f"{s}/{u}" for s, u in r["members"] or [])]
           for n, r in rows.items()])
    summary = []
    for kd in dict.fromkeys(kind.values()):
        rs = [r for r in rows.values() if r["kind"] == kd]
        summary.append([kd, len(rs), f"{sum(r['bsld_mean'] for r in rs) / len(rs):.1f}",
                        f"{sum(r['all'] for r in rs)} of {len(rs)}"])
    table(["kind", "models", "mean bsld", "every line kept"], summary)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "baselines": base,
                                         "runs": [str(r) for r in args.runs],
                                         "groups": sizes, "rules": rules}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
