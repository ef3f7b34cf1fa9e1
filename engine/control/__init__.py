"""A run's supervisor process and how everything else reaches it.

``wire``: the control protocol (newline-delimited JSON, versioned; ``PROTOCOL.md``);
``server``: ``ControlServer``, the socket a supervisor answers on; ``client``:
``RemoteHandle``, a ``SupervisorHandle`` over that socket; ``host``: ``RunHost``, which gives
any run (supervisor process, headless, foreground) its socket, registry entry, status.json
and events.ndjson; ``replay``: ``RecordedRun``, a finished or stale run viewed from its
record; ``registry``: this user's state directory (sockets, one entry per run) and how RUN,
as a person types it, names a run; ``status``: status.json (``STATUS.md``) and how a reader
tells a running run from a finished or stale one; ``hooks``: the ``--on-failure`` command.
The supervisor process itself and how ``rankvisor run`` starts it are in ``engine.entry``.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "PROTOCOL_VERSION": "wire",
    "ControlServer": "server",
    "NoAnswer": "client",
    "NoSuchRun": "registry",
    "ProtocolMismatch": "client",
    "RecordedRun": "replay",
    "RemoteHandle": "client",
    "RunEntry": "registry",
    "RunHost": "host",
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
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
