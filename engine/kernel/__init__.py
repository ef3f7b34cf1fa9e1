"""The run kernel: the supervisor's decisions as pure functions and data, time passed in.

What happens to a run's ranks (which a command reaches and when it is refused, where a stop
moves a rank, whose exit was ours, the SIGTERM -> SIGKILL escalations and their deadlines,
what follows an exit: a restart alone, a new attempt, torch's restart policy, the end) is
decided here, once, for every handle that carries it out: ``run.RunKernel`` holds the run's
lifecycle and takes what happens on its own through ``step(input, now)`` (the Supervisor's
state over real processes is one; its scripted double, ``engine.testing``, drives one over
scripted ones), ``policy`` and ``escalation`` its rules
as plain functions and data (the handle of a torchrun job uses them too). Nothing here
starts a thread, reads a clock, a file or a process, or sends a signal; an import-linter
contract in pyproject.toml keeps it so. A rule is tested as a table of inputs at given
times (tests/kernel/).
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
