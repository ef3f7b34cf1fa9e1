"""A worker server of our own for one request: the answer is the test's to choose."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable

Reply = Callable[[socket.socket], None]


class _Once(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.recv(65536)  # the request: read, not looked at
        try:
            self.server.reply(self.request)  # type: ignore[attr-defined]
        except OSError:
            pass  # the client stopped reading: what some tests want


def answer_once(path: str, reply: Reply) -> tuple[socketserver.UnixStreamServer,
                                                   threading.Thread]:
    """Listen on ``path``; the first client's request is answered by ``reply(conn)``. The
    caller joins the thread and closes the server."""
    server = socketserver.UnixStreamServer(path, _Once)
    server.reply = reply  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    return server, thread
