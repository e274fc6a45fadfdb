"""slurm_plugin.helper.config: one TOML file, documented keys, CLI overrides, safety."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from slurm_plugin.helper import config as C

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _write(tmp_path: Path, text: str, mode: int = 0o640) -> str:
    p = tmp_path / "helper.toml"
    p.write_text(text)
    p.chmod(mode)
    return str(p)


def test_every_key_is_documented_and_defaults_validate():
    for f in dataclasses.fields(C.HelperConfig):
        assert len(f.metadata["help"]) > 20, f.name
    assert C.HelperConfig().validate().mode == "shadow"


def test_example_round_trips_to_the_defaults_and_matches_contrib():
    text = C.example_toml()
    parsed = tomllib.loads(text)
    assert set(parsed) == {f.name for f in dataclasses.fields(C.HelperConfig)}
    defaults = C.HelperConfig()
    for k, v in parsed.items():
        assert v == getattr(defaults, k), k
    assert (ROOT / "contrib" / "helper.toml").read_text() == text, (
        "contrib/helper.toml is stale: regenerate with 'rlsched helper config --example'")


def test_file_values_then_overrides(tmp_path):
    path = _write(tmp_path, 'mode = "enforce"\nband_hi = 5000\nstarvation_limit = "3d"\n'
                            'interval = 30\nrank_all = false\n')
    cfg, src = C.load_config(path)
    assert src == path
    assert (cfg.mode, cfg.band_hi, cfg.starvation_limit, cfg.interval, cfg.rank_all) == (
        "enforce", 5000, 3 * 86400.0, 30.0, False)
    cfg, _ = C.load_config(path, {"band_hi": 7000, "mode": None, "interval": "2m"})
    assert (cfg.band_hi, cfg.mode, cfg.interval) == (7000, "enforce", 120.0)


def test_missing_named_file_is_an_error_default_missing_is_not(tmp_path, monkeypatch):
    with pytest.raises(C.ConfigError, match="not found"):
        C.load_config(str(tmp_path / "nope.toml"))
    monkeypatch.setattr(C, "DEFAULT_PATH", str(tmp_path / "absent.toml"))
    cfg, src = C.load_config(None)
    assert src is None and cfg == C.HelperConfig()


def test_world_writable_config_is_refused(tmp_path):
    path = _write(tmp_path, 'mode = "enforce"\n', mode=0o646)
    os.chmod(path, 0o646)
    with pytest.raises(C.ConfigError, match="world-writable"):
        C.load_config(path)


@pytest.mark.parametrize("text, match", [
    ("band_hight = 5\n", "unknown key 'band_hight'.*band_hi"),
    ('band_hi = "lots"\n', "band_hi = 'lots'.*expected int"),
    ("band_lo = 10\nband_hi = 10\n", "band_lo"),
    ('mode = "aggressive"\n', "mode = 'aggressive'"),
    ('mapping = "magic"\n', "mapping"),
    ('metrics_address = "0.0.0.0"\n', "loopback"),
    ("interval = 0\n", "interval must be positive"),
    ('starvation_limit = "soon"\n', "starvation_limit"),
    ("rank_all = 1\n", "expected bool"),
    ('model_sha256 = "abc"\n', "64 hex digits"),
    ("hint_socket_mode = 0o666\n", "no rights to others"),
    ("steer_min_nodes = 0\n", "steer_min_nodes must be at least 1"),
    ("band_hi = 3000000000\n", "band_lo"),
    ("mode = \n", "not valid TOML"),
    ('starvation_order = "oldest"\n', "starvation_order = 'oldest'"),
    ('starvation_order = "policy"\nmapping = "logit"\n', "needs mapping"),
    ("score_resolution = -0.1\n", "score_resolution must be a finite number >= 0"),
    ("score_resolution = nan\n", "score_resolution must be a finite number >= 0"),
    ('switch_wait = "2d"\n', "switch_wait must be at most 86400 s"),
    ("switch_wait = 0\n", "switch_wait must be positive"),
    ('steering = "features"\n', "steering = 'features'"),
    ('express_limit = -60\nstarvation_order = "policy"\n', "express_limit must be a finite"),
])
def test_bad_values_name_the_key(tmp_path, text, match):
    with pytest.raises(C.ConfigError, match=match):
        C.load_config(_write(tmp_path, text))


def test_unknown_override_and_bad_override_type():
    with pytest.raises(C.ConfigError, match="unknown setting"):
        C.HelperConfig().with_overrides({"colour": "blue"})
    with pytest.raises(C.ConfigError, match="expected int"):
        C.HelperConfig().with_overrides({"band_hi": 2.5})


def test_rule_reflects_the_band_and_mapping(tmp_path):
    cfg = C.HelperConfig(band_lo=10, band_hi=20, mapping="logit", hysteresis=2)
    r = cfg.rule()
    assert (r.lo, r.hi, r.mapping, r.hysteresis) == (10, 20, "logit", 2)
    assert r.starvation_order == "age"
    assert C.HelperConfig(starvation_order="policy").rule().starvation_order == "policy"
    assert r.score_resolution == 0.0
    assert C.HelperConfig(score_resolution=0.2).rule().score_resolution == 0.2
    assert r.express_limit == 0.0
    cfg = C.load_config(_write(tmp_path, 'express_limit = "15m"\nstarvation_order = "policy"\n'))[0]
    assert cfg.rule().express_limit == 900.0  # a duration, as the other times
    aged = C.load_config(_write(tmp_path, 'express_limit = "15m"\n'))[0].rule()  # age order
    assert aged.express_limit == 900.0 and aged.starvation_order == "age" and aged.split
