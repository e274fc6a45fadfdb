"""The Slurm client built on Slurm's own commands (squeue, sinfo, sacct, scontrol, sprio).

Commands are run as argument lists, never through a shell: job names, comments and
other job-derived strings are data and are never interpolated into a command line.
Every command runs with ``TZ=UTC`` (so printed times are UTC) and a timeout.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timezone

from ..when import epoch_s
from . import parse
from .client import DEFAULT_TIMEOUT, SlurmClient, req_nodes_hostlist, switches_text
from .errors import SlurmError
from .types import PENDING, RUNNING, AccountingJob, SchedulerConfig, SlurmJob, SlurmNode, SwitchTree

#: Why a switch count is changed on pending jobs only.
_PENDING_ONLY = "the helper asks for leaf switches only before a job starts"


class CliSlurmClient(SlurmClient):
    """:class:`SlurmClient` on Slurm's command-line tools (any Slurm from 22.05 on).

    Args:
        timeout: Seconds allowed for each command.
        bindir: Directory holding the Slurm commands; default: found on ``PATH``.
    """

    backend = "cli"

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, bindir: str | None = None) -> None:
        super().__init__(timeout)
        self.bindir = bindir
        self._version: tuple[int, int] | None = None

    # ------------------------------------------------------------------ running
    def run(self, args: Sequence[str]) -> str:
        """Run one Slurm command (an argument list) and return its stdout.

        Raises:
            SlurmError: If the program is missing, times out, or exits non-zero.
        """
        argv = list(args)
        if self.bindir:
            argv[0] = os.path.join(self.bindir, argv[0])
        shown = " ".join(shlex.quote(a) for a in args)
        env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="standard")
        try:
            proc = subprocess.run(  # noqa: S603 - an argument list, no shell
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=env,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise SlurmError(
                shown, f"{args[0]} not found: install the Slurm client commands or fix PATH"
            ) from None
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
            raise SlurmError(shown, f"timed out after {self.timeout:g} s", stderr=err) from None
        except OSError as exc:
            raise SlurmError(shown, f"could not run: {exc.strerror or exc}") from None
        if proc.returncode != 0:
            raise SlurmError(shown, f"exit code {proc.returncode}", stderr=proc.stderr)
        return proc.stdout

    # ------------------------------------------------------------------ reading
    def jobs(self, states: Iterable[str] = (PENDING, RUNNING)) -> list[SlurmJob]:
        """Jobs in ``states``; filtered here because 22.05 ignores filters with ``--json``."""
        want = {s.upper() for s in states}
        out = self.run(["squeue", "--all", "--json"])
        parsed, version = parse.parse_squeue_document(out, "squeue --all --json")
        jobs = [j for j in parsed if j.state in want]
        if not any(j.is_pending for j in jobs):
            return jobs
        # No JSON version prints the site factor: sprio does (eligible pending jobs only;
        # for others it stays None). 22.05's JSON also lacks the switch request.
        sites = self._site_factors()
        switches = self._switches() if version == 38 else {}
        result = []
        for j in jobs:
            if j.is_pending:
                count, wait = switches.get(j.job_id, (j.switches, j.switches_wait))
                j = replace(j, site_factor=sites.get(j.job_id), switches=count,
                            switches_wait=wait)
            result.append(j)
        return result

    def _site_factors(self) -> dict[int, int]:
        """Site factors of eligible pending jobs from ``sprio``."""
        args = ["sprio", "--noheader", "--format=%i %S"]
        return parse.parse_sprio_site(self.run(args), " ".join(args))

    def _switches(self) -> dict[int, tuple[int | None, int | None]]:
        """Wanted switch count and wait per job from ``squeue -O`` (for 22.05)."""
        args = ["squeue", "--all", "--noheader", "-O", parse.SQUEUE_SWITCHES_FORMAT]
        return parse.parse_squeue_switches(self.run(args), " ".join(args))

    def nodes(self) -> list[SlurmNode]:
        """Every node once.

        Read from ``sinfo --json``, or from ``scontrol show nodes --json`` where sinfo
        groups nodes (23.11 and later).
        """
        out = self.run(["sinfo", "--json"])
        if parse.is_grouped_sinfo(out):
            out = self.run(["scontrol", "show", "nodes", "--json"])
            return parse.parse_nodes_json(out, "scontrol show nodes --json")
        return parse.parse_nodes_json(out, "sinfo --json")

    def topology(self) -> SwitchTree:
        """The switch tree from ``scontrol show topology``."""
        return parse.parse_topology(self.run(["scontrol", "show", "topology"]))

    def config(self) -> SchedulerConfig:
        """The configuration from ``scontrol show config``."""
        return parse.parse_config(self.run(["scontrol", "show", "config"]))

    def accounting(
        self,
        start: datetime,
        end: datetime,
        *,
        states: Sequence[str] = (),
        all_users: bool = True,
        use_json: bool | None = None,
    ) -> list[AccountingJob]:
        """Jobs from ``sacct`` (``--json`` where it works, ``-P`` otherwise).

        Args:
            start: Window start (naive datetimes are taken as UTC).
            end: Window end.
            states: Keep only these job states (checked here as well as asked of sacct).
            all_users: Every user's jobs (``--allusers``), not only the caller's.
            use_json: Force ``--json`` (True) or ``-P`` (False). Default: ``-P`` before
                Slurm 23.02 (22.05's ``sacct --json`` reports return code 0 for failed
                jobs), JSON after, falling back to ``-P`` if sacct has no ``--json``.
        """
        raw, is_json = self.sacct_output(start, end, states=states, all_users=all_users,
                                         use_json=use_json)
        if is_json:
            jobs = parse.parse_sacct_json(raw, "sacct --json")
        else:
            jobs = parse.parse_sacct_parsable(raw, "sacct -P")
        if states:
            want = {s.upper() for s in states}
            jobs = [j for j in jobs if j.state in want]
        return jobs

    def sacct_output(
        self,
        start: datetime,
        end: datetime,
        *,
        states: Sequence[str] = (),
        all_users: bool = True,
        use_json: bool | None = None,
    ) -> tuple[str, bool]:
        """Run ``sacct`` for a window and return its raw output and whether it is JSON.

        For record-by-record ingest, where one bad row must not fail the window. The
        arguments are those of :meth:`accounting`.
        """
        if use_json is None and self.version() < (23, 2):
            use_json = False
        # sacct keeps jobs eligible strictly before -E, to the second: the end is rounded
        # up so a job that became eligible in the same second as ``end`` is not lost
        window = ["-X", "-S", _utc(start), "-E", _utc(end, ceil=True)]
        if all_users:
            window.insert(0, "--allusers")
        if states:
            window += ["--state", ",".join(s.upper() for s in states)]
        if use_json is not False:
            try:
                return self.run(["sacct", "--json", *window]), True
            except SlurmError as exc:
                if use_json or not _no_json_option(exc):
                    raise
        fmt = "--format=" + ",".join(parse.SACCT_FIELDS)
        return self.run(["sacct", "-P", fmt, *window]), False

    def version(self) -> tuple[int, int]:
        """The Slurm (major, minor) version of the client commands, read once."""
        if self._version is None:
            out = self.run(["sinfo", "--version"])
            m = re.search(r"(\d+)\.(\d+)", out)
            if not m:
                raise SlurmError("sinfo --version", f"no version in {out.strip()!r:.60}")
            self._version = (int(m.group(1)), int(m.group(2)))
        return self._version

    def job_state(self, job_id: int) -> str | None:
        """The base state of one job, or ``None`` if slurmctld does not know it."""
        args = ["squeue", "--noheader", "--jobs", str(int(job_id)), "--format=%T"]
        try:
            out = self.run(args)
        except SlurmError as exc:
            if "Invalid job id" in exc.stderr:
                return None
            raise
        line = out.strip().splitlines()
        return line[0].strip().upper() if line else None

    # ------------------------------------------------------------------ changing
    def _update(self, job_id: int, assignment: str) -> None:
        self.run(["scontrol", "update", f"JobId={int(job_id)}", assignment])

    def set_site_factor(self, job_id: int, value: int) -> None:
        """``scontrol update JobId=N SiteFactor=S``."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"site factor must be an int, got {value!r}")
        self._update(job_id, f"SiteFactor={value}")

    def _require_pending(self, job_id: int, what: str,
                         why: str = "changing the node list of a running job would resize it"
                         ) -> None:
        state = self.job_state(job_id)
        if state != PENDING:
            raise SlurmError(
                f"scontrol update JobId={int(job_id)} {what}",
                f"refused: job {job_id} is {state or 'unknown'}, not PENDING ({why})",
            )

    def set_req_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        """``scontrol update JobId=N ReqNodeList=...`` on a pending job only."""
        hostlist = req_nodes_hostlist(nodes)
        self._require_pending(job_id, f"ReqNodeList={hostlist}")
        self._update(job_id, f"ReqNodeList={hostlist}")

    def clear_req_nodes(self, job_id: int) -> None:
        """``scontrol update JobId=N ReqNodeList=`` on a pending job only."""
        self._require_pending(job_id, "ReqNodeList=")
        self._update(job_id, "ReqNodeList=")

    def set_switches(self, job_id: int, count: int, wait: int) -> None:
        """``scontrol update JobId=N Switches=count@HH:MM:SS`` on a pending job only."""
        value = switches_text(count, wait)
        self._require_pending(job_id, f"Switches={value}", _PENDING_ONLY)
        self._update(job_id, f"Switches={value}")

    def clear_switches(self, job_id: int) -> None:
        """``scontrol update JobId=N Switches=0`` on a pending job only."""
        self._require_pending(job_id, "Switches=0", _PENDING_ONLY)
        self._update(job_id, "Switches=0")


def _utc(t: datetime, *, ceil: bool = False) -> str:
    """``t`` as sacct's UTC time to the second, truncated (or rounded up with ``ceil``)."""
    return datetime.fromtimestamp(epoch_s(t, ceil=ceil), timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S")


def _no_json_option(exc: SlurmError) -> bool:
    """True when sacct failed because it has no ``--json`` (built without the plugin)."""
    text = (exc.stderr + exc.reason).lower()
    return "unrecognized option" in text or "json" in text and "not" in text
