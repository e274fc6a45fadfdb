"""The ``rlsched`` command line: a root group that loads each package's commands lazily.

Each package owns its command group; the root only knows, for each name, where the group
lives, which extra it needs and a one-line help. Nothing is imported until a command is
run, so ``rlsched --help`` and the runtime commands work with the runtime install alone,
and a command whose extra is missing says which extra to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import click

from . import __version__
from .slurm.errors import SlurmError


@dataclass(frozen=True)
class CommandEntry:
    """Where a top-level command lives.

    Attributes:
        target: ``"package.module:attribute"`` of the click command or group.
        help: One-line help shown by ``rlsched --help`` (without importing the target).
        extra: The pip extra the command needs (``"train"``, ``"export"``), if any.
    """

    target: str
    help: str
    extra: str | None = None


#: Every registered top-level command. Only commands that work are listed here.
COMMANDS: dict[str, CommandEntry] = {
    "slurm": CommandEntry(
        "slurm_plugin.slurm.commands:slurm",
        "Read the cluster through rlsched's Slurm boundary (jobs, nodes, topology...).",
    ),
    "db": CommandEntry(
        "db.cli:db",
        "Create, upgrade and inspect the job-history store (init, upgrade, stats...).",
    ),
    "ingest": CommandEntry(
        "db.ingest_cli:ingest",
        "Load job history into the store: sacct, the slurmdbd database, SWF/Philly traces.",
    ),
    "helper": CommandEntry(
        "slurm_plugin.helper.cli:helper",
        "Run the compiled policy next to slurmctld (shadow/enforce); status, audit log, reset.",
    ),
    "simulate": CommandEntry(
        "trainer.cli:simulate",
        "Replay a trace or the store's history under one policy and print its metrics.",
    ),
    "build-sim": CommandEntry(
        "trainer.cli:build_sim",
        "Compile the replay simulator with mypyc (optional; about 2x faster replays).",
    ),
    "compare": CommandEntry(
        "trainer.cli:compare",
        "Replay the same jobs under every baseline (Slurm, FIFO, SJF...) side by side.",
    ),
    "evaluate": CommandEntry(
        "trainer.evaluate:evaluate_command",
        "Compare learned policies with every baseline on the test period (quality targets).",
        extra="train",
    ),
    "tune-guard": CommandEntry(
        "trainer.guard:tune_guard",
        "Choose the helper's starvation guard on your own history (validation period).",
        extra="train",
    ),
    "demo": CommandEntry(
        "trainer.demo:demo",
        "Run the whole product end to end on a synthetic GPU cluster (or a trace).",
        extra="train",
    ),
    "report": CommandEntry(
        "trainer.report:report",
        "Build a self-contained HTML report of a run directory (demo or evaluate --out).",
    ),
    "export": CommandEntry(
        "exporter.cli:export",
        "Compile a trained policy checkpoint to a verified ONNX model with its model card.",
        extra="export",
    ),
    "verify": CommandEntry(
        "exporter.verify:verify",
        "Check an ONNX policy against its model card and this install, then smoke-test it.",
    ),
    "replay-live": CommandEntry(
        "trainer.replay_live:replay_live",
        "Replay a trace window on the real cluster with and without the helper; compare.",
        extra="train",
    ),
    "train": CommandEntry(
        "trainer.cli_train:train",
        "Learn a policy: imitate the site's scheduler, then improve it with RL.",
        extra="train",
    ),
}

#: Packages an extra provides, to tell a missing extra from a bug.
EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "train": ("torch", "gymnasium", "matplotlib", "tqdm"),
    "export": ("onnx", "torch", "gymnasium"),
    "dist": ("ray",),
    "pyslurm": ("pyslurm",),
}


def _install_hint(extra: str) -> str:
    hint = f"pip install 'rlsched[{extra}]'"
    if "torch" in EXTRA_PACKAGES.get(extra, ()):
        hint = f"pip install torch==2.13.0 && {hint}"
    return hint


def load_command(name: str, entry: CommandEntry) -> click.Command:
    """Import a registered command.

    Raises:
        click.ClickException: If the command's extra is not installed (saying which
            extra to install).
    """
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        for extra, pkgs in EXTRA_PACKAGES.items():
            if missing in pkgs and (entry.extra is None or extra == entry.extra):
                raise click.ClickException(
                    f"'rlsched {name}' needs the '{extra}' extra ({missing} is not installed):"
                    f" {_install_hint(extra)}"
                ) from None
        raise
    cmd = getattr(module, attr)
    if not isinstance(cmd, click.Command):
        raise TypeError(f"{entry.target} is not a click command")
    return cmd


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when used."""

    def __init__(self, *args: Any, commands_table: dict[str, CommandEntry], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.table = commands_table

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Registered names, sorted."""
        return sorted(self.table)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import and return a command, or ``None`` if the name is not registered."""
        entry = self.table.get(cmd_name)
        return None if entry is None else load_command(cmd_name, entry)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List commands from the registry's help lines, without importing anything."""
        rows = []
        for name in self.list_commands(ctx):
            entry = self.table[name]
            suffix = f" [needs rlsched[{entry.extra}]]" if entry.extra else ""
            rows.append((name, entry.help + suffix))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a Slurm failure becomes a one-line error, not a traceback."""
        try:
            return super().invoke(ctx)
        except SlurmError as exc:
            raise click.ClickException(f"Slurm call failed: {exc}") from None


@click.group(
    cls=LazyGroup,
    commands_table=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="rlsched")
def main() -> None:
    """rlsched: learn a better Slurm scheduling policy from your cluster's own history.

    Train offline from accounting data, compile the policy to ONNX, and run a light
    helper next to slurmctld that reorders pending jobs (SiteFactor) and steers them
    to topology-aware node sets. Run 'rlsched COMMAND --help' for each command.
    """
