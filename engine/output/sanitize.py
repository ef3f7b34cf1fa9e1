"""Make rank output safe to show on a terminal: keep SGR colours, neutralise everything else.

Worker output is hostile input. A line can carry escape sequences that act on the user's
terminal rather than colour text: OSC 52 writes the clipboard, OSC 0/2 retitle the window,
CSI sequences move the cursor or erase the screen, DCS/APC/PM/SOS strings talk to the
terminal itself, and a lone ESC or an unterminated sequence swallows whatever follows.
``sanitize`` removes all of those and shows bare control characters as visible symbols,
keeping only ``ESC [ <digits ; :> m`` (SGR: colours and text attributes), which renderers such
as ``rich.text.Text.from_ansi`` turn into styles.

Rules (one compiled regex, one pass):
- SGR ``ESC[...m`` with parameters made only of digits, ``;`` and ``:`` is kept.
- Any other CSI (``ESC[`` or 8-bit ``\\x9b``), terminated or not, is removed.
- OSC / DCS / SOS / PM / APC strings (7-bit or 8-bit introducers) are removed up to and
  including their terminator (BEL, ``ESC \\`` or ``\\x9c``); an unterminated one is removed up
  to the end of the text (or the next ESC). They never cross a newline: text is handled line
  by line, so a hostile string cannot eat the lines after it.
- Two- and three-byte escapes (``ESC c`` reset, ``ESC 7``, ``ESC ( B``) and a lone ESC are
  removed.
- Other C0 controls (but tab and newline), DEL and C1 controls become visible: C0 as the
  Unicode "control pictures" (``\\x07`` -> U+2407), DEL as U+2421, C1 as U+FFFD.

``sanitize`` is idempotent and has a fast path: text with no ESC and no control character
(other than tab/newline and SGR) is returned unchanged after one regex scan.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["bytes_look_safe", "has_unsafe", "safe_line_count", "sanitize", "strip_sgr"]

_SGR: Final = r"\x1b\[[0-9;:]*m"
_UNSAFE_SRC: Final = (
    r"\x1b(?!\[[0-9;:]*m)"  # any ESC that does not start a plain SGR
    r"|[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]"  # C0 (not tab, newline, ESC), DEL, C1
)
_UNSAFE: Final = re.compile(_UNSAFE_SRC)
"""Finds anything ``sanitize`` would change; None means the text is already safe."""
_CONTROLS: Final = [*range(0x09), *range(0x0B, 0x1B), *range(0x1C, 0x20), 0x7F]
"""C0 controls but tab, newline and ESC (ESC is checked apart: SGR is allowed), and DEL."""
_ASCII_CONTROLS: Final = str.maketrans(dict.fromkeys(_CONTROLS))
_NOT_MARKS: Final = bytes(b for b in range(256) if b not in {*_CONTROLS, 0x0A, 0x1B})
"""Every byte but newline, ESC and the controls: what ``safe_line_count`` deletes."""
_C1_BYTES: Final = re.compile(b"\xc2[\x80-\x9f]")
"""C1 controls (U+0080-U+009F) as UTF-8."""
_BAD_ESC: Final = re.compile(r"\x1b(?!\[[0-9;:]*m)")
_BAD_ESC_BYTES: Final = re.compile(rb"\x1b(?!\[[0-9;:]*m)")

_STRING_BODY: Final = r"[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
_SEQ: Final = re.compile(
    "(" + _SGR + ")"  # group 1: keep
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"  # CSI (cursor, erase, modes...)
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"
    + _STRING_BODY  # OSC, DCS, SOS, PM, APC
    + r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"  # nF / Fp / Fe / Fs escapes, lone ESC
    r"|([\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f])"  # group 2: a bare control character
)


def _picture(ch: str) -> str:
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return "\ufffd"


_PICTURES: Final = {chr(c): _picture(chr(c)) for c in [*range(0x20), *range(0x7F, 0xA0)]}


def _replace(match: re.Match[str]) -> str:
    sgr = match.group(1)
    if sgr is not None:
        return sgr
    control = match.group(2)
    if control is not None:
        return _PICTURES[control]
    return ""


def has_unsafe(text: str) -> bool:
    """True if ``sanitize(text)`` would change ``text``.

    A regex scan costs about 6-14 ns a character, more than the rest of the pipeline, so the
    common cases go through C loops instead: ``str.translate`` for ASCII text, the UTF-8 bytes
    for the rest, and an ESC search (one literal scan) that accepts SGR colours.
    """
    if text.isascii():
        if len(text.translate(_ASCII_CONTROLS)) != len(text):
            return True
    elif not bytes_look_safe(text.encode("utf-8", "surrogatepass")):
        return True
    return "\x1b" in text and _BAD_ESC.search(text) is not None


def safe_line_count(data: bytes) -> int | None:
    """The number of newlines in the UTF-8 ``data`` if it looks safe (``bytes_look_safe``),
    else None.

    One C pass for both answers a busy tail needs of every chunk: deleting every byte but
    newline, ESC and the controls leaves a few bytes a line, and those say how many lines
    the chunk ends and whether any control character is among them (counting the lines and
    looking for controls apart cost two passes over every byte).
    """
    marks = data.translate(None, _NOT_MARKS)
    lines = marks.count(b"\n")
    escapes = len(marks) - lines
    if escapes and (escapes != marks.count(b"\x1b") or _BAD_ESC_BYTES.search(data)):
        return None
    if b"\xc2" in data and _C1_BYTES.search(data) is not None:
        return None
    return lines


def bytes_look_safe(data: bytes) -> bool:
    """True if the UTF-8 ``data`` holds no control character but tab, newline and SGR's ESC.

    Used on raw chunks read from a rank's file, before decoding: a chunk that passes needs no
    sanitising at all (the common case), one that fails goes to ``sanitize``.
    """
    return safe_line_count(data) is not None


def sanitize(text: str) -> str:
    """Return ``text`` with every control and escape sequence but SGR neutralised.

    Args:
        text: decoded output, one line or many joined by ``\\n``.

    Returns:
        Text safe to write to a terminal; SGR colour sequences are kept as they were.
    """
    if not has_unsafe(text):
        return text
    return _SEQ.sub(_replace, text)


_SGR_RE: Final = re.compile(_SGR)


def strip_sgr(text: str) -> str:
    """Remove SGR colour sequences (for plain-text search, widths, or a no-colour console)."""
    if "\x1b" not in text:
        return text
    return _SGR_RE.sub("", text)
