"""rlsched runtime: the Slurm boundary, the feature schema and the helper.

This package must stay importable with the runtime install alone (numpy, onnxruntime,
click, sqlalchemy): it never imports torch, onnx, ``trainer`` or ``exporter``.
"""

__version__ = "0.1.0"
