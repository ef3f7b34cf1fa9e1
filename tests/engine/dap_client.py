"""A small Debug Adapter Protocol client for the tests: what VS Code says to debugpy.

Messages are JSON with a ``Content-Length`` header, over TCP. ``request`` sends one and
returns its sequence number; ``wait_for`` reads until a message matches (events and
responses that arrive meanwhile are kept, so none is lost).
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any


class DapClient:
    def __init__(self, port: int, *, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._sock.settimeout(timeout)
        self._buf = b""
        self._seq = 0
        self.seen: list[dict[str, Any]] = []

    def close(self) -> None:
        self._sock.close()

    def request(self, command: str, **arguments: Any) -> int:
        self._seq += 1
        body = json.dumps({"seq": self._seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        self._sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self._seq

    def _read(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self._buf:
            self._fill()
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        while len(self._buf) < length:
            self._fill()
        body, self._buf = self._buf[:length], self._buf[length:]
        message: dict[str, Any] = json.loads(body)
        return message

    def _fill(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError("the debug adapter closed the connection")
        self._buf += chunk

    def wait_for(self, *, event: str | None = None, response_to: int | None = None
                 ) -> dict[str, Any]:
        """The first message (kept or new) that is ``event`` or the response to a request."""
        def matches(m: dict[str, Any]) -> bool:
            if event is not None:
                return m.get("type") == "event" and m.get("event") == event
            return m.get("type") == "response" and m.get("request_seq") == response_to

        for i, m in enumerate(self.seen):
            if matches(m):
                return self.seen.pop(i)
        while True:
            m = self._read()
            if matches(m):
                return m
            self.seen.append(m)
