"""``rlsched verify model.onnx``: check a compiled policy against its card, then smoke it.

Runtime only (numpy, onnxruntime, click, :mod:`slurm_plugin`): it runs where the helper
runs, before the helper is pointed at a model.

1. :func:`slurm_plugin.model.load_model`, the helper's own checks (one implementation):
   the file and its card exist and are not world-writable; the card is a
   ``rlsched-model-card/1`` object; the sha256 of the file's bytes equals the card's
   (and ``--sha256`` if given); the schema version and the schema hash (of the card's
   normalisation) equal the installed :mod:`slurm_plugin.features`; the file's
   default-domain opset equals the card's and is one the installed onnxruntime
   supports; the ``rlsched.*`` metadata agrees with the card; the session's inputs and
   outputs are the contract's and the card lists the same names.
2. :func:`smoke` runs the session on the fixed synthetic cases of
   :func:`exporter.synthetic.edge_cases` (0, 1 and 10,000 pending jobs, every job
   masked, one node...) and checks output shapes (``J + 1``, ``K``, scalar), that every
   output is finite, that masked jobs and candidates score exactly ``-1e9`` and no
   unmasked entry does, that a second run gives identical outputs, and that permuting
   the jobs permutes their scores (the network is permutation-invariant).
3. A one-screen summary; any failure exits non-zero with the reason and what to do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import numpy as np

from slurm_plugin.model import (
    MIN_OPSET,
    OUTPUTS,
    LoadedModel,
    ModelError,
    load_model,
    max_supported_opset,
)
from slurm_plugin.scorer import MASKED

from .synthetic import Case, edge_cases

__all__ = ["SmokeResult", "run_case", "session_for", "smoke", "verify"]

_REEXPORT = "re-export it with 'rlsched export CHECKPOINT -o model.onnx'"


def session_for(data: bytes | str | os.PathLike[str], threads: int = 1) -> Any:
    """An onnxruntime CPU session of a model (bytes or path), unchecked.

    For models just written by the exporter and for benchmarks; a model from elsewhere
    goes through :func:`slurm_plugin.model.load_model`.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(0, int(threads))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    src = data if isinstance(data, bytes) else os.fspath(data)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------- smoke
def run_case(session: Any, case: Case, names: frozenset[str] | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(job_logits, place_logits, value)`` of a session on one case."""
    if names is None:
        names = frozenset(i.name for i in session.get_inputs())
    out: list[np.ndarray] = session.run(list(OUTPUTS), case.feed(names))
    return out[0], out[1], out[2]


@dataclass
class SmokeResult:
    """What :func:`smoke` ran.

    Attributes:
        cases: ``(name, J, N, K)`` of each case run.
        problems: What went wrong (empty: all good).
    """

    cases: list[tuple[str, int, int, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def _check_case(session: Any, names: frozenset[str], case: Case) -> list[str]:
    j, k = case.obs.n_jobs, case.n_cands
    try:
        jl, pl, v = run_case(session, case, names)
        jl2, pl2, v2 = run_case(session, case, names)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
        return [f"onnxruntime failed: {str(exc).strip().splitlines()[0][:200]}"]
    bad: list[str] = []
    if jl.shape != (j + 1,) or pl.shape != (k,) or v.shape != ():
        return [f"output shapes {jl.shape}, {pl.shape}, {v.shape}; expected"
                f" ({j + 1},), ({k},), ()"]
    if not (np.isfinite(jl).all() and np.isfinite(pl).all() and np.isfinite(v)):
        bad.append("non-finite output")
    if not (np.array_equal(jl, jl2) and np.array_equal(pl, pl2) and np.array_equal(v, v2)):
        bad.append("two runs on the same input differ")
    mask = case.obs.job_mask
    if not (jl[:j][~mask] == MASKED).all():
        bad.append("a masked job does not score -1e9")
    if (jl[:j][mask] <= MASKED / 2).any() or jl[j] <= MASKED / 2:
        bad.append("an unmasked job or hold scores like a masked one")
    if not (pl[~case.cand_mask] == MASKED).all():
        bad.append("a masked candidate does not score -1e9")
    if (pl[case.cand_mask] <= MASKED / 2).any():
        bad.append("an unmasked candidate scores like a masked one")
    if j > 1:
        perm = np.random.default_rng(j).permutation(j)
        o = case.obs
        sub = {"jobs": o.jobs[perm], "job_mask": o.job_mask[perm]}
        f = case.feed(names)
        f.update({n: a for n, a in sub.items() if n in names})
        if "place_job" in names:
            f["place_job"] = np.array(int(np.flatnonzero(perm == case.place_job)[0]),
                                      dtype=np.int64)
        jp = session.run(["job_logits"], f)[0]
        scale = max(1.0, float(np.abs(jl[:j][mask]).max(initial=0.0)))
        if not np.allclose(jp[:j], jl[:j][perm], rtol=0, atol=1e-4 * scale):
            bad.append("permuting the jobs does not permute their scores")
    return bad


def smoke(session: Any, cases: Sequence[Case] | None = None) -> SmokeResult:
    """Run ``session`` on ``cases`` (default :func:`~exporter.synthetic.edge_cases`).

    See the module docstring for what is checked.
    """
    names = frozenset(i.name for i in session.get_inputs())
    res = SmokeResult()
    for case in edge_cases() if cases is None else cases:
        res.cases.append((case.name, case.obs.n_jobs, case.obs.n_nodes, case.n_cands))
        res.problems += [f"{case.name}: {p}" for p in _check_case(session, names, case)]
    return res


# ---------------------------------------------------------------------------- command
def _summary(m: LoadedModel, res: SmokeResult) -> list[str]:
    card = m.card
    cl = card.get("cluster") or {}
    tr = card.get("training") or {}
    ev = card.get("evaluation") or {}
    lo, hi = MIN_OPSET, max_supported_opset()
    lines = [
        f"model      {m.path} ({m.path.stat().st_size:,} bytes)",
        f"sha256     {m.sha256}  (matches the card)",
        f"schema     v{card['schema_version']} {card['schema_hash'][:16]}..."
        "  (matches slurm_plugin.features)",
        f"opset      {m.opset}  (onnxruntime supports {lo}..{hi if hi is not None else '?'})",
        f"inputs     {', '.join(sorted(m.input_names))}",
        f"outputs    {', '.join(OUTPUTS)}",
        f"cluster    {cl.get('name')}: {cl.get('nodes')} nodes, {cl.get('gpus')} GPUs,"
        f" {cl.get('leaves')} leaf switches, tree {cl.get('switch_tree_hash')}",
        f"training   {tr.get('algorithm')}, window {json.dumps(tr.get('window'))}",
        f"evaluation {', '.join(sorted(ev)) if ev else '(none)'}",
        f"created    {card.get('created')} by rlsched {card.get('rlsched_version')}",
        "smoke      " + ("all cases passed" if res.ok else f"{len(res.problems)} problem(s)"),
    ]
    for name, j, n, k in res.cases:
        lines.append(f"  {name:<36} J={j:<6} N={n:<5} K={k}")
    return lines


@click.command("verify")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--sha256", "pin", default=None,
              help="The sha256 the file must have (as the helper's pinned model).")
def verify(model: str, pin: str | None) -> None:
    """Check MODEL (an ONNX policy) against its card and run a smoke test.

    Checks the sha256 against MODEL.card.json, the feature schema against the installed
    rlsched, the opset against the installed onnxruntime and the input/output names
    against the model contract; then runs the model on synthetic observations (0, 1 and
    10,000 pending jobs, every job masked, one node...) and checks shapes, masks and
    that every output is finite. Exits non-zero with the reason on any failure.
    """
    try:
        m = load_model(model, pin=pin)
    except ModelError as exc:
        raise click.ClickException(f"{model} FAILED: {exc.reason}\n  -> {exc.action}") from None
    res = smoke(m.session)
    for line in _summary(m, res):
        click.echo(line)
    if not res.ok:
        for p in res.problems:
            click.echo(f"  problem: {p}", err=True)
        raise click.ClickException(f"{model} FAILED the smoke test\n  -> {_REEXPORT}")
    click.echo("OK: the helper may use this model")
