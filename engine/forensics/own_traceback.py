"""Whether a rank had already failed on its own when our stop signal reached it.

A rank that raised prints its traceback, then spends a moment in Python's shutdown (freeing
a process group, stopping torch's worker server, which logs "[c10d] Server exited", joining
threads); the teardown's SIGTERM, sent a millisecond after the first rank's exit, ends that
shutdown with -SIGTERM. torchrun, which looks every 0.1 s, sees the rank's own exit code and
lists it as a failure. So does rankvisor when the rank's stderr ends with a traceback (its
last line but torch's own log lines an exception that is not a signal's or an interrupt's)
written before the signal took effect: before it was sent when the rank catches it (a
handler may print a traceback of its own), before the rank's exit when the signal's default
action ended it on arrival (nothing it wrote can come after). A traceback the signal cut
short while the rank printed it (Python writes it a line at a time) has no exception line
yet: it ends with a frame, and it counts too.
"""

from __future__ import annotations

import os
import re
from typing import Final

from ..logfile.torch_log import said_lines

__all__ = ["CUT_SHORT", "own_traceback_before", "raised_before_stop", "raised_line"]

_EXCEPTION: Final = re.compile(r"^(?:\[[^\]]*\]:)*\s*([A-Za-z_][\w.]*(?:Error|Exception))\b")
_NOT_OWN: Final = ("KeyboardInterrupt", "SignalException", "SystemExit")
_TAIL: Final = 40
_FRAME: Final = re.compile(r"^(?:\[[^\]]*\]:)*(?:\s+\S|\s*\^+\s*$)")
"""A traceback's frame lines: ``  File ...``, its source line, the ``^^^`` under it."""
CUT_SHORT: Final = "a traceback of its own, cut short by the stop signal"


def own_traceback_before(stderr_path: str, t_ns: int | None) -> str:
    """The exception line that ends ``stderr_path`` if the file was last written before
    ``t_ns`` and holds a traceback; "" otherwise."""
    if not stderr_path or t_ns is None:
        return ""
    try:
        if os.stat(stderr_path).st_mtime_ns > t_ns:
            return ""
    except OSError:
        return ""
    tail = _said(stderr_path)
    return _raised(tail) or (CUT_SHORT if _cut_short(tail) else "")


def raised_before_stop(
    stderr_path: str, stop_signal_ns: int | None, stop_caught: bool | None,
    exit_time_ns: int | None,
) -> bool:
    """Whether a rank our stop signal reached had already failed on its own: its stderr
    ended with a traceback of its own before the signal took effect. Our signal takes
    effect when it is sent if the rank may catch it (a handler can print after it), on
    arrival when it cannot, which ended the rank: all it wrote came before its exit.
    Whatever the exit code: a rank that raised may exit 1 in the very moment our SIGTERM
    reaches it, as it may die of the signal in its shutdown."""
    if stop_signal_ns is None:
        return False
    took_effect = exit_time_ns if stop_caught is False else stop_signal_ns
    return bool(own_traceback_before(stderr_path, took_effect))


_HEADER: Final = "Traceback (most recent call last)"


def _said(stderr_path: str) -> list[str]:
    """The non-blank lines of the file's end, torch's own log lines left out."""
    return [ln for ln in said_lines(stderr_path, _TAIL) if ln.strip()]


def _cut_short(tail: list[str]) -> bool:
    """Whether ``tail`` ends inside a traceback: its header, then frames only."""
    heads = [i for i, ln in enumerate(tail) if _HEADER in ln]
    return bool(heads) and all(_FRAME.match(ln) for ln in tail[heads[-1] + 1:])


def raised_line(stderr_path: str) -> str:
    """The exception line that ends ``stderr_path`` (torch's own log lines after it
    skipped) when a traceback comes before it; "" when the rank's stderr does not end with
    an exception of its own (an interrupt's, a signal's, ``SystemExit`` are not)."""
    return _raised(_said(stderr_path)) if stderr_path else ""


def _raised(tail: list[str]) -> str:
    if not tail or not any(_HEADER in ln for ln in tail):
        return ""
    last = tail[-1]
    m = _EXCEPTION.match(last)
    if m is None or m.group(1).rsplit(".", 1)[-1] in _NOT_OWN:
        return ""
    return last.strip()
