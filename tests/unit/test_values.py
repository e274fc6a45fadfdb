from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_plugin.slurm import values as v


@pytest.mark.parametrize(
    "raw,expected",
    [
        (None, None),
        (5, 5),
        (5.0, 5),
        (4294967295, None),
        (4294967294, None),
        ({"set": True, "infinite": False, "number": 60}, 60),
        ({"set": False, "infinite": False, "number": 0}, None),
        ({"set": True, "infinite": True, "number": 0}, None),
    ],
)
def test_number_forms(raw, expected):
    assert v.number(raw, "f") == expected


@pytest.mark.parametrize("raw", ["5", True, [1], {"foo": 1}, 1.5])
def test_number_rejects_wrong_types(raw):
    with pytest.raises(v.FieldError) as ei:
        v.number(raw, "jobs[0].priority")
    assert ei.value.field == "jobs[0].priority"


def test_states():
    assert v.states("PENDING", "s") == ("PENDING", ())
    assert v.states(["RUNNING", "COMPLETING"], "s") == ("RUNNING", ("COMPLETING",))
    assert v.states("idle+drain", "s") == ("IDLE", ("DRAIN",))
    assert v.states("mixed*", "s") == ("MIXED", ())
    with pytest.raises(v.FieldError):
        v.states(3, "s")
    with pytest.raises(v.FieldError):
        v.states([], "s")


def test_signed32_nice():
    assert v.signed32(4294967246) == -50
    assert v.signed32(100) == 100


@pytest.mark.parametrize(
    "text,secs",
    [
        ("10", 600),
        ("10:30", 630),
        ("01:00:00", 3600),
        ("1-00:00:00", 86400),
        ("2-03", 2 * 86400 + 3 * 3600),
        ("2-03:04", 2 * 86400 + 3 * 3600 + 240),
        ("7-00:00:00", 7 * 86400),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("INVALID", None),
    ],
)
def test_duration(text, secs):
    assert v.duration(text, "Timelimit") == secs


def test_duration_rejects_garbage():
    with pytest.raises(v.FieldError):
        v.duration("soon", "Timelimit")


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_duration_round_trip(secs):
    assert v.duration(v.format_duration(secs), "t") == secs


def test_iso_utc():
    assert v.iso_utc("1970-01-02T00:00:00", "t") == 86400
    assert v.iso_utc("Unknown", "t") is None
    assert v.iso_utc("None", "t") is None
    with pytest.raises(v.FieldError):
        v.iso_utc("yesterday", "t")


@pytest.mark.parametrize(
    "raw,expected",
    [(None, None), (0, 0), (500, 500), (-50, -50), (0x80000000 + 500, 500),
     (0x80000000 - 50, -50), ({"set": True, "infinite": False, "number": 0x80000000}, 0)],
)
def test_site_factor_offset(raw, expected):
    assert v.site_factor(raw, "site_factor") == expected
