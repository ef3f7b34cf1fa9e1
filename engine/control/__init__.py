"""The control room: a run's supervisor reached over a Unix socket, and its viewers.

``wire`` is the protocol (newline-delimited JSON, versioned; ``PROTOCOL.md`` beside it);
``server`` serves a ``SupervisorHandle`` on a socket (``ControlServer``); ``client`` is the
handle a viewer holds (``RemoteHandle``). Imports the standard library, the engine's data
types and ``engine.logfile`` (a viewer reads history from the files); never a UI.
"""

from __future__ import annotations

from engine._lazy import face

__all__ = [
    "PROTOCOL_VERSION",
    "ControlServer",
    "NoAnswer",
    "ProtocolMismatch",
    "RemoteHandle",
]

__getattr__, __dir__ = face(
    __name__,
    {
        "ControlServer": "server",
        "NoAnswer": "client",
        "PROTOCOL_VERSION": "wire",
        "ProtocolMismatch": "client",
        "RemoteHandle": "client",
    },
)
