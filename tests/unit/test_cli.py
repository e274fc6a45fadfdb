"""The CLI documents itself, lists only working commands, and loads lazily."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from slurm_plugin import cli


def _walk(cmd: click.Command, path: str):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, f"{path} {name} is listed but cannot be loaded"
            yield from _walk(sub, f"{path} {name}")


def test_every_registered_command_loads_and_has_help():
    seen = list(_walk(cli.main, "rlsched"))
    assert len(seen) > 5
    for path, cmd in seen:
        assert (cmd.help or "").strip(), f"{path} has no help text"
        for p in cmd.params:
            if isinstance(p, click.Option) and p.name not in ("help", "version"):
                assert (p.help or "").strip(), f"{path} option {p.opts} has no help"


def test_root_help_lists_registry_without_importing(monkeypatch):
    def boom(*a, **k):  # pragma: no cover - the point is that it is not called
        raise AssertionError("--help imported a command module")

    monkeypatch.setattr(cli, "load_command", boom)
    result = CliRunner().invoke(cli.main, ["--help"])
    assert result.exit_code == 0, result.output
    for name, entry in cli.COMMANDS.items():
        assert name in result.output
        assert entry.help.split()[0] in result.output


def test_missing_extra_names_the_extra(monkeypatch):
    table = dict(cli.COMMANDS)
    table["fake-train"] = cli.CommandEntry(
        "tests.unit._needs_torch_cmd:cmd", "Needs torch.", extra="train"
    )
    group = cli.LazyGroup(name="rlsched", commands_table=table)
    sys.modules.pop("tests.unit._needs_torch_cmd", None)
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    result = CliRunner().invoke(group, ["fake-train"])
    assert result.exit_code != 0
    assert "'train' extra" in result.output
    assert "pip install torch==2.13.0 && pip install 'rlsched[train]'" in result.output


def test_unrelated_import_error_is_not_disguised():
    group = cli.LazyGroup(
        name="rlsched",
        commands_table={"x": cli.CommandEntry("no_such_module_rlsched:cmd", "X.")},
    )
    result = CliRunner().invoke(group, ["x"])
    assert isinstance(result.exception, ModuleNotFoundError)


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "slurm_plugin", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "slurm" in out.stdout


def test_slurm_error_is_one_line(monkeypatch):
    from slurm_plugin.slurm import cli_backend
    from slurm_plugin.slurm.errors import SlurmError

    def fail(self, args):
        raise SlurmError("squeue --all --json", "exit code 1", stderr="slurm_load_jobs error: x")

    monkeypatch.setattr(cli_backend.CliSlurmClient, "run", fail)
    result = CliRunner().invoke(cli.main, ["slurm", "jobs"])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == [
        "Error: Slurm call failed: squeue --all --json: exit code 1"
        " (stderr: slurm_load_jobs error: x)"
    ]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args", [["--version"], ["slurm", "--help"], ["slurm", "jobs", "--help"]])
def test_basic_invocations(args):
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 0, result.output
