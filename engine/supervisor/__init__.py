"""The Supervisor: one run of N local ranks, its threads, its commands and its policy.

The Supervisor composes the other rooms (rank processes, the output pump, the guard) into one
run: the rank lifecycle, commands (signal, terminate with escalation, kill, restart one rank
or all), torch's restart policy and teardown, psutil stats, torch's file-timer watchdog,
torchrun's per-rank environment, and the run's configuration (with ``ClusterOptions``, the
multi-node flags it carries). Sits above the process, output, log-file and forensics rooms;
the front ends that drive it (the headless console, the supervisor process) are in
``engine.entry``.
"""

from __future__ import annotations

from .._lazy import face

__all__ = ["ClusterOptions", "ConfigError", "Supervisor", "SupervisorConfig"]

__getattr__, __dir__ = face(
    __name__,
    {
        "ClusterOptions": "cluster_options",
        "ConfigError": "run_config",
        "Supervisor": "core",
        "SupervisorConfig": "run_config",
    },
)
