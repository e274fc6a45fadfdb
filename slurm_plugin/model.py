"""Load and verify a compiled policy (``model.onnx`` + its model card) before any use.

The model contract (written by ``exporter/``, read here) is:

- ``model.onnx`` and, beside it, ``model.onnx.card.json`` (the model card);
- the card's ``sha256`` is the sha256 of the ONNX file's bytes; its ``schema_hash`` is
  :func:`slurm_plugin.features.schema_hash` of the card's ``normalisation`` and must equal
  the installed featurizer's; its ``opset`` is the file's default-domain opset and must be
  supported by the installed onnxruntime;
- the ONNX graph takes (a subset of) :data:`INPUTS` and returns exactly :data:`OUTPUTS`,
  and carries ``rlsched.*`` metadata that agrees with the card.

:func:`load_model` checks all of it, plus what the helper's security demands (neither the
file nor the card may be world-writable; an optional pinned sha256 from the helper's
configuration), and raises :class:`ModelError` saying what is wrong and what to do. The
bytes that were hashed are the bytes handed to onnxruntime (no re-read in between).

Only numpy, onnxruntime and the standard library.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from .features import SCHEMA_VERSION, Normalisation, schema_hash

__all__ = [
    "CARD_FORMAT",
    "CARD_SUFFIX",
    "INPUTS",
    "MODEL_FORMAT",
    "OUTPUTS",
    "PLACE_TRAINED",
    "LoadedModel",
    "ModelError",
    "card_path",
    "file_signature",
    "load_model",
    "max_supported_opset",
    "place_head_trained",
    "read_onnx_header",
    "sha256_hex",
]

#: ``rlsched.format`` inside the ONNX file.
MODEL_FORMAT = "rlsched-model/1"
#: ``format`` of the card.
CARD_FORMAT = "rlsched-model-card/1"
#: The card lives at the model path plus this suffix.
CARD_SUFFIX = ".card.json"

#: Contract inputs: name -> ONNX type string as onnxruntime reports it.
INPUTS: dict[str, str] = {
    "jobs": "tensor(float)",
    "job_mask": "tensor(bool)",
    "nodes": "tensor(float)",
    "node_leaf": "tensor(int64)",
    "n_leaves": "tensor(int64)",
    "globals": "tensor(float)",
    "cand_sets": "tensor(bool)",
    "cand_mask": "tensor(bool)",
    "place_job": "tensor(int64)",
}
#: Contract outputs (all three required; ``value`` is ignored by the helper).
OUTPUTS: tuple[str, ...] = ("job_logits", "place_logits", "value")

#: The oldest default-domain opset onnxruntime guarantees.
MIN_OPSET = 7

_FIX_EXPORT = "re-export it with 'rlsched export' (issue 6) or point the helper at another model"


class ModelError(Exception):
    """A model that must not be used, with the reason and what to do about it.

    Attributes:
        reason: What is wrong, one line.
        action: What to do about it, one line.
    """

    def __init__(self, reason: str, action: str = _FIX_EXPORT) -> None:
        self.reason = reason
        self.action = action
        super().__init__(f"{reason}: {action}")


#: Key of a checkpoint's ``extra`` (and of the exported model card) saying whether its
#: placement head was trained to place jobs (see :func:`place_head_trained`).
PLACE_TRAINED = "place_trained"


def place_head_trained(meta: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's (``extra``) or a model's (card) placement head was trained.

    Training records it: imitation trains it when enough starts had a placement label
    (multi-node starts whose nodes are known: :func:`trainer.imitate.place_head_learned`;
    a trace like Philly has a handful), reinforcement learning with ``--place`` (the
    agent chose the node sets and was rewarded for them) trains it, and RL without
    ``--place`` keeps the head it started from. Where it is not recorded (files saved
    before it was) the head counts as trained, as it did then. An untrained head does
    not place jobs: :func:`trainer.evaluate.load_policy` and the helper's steering
    (:mod:`slurm_plugin.helper.cycle`) leave them to Slurm's topology/tree best fit.
    """
    v = meta.get(PLACE_TRAINED)
    return True if v is None else bool(v)



@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A verified model and its onnxruntime session.

    Attributes:
        path: The ONNX file.
        sha256: sha256 of its bytes (hex).
        card: The model card as read.
        norm: The feature normalisation the model was trained with (from the card).
        opset: The default-domain opset of the graph.
        session: The ``onnxruntime.InferenceSession``.
        input_names: The inputs the session declares (a subset of :data:`INPUTS`).
        metadata: The ONNX file's ``metadata_props``.
        signature: :func:`file_signature` of the file when it was read (reload detection).
        created: The card's ``created`` time as epoch seconds, ``None`` if unreadable.
    """

    path: Path
    sha256: str
    card: Mapping[str, Any]
    norm: Normalisation
    opset: int
    session: Any
    input_names: tuple[str, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)
    signature: tuple[int, ...] = ()
    created: float | None = None

    @property
    def short_sha(self) -> str:
        """The first 12 hex digits of the sha256 (for logs)."""
        return self.sha256[:12]

    def age(self, now: float) -> float | None:
        """Seconds since the model was created (``None`` if the card has no time)."""
        return None if self.created is None else max(0.0, now - self.created)


def card_path(model: str | os.PathLike[str]) -> Path:
    """Where the card of ``model`` lives (the model path plus ``.card.json``)."""
    return Path(str(model) + CARD_SUFFIX)


def sha256_hex(data: bytes) -> str:
    """sha256 of ``data`` in lower-case hex."""
    return hashlib.sha256(data).hexdigest()


def file_signature(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """``(device, inode, size, mtime_ns)`` of a file, ``()`` if it cannot be read.

    The helper reloads (and re-verifies) a model whose signature changed.
    """
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------------------- ONNX header
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Top-level protobuf fields of ``buf`` as ``(number, wire type, value)``."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if pos > n:
            raise ValueError("truncated protobuf field")
        out.append((num, wire, value))
    return out


def read_onnx_header(data: bytes) -> tuple[dict[str, int], dict[str, str]]:
    """The opset imports (domain -> version) and metadata_props of an ONNX file.

    A minimal reader of the top-level ``ModelProto`` fields (8: opset_import, 14:
    metadata_props), so the runtime needs no ``onnx`` package.

    Raises:
        ValueError: If the bytes are not a well-formed protobuf message.
    """
    opsets: dict[str, int] = {}
    meta: dict[str, str] = {}
    for num, wire, value in _fields(data):
        if num == 8 and wire == 2:
            sub = {n: v for n, _w, v in _fields(value)}
            domain = bytes(sub.get(1, b"")).decode("utf-8", "replace")
            opsets[domain] = int(sub.get(2, 0))
        elif num == 14 and wire == 2:
            sub = {n: v for n, _w, v in _fields(value)}
            meta[bytes(sub.get(1, b"")).decode("utf-8", "replace")] = bytes(
                sub.get(2, b"")).decode("utf-8", "replace")
    return opsets, meta


@lru_cache(maxsize=1)
def max_supported_opset() -> int | None:
    """The newest default-domain opset the installed onnxruntime knows, if it says.

    Read from onnxruntime's operator schema registry; ``None`` when the build does not
    expose it (then creating the session decides).
    """
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

        schemas = ort_state.get_all_operator_schema()
        return max(int(s.since_version) for s in schemas if s.domain in ("", "ai.onnx"))
    except Exception:  # noqa: BLE001 - any failure means "unknown", not "unsupported"
        return None


# ---------------------------------------------------------------------------- checks
def _check_not_world_writable(path: Path, what: str) -> None:
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{what} {path} is not a regular file", "point the helper at the"
                         " model.onnx file itself")
    if st.st_mode & stat.S_IWOTH:
        raise ModelError(f"{what} {path} is world-writable (mode {stat.S_IMODE(st.st_mode):o})",
                         f"run 'chmod o-w {path}' (anyone could replace the policy)")


def _read_card(path: Path) -> dict[str, Any]:
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read the model card {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"model card {path} is not JSON ({exc})") from None
    if not isinstance(card, dict):
        raise ModelError(f"model card {path} is not a JSON object")
    if card.get("format") != CARD_FORMAT:
        raise ModelError(f"model card {path} has format {card.get('format')!r},"
                         f" expected {CARD_FORMAT!r}")
    need: dict[str, type | tuple[type, ...]] = {
        "sha256": str, "opset": int, "schema_version": int, "schema_hash": str,
        "normalisation": dict, "inputs": list, "outputs": list,
    }
    for key, typ in need.items():
        if key not in card:
            raise ModelError(f"model card {path} lacks {key!r}")
        if not isinstance(card[key], typ) or isinstance(card[key], bool):
            raise ModelError(f"model card {path}: {key!r} has the wrong type"
                             f" ({type(card[key]).__name__})")
    return card


def _normalisation(card: Mapping[str, Any], where: Path) -> Normalisation:
    raw = card["normalisation"]
    known = {f.name for f in fields(Normalisation)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ModelError(f"model card {where}: unknown normalisation keys {unknown}",
                         "upgrade rlsched on this host to the version that trained the model")
    values: dict[str, Any] = {}
    try:
        for k, v in raw.items():
            values[k] = float(v) if isinstance(getattr(Normalisation(), k), float) else int(v)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"model card {where}: bad normalisation value ({exc})") from None
    return Normalisation(**values)


def _created(card: Mapping[str, Any]) -> float | None:
    text = card.get("created")
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    ts = t.timestamp()
    return ts if math.isfinite(ts) else None


def _session(data: bytes, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(0, int(threads))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])


def load_model(path: str | os.PathLike[str], *, pin: str | None = None,
               threads: int = 1) -> LoadedModel:
    """Verify a model against the contract and open it with onnxruntime.

    Args:
        path: The ``model.onnx`` file (its card is ``path + ".card.json"``).
        pin: If given, the sha256 the file must have (the helper configuration's pin).
        threads: onnxruntime intra-op threads (1: single-threaded; 0: onnxruntime decides).

    Raises:
        ModelError: Saying what is wrong and what to do, for anything that makes the
            model unusable: missing or world-writable file or card, unreadable card, sha256
            mismatch (card or pin), schema version or hash mismatch, unsupported opset,
            inputs/outputs or metadata not as the contract says, onnxruntime refusing it.
    """
    p = Path(path)
    cp = card_path(p)
    for f, what in ((p, "model file"), (cp, "model card")):
        if not f.exists():
            raise ModelError(f"{what} {f} not found",
                             "export the model with its card or fix the 'model' setting")
        _check_not_world_writable(f, what)
    card = _read_card(cp)
    signature = file_signature(p)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read model file {p}: {exc.strerror or exc}",
                         "check its permissions for the helper's account") from None
    digest = sha256_hex(data)
    if digest != str(card["sha256"]).lower():
        raise ModelError(f"sha256 of {p} is {digest[:12]}..., the card says"
                         f" {str(card['sha256'])[:12]}... (file changed or corrupt)")
    if pin and digest != pin.strip().lower():
        raise ModelError(f"sha256 of {p} is {digest[:12]}..., the configuration pins"
                         f" {pin.strip()[:12]}...",
                         "deploy the pinned model or update 'model_sha256' in the config")
    if card["schema_version"] != SCHEMA_VERSION:
        raise ModelError(f"model uses feature schema version {card['schema_version']},"
                         f" this rlsched has version {SCHEMA_VERSION}",
                         "retrain/re-export the model with this rlsched version, or install"
                         " the rlsched version it was trained with")
    norm = _normalisation(card, cp)
    want = schema_hash(norm)
    if card["schema_hash"] != want:
        raise ModelError(f"model feature schema hash {str(card['schema_hash'])[:12]}... differs"
                         f" from this rlsched's {want[:12]}... (features changed)",
                         "retrain/re-export the model with this rlsched version")
    try:
        opsets, meta = read_onnx_header(data)
    except ValueError as exc:
        raise ModelError(f"{p} is not an ONNX file ({exc})") from None
    opset = opsets.get("", opsets.get("ai.onnx"))
    if opset is None:
        raise ModelError(f"{p} declares no default-domain opset (not an ONNX model?)")
    if opset != card["opset"]:
        raise ModelError(f"{p} has opset {opset}, its card says {card['opset']}")
    newest = max_supported_opset()
    if opset < MIN_OPSET or (newest is not None and opset > newest):
        import onnxruntime as ort

        raise ModelError(f"opset {opset} is not supported by onnxruntime {ort.__version__}"
                         f" (supports {MIN_OPSET}..{newest})",
                         f"re-export with an opset <= {newest} or upgrade onnxruntime")
    if meta.get("rlsched.format") != MODEL_FORMAT:
        raise ModelError(f"{p} metadata rlsched.format is {meta.get('rlsched.format')!r},"
                         f" expected {MODEL_FORMAT!r}")
    if meta.get("rlsched.schema_hash") != card["schema_hash"]:
        raise ModelError(f"{p} metadata rlsched.schema_hash does not match its card")
    if meta.get("rlsched.schema_version") != str(card["schema_version"]):
        raise ModelError(f"{p} metadata rlsched.schema_version does not match its card")
    try:
        session = _session(data, threads)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own many types
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
        raise ModelError(f"onnxruntime cannot load {p}: {first}") from None
    ins = {i.name: i.type for i in session.get_inputs()}
    outs = [o.name for o in session.get_outputs()]
    extra = sorted(set(ins) - set(INPUTS))
    if extra:
        raise ModelError(f"{p} has inputs the contract does not know: {extra}")
    if "jobs" not in ins:
        raise ModelError(f"{p} has no 'jobs' input")
    for name, typ in ins.items():
        if typ != INPUTS[name]:
            raise ModelError(f"{p} input {name!r} is {typ}, the contract says {INPUTS[name]}")
    if sorted(outs) != sorted(OUTPUTS):
        raise ModelError(f"{p} outputs are {outs}, the contract says {list(OUTPUTS)}")
    if sorted(card["inputs"]) != sorted(ins) or sorted(card["outputs"]) != sorted(outs):
        raise ModelError(f"model card {cp} lists other inputs/outputs than {p} has")
    return LoadedModel(path=p, sha256=digest, card=card, norm=norm, opset=opset,
                       session=session, input_names=tuple(ins), metadata=meta,
                       signature=signature, created=_created(card))
