"""What a command runs: the process mains and front ends over the rooms below.

``daemon``: the supervisor process (its own session, the run's socket and files, a single or
a multi-node run); ``spawn``: how ``rankvisor run`` starts it and waits for it to answer;
``headless``: the console front end (``--headless``, ``--foreground``: prefixed lines, the
report at the end); ``cluster_run``: a whole multi-node run on this node, torch's agent loop
over a driven Supervisor; ``bundle``: one archive of a run's directory for a bug report;
``debug_console``: ``rankvisor debug``'s line-mode console on one rank.
The top room of the engine: it may import every other, and only the UI imports it.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "make_bundle": "bundle",
    "run_cluster": "cluster_run",
    "run_headless": "headless",
    "start_supervisor": "spawn",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
