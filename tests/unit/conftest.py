"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """An untrained 8-unit policy net saved as a checkpoint (skips without torch)."""
    torch = pytest.importorskip("torch")
    from trainer.policy import PolicyConfig, PolicyNet, save_checkpoint

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ck") / "tiny.pt"
    save_checkpoint(path, PolicyNet(PolicyConfig(hidden=8)))
    return path
