"""torch's own C++ log lines in a rank's stderr, told apart from what the rank said.

At a rank's exit torch's worker server logs "[c10d] Server shutting down" and "Server
exited" after the traceback, and a thread torch left running may end it with the C++
runtime's "terminate called without an active exception" or "terminate called after throwing
an instance of 'gloo::IoException'" followed by the exception's ``what():`` text (a peer that
closed its connection while this rank was on its way out; a c10 error's text goes on with its
C++ backtrace). The process aborts right after: everything from that line on is the
runtime's. A reader looking for the rank's last words (a failure's line, whether it raised
before our signal) skips all of them.
"""

from __future__ import annotations

import re
from typing import Final

from .tail import last_lines

__all__ = ["is_torch_log_line", "rank_said", "said_lines"]

_TORCH_LOG: Final = re.compile(r"^(?:\[[^\]]*\]:)?\[[WIE]\d{4} [^\]]*\] \[c10d\]")
"""A line of torch's C++ log (``[W1201 18:58:49.79 WorkerServer.cpp:139] [c10d] ...``), with
or without the ``[rankN]:`` prefix torch adds."""


_TERMINATE: Final = re.compile(r"^(?:\[[^\]]*\]:)?terminate called (?:without an active "
                              r"exception|after throwing)")
"""The C++ runtime's last words when a thread torch left running ends the process (SIGABRT
on the way out, after the rank's own traceback)."""


def is_torch_log_line(line: str) -> bool:
    """A line torch's C++ side wrote (its worker server starting or exiting, a socket
    warning, std::terminate at the interpreter's end): never what a failure says."""
    return bool(_TORCH_LOG.search(line) or _TERMINATE.match(line))


_RUNTIME_TAIL: Final = 64
"""Lines read beyond ``n`` so that a terminate message's ``what():`` text and backtrace do
not push the rank's own last words out of the window."""


def said_lines(path: str, n: int) -> list[str]:
    """The last lines among ``path``'s last ``n`` that torch's C++ side did not write (its log
    lines; the runtime's terminate message and all that follows it)."""
    return rank_said(last_lines(path, n + _RUNTIME_TAIL))[-n:] if n > 0 else []


def rank_said(lines: list[str]) -> list[str]:
    """``lines`` (a stderr's end, oldest first) less what torch's C++ side wrote."""
    ends = [i for i, ln in enumerate(lines) if _TERMINATE.match(ln)]
    if ends:
        lines = lines[: ends[-1]]
    return [ln for ln in lines if not _TORCH_LOG.search(ln)]
