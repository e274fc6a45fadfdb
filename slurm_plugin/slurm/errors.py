"""The one error type raised by the Slurm boundary."""

from __future__ import annotations


class SlurmError(Exception):
    """A Slurm command failed, timed out, or printed something that could not be parsed.

    Attributes:
        command: The command (or API call) that failed, e.g. ``"squeue --json"``.
        reason: One line saying why, e.g. ``"exit code 1"`` or ``"timed out after 10 s"``.
        stderr: What the command printed on stderr, if anything (trimmed).
        field: For parse errors, the path of the offending field, e.g. ``"jobs[3].job_id"``.
    """

    def __init__(
        self,
        command: str,
        reason: str,
        *,
        stderr: str = "",
        field: str | None = None,
    ) -> None:
        self.command = command
        self.reason = reason
        self.stderr = stderr.strip()
        self.field = field
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" at field {self.field!r}" if self.field else ""
        msg = f"{self.command}: {self.reason}{where}"
        if self.stderr:
            first = self.stderr.splitlines()[-1][:300]
            msg += f" (stderr: {first})"
        return msg
