"""Std.from_str and to_map: torch's table of accepted strings, plus multi-digit ranks."""

from __future__ import annotations

import logging

import pytest
from rankvisor.engine.std import Std, to_map

ACCEPTED = [
    ("0", Std.NONE),
    ("1", Std.OUT),
    ("2", Std.ERR),
    ("3", Std.ALL),
    ("1\n", Std.OUT),  # torch's `$` also matches before a trailing newline
    ("0:3", {0: Std.ALL}),
    ("0:3,1:0,2:1,3:2", {0: Std.ALL, 1: Std.NONE, 2: Std.OUT, 3: Std.ERR}),
    ("0:1,0:2", {0: Std.ERR}),  # a later pair wins
    ("10:1", {10: Std.OUT}),  # torch rejects: its rank pattern is one digit
    ("0:1,12:3", {0: Std.OUT, 12: Std.ALL}),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_from_str_accepts(text: str, expected: object) -> None:
    assert Std.from_str(text) == expected


@pytest.mark.parametrize(
    ("text", "bad_part"),
    [
        ("4", "4"),
        (" 1", " 1"),
        ("", ""),
        ("0:4", "0:4"),
        ("0:1,x:2", "x:2"),
        ("0:1,", ""),
        ("1,2", "1"),
        ("0:1;1:2", "0:1;1:2"),
    ],
)
def test_from_str_rejects_naming_the_bad_part(text: str, bad_part: str) -> None:
    with pytest.raises(ValueError) as info:
        Std.from_str(text)
    assert f"bad part {bad_part!r}" in str(info.value)


def test_to_map_value_and_partial_map() -> None:
    assert to_map(Std.OUT, 2) == {0: Std.OUT, 1: Std.OUT}
    assert to_map({1: Std.ERR}, 3) == {0: Std.NONE, 1: Std.ERR, 2: Std.NONE}


def test_to_map_drops_out_of_range_ranks_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rankvisor.engine.std"):
        assert to_map({0: Std.OUT, 5: Std.ALL}, 2) == {0: Std.OUT, 1: Std.NONE}
    assert "[5]" in caplog.text


def test_std_is_an_int_flag_like_torchs() -> None:
    assert Std.ALL == Std.OUT | Std.ERR
    assert (Std.ALL & Std.ERR) == Std.ERR
    assert [int(s) for s in (Std.NONE, Std.OUT, Std.ERR, Std.ALL)] == [0, 1, 2, 3]
