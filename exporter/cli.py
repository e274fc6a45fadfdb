"""``rlsched export CHECKPOINT -o model.onnx``: compile a policy with its model card.

Needs the ``export`` extra (onnx) and the training stack (torch, gymnasium: the parity
check records observations from the simulator's environment). The defaults live in
:class:`exporter.onnx_export.ExportConfig`; the resolved settings are written into the
card (``export``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from slurm_plugin.cluster import ClusterSpec

__all__ = ["export"]


def _json_file(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.ClickException(f"cannot read {what} {path}: {exc}") from None


def _spec_from_store(url: str | None, name: str) -> ClusterSpec:
    from db.session import StoreError
    from db.store import Store

    try:
        with Store.open(url) as store:
            spec = store.cluster_spec(name)
    except StoreError as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    if spec is None:
        raise click.ClickException(f"the store has no spec of cluster {name!r}: ingest from"
                                   " sacct (which records it) or give --cluster-spec FILE")
    return spec


@click.command("export")
@click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="ONNX file to write; its card is written beside it (OUTPUT.card.json).")
@click.option("--cluster-spec", type=click.Path(exists=True, dir_okay=False),
              help="ClusterSpec JSON snapshot of the training cluster, when the checkpoint"
                   " does not name it.")
@click.option("--db", envvar="RLSCHED_DB", default=None,
              help="Store URL or SQLite file to read the cluster spec from (with --cluster);"
                   " default $RLSCHED_DB.")
@click.option("--cluster", help="Cluster name in the store (with --db) whose spec to use.")
@click.option("--eval", "eval_file", type=click.Path(exists=True, dir_okay=False),
              help="JSON file with the evaluation table to put in the card (default: the"
                   " checkpoint's).")
@click.option("--observations", type=click.IntRange(min=1000), default=None,
              help="Simulator observations for the parity check (default 1000).")
@click.option("--seed", type=int, default=None,
              help="Seed of the parity observations (default 0).")
def export(checkpoint: str, output: str, cluster_spec: str | None, db: str | None,
           cluster: str | None, eval_file: str | None, observations: int | None,
           seed: int | None) -> None:
    """Compile CHECKPOINT (a trained policy) to a verified ONNX model with its card.

    Traces the policy at a fixed opset with dynamic job, node and candidate counts,
    checks the graph, writes the feature schema, normalisation, cluster, training and
    evaluation into the file's metadata and the card, and compares onnxruntime with
    torch on 1,000+ simulator observations and edge cases (0, 1, 10,000 pending jobs,
    all masked, one node, no GPUs). Nothing is written when they disagree.
    """
    from .onnx_export import ExportConfig
    from .onnx_export import export as run_export

    spec = None
    if cluster_spec is not None:
        if cluster is not None:
            raise click.UsageError("give --cluster-spec FILE or --cluster NAME, not both")
        try:
            spec = ClusterSpec.from_dict(_json_file(cluster_spec, "cluster spec"))
        except (ValueError, TypeError, AttributeError) as exc:
            raise click.ClickException(f"{cluster_spec}: not a ClusterSpec snapshot"
                                       f" ({exc})") from None
    elif cluster is not None:
        spec = _spec_from_store(db, cluster)
    evaluation = None
    if eval_file is not None:
        evaluation = _json_file(eval_file, "evaluation table")
        if not isinstance(evaluation, dict):
            raise click.ClickException(f"{eval_file}: the evaluation table must be a JSON"
                                       " object")
    overrides = {"observations": observations, "seed": seed}
    cfg = ExportConfig(**{k: v for k, v in overrides.items() if v is not None})
    try:
        res = run_export(checkpoint, output, cluster_spec=spec, evaluation=evaluation,
                         config=cfg, progress=click.echo)
    except ValueError as exc:  # ExportError, ParityError, SchemaMismatchError, bad file
        raise click.ClickException(f"export failed: {exc}") from None
    click.echo(f"sha256 {res.card['sha256']}; check it where it runs: rlsched verify {output}")
