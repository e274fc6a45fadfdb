"""rlsched exporter: a trained torch policy to a verified ONNX model with its model card.

Modules:

- :mod:`exporter.onnx_export`: ``export(checkpoint, out_path)`` (``rlsched export``);
  needs the ``export`` extra and torch.
- :mod:`exporter.parity`: onnxruntime vs torch on simulator observations and edge cases.
- :mod:`exporter.verify`: ``rlsched verify``: the helper's own checks
  (:func:`slurm_plugin.model.load_model`) plus a smoke test (runtime only: numpy,
  onnxruntime, click).
- :mod:`exporter.policy`: ``OnnxPolicy``, an exported model as a simulator policy.
- :mod:`exporter.contract`, :mod:`exporter.synthetic`: contract names, input feeding,
  synthetic observations (runtime only).

This package's ``__init__`` imports nothing, so ``rlsched verify`` runs with the runtime
install alone.

The model contract
==================

The contract between ``exporter/`` (writes) and ``slurm_plugin/`` (reads:
:mod:`slurm_plugin.model`). It is fixed; the constants of :mod:`slurm_plugin.model` and
:mod:`exporter.contract` spell it.

Files
-----
- ``model.onnx`` and, beside it, ``model.onnx.card.json`` (the model card: the ONNX path
  + ``".card.json"``).

ONNX graph
----------
Inputs (by name; the runtime scorer builds all of these and feeds those the session
declares, so a graph may omit some):

- ``jobs``       float32 ``[J, len(JOB_FEATURES)]``   (J dynamic, may be 0)
- ``job_mask``   bool    ``[J]``                     (True = may start now)
- ``nodes``      float32 ``[N, len(NODE_FEATURES)]`` (N dynamic, >= 1)
- ``node_leaf``  int64   ``[N]``                     (leaf switch index per node)
- ``n_leaves``   int64   ``[]`` (scalar)             (number of leaf switches)
- ``globals``    float32 ``[len(GLOBAL_FEATURES)]``
- ``cand_sets``  bool    ``[K, N]``                  (candidate node sets of the job to
  place; K dynamic, may be 0)
- ``cand_mask``  bool    ``[K]``
- ``place_job``  int64   ``[]`` (scalar)             (row of the job whose candidates are
  scored; 0 when J=0)

Outputs:

- ``job_logits``   float32 ``[J+1]`` (last = hold; masked jobs = -1e9)
- ``place_logits`` float32 ``[K]``   (masked = -1e9)
- ``value``        float32 ``[]``    (critic; ignored by the helper)

All features come from :mod:`slurm_plugin.features` (Observation fields of the same
names). The exported :class:`~trainer.policy.PolicyNet` omits ``n_leaves`` (it derives
the leaf count from ``node_leaf``).

metadata_props (strings) inside the ONNX file
---------------------------------------------
``rlsched.format`` = ``"rlsched-model/1"``, ``rlsched.schema_version``,
``rlsched.schema_hash``, ``rlsched.normalisation`` (JSON), ``rlsched.cluster`` (JSON:
name, nodes, gpus, switch_tree_hash; the exporter also writes ``leaves``, as in the
card), ``rlsched.training`` (JSON), ``rlsched.version``, ``rlsched.created`` (ISO UTC).

Card (JSON)
-----------
::

    { "format": "rlsched-model-card/1", "sha256": <hex of model.onnx bytes>, "opset": int,
      "schema_version": int, "schema_hash": str, "normalisation": {...},
      "inputs": [names], "outputs": [names],
      "cluster": {"name", "nodes", "gpus", "leaves", "switch_tree_hash"},
      "training": {"algorithm", "config", "window"}, "evaluation": {...table...},
      "rlsched_version": str, "created": ISO UTC }

The exporter adds ``checkpoint`` (file name, sha256, rlsched version), ``parity`` (the
parity report) and ``export`` (its settings), and ``training.net`` (the net's sizes).

A model is usable by the helper only if: the file and card exist and are not
world-writable, sha256 of the file equals ``card.sha256`` (and the configured pin if
any), ``card.schema_hash == slurm_plugin.features.schema_hash()`` (with the card's
normalisation), the opset is supported by the installed onnxruntime, and the session's
inputs/outputs match the names above.
"""
