"""The helper's configuration: one TOML file, every key documented, every key a CLI option.

:class:`HelperConfig` is the one source of defaults. Each field's ``help`` (in its
metadata) documents the key; ``rlsched helper config --example`` prints a commented
example generated from them (``contrib/helper.toml`` is that output), and every key is
also a ``rlsched helper run`` / ``once`` option (``band_hi`` -> ``--band-hi``) that
overrides the file.

The file is flat (``key = value`` at the top level). Unknown keys, wrong types and bad
values are refused with a message naming the key; so is a world-writable file (anyone
could turn on ``enforce`` or point the helper at another model). Durations are seconds,
or a string such as ``"2d"``, ``"12h"``, ``"30m"``.
"""

from __future__ import annotations

import ipaddress
import os
import stat
import sys
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .decide import (
    MAPPINGS,
    STARVATION_ORDERS,
    SiteFactorRule,
    check_express_limit,
    check_score_resolution,
    check_starvation_order,
)

__all__ = [
    "DEFAULT_PATH",
    "MAX_SWITCH_WAIT",
    "MODES",
    "STEERING",
    "ConfigError",
    "HelperConfig",
    "example_toml",
    "load_config",
]

#: Where the helper looks for its configuration by default.
DEFAULT_PATH = "/etc/rlsched/helper.toml"

#: Helper modes: what each does.
MODES: dict[str, str] = {
    "shadow": "compute, log and audit what it would change; change nothing",
    "enforce": "apply site factors and steering (every change audited)",
}

#: Steering modes: how a pending job is steered to where it should run.
#: LATER: "features" (Features=[leafA|leafB] matching-OR on leaf-switch features), which
#: needs per-switch node features.
STEERING: dict[str, str] = {
    "reqnodes": "ReqNodeList=<the chosen nodes> on the pending job (rolled back if it"
                " does not start)",
    "switches": "Switches=1@<switch_wait> on a multi-node job that one leaf switch could"
                " hold but that could start now only across several: Slurm's topology/tree"
                " keeps it pending up to switch_wait for one leaf (needs no placement head)",
    "none": "no steering: reorder only",
}
#: Longest ``switch_wait`` the helper accepts (each change it makes is bounded).
MAX_SWITCH_WAIT = 86400.0

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: SiteFactor values the helper may ever write (Slurm keeps them in 32 bits with an offset).
SITE_FACTOR_LIMIT = 2_000_000_000


class ConfigError(ValueError):
    """A configuration that cannot be used (the message names the key and the fix)."""


def _key(default: Any, help: str, *, kind: str = "", choices: dict[str, str] | None = None
         ) -> Any:
    return field(default=default, metadata={"help": help, "kind": kind, "choices": choices})


@dataclass(frozen=True)
class HelperConfig:
    """Every setting of the helper (each field's metadata holds its documentation).

    See ``rlsched helper config --example`` for the documented list of keys.
    """

    mode: str = _key("shadow", "What the helper does: 'shadow' (default for a new install:"
                     " compute, log and audit what it would do, change nothing) or 'enforce'.",
                     choices=MODES)
    model: str = _key("/etc/rlsched/model.onnx", "The policy model (ONNX); its card is"
                      " the same path plus '.card.json'. Neither may be world-writable.")
    model_sha256: str = _key("", "Pin: the sha256 the model file must have (empty: trust"
                             " the card's sha256 only).")
    interval: float = _key(15.0, "Seconds between cycles; also the time one cycle's"
                           " changes may take (at least 5 s), the rest waiting for the"
                           " next cycle.", kind="duration")
    threads: int = _key(1, "onnxruntime threads for scoring (1: single-threaded, 0:"
                        " onnxruntime decides).")
    slurm_backend: str = _key("cli", "How to talk to Slurm: 'cli' (squeue/sinfo/scontrol)"
                              " or 'pyslurm' (Slurm 25.11 sites).")
    slurm_timeout: float = _key(10.0, "Seconds allowed for each Slurm command; a slower"
                                " slurmctld fails the cycle (and the helper backs off).",
                                kind="duration")
    store: str = _key("", "The store for the audit log and job history: a database URL or"
                      " SQLite path (empty: $RLSCHED_DB, else the default SQLite file).")
    store_timeout: float = _key(5.0, "Seconds the store may take to connect or to grant a"
                                " write lock; a slower store fails the cycle before any"
                                " change is made (none without its audit record) and the"
                                " helper backs off.", kind="duration")
    cluster: str = _key("", "Cluster name in the store (empty: Slurm's ClusterName).")
    state_file: str = _key("/var/lib/rlsched/helper-state.json", "The helper's state file"
                           " (last cycle, counters, the values it set, steered jobs).")
    band_lo: int = _key(0, "Lowest SiteFactor the helper writes.")
    band_hi: int = _key(100_000, "Highest SiteFactor the helper writes. Make the band wide"
                        " compared with the other priority weights for the policy to"
                        " dominate, narrow to blend it with age and fair-share.")
    mapping: str = _key("rank", "How scores become site factors: 'rank' (evenly spaced by"
                        " rank over the band) or 'logit' (affine in the model's logits,"
                        " clipped to the band).",
                        choices={k: k for k in MAPPINGS})
    logit_scale: float = _key(10_000.0, "'logit' mapping: SiteFactor per logit unit.")
    logit_center: float = _key(0.5, "'logit' mapping: where logit 0 lands, as a fraction"
                               " of the band (0 = band_lo, 1 = band_hi).")
    rank_all: bool = _key(True, "Rank every pending job (the model's job_mask is all true;"
                          " its fits_now feature still says which job can start now);"
                          " false: only jobs that fit now are ranked, the others share the"
                          " value below them and Slurm's own factors order them.")
    hysteresis: int = _key(1_000, "Write a new SiteFactor only when it differs from the"
                           " current one by more than this.")
    starvation_limit: float = _key(2 * 86400.0, "A job waiting longer than this (seconds"
                                   " since eligible) goes above every job that has not"
                                   " waited as long. Choose it on your own history with"
                                   " 'rlsched tune-guard MODEL ...'.", kind="duration")
    starvation_order: str = _key("age", "How those starving jobs are ordered among"
                                 " themselves: 'age' (all at band_hi, or with an express"
                                 " lane just below it, and Slurm's age factor puts the"
                                 " oldest first: the tightest bound on the longest"
                                 " wait) or 'policy' (ranked at the top of the band in the"
                                 " model's order: less loss on a loaded machine, longer"
                                 " longest waits; 'rank' mapping only).",
                                 choices=STARVATION_ORDERS)
    express_limit: float = _key(0.0, "An express lane: a pending job whose time limit is"
                                " at most this (seconds) goes above every other job,"
                                " starving ones included, so that short jobs need not"
                                " wait behind the wide starving jobs the guard releases"
                                " back to back (0: off). With starvation_order ="
                                " \"age\" the lane takes about the top quarter of the band,"
                                " kept more than Slurm's PriorityWeightAge above the starving"
                                " jobs (the helper reads it from Slurm). Try it on your"
                                " history with 'rlsched evaluate MODEL --express-limit 900"
                                " ...'.", kind="duration")
    score_resolution: float = _key(0.0, "Scores closer than this (in logits) are equals:"
                                   " the scores are rounded to multiples of it and"
                                   " Slurm's own factors (age first) order the jobs that"
                                   " tie (0: exact scores). Choose it with the guard:"
                                   " 'rlsched tune-guard MODEL --resolutions 0,0.2 ...'.")
    max_changes: int = _key(500, "SiteFactor updates issued per cycle, at most (head of"
                            " the queue first; the rest follow in later cycles).")
    steering: str = _key("reqnodes", "How the helper steers jobs: 'reqnodes' (to the node"
                         " sets the model chooses), 'switches' (multi-node jobs wait up to"
                         " switch_wait for one leaf switch) or 'none'.", choices=STEERING)
    switch_wait: float = _key(1800.0, "With steering = \"switches\": how long a multi-node"
                              " job waits for one leaf switch (at most 1 day; Slurm caps it"
                              " at SchedulerParameters=max_switch_wait, 300 s unless set).",
                              kind="duration")
    steer_jobs: int = _key(4, "Steer at most this many jobs per cycle (the first in the"
                           " policy's order that can start now).")
    steer_min_nodes: int = _key(1, "Steer only jobs asking for at least this many nodes.")
    steer_candidates: int = _key(8, "Candidate node sets the model chooses among, per job.")
    rollback_cycles: int = _key(4, "Clear the steering of a job still pending after this"
                                " many cycles.")
    history_days: float = _key(14.0, "Days of finished jobs read from the store for the"
                               " per-user estimates (0: none).")
    history_refresh: float = _key(600.0, "Seconds between re-reads of that history.",
                                  kind="duration")
    backoff_max: float = _key(300.0, "Longest wait after repeated failed cycles (the wait"
                              " doubles from 'interval' after each failure).",
                              kind="duration")
    metrics_port: int = _key(0, "Prometheus text metrics on http://metrics_address:port/"
                             "metrics (0: off).")
    metrics_address: str = _key("127.0.0.1", "Address of the metrics endpoint (loopback"
                                " only).")
    hint_socket: str = _key("", "Unix socket for job_submit.lua's initial site factor"
                            " (empty: off), e.g. /run/rlsched/hint.sock.")
    hint_socket_mode: int = _key(0o660, "Permissions of the hint socket (slurmctld's"
                                 " user must be able to connect).")
    hint_timeout: float = _key(0.5, "Seconds a hint connection may take before it is"
                               " closed.", kind="duration")
    hint_workers: int = _key(4, "Hint requests served at once; more are closed unanswered.")
    log_level: str = _key("info", "Lowest log level written: debug, info, warning, error.",
                          choices={"debug": "", "info": "", "warning": "", "error": ""})

    # ------------------------------------------------------------------ derived
    @property
    def enforce(self) -> bool:
        """True in ``enforce`` mode."""
        return self.mode == "enforce"

    def rule(self) -> SiteFactorRule:
        """The ranking-to-site-factor rule of this configuration."""
        return SiteFactorRule(
            lo=self.band_lo, hi=self.band_hi, mapping=self.mapping,
            logit_scale=self.logit_scale, logit_center=self.logit_center,
            hysteresis=self.hysteresis, starvation_limit=self.starvation_limit,
            max_changes=self.max_changes, starvation_order=self.starvation_order,
            score_resolution=self.score_resolution, express_limit=self.express_limit)

    def validate(self) -> HelperConfig:
        """Check every value; return ``self``.

        Raises:
            ConfigError: Naming the key and what is allowed.
        """
        for f in fields(self):
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ConfigError(f"{f.name} = {getattr(self, f.name)!r}: use one of"
                                  f" {sorted(choices)}")
        if not -SITE_FACTOR_LIMIT <= self.band_lo < self.band_hi <= SITE_FACTOR_LIMIT:
            raise ConfigError(f"band_lo ({self.band_lo}) must be below band_hi"
                              f" ({self.band_hi}), both within ±{SITE_FACTOR_LIMIT}")
        positive = ("interval", "slurm_timeout", "store_timeout", "hint_timeout",
                    "starvation_limit", "history_refresh", "switch_wait")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive (got {getattr(self, name)})")
        at_least = {"hysteresis": 0, "max_changes": 0, "steer_jobs": 0, "steer_min_nodes": 1,
                    "steer_candidates": 1, "rollback_cycles": 1, "threads": 0,
                    "hint_workers": 1, "metrics_port": 0, "history_days": 0}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ConfigError(f"{name} must be at least {low} (got {getattr(self, name)})")
        if self.switch_wait > MAX_SWITCH_WAIT:
            raise ConfigError(f"switch_wait must be at most {MAX_SWITCH_WAIT:g} s (1 day; got"
                              f" {self.switch_wait:g})")
        if self.metrics_port > 65535:
            raise ConfigError(f"metrics_port must be at most 65535 (got {self.metrics_port})")
        try:
            check_starvation_order(self.starvation_order, self.mapping)
            check_express_limit(self.express_limit, self.starvation_order,
                                self.starvation_limit)
            check_score_resolution(self.score_resolution)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not 0.0 <= self.logit_center <= 1.0:
            raise ConfigError(f"logit_center must lie in [0, 1] (got {self.logit_center})")
        if self.backoff_max < self.interval:
            raise ConfigError(f"backoff_max ({self.backoff_max}) must be at least interval"
                              f" ({self.interval})")
        if not 0 <= self.hint_socket_mode <= 0o777 or self.hint_socket_mode & 0o007:
            raise ConfigError(f"hint_socket_mode {self.hint_socket_mode:o}: give no rights to"
                              " others (e.g. 0o660, with slurmctld's user in the group)")
        try:
            loopback = ipaddress.ip_address(self.metrics_address).is_loopback
        except ValueError:
            loopback = self.metrics_address == "localhost"
        if not loopback:
            raise ConfigError(f"metrics_address {self.metrics_address!r} is not a loopback"
                              " address: the endpoint is for localhost only (put a proxy in"
                              " front to expose it)")
        if self.model_sha256 and (len(self.model_sha256) != 64 or any(
                c not in "0123456789abcdefABCDEF" for c in self.model_sha256)):
            raise ConfigError("model_sha256 must be 64 hex digits (the sha256 of model.onnx)")
        if not self.model:
            raise ConfigError("model must name the model.onnx file")
        return self

    def with_overrides(self, overrides: dict[str, Any]) -> HelperConfig:
        """A copy with ``overrides`` (``None`` values ignored), converted and validated.

        Raises:
            ConfigError: For an unknown key or a bad value.
        """
        known = {f.name: f for f in fields(self)}
        values: dict[str, Any] = {}
        for k, v in overrides.items():
            if v is None:
                continue
            if k not in known:
                raise ConfigError(f"unknown setting {k!r}")
            values[k] = _convert(known[k], v, "option")
        return replace(self, **values).validate()


# ---------------------------------------------------------------------------- values
def _span(name: str, value: str) -> float:
    v = value.strip().lower()
    try:
        if v[-1:] in _DURATION_UNITS:
            return float(v[:-1]) * _DURATION_UNITS[v[-1]]
        return float(v)
    except ValueError:
        raise ConfigError(f"{name} = {value!r}: use seconds or a span like 30s, 15m, 2h,"
                          " 2d") from None


def _type_name(f: Field[Any]) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def _convert(f: Field[Any], value: Any, where: str) -> Any:
    """``value`` as the type of field ``f``.

    Raises:
        ConfigError: Naming the key when the type is wrong.
    """
    typ = _type_name(f)
    name = f.name
    if typ == "bool":
        if isinstance(value, bool):
            return value
    elif typ == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif typ == "float":
        if f.metadata.get("kind") == "duration" and isinstance(value, str):
            return _span(name, value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif typ == "str":
        if isinstance(value, str):
            return value
    raise ConfigError(f"{name} = {value!r} in the {where}: expected {typ}")


def _load_toml(data: bytes, path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigError("reading the helper's TOML config needs Python 3.11+"
                              " (or 'pip install tomli' on 3.10)") from None
    try:
        parsed: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parsed


def load_config(path: str | None = None, overrides: dict[str, Any] | None = None
                ) -> tuple[HelperConfig, str | None]:
    """Read the configuration file, apply ``overrides`` and validate.

    Args:
        path: The TOML file; ``None``: :data:`DEFAULT_PATH` if it exists, else defaults.
        overrides: Key -> value from the command line (``None`` values ignored).

    Returns:
        ``(config, the file read or None)``.

    Raises:
        ConfigError: Missing (when named) or world-writable file, bad TOML, unknown key,
            wrong type or bad value.
    """
    source: str | None = path
    if path is None and os.path.exists(DEFAULT_PATH):
        source = DEFAULT_PATH
    cfg = HelperConfig()
    if source is not None:
        p = Path(source)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise ConfigError(f"config file {p} not found (see 'rlsched helper config"
                              " --example')") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"config file {p} is not a regular file")
        if st.st_mode & stat.S_IWOTH:
            raise ConfigError(f"config file {p} is world-writable (mode"
                              f" {stat.S_IMODE(st.st_mode):o}): run 'chmod o-w {p}'")
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
        table = _load_toml(data, str(p))
        known = {f.name: f for f in fields(HelperConfig)}
        values: dict[str, Any] = {}
        for k, v in table.items():
            if k not in known:
                near = [n for n in known if n.split("_")[0] == k.split("_")[0]]
                hint = f" (did you mean {', '.join(near)}?)" if near else ""
                raise ConfigError(f"{p}: unknown key {k!r}{hint}")
            values[k] = _convert(known[k], v, f"file {p}")
        cfg = replace(cfg, **values)
    try:
        cfg = cfg.with_overrides(overrides or {})
    except ConfigError as exc:
        where = f"{source}: " if source else ""
        raise ConfigError(f"{where}{exc}") from None
    return cfg, source


# ---------------------------------------------------------------------------- example
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _wrap(text: str, width: int = 86) -> list[str]:
    words = text.split()
    lines: list[str] = []
    cur = ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


def example_toml() -> str:
    """A complete, commented example configuration with every key at its default."""
    out = [
        "# rlsched helper configuration (rlsched helper config --example).",
        "# Every key is shown at its default and can be overridden on the command line",
        "# (band_hi -> --band-hi). The file must not be world-writable.",
        "# Durations: seconds, or a string such as \"30s\", \"15m\", \"2h\", \"2d\".",
        "",
    ]
    for f in fields(HelperConfig):
        for line in _wrap(f.metadata["help"]):
            out.append(f"# {line}")
        default = f.default if f.default is not MISSING else None
        if f.name == "hint_socket_mode":
            out.append(f"{f.name} = 0o{default:o}")
        else:
            out.append(f"{f.name} = {_toml_value(default)}")
        out.append("")
    return "\n".join(out)
