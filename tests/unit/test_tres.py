from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin.slurm.tres import (
    STATIC_TRES_IDS,
    TresError,
    format_tres,
    gpu_count,
    is_memory_key,
    parse_gres_count,
    parse_tres,
)

IDS = {1: "cpu", 2: "mem", 3: "energy", 4: "node", 5: "billing", 1001: "gres/gpu"}

# --- parse_tres ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, {}),
        ("", {}),
        ("  ", {}),
        (
            "cpu=4,mem=4000M,node=2,billing=4,gres/gpu=2",
            {"cpu": 4, "mem": 4000, "node": 2, "billing": 4, "gres/gpu": 2},
        ),
        (
            "billing=4,cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=16G,node=1",
            {"billing": 4, "cpu": 4, "gres/gpu:a100": 2, "gres/gpu": 2, "mem": 16384, "node": 1},
        ),
        ("mem=4000", {"mem": 4000}),
        ("mem=1K", {"mem": 1}),
        ("mem=1025K", {"mem": 2}),
        ("mem=2048K", {"mem": 2}),
        ("mem=0", {"mem": 0}),
        ("mem=1.5G", {"mem": 1536}),
        ("mem=2T", {"mem": 2 * 1024 * 1024}),
        ("mem=1P", {"mem": 1024**3}),
        ("mem=4g", {"mem": 4096}),
        ("gres/mem=1G", {"gres/mem": 1024}),
        ("billing=1.5K", {"billing": 1536}),
        ("energy=2M", {"energy": 2 * 1024 * 1024}),
        ("cpu=4, mem=100M", {"cpu": 4, "mem": 100}),
        ("license/matlab=1,fs/disk=100", {"license/matlab": 1, "fs/disk": 100}),
        # Special values are not interpreted.
        ("mem=18446744073709551614", {"mem": 18446744073709551614}),
    ],
)
def test_parse_named(text: str | None, expected: dict[str, int]) -> None:
    assert parse_tres(text) == expected


def test_parse_ids() -> None:
    assert parse_tres("1=4,2=4000,4=2,1001=2", IDS) == {
        "cpu": 4,
        "mem": 4000,
        "node": 2,
        "gres/gpu": 2,
    }
    assert parse_tres("1=4,1002=3", IDS) == {"cpu": 4, "id:1002": 3}
    assert parse_tres("1=4,2=4000") == {"id:1": 4, "id:2": 4000}
    assert parse_tres("1=4,2=4000", STATIC_TRES_IDS) == {"cpu": 4, "mem": 4000}


def test_parse_keeps_order() -> None:
    assert list(parse_tres("node=1,cpu=2,mem=3")) == ["node", "cpu", "mem"]


@pytest.mark.parametrize(
    ("text", "bad_item"),
    [
        ("cpu", "cpu"),
        ("cpu=4,mem", "mem"),
        ("cpu=", "cpu="),
        ("=4", "=4"),
        ("cpu=-1", "cpu=-1"),
        ("cpu=x", "cpu=x"),
        ("cpu=1.5", "cpu=1.5"),
        ("mem=1.5", "mem=1.5"),
        ("mem=4X", "mem=4X"),
        ("cpu=4=5", "cpu=4=5"),
        ("cpu=4,,mem=1", ""),
        ("cpu=1,cpu=2", "cpu=2"),
        ("1=1,cpu=2", "cpu=2"),
        ("cpu=00:01:02", "cpu=00:01:02"),
        ("a b=1", "a b=1"),
    ],
)
def test_parse_errors(text: str, bad_item: str) -> None:
    with pytest.raises(TresError) as info:
        parse_tres(text, IDS)
    assert isinstance(info.value, ValueError)
    assert info.value.item == bad_item
    assert repr(bad_item) in str(info.value)


def test_error_pickles() -> None:
    err = TresError("cpu=x", "bad")
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


# --- format_tres --------------------------------------------------------------------------


def test_format_order() -> None:
    tres = {
        "gres/gpu": 2,
        "billing": 4,
        "node": 2,
        "mem": 4000,
        "cpu": 4,
        "energy": 0,
        "fs/disk": 5,
        "bb/x": 1,
    }
    assert format_tres(tres) == (
        "cpu=4,mem=4000M,energy=0,node=2,billing=4,bb/x=1,fs/disk=5,gres/gpu=2"
    )
    assert format_tres({}) == ""
    assert format_tres({"gres/mem": 3}) == "gres/mem=3M"


@pytest.mark.parametrize(
    "tres",
    [{"cpu": -1}, {"": 1}, {"a=b": 1}, {"a,b": 1}, {"a b": 1}, {"12": 1}, {"cpu": True}],
)
def test_format_errors(tres: dict[str, int]) -> None:
    with pytest.raises(TresError) as info:
        format_tres(tres)
    key, value = next(iter(tres.items()))
    assert repr(f"{key}={value}") in str(info.value)


_key = st.one_of(
    st.sampled_from(
        [
            "cpu",
            "mem",
            "energy",
            "node",
            "billing",
            "fs/disk",
            "vmem",
            "pages",
            "gres/gpu",
            "gres/gpu:a100",
            "license/x",
            "gres/mem",
            "id:1002",
        ]
    ),
    st.from_regex(r"[a-z][a-z0-9/:_.-]{0,12}", fullmatch=True),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_key, st.integers(min_value=0, max_value=2**64), max_size=10))
def test_round_trip(tres: dict[str, int]) -> None:
    text = format_tres(tres)
    assert parse_tres(text) == tres
    assert format_tres(parse_tres(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["K", "M", "G", "T", "P"]))
def test_memory_units(n: int, unit: str) -> None:
    power = {"K": -1, "M": 0, "G": 1, "T": 2, "P": 3}[unit]
    mib = parse_tres(f"mem={n}{unit}")["mem"]
    if power >= 0:
        assert mib == n * 1024**power
    else:
        assert mib == -(-n // 1024)


def test_is_memory_key() -> None:
    assert is_memory_key("mem")
    assert is_memory_key("gres/mem")
    assert not is_memory_key("vmem")
    assert not is_memory_key("memory")


# --- gpu_count ----------------------------------------------------------------------------


def test_gpu_count() -> None:
    assert gpu_count({"gres/gpu": 2, "gres/gpu:a100": 2}) == 2
    assert gpu_count({"gres/gpu:a100": 2, "gres/gpu:v100": 1, "cpu": 4}) == 3
    assert gpu_count({"cpu": 4}) == 0
    assert gpu_count({}) == 0
    assert gpu_count({"gres/gpumem": 9}) == 0
    assert gpu_count(parse_tres("1=4,1001=2", IDS)) == 2


# --- parse_gres_count ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, 0),
        ("", 0),
        ("(null)", 0),
        ("N/A", 0),
        ("gpu:8", 8),
        ("gpu:a100:4", 4),
        ("gpu:a100:4(S:0-1)", 4),
        ("gres:gpu:8", 8),
        ("gres/gpu:2", 2),
        ("gres/gpu=2", 2),
        ("gres/gpu:a100=2", 2),
        ("gpu:(null):8(IDX:0-7)", 8),
        ("gpu:2(IDX:0,3)", 2),
        ("gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:5)", 3),
        ("gpu:0", 0),
        ("gpu:2,mps:100", 2),
        ("mps:100,gpu:2", 2),
        ("gpu:a100:2,gpu:v100:1", 3),
        ("gpu", 1),
        ("gpu:a100", 1),
        ("gpu:1080ti:2", 2),
        ("mps:100", 0),
        ("gpus:4", 0),
        ("gpu:1K", 1024),
        ("cpu=4,mem=4000M,gres/gpu=2,gres/gpu:a100=2", 2),
        ("gres/gpu:a100=2,gres/gpu:v100=1", 3),
        (" gpu:4 , mps:1 ", 4),
    ],
)
def test_parse_gres_count(text: str | None, expected: int) -> None:
    assert parse_gres_count(text) == expected


def test_parse_gres_count_other_name() -> None:
    assert parse_gres_count("gpu:2,mps:100", "mps") == 100
    assert parse_gres_count("gres/shard=8", "gres/shard") == 8
    assert parse_gres_count("gpu:2", "shard") == 0


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("gpu:", "gpu:"),
        ("gres/gpu=x", "gres/gpu=x"),
        ("gpu:2(S:0", "gpu:2(S:0"),
        ("gpu:2)", "gpu:2)"),
    ],
)
def test_parse_gres_count_errors(text: str, bad: str) -> None:
    with pytest.raises(TresError) as info:
        parse_gres_count(text)
    assert repr(bad) in str(info.value)
