"""Whether a process catches a signal, read from ``/proc/<pid>/status`` (``SigCgt``).

When rankvisor stops a rank with SIGTERM and the rank has no handler for it, the kernel
ends it with that signal (exit ``-15``): a rank that instead exits with a code of its own
after the signal was sent (its gloo timeout's traceback, exit 1) ended by itself, and is a
failure as torchrun counts it, not a rank rankvisor stopped. A rank that catches SIGTERM
(torch's elastic handler, a training loop's own) may exit with any code because of it.
"""

from __future__ import annotations

__all__ = ["catches"]


def catches(pid: int, sig: int) -> bool | None:
    """Whether ``pid`` has a handler for ``sig`` now; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
                    return bool(mask >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None
