"""``--debugpy``'s ports, held by the supervisor for the whole run: ``DebugpyHold``.

A rank's debugpy listener (``engine.process.py_bootstrap``) lives as long as the rank; between
two incarnations (``rankvisor restart``, a restart of the run) its port would be free, and
another user of the host could take it: the new incarnation could not listen, and the attach
configuration and the ``ssh -L`` line would lead to that user's listener. So the supervisor
binds each port first, with SO_REUSEPORT and without listening on it: no connection ever
reaches this socket, each incarnation binds beside it (the kernel shares a port that way only
between sockets of the same user), and nobody else can bind the port until the run ends.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

__all__ = ["DebugpyHold"]


class DebugpyHold:
    """One bound, never listening socket per debugpy rank's port on 127.0.0.1."""

    def __init__(self, ports: Mapping[int, int]) -> None:
        """Bind every port (rank -> port).

        Raises:
            ValueError: a port is taken, in one line that says what to do.
        """
        self._sockets: list[socket.socket] = []
        for rank, port in ports.items():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                # SO_REUSEPORT alone, never SO_REUSEADDR: a socket of another user could
                # share a port with one that allows reuse and is not listening.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                s.bind(("127.0.0.1", port))
            except OSError as e:
                s.close()
                self.close()
                raise ValueError(
                    f"--debugpy: rank {rank}'s port {port} on 127.0.0.1 is taken ({e.strerror}); "
                    "give another base port (--debugpy RANKS:PORT)"
                ) from None
            self._sockets.append(s)

    def close(self) -> None:
        """Let the ports go (the run has ended)."""
        while self._sockets:
            self._sockets.pop().close()
