"""``rlsched verify model.onnx``: check a compiled policy against its card, then smoke it.

Runtime only (numpy, onnxruntime, click, :mod:`slurm_plugin`): it runs where the helper
runs, before the helper is pointed at a model.

1. :func:`load_model` checks everything the helper demands (the contract in
   :mod:`exporter`): the file and its card exist and are not world-writable; the card
   is a ``rlsched-model-card/1`` object with every contract field; the sha256 of the
   file's bytes equals the card's (and ``--sha256`` if given); the schema version and
   the schema hash (of the card's normalisation) equal the installed
   :mod:`slurm_plugin.features`; the file's default-domain opset equals the card's and
   is one the installed onnxruntime supports; the ``rlsched.*`` metadata agrees with
   the card; the session's inputs are contract inputs of the contract types, its
   outputs exactly the contract's, and the card lists the same names. It opens the
   bytes it hashed (no second read).
2. :func:`smoke` runs the session on the fixed synthetic cases of
   :func:`exporter.synthetic.edge_cases` (0, 1 and 10,000 pending jobs, every job
   masked, one node...) and checks output shapes (``J + 1``, ``K``, scalar), that every
   output is finite, that masked jobs and candidates score exactly ``-1e9`` and no
   unmasked entry does, that a second run gives identical outputs, and that permuting
   the jobs permutes their scores (the network is permutation-invariant).
3. A one-screen summary; any failure exits non-zero with the reason and what to do.

The checks of step 1 are the same ones the helper runs (``slurm_plugin.model``, being
written on the ``helper`` branch, same contract). Until that module is on main they live
here, behind the same names (:class:`ModelError`, :class:`LoadedModel`,
:func:`load_model`); once it is, this section becomes an import of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import click
import numpy as np

from slurm_plugin.features import SCHEMA_VERSION, Normalisation, schema_hash

from .contract import (
    CARD_FIELDS,
    CARD_FORMAT,
    INPUTS,
    META_FORMAT,
    META_SCHEMA_HASH,
    META_SCHEMA_VERSION,
    MODEL_FORMAT,
    OUTPUTS,
    card_path,
)
from .synthetic import Case, edge_cases

__all__ = [
    "MASKED",
    "MIN_OPSET",
    "LoadedModel",
    "ModelError",
    "SmokeResult",
    "load_model",
    "onnx_opsets",
    "run_case",
    "session_for",
    "smoke",
    "supported_opsets",
    "verify",
]

#: The logit of a masked job or candidate (contract).
MASKED = -1e9
#: The oldest default-domain opset onnxruntime supports.
MIN_OPSET = 7

_REEXPORT = "re-export it with 'rlsched export CHECKPOINT -o model.onnx'"


class ModelError(Exception):
    """A model that must not be used: what is wrong and what to do about it.

    Attributes:
        reason: What is wrong (one line).
        action: What to do about it (one line).
    """

    def __init__(self, reason: str, action: str = _REEXPORT) -> None:
        self.reason = reason
        self.action = action
        super().__init__(f"{reason}; {action}")


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model that passed :func:`load_model`.

    Attributes:
        path: The ONNX file.
        sha256: sha256 of its bytes (hex).
        size: Its size in bytes.
        card: The card as read.
        norm: The feature normalisation of the card.
        opset: The default-domain opset of the graph.
        session: The onnxruntime ``InferenceSession``.
        input_names: The inputs the session declares (contract names).
        metadata: The file's ``metadata_props``.
    """

    path: Path
    sha256: str
    size: int
    card: Mapping[str, Any]
    norm: Normalisation
    opset: int
    session: Any
    input_names: frozenset[str]
    metadata: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------- ONNX header
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("malformed varint")
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, pos


def _message(buf: bytes) -> list[tuple[int, int | bytes]]:
    """The fields ``(number, value)`` of one protobuf message (varints and bytes)."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = _varint(buf, pos)
            out.append((num, v))
        elif wire == 2:
            ln, pos = _varint(buf, pos)
            if pos + ln > len(buf):
                raise ValueError("truncated field")
            out.append((num, buf[pos:pos + ln]))
            pos += ln
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    if pos != len(buf):
        raise ValueError("truncated message")
    return out


def onnx_opsets(data: bytes) -> dict[str, int]:
    """The ``opset_import`` of an ONNX file (domain -> version), without the onnx package.

    Raises:
        ValueError: If the bytes are not a protobuf message.
    """
    opsets: dict[str, int] = {}
    for num, value in _message(data):
        if num == 8 and isinstance(value, bytes):  # ModelProto.opset_import
            sub = dict(_message(value))
            domain = sub.get(1, b"")
            version = sub.get(2, 0)
            name = domain.decode("utf-8", "replace") if isinstance(domain, bytes) else ""
            opsets[name] = int(version) if isinstance(version, int) else 0
    return opsets


@lru_cache(maxsize=1)
def supported_opsets() -> tuple[int, int | None]:
    """``(oldest, newest)`` default-domain opset of the installed onnxruntime.

    The newest is the latest ``since_version`` of its operator registry (``None`` if the
    build does not expose the registry: then opening the session decides).
    """
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as state

        newest = max(int(s.since_version) for s in state.get_all_operator_schema()
                     if s.domain in ("", "ai.onnx"))
    except Exception:  # noqa: BLE001 - unknown, not unsupported
        return MIN_OPSET, None
    return MIN_OPSET, newest


# ---------------------------------------------------------------------------- checks
def _private(path: Path, what: str) -> None:
    if not path.is_file():
        raise ModelError(f"{what} {path} not found", "export the model with its card"
                         " (rlsched export) or give the right path")
    mode = path.stat().st_mode
    if mode & stat.S_IWOTH:
        raise ModelError(f"{what} {path} is world-writable (mode {stat.S_IMODE(mode):o})",
                         f"run 'chmod o-w {path}': anyone could replace the policy")


def _card(path: Path) -> dict[str, Any]:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"cannot read the model card {path}: {exc}") from None
    if not isinstance(card, dict):
        raise ModelError(f"model card {path} is not a JSON object")
    if card.get("format") != CARD_FORMAT:
        raise ModelError(f"model card {path} has format {card.get('format')!r},"
                         f" expected {CARD_FORMAT!r}")
    missing = [k for k in CARD_FIELDS if k not in card]
    if missing:
        raise ModelError(f"model card {path} lacks {missing}")
    types: dict[str, type] = {"sha256": str, "opset": int, "schema_version": int,
                              "schema_hash": str, "normalisation": dict, "inputs": list,
                              "outputs": list}
    for k, t in types.items():
        if not isinstance(card[k], t) or isinstance(card[k], bool):
            raise ModelError(f"model card {path}: {k!r} is a {type(card[k]).__name__},"
                             f" expected {t.__name__}")
    return card


def _normalisation(card: Mapping[str, Any], where: Path) -> Normalisation:
    known = {f.name: f for f in fields(Normalisation)}
    raw = card["normalisation"]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ModelError(f"model card {where}: unknown normalisation keys {unknown}",
                         "install the rlsched version the model was exported with")
    default = asdict(Normalisation())
    try:
        vals = {k: type(default[k])(v) for k, v in raw.items()}
    except (TypeError, ValueError) as exc:
        raise ModelError(f"model card {where}: bad normalisation value ({exc})") from None
    return Normalisation(**vals)


def session_for(data: bytes | str | os.PathLike[str], threads: int = 1) -> Any:
    """An onnxruntime CPU session (``threads`` intra-op threads; 0: onnxruntime decides)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(0, int(threads))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    src = data if isinstance(data, bytes) else os.fspath(data)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


def load_model(path: str | os.PathLike[str], *, pin: str | None = None,
               threads: int = 1) -> LoadedModel:
    """Check a model file against its card and the contract, and open it.

    Args:
        path: The ONNX file (its card is ``path + ".card.json"``).
        pin: The sha256 the file must have (the helper's pinned model), if any.
        threads: onnxruntime intra-op threads.

    Raises:
        ModelError: On the first check that fails (module docstring), saying what to do.
    """
    p = Path(path)
    cp = card_path(p)
    _private(p, "model file")
    _private(cp, "model card")
    card = _card(cp)
    data = p.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != card["sha256"].lower():
        raise ModelError(f"sha256 of {p} is {digest[:16]}..., its card says"
                         f" {card['sha256'][:16]}... (the file changed or is corrupt)")
    if pin and digest != pin.strip().lower():
        raise ModelError(f"sha256 of {p} is {digest[:16]}..., the pin is {pin.strip()[:16]}...",
                         "deploy the pinned model or change the pin")
    if card["schema_version"] != SCHEMA_VERSION:
        raise ModelError(f"model uses feature schema v{card['schema_version']}, the installed"
                         f" slurm_plugin.features is v{SCHEMA_VERSION}",
                         "retrain and re-export with this rlsched, or install the rlsched"
                         " the model was trained with")
    norm = _normalisation(card, cp)
    want = schema_hash(norm)
    if card["schema_hash"] != want:
        raise ModelError(f"model feature schema hash {card['schema_hash'][:16]}... differs from"
                         f" the installed slurm_plugin.features ({want[:16]}...): features"
                         " were added, removed or computed differently",
                         "retrain and re-export with this rlsched")
    try:
        opsets = onnx_opsets(data)
    except ValueError as exc:
        raise ModelError(f"{p} is not an ONNX file ({exc})") from None
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None:
        raise ModelError(f"{p} imports no default-domain opset: not an ONNX model")
    if opset != card["opset"]:
        raise ModelError(f"{p} has opset {opset}, its card says {card['opset']}")
    import onnxruntime as ort

    lo, hi = supported_opsets()
    unsupported = ModelError(
        f"opset {opset} is not supported by onnxruntime {ort.__version__}"
        f" (opsets {lo}..{hi if hi is not None else '?'})",
        "upgrade onnxruntime or re-export with an older opset")
    if opset < lo:
        raise unsupported
    try:
        session = session_for(data, threads)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises many types
        if hi is not None and opset > hi:
            raise unsupported from None
        first = (str(exc).strip().splitlines() or [repr(exc)])[0][:300]
        raise ModelError(f"onnxruntime cannot load {p}: {first}") from None
    meta = dict(session.get_modelmeta().custom_metadata_map)
    for key, expect in ((META_FORMAT, MODEL_FORMAT),
                        (META_SCHEMA_VERSION, str(card["schema_version"])),
                        (META_SCHEMA_HASH, card["schema_hash"])):
        if meta.get(key) != expect:
            raise ModelError(f"{p}: metadata {key} is {meta.get(key)!r}, expected {expect!r}"
                             " (the card does not belong to this file)")
    ins = {i.name: i.type for i in session.get_inputs()}
    outs = [o.name for o in session.get_outputs()]
    unknown = sorted(set(ins) - set(INPUTS))
    if unknown:
        raise ModelError(f"{p} has inputs outside the contract: {unknown}")
    if "jobs" not in ins:
        raise ModelError(f"{p} has no 'jobs' input")
    for name, typ in ins.items():
        if typ != INPUTS[name]:
            raise ModelError(f"{p}: input {name!r} is {typ}, the contract says {INPUTS[name]}")
    if sorted(outs) != sorted(OUTPUTS):
        raise ModelError(f"{p}: outputs are {outs}, the contract says {list(OUTPUTS)}")
    if sorted(card["inputs"]) != sorted(ins) or sorted(card["outputs"]) != sorted(outs):
        raise ModelError(f"card {cp} lists inputs/outputs {card['inputs']}/{card['outputs']},"
                         f" the file has {sorted(ins)}/{outs}")
    return LoadedModel(p, digest, len(data), card, norm, int(opset), session,
                       frozenset(ins), meta)


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
    lo, hi = supported_opsets()
    lines = [
        f"model      {m.path} ({m.size:,} bytes)",
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
