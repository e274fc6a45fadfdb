"""rlsched exporter: torch policy to verified ONNX (needs the ``export`` extra)."""
