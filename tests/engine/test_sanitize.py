"""engine.output.sanitize: SGR colours survive, nothing that drives a terminal does."""

from __future__ import annotations

import random
import re

import pytest
from rankvisor.engine.output.sanitize import (
    _UNSAFE,
    bytes_look_safe,
    has_unsafe,
    safe_line_count,
    sanitize,
    strip_sgr,
)

SGR = re.compile(r"\x1b\[[0-9;:]*m")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

HOSTILE = {
    "osc52 clipboard, BEL": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "osc52 clipboard, ST": "\x1b]52;c;cm0gLXJmIH4=\x1b\\",
    "title, BEL": "\x1b]0;pwned\x07",
    "title, ST": "\x1b]2;pwned\x1b\\",
    "hyperlink": "\x1b]8;;http://evil\x1b\\",
    "osc, 8-bit": "\x9d0;pwned\x9c",
    "cursor home + erase": "\x1b[H\x1b[2J",
    "cursor up": "\x1b[5A",
    "private mode": "\x1b[?1049h",
    "csi, 8-bit": "\x9b2J",
    "dcs": "\x1bPq#0;2;0;0;0#0~~\x1b\\",
    "apc": "\x1b_Gf=100;payload\x1b\\",
    "pm": "\x1b^private\x1b\\",
    "sos": "\x1bXstring\x1b\\",
    "full reset": "\x1bc",
    "save cursor": "\x1b7",
    "charset": "\x1b(0",
    "modifyOtherKeys looks like SGR": "\x1b[>4;1m",
    "unterminated osc": "\x1b]0;no end",
    "unterminated csi": "\x1b[12",
    "lone esc": "\x1b",
    "bell": "\x07",
    "backspace": "\x08\x08",
    "carriage return": "\r",
    "vertical tab, form feed": "\x0b\x0c",
    "del": "\x7f",
    "c1 next line": "\x85",
}


def assert_terminal_safe(text: str) -> None:
    """Nothing but SGR escapes and no control characters but tab and newline."""
    rest = SGR.sub("", text)
    assert "\x1b" not in rest, repr(text)
    assert not CONTROL.search(rest), repr(text)


@pytest.mark.parametrize("seq", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_sequences_are_neutralised(seq: str) -> None:
    out = sanitize(f"before {seq} after")
    assert_terminal_safe(out)
    assert out.startswith("before ")
    assert has_unsafe(f"x{seq}y")


def test_payloads_of_removed_strings_do_not_show() -> None:
    assert sanitize("a\x1b]52;c;SECRET\x07b") == "ab"
    assert sanitize("a\x1b]0;SECRET\x1b\\b") == "ab"
    assert sanitize("a\x1bPSECRET\x1b\\b") == "ab"


def test_sgr_colours_are_kept_exactly() -> None:
    text = "\x1b[1;31mred bold\x1b[0m \x1b[38;2;10;20;30mrgb\x1b[m \x1b[38:5:208mx\x1b[0m"
    assert sanitize(text) == text
    assert not has_unsafe(text)
    assert strip_sgr(text) == "red bold rgb x"


def test_controls_become_visible_symbols() -> None:
    assert sanitize("bell\x07 bs\x08 del\x7f") == "bell\u2407 bs\u2408 del\u2421"
    assert sanitize("tab\tnl\n") == "tab\tnl\n"


def test_a_string_sequence_never_eats_the_next_line() -> None:
    assert sanitize("a\x1b]0;unterminated\nnext line") == "a\nnext line"


def test_fast_path_returns_the_same_object() -> None:
    text = "plain ascii line with tab\tand newline\n" * 100
    assert sanitize(text) is text
    coloured = "\x1b[32mINFO\x1b[0m step 1\n" * 100
    assert sanitize(coloured) is coloured
    unicode = "шаг █████▌ 50% 😀\n" * 10
    assert sanitize(unicode) is unicode


def test_random_mixtures_are_safe_idempotent_and_agree_with_the_checks() -> None:
    rng = random.Random(7)
    tokens = [*HOSTILE.values(), "text", "é", "😀", "\x1b[31m", "\x1b[0m", "\t", "\n", " ", "["]
    for _ in range(2000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 12)))
        out = sanitize(text)
        assert_terminal_safe(out)
        assert sanitize(out) == out
        assert has_unsafe(text) == (_UNSAFE.search(text) is not None) == (out != text)
        assert bytes_look_safe(text.encode()) == (not has_unsafe(text))
        lines = None if has_unsafe(text) else text.count("\n")
        assert safe_line_count(text.encode()) == lines
