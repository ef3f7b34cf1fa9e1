"""The run kernel: the supervisor's decisions as pure functions and data, time passed in.

What happens to a run's ranks (which a command reaches and when it is refused, where a stop
moves a rank, whose exit was ours, the SIGTERM -> SIGKILL escalations and their deadlines,
what follows an exit: a restart alone, a new attempt, torch's restart policy, the end) is
decided here, once, from plain values, for every handle that carries it out: the Supervisor
over real processes, its scripted double (``engine.testing``) over scripted ones, the handle
of a torchrun job. Nothing here starts a thread, reads a clock, a file or a process, or
sends a signal; an import-linter contract in pyproject.toml keeps it so. A rule is tested as
a table of inputs at given times (tests/kernel/).
"""

from __future__ import annotations

from .._lazy import face

__all__ = ["Escalation", "EscalationTable", "Refused", "Settlement"]

__getattr__, __dir__ = face(
    __name__,
    {
        "Escalation": "escalation",
        "EscalationTable": "escalation",
        "Refused": "policy",
        "Settlement": "policy",
    },
)
