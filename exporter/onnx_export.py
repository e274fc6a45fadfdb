"""Compile a policy checkpoint to ``model.onnx`` plus its model card, verified.

:func:`export` does, in order (nothing is written at ``out_path`` unless all passes):

1. loads the checkpoint (:func:`trainer.policy.load_checkpoint`: refused when its
   feature schema is not the installed one) and resolves the cluster it was trained for
   (:func:`resolve_cluster`);
2. traces :class:`DeployModule` (whose ``forward`` is the contract) with
   ``torch.onnx.export`` at the fixed :data:`OPSET`, with dynamic axes ``J``, ``N``,
   ``K`` (``J`` and ``K`` may be 0), and checks the graph with ``onnx.checker``;
3. writes the ``rlsched.*`` metadata_props into the file;
4. runs :func:`exporter.parity.check_parity` on >= 1,000 simulator observations and the
   edge cases; on failure removes the new file and raises
   :class:`~exporter.parity.ParityError` (a model already at ``out_path`` is left as
   it was, with its card);
5. runs the checks of ``rlsched verify``'s smoke test on the session;
6. moves the file into place (mode 0644: the helper refuses world-writable files) and
   writes the card beside it with the sha256 of the final bytes.

Exporter choice (torch 2.13, CPU): the TorchScript-based exporter
(``torch.onnx.export(..., dynamo=False)``). Both were tried on :class:`DeployModule`
and give correct dynamic shapes, including ``J = 0`` and ``K = 0``, and identical
outputs; the torch.export-based one (``dynamo=True``, the default since torch 2.9)
needs ``onnxscript``, which is not a dependency of rlsched, emits opset 18, and took 17 s
against 0.9 s here. The TorchScript exporter is deprecated upstream but present in
torch 2.13, the newest torch rlsched allows. ``PolicyNet`` does not take ``n_leaves``
(it derives the leaf count from ``node_leaf``), so the graph omits that input; the
runtime feeds by declared names.

Cluster of the card (:func:`resolve_cluster`), in order: the checkpoint's
``extra["cluster"]`` (a :meth:`slurm_plugin.cluster.ClusterSpec.to_dict` snapshot or
the card's ``{name, nodes, gpus, leaves, switch_tree_hash}``); else a cluster spec
given by the caller (``--cluster-spec FILE``, or ``--db URL --cluster NAME`` read from
the store). Given both, they must agree (same name and switch tree hash). Training:
the checkpoint's ``extra["training"]`` (``algorithm``, ``config``, ``window``) or those
keys at the top of ``extra``. Evaluation: the table given (``--eval FILE``), else the
checkpoint's ``extra["evaluation"]``, else ``{}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import Tensor, nn

from slurm_plugin import __version__
from slurm_plugin.cluster import ClusterSpec
from slurm_plugin.features import (
    GLOBAL_FEATURES,
    JOB_FEATURES,
    NODE_FEATURES,
    SCHEMA_VERSION,
    schema_hash,
)
from slurm_plugin.fsio import atomic_write
from trainer.policy import (
    PLACE_TRAINED,
    Checkpoint,
    Net,
    PolicyEnsemble,
    load_checkpoint,
    place_head_trained,
)

from . import parity
from .contract import (
    CARD_FORMAT,
    CLUSTER_FIELDS,
    META_CLUSTER,
    META_CREATED,
    META_FORMAT,
    META_NORMALISATION,
    META_SCHEMA_HASH,
    META_SCHEMA_VERSION,
    META_TRAINING,
    META_VERSION,
    MODEL_FORMAT,
    OUTPUTS,
    TRAINING_FIELDS,
    card_path,
)
from .synthetic import Case
from .verify import session_for, smoke

__all__ = [
    "GRAPH_INPUTS",
    "OPSET",
    "DeployModule",
    "ExportConfig",
    "ExportError",
    "ExportResult",
    "cluster_summary",
    "export",
    "export_net",
    "resolve_cluster",
]

#: The fixed default-domain opset of every exported model.
OPSET = 17

#: The inputs of the exported graph, in :meth:`DeployModule.forward` order.
GRAPH_INPUTS: tuple[str, ...] = ("jobs", "job_mask", "nodes", "node_leaf", "globals",
                                 "cand_sets", "cand_mask", "place_job")

_DYNAMIC_AXES: dict[str, dict[int, str]] = {
    "jobs": {0: "J"}, "job_mask": {0: "J"},
    "nodes": {0: "N"}, "node_leaf": {0: "N"},
    "cand_sets": {0: "K", 1: "N"}, "cand_mask": {0: "K"},
    "job_logits": {0: "J_plus_1"}, "place_logits": {0: "K"},
}


class ExportError(ValueError):
    """The checkpoint cannot be exported as asked (what to do is in the message)."""


@dataclass(frozen=True)
class ExportConfig:
    """Settings of :func:`export` (written into the card as ``export``).

    Attributes:
        observations: Simulator observations the parity check records (>= 1,000 for a
            model that will be deployed).
        seed: Seed of the recorded observations and edge cases.
        atol: Parity tolerance on unmasked outputs.
        opset: Default-domain opset (fixed: :data:`OPSET`).
    """

    observations: int = 1000
    seed: int = 0
    atol: float = parity.ATOL
    opset: int = OPSET

    def __post_init__(self) -> None:
        if self.observations < 0:
            raise ValueError("ExportConfig.observations must be >= 0")
        if not 0 < self.atol <= 1e-3:
            raise ValueError("ExportConfig.atol must lie in (0, 1e-3]")
        if self.opset != OPSET:
            raise ValueError(f"ExportConfig.opset is fixed at {OPSET}")


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export` wrote.

    Attributes:
        path: The ONNX file.
        card_path: The card beside it.
        card: The card's content.
        parity: The parity report.
    """

    path: Path
    card_path: Path
    card: dict[str, Any]
    parity: parity.ParityReport


class DeployModule(nn.Module):
    """The deploy contract as a module: contract inputs in, contract outputs out.

    Wraps a :class:`~trainer.policy.PolicyNet` (or a
    :class:`~trainer.policy.PolicyEnsemble`, traced into one graph) so the exported
    signature stays the contract's even if the net's ``forward`` grows; ``cand_sets`` is
    a bool input.
    """

    def __init__(self, net: Net) -> None:
        super().__init__()
        self.net = net

    def forward(self, jobs: Tensor, job_mask: Tensor, nodes: Tensor, node_leaf: Tensor,
                globals: Tensor, cand_sets: Tensor, cand_mask: Tensor, place_job: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        """``(job_logits [J+1], place_logits [K], value [])``: see the contract."""
        out: tuple[Tensor, Tensor, Tensor] = self.net(
            jobs, job_mask, nodes, node_leaf, globals, cand_sets, cand_mask, place_job)
        return out


# ---------------------------------------------------------------------------- cluster
def cluster_summary(spec: ClusterSpec) -> dict[str, Any]:
    """The card's cluster entry for a spec.

    ``leaves`` counts leaf switches as the featurizer does: the tree's leaves, plus one
    for nodes outside every leaf; 1 without a tree.
    """
    leaves = spec.switches.leaves
    in_leaf = {n for s in leaves for n in s.nodes}
    outside = any(n.name not in in_leaf for n in spec.nodes)
    n_leaves = len(leaves) + (1 if outside else 0) if leaves else 1
    return {"name": spec.name, "nodes": spec.num_nodes, "gpus": spec.total_gpus,
            "leaves": n_leaves, "switch_tree_hash": spec.switch_tree_hash()}


def _summary_of(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ExportError(f"{where}: cluster must be a JSON object, not {type(raw).__name__}")
    if "spec_version" in raw:
        try:
            return cluster_summary(ClusterSpec.from_dict(raw))
        except ValueError as exc:
            raise ExportError(f"{where}: {exc}") from None
    missing = [k for k in CLUSTER_FIELDS if k not in raw]
    if missing:
        raise ExportError(f"{where}: cluster lacks {missing} (give a ClusterSpec snapshot"
                          f" or all of {list(CLUSTER_FIELDS)})")
    return {k: raw[k] for k in CLUSTER_FIELDS}


def resolve_cluster(extra: Mapping[str, Any], spec: ClusterSpec | None = None
                    ) -> dict[str, Any]:
    """The card's cluster: from the checkpoint, else ``spec`` (module docstring).

    Raises:
        ExportError: If neither names a cluster, or both do and disagree.
    """
    saved = (_summary_of(extra["cluster"], "checkpoint extra['cluster']")
             if extra.get("cluster") is not None else None)
    given = cluster_summary(spec) if spec is not None else None
    if saved is None and given is None:
        raise ExportError("the checkpoint does not say which cluster it was trained for:"
                          " give --cluster-spec FILE (a ClusterSpec JSON snapshot) or"
                          " --db URL --cluster NAME")
    if saved is not None and given is not None and (
            saved["name"], saved["switch_tree_hash"]) != (given["name"],
                                                          given["switch_tree_hash"]):
        raise ExportError(f"the checkpoint was trained for cluster {saved['name']!r} (switch"
                          f" tree {saved['switch_tree_hash']}), the given spec is"
                          f" {given['name']!r} ({given['switch_tree_hash']}): drop the"
                          " cluster option or give the spec of the training cluster")
    out = saved if saved is not None else given
    assert out is not None
    return out


def _training(ck: Checkpoint) -> dict[str, Any]:
    ex = ck.extra
    nested = ex.get("training")
    src: Mapping[str, Any] = nested if isinstance(nested, Mapping) else ex
    out = {k: src.get(k) for k in TRAINING_FIELDS}
    out["net"] = ck.config.to_dict()
    if isinstance(ck.net, PolicyEnsemble):  # (train rl --ensemble: which nets, averaged)
        saved = ex.get("ensemble")
        out["ensemble"] = {"nets": len(ck.net),
                           "members": saved.get("members") if isinstance(saved, Mapping)
                           else None}
    return out


# ---------------------------------------------------------------------------- export
def _example_inputs() -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    j, n = 3, 4  # K = 2 candidate sets below
    return (torch.rand(j, _width("jobs"), generator=g), torch.tensor([True, False, True]),
            torch.rand(n, _width("nodes"), generator=g), torch.tensor([0, 0, 1, 1]),
            torch.rand(_width("globals"), generator=g),
            torch.tensor([[True, True, False, False], [False, True, True, False]]),
            torch.tensor([True, True]), torch.tensor(0))


def _width(table: str) -> int:
    return {"jobs": len(JOB_FEATURES), "nodes": len(NODE_FEATURES),
            "globals": len(GLOBAL_FEATURES)}[table]


def export_net(net: Net, path: str | os.PathLike[str], opset: int = OPSET) -> None:
    """Trace ``net`` to an ONNX file (no metadata, no checks): step 2 of :func:`export`.

    Raises:
        ExportError: If the net's sizes are not the installed feature schema's, or the
            graph fails ``onnx.checker``.
    """
    cfg = net.config
    want = (_width("jobs"), _width("nodes"), _width("globals"))
    if (cfg.job_features, cfg.node_features, cfg.global_features) != want:
        raise ExportError(f"the net takes {cfg.job_features}/{cfg.node_features}/"
                          f"{cfg.global_features} job/node/global features, the installed"
                          f" schema has {want}: retrain with this rlsched")
    module = DeployModule(net).eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # type: ignore[attr-defined]
        torch.onnx.export(module, _example_inputs(), os.fspath(path),
                          input_names=list(GRAPH_INPUTS), output_names=list(OUTPUTS),
                          dynamic_axes=_DYNAMIC_AXES, opset_version=opset, dynamo=False,
                          do_constant_folding=True)
    try:
        onnx.checker.check_model(os.fspath(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"onnx.checker rejects the exported graph: {exc}") from None


def _utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def export(checkpoint: str | os.PathLike[str], out_path: str | os.PathLike[str], *,
           cluster_spec: ClusterSpec | None = None,
           evaluation: Mapping[str, Any] | None = None,
           config: ExportConfig | None = None,
           cases: list[Case] | None = None,
           progress: Callable[[str], None] | None = None) -> ExportResult:
    """Compile ``checkpoint`` to ``out_path`` and its card (module docstring).

    Args:
        checkpoint: A :func:`trainer.policy.save_checkpoint` file.
        out_path: The ONNX file to write (its card is ``out_path + ".card.json"``).
        cluster_spec: The training cluster, when the checkpoint does not say.
        evaluation: The evaluation table for the card (default: the checkpoint's).
        config: Export settings.
        cases: Parity inputs instead of :func:`exporter.parity.parity_cases` (tests).
        progress: Called with a line per step.

    Returns:
        What was written.

    Raises:
        ExportError: On a checkpoint or cluster that cannot be exported.
        trainer.policy.SchemaMismatchError: If the checkpoint's schema is not installed.
        exporter.parity.ParityError: If onnxruntime and torch disagree (nothing is
            written).
    """
    cfg = config or ExportConfig()
    say = progress or (lambda _s: None)
    out = Path(out_path)
    if out.is_dir():
        raise ExportError(f"{out} is a directory: give the path of the .onnx file to write")
    if not out.parent.is_dir():
        raise ExportError(f"{out.parent} does not exist: create it first")
    ck = load_checkpoint(checkpoint)
    cluster = resolve_cluster(ck.extra, cluster_spec)
    training = _training(ck)
    ev = dict(evaluation if evaluation is not None else ck.extra.get("evaluation") or {})
    norm = asdict(ck.norm)
    created = _utc_now()

    with tempfile.TemporaryDirectory(prefix=".rlsched-export-", dir=out.parent) as tmpdir:
        tmp = Path(tmpdir) / "model.onnx"
        say(f"tracing the policy (opset {cfg.opset})")
        export_net(ck.net, tmp, cfg.opset)
        model = onnx.load(os.fspath(tmp))
        meta = {
            META_FORMAT: MODEL_FORMAT,
            META_SCHEMA_VERSION: str(SCHEMA_VERSION),
            META_SCHEMA_HASH: schema_hash(ck.norm),
            META_NORMALISATION: json.dumps(norm, sort_keys=True),
            META_CLUSTER: json.dumps(cluster, sort_keys=True),
            META_TRAINING: json.dumps(training, sort_keys=True, default=str),
            META_VERSION: __version__,
            META_CREATED: created,
        }
        del model.metadata_props[:]
        onnx.helper.set_model_props(model, meta)
        model.producer_name = "rlsched"
        model.producer_version = __version__
        model.doc_string = "rlsched scheduling policy (see the model card beside this file)"
        data = model.SerializeToString()
        session = session_for(data, threads=1)

        if cases is None:
            say(f"recording {cfg.observations} observations from the simulator")
            cases = parity.parity_cases(cfg.observations, cfg.seed)
        say(f"parity check on {len(cases)} inputs")
        report = parity.check_parity(ck.net, session, cases, cfg.atol)
        if not report.ok:
            raise parity.ParityError(report)
        say(report.message())
        res = smoke(session)
        if not res.ok:
            raise ExportError("the exported model fails the smoke test: "
                              + "; ".join(res.problems[:3]))
        card: dict[str, Any] = {
            "format": CARD_FORMAT,
            "sha256": hashlib.sha256(data).hexdigest(),
            "opset": cfg.opset,
            "schema_version": SCHEMA_VERSION,
            "schema_hash": schema_hash(ck.norm),
            "normalisation": norm,
            "inputs": [i.name for i in session.get_inputs()],
            "outputs": [o.name for o in session.get_outputs()],
            "cluster": cluster,
            "training": training,
            "evaluation": ev,
            "rlsched_version": __version__,
            "created": created,
            "checkpoint": {"file": Path(checkpoint).name,
                           "sha256": _sha256_file(Path(checkpoint)),
                           "rlsched_version": ck.version},
            "parity": report.to_dict(),
            "export": asdict(cfg),
            # whether the placement head may steer (trainer.policy.place_head_trained)
            PLACE_TRAINED: place_head_trained(ck.extra),
        }
        atomic_write(out, data)
    cp = card_path(out)
    atomic_write(cp, (json.dumps(card, indent=2, sort_keys=True, default=str) + "\n").encode())
    say(f"wrote {out} ({len(data):,} bytes) and {cp.name}")
    return ExportResult(out, cp, card, report)
