"""The Supervisor: one run of N local ranks, its threads, its commands and its policy.

The Supervisor composes the other rooms (rank processes, the output pump, the guard) into one
run: the rank lifecycle, commands (signal, terminate with escalation, kill, restart one rank
or all), torch's restart policy and teardown, psutil stats, torch's file-timer watchdog,
torchrun's per-rank environment, the run's configuration, and the headless front end. Imports
every other engine package; nothing imports it but ``engine`` (lazily) and the front ends.
"""

from __future__ import annotations

from .._lazy import face

__all__ = ["ConfigError", "Supervisor", "SupervisorConfig", "run_headless"]

__getattr__, __dir__ = face(
    __name__,
    {
        "ConfigError": "run_config",
        "Supervisor": "core",
        "SupervisorConfig": "run_config",
        "run_headless": "headless",
    },
)
