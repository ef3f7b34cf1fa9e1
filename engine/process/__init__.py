"""Rank processes: how a rank is forked, signalled, watched, placed and never orphaned.

``RankProcess`` (one rank: own session, pidfd signals, exit time stamped within a
millisecond), the long-lived spawner thread that forks every rank (so PR_SET_PDEATHSIG holds),
the death signal a process asks for itself (a function rank, a browser session's app), the
exit watcher, the /proc tables used to find a rank's descendants, a cgroup per rank where
cgroups are writable (``cgroups``), the guard process that kills every rank's tree if
rankvisor itself is killed, NUMA placement, and the bootstrap of a function rank. Sits
above the errors, the redirects and the signal names (``engine.names``); the output,
log-file and supervisor rooms sit above it.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "Guard": "guard",
    "NumaOptions": "numa",
    "RankProcess": "rank_process",
    "die_with_parent": "parent_death",
    "on_spawner_thread": "rank_process",
    "send_signal_all": "rank_process",
    "wait_any": "rank_process",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
