"""A command module that needs torch (used by test_cli to test the extra hint)."""

import click
import torch  # noqa: F401

cmd = click.Command("fake-train", help="Needs torch.")
