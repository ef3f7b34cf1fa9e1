"""torch's own C++ log lines in a rank's stderr, told apart from what the rank said.

At a rank's exit torch's worker server logs "[c10d] Server shutting down" and "Server
exited" after the traceback (and a thread torch left running may end it with "terminate
called without an active exception"); a reader looking for the rank's last words (a failure's line,
whether it raised before our signal) skips them.
"""

from __future__ import annotations

import re
from typing import Final

from .tail import last_lines

__all__ = ["is_torch_log_line", "said_lines"]

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


def said_lines(path: str, n: int) -> list[str]:
    """The last lines among ``path``'s last ``n`` that torch's C++ log did not write."""
    return [ln for ln in last_lines(path, n) if not is_torch_log_line(ln)]
