from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin.slurm.hostlist import MAX_HOSTS, HostlistError, compress, expand

# --- expand: literal examples -------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("", []),
        ("   ", []),
        ("node07", ["node07"]),
        ("n[5]", ["n5"]),
        ("node[01-02]", ["node01", "node02"]),
        ("leaf[1-4]", ["leaf1", "leaf2", "leaf3", "leaf4"]),
        ("node[001-004,07]", ["node001", "node002", "node003", "node004", "node07"]),
        ("node[1-10]", [f"node{i}" for i in range(1, 11)]),
        ("node[01-10]", [f"node{i:02d}" for i in range(1, 11)]),
        ("node[8-11]", ["node8", "node9", "node10", "node11"]),
        ("node[098-101]", ["node098", "node099", "node100", "node101"]),
        ("a,b,c", ["a", "b", "c"]),
        ("a[1-2],b", ["a1", "a2", "b"]),
        ("node[1-2]-ib", ["node1-ib", "node2-ib"]),
        ("[1-3]", ["1", "2", "3"]),
        (
            "gpu-a[1-2]-b[3-4]",
            ["gpu-a1-b3", "gpu-a1-b4", "gpu-a2-b3", "gpu-a2-b4"],
        ),
        ("r[1-2]n[01-02]x", ["r1n01x", "r1n02x", "r2n01x", "r2n02x"]),
        # Order as given, duplicates kept.
        ("n[3,1-2],n1", ["n3", "n1", "n2", "n1"]),
        ("n[1-2,2]", ["n1", "n2", "n2"]),
        # Slurm: whitespace separates, empty items are skipped.
        ("a b\tc\n", ["a", "b", "c"]),
        ("a,,b,", ["a", "b"]),
    ],
)
def test_expand_examples(expr: str, expected: list[str]) -> None:
    assert expand(expr) == expected


def test_expand_node01_16() -> None:
    assert expand("node[01-16]") == [f"node{i:02d}" for i in range(1, 17)]


@pytest.mark.parametrize(
    ("expr", "bad"),
    [
        ("node[1-3", "'['"),
        ("node1-3]", "']'"),
        ("node[1-[2]]", "nested"),
        ("a[3-1]", "'3-1'"),
        ("a[x-y]", "'x-y'"),
        ("a[1,,2]", "empty range item"),
        ("a[]", "empty range item"),
        ("a[1-]", "'1-'"),
        ("a[-1]", "'-1'"),
        ("a[1 - 2]", "'1 - 2'"),
        ("a[0-1000000]", "more than"),
        ("a[0-999]b[0-999]c[0-1]", "more than"),
        ("a[0-999999],b[0-1]", "more than"),
    ],
)
def test_expand_errors(expr: str, bad: str) -> None:
    with pytest.raises(HostlistError) as info:
        expand(expr)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert repr(expr) in message
    assert bad in message
    assert "\n" not in message
    assert info.value.expr == expr


def test_expand_limit_is_inclusive() -> None:
    assert len(expand(f"a[1-{MAX_HOSTS}]")) == MAX_HOSTS


def test_error_pickles() -> None:
    err = HostlistError("a[", "unbalanced '['")
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)
    assert copy.expr == "a["


def test_long_expression_is_quoted_short() -> None:
    expr = "x" * 5000 + "["
    with pytest.raises(HostlistError) as info:
        expand(expr)
    assert len(str(info.value)) < 400


# --- compress: literal examples -----------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([], ""),
        (["node07"], "node07"),
        (["node01", "node02"], "node[01-02]"),
        ([f"node{i:02d}" for i in range(1, 17)], "node[01-16]"),
        (["leaf1", "leaf2", "leaf3", "leaf4"], "leaf[1-4]"),
        (["node001", "node002", "node003", "node004", "node007"], "node[001-004,007]"),
        (["node07", "node04", "node01", "node02", "node03"], "node[01-04,07]"),
        (["node01", "node1"], "node1,node01"),
        (["node09", "node10", "node11"], "node[09-11]"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["node098", "node099", "node100"], "node[098-100]"),
        (["login", "node1", "node2"], "login,node[1-2]"),
        (["node2", "node1", "node2"], "node[1-2]"),
        (["b1", "a1", "a3"], "a[1,3],b1"),
        (["gpu-a1-b3", "gpu-a1-b4", "gpu-a2-b3"], "gpu-a1-b[3-4],gpu-a2-b3"),
        (["node", "node1"], "node,node1"),
        (["n0", "n00", "n1"], "n[0-1],n00"),
    ],
)
def test_compress_examples(names: list[str], expected: str) -> None:
    assert compress(names) == expected
    assert sorted(expand(expected)) == sorted(set(names))


def test_compress_accepts_any_iterable() -> None:
    assert compress(f"n{i}" for i in range(3)) == "n[0-2]"


@pytest.mark.parametrize(
    ("name", "bad"), [("", "empty"), ("a[1", "'['"), ("a,b", "','"), ("a b", "' '"), ("a]", "']'")]
)
def test_compress_errors(name: str, bad: str) -> None:
    with pytest.raises(HostlistError) as info:
        compress(["ok1", name])
    assert repr(name) in str(info.value)
    assert bad in str(info.value)


# Speed is measured in benchmarks, not asserted here: these check large inputs are right.
def test_large_range() -> None:
    names = expand("node[00001-10000]")
    assert compress(names) == "node[00001-10000]"
    assert len(names) == 10000


def test_large_scattered() -> None:
    names = [f"n{i:05d}" for i in range(0, 20000, 2)]
    assert expand(compress(reversed(names))) == names


# --- properties ---------------------------------------------------------------------------

_prefix = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=0, max_size=6)
_number = st.builds(lambda n, w: str(n).zfill(w), st.integers(0, 2000), st.integers(0, 5))


@st.composite
def _host_name(draw: st.DrawFn) -> str:
    prefix = draw(_prefix)
    # Sometimes a name with digits inside it too (gpu-a1-b3).
    if draw(st.booleans()):
        prefix += draw(_number) + draw(st.text(alphabet="abc-", min_size=1, max_size=3))
    if draw(st.booleans()) or not prefix:
        return prefix + draw(_number)
    return prefix


@settings(max_examples=200, deadline=None)
@given(st.lists(_host_name(), unique=True, max_size=40))
def test_round_trip(names: list[str]) -> None:
    text = compress(names)
    assert sorted(expand(text)) == sorted(names)
    # Canonical: the order of the input does not matter.
    assert compress(reversed(names)) == text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["n", "node", "gpu-"]), min_size=1, max_size=1),
    st.sets(st.integers(0, 300), min_size=1, max_size=60),
    st.integers(0, 4),
)
def test_round_trip_dense(prefixes: list[str], numbers: set[int], width: int) -> None:
    names = [prefixes[0] + str(n).zfill(width) for n in numbers]
    text = compress(names)
    assert sorted(expand(text)) == sorted(names)
    assert text.count(",") <= len(names)


# A range item: (lo, hi, width) where the width is how many digits lo is written with.
_range_item = st.builds(
    lambda lo, span, pad: (lo, lo + span, len(str(lo)) + pad),
    st.integers(0, 150),
    st.integers(0, 12),
    st.integers(0, 3),
)
_group = st.lists(_range_item, min_size=1, max_size=3)
_literal = st.text(alphabet="abcxyz-_.", max_size=4)


@st.composite
def _item(draw: st.DrawFn) -> tuple[list[str], list[list[tuple[int, int, int]]]]:
    groups = draw(st.lists(_group, min_size=0, max_size=3))
    literals = [draw(_literal) for _ in range(len(groups) + 1)]
    if not groups and not literals[0]:
        literals[0] = "h"
    return literals, groups


def _render(literals: list[str], groups: list[list[tuple[int, int, int]]]) -> str:
    out = literals[0]
    for group, literal in zip(groups, literals[1:], strict=True):
        parts = [
            str(lo).zfill(w) if lo == hi else f"{str(lo).zfill(w)}-{hi}" for lo, hi, w in group
        ]
        out += "[" + ",".join(parts) + "]" + literal
    return out


def _reference(literals: list[str], groups: list[list[tuple[int, int, int]]]) -> list[str]:
    value_lists = [
        [f"{n:0{w}d}" for lo, hi, w in group for n in range(lo, hi + 1)] for group in groups
    ]
    result = []
    for combo in itertools.product(*value_lists):
        name = literals[0]
        for value, literal in zip(combo, literals[1:], strict=True):
            name += value + literal
        result.append(name)
    return result


@settings(max_examples=200, deadline=None)
@given(st.lists(_item(), min_size=0, max_size=4))
def test_expand_matches_reference(
    items: list[tuple[list[str], list[list[tuple[int, int, int]]]]],
) -> None:
    expr = ",".join(_render(lits, groups) for lits, groups in items)
    expected = [name for lits, groups in items for name in _reference(lits, groups)]
    assert expand(expr) == expected
