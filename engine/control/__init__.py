"""A run's supervisor process seen from outside: the registry of runs, status.json, hooks.

``registry``: this user's state directory (sockets, one entry per run) and how RUN, as a
person types it, names a run; ``status``: status.json, written atomically on every
lifecycle event, and how a reader tells a running run from a finished or stale one (the
supervisor's pid and start time); ``hooks``: the ``--on-failure`` command. Imports the
standard library and ``engine.process`` (signal names, /proc reads); never textual.
"""

from __future__ import annotations

from engine._lazy import face

__all__ = [
    "NoSuchRun",
    "RunEntry",
    "StateDirUnsafe",
    "build_status",
    "effective_state",
    "new_socket_path",
    "read_status",
    "register",
    "resolve",
    "run_on_failure",
    "unregister",
    "write_status",
]

__getattr__, __dir__ = face(
    __name__,
    {
        "NoSuchRun": "registry",
        "RunEntry": "registry",
        "StateDirUnsafe": "registry",
        "build_status": "status",
        "effective_state": "status",
        "new_socket_path": "registry",
        "read_status": "status",
        "register": "registry",
        "resolve": "registry",
        "run_on_failure": "hooks",
        "unregister": "registry",
        "write_status": "status",
    },
)
