"""Attaching to a job rankvisor did not start: a torchrun agent and its workers.

``discovery`` finds the agent, its workers (children whose environment names a torchrun
run and rank, of our own uid) and their files in torchrun's log directory layout, from a pid
or from the log directory; ``TorchrunHandle`` is that job behind ``SupervisorHandle``: its
logs tailed, its exits and new attempts followed, its workers signalled through pidfds, its
restarts left to torchrun. Imports the process, output, log-file and error packages and the
supervisor's stats sampler and escalation table; nothing imports it but the front ends.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "AttachError": "discovery",
    "TorchrunHandle": "handle",
    "TorchrunJob": "discovery",
    "Worker": "discovery",
    "discover": "discovery",
    "find_by_log_dir": "discovery",
    "find_by_pid": "discovery",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
