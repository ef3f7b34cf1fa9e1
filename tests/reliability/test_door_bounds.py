"""What an unproven client of the cluster door may cost (issue 36.6).

Each unauthenticated connection got a thread (500 clients: 14 -> 308 threads); the 5 s
limit was per byte read (a byte every 3 s stayed connected for good); one failed thread
start (a pids limit) ended the accept loop, and so the door, for good. Real TCP sockets on
loopback; the failed thread start is the one thing simulated (a pids limit would starve the
rest of the test run too).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rankvisor.engine.cluster import door as door_module
from rankvisor.engine.cluster.door import (
    MAX_UNPROVEN,
    MAX_UNPROVEN_PER_HOST,
    ClusterDoor,
    connect_door,
    new_secret,
)
from rankvisor.engine.control.server import ControlServer
from rankvisor.engine.handle import RunInfo
from rankvisor.engine.testing import ScriptedSupervisor

from tests.conftest import wait_until


@pytest.fixture
def door(tmp_path: Path) -> Iterator[tuple[ClusterDoor, str]]:
    sup = ScriptedSupervisor(RunInfo("r", 1, "door", str(tmp_path), 0, 5.0, ranks=()))
    server = ControlServer(sup, str(tmp_path / "s.sock"))
    server.start()
    made = ClusterDoor(server)
    made.secret = new_secret()
    address = made.start("127.0.0.1")
    try:
        yield made, address
    finally:
        made.close()
        server.close()


def _connect(address: str, source: str = "127.0.0.1") -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect((host, int(port)))
    return sock


def _vetting_threads() -> int:
    return sum(t.name == "rankvisor-door-vet" for t in threading.enumerate())


def test_a_flood_of_silent_clients_is_bounded(door: tuple[ClusterDoor, str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """200 silent clients of one host, then 20 from each of four more: the vetting threads
    stop at each host's share and at the door's bound; a viewer gets in once some leave."""
    made, address = door
    monkeypatch.setattr(door_module, "PROOF_TIMEOUT_S", 120.0)  # the flood holds its slots
    flood = [_connect(address) for _ in range(200)]
    others: list[socket.socket] = []
    try:
        wait_until(lambda: made.turned_away + _vetting_threads() >= 200 or None, 30)
        assert _vetting_threads() == MAX_UNPROVEN_PER_HOST  # one host's share
        assert made.turned_away == 200 - MAX_UNPROVEN_PER_HOST
        others = [_connect(address, f"127.0.0.{h}") for h in (2, 3, 4, 5) for _ in range(20)]
        wait_until(lambda: made.turned_away + _vetting_threads() >= 280 or None, 30)
        assert _vetting_threads() == MAX_UNPROVEN  # the whole door's bound
        assert made.secret is not None
        with pytest.raises(OSError):  # the door is full: closed on accept
            _connect_door_from(address, made.secret, "127.0.0.6")
        for s in others:
            s.close()
        wait_until(lambda: _vetting_threads() <= MAX_UNPROVEN_PER_HOST or None, 30)
        viewer = _connect_door_from(address, made.secret, "127.0.0.6")
        assert viewer.snapshot().run_id == "door"
        viewer.detach()
    finally:
        for s in flood + others:
            s.close()


def _connect_door_from(address: str, secret: str, source: str):  # type: ignore[no-untyped-def]
    """``connect_door`` with the socket's source address chosen (another node's)."""
    real = socket.create_connection

    def from_source(addr, timeout=None, source_address=None):  # type: ignore[no-untyped-def]
        return real(addr, timeout=timeout, source_address=(source, 0))

    socket.create_connection = from_source  # type: ignore[assignment]
    try:
        return connect_door(address, secret)
    finally:
        socket.create_connection = real  # type: ignore[assignment]


def test_the_whole_proof_has_one_deadline(door: tuple[ClusterDoor, str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte every 0.3 s with 1 s for the proof: closed after a handful of bytes."""
    made, address = door
    monkeypatch.setattr(door_module, "PROOF_TIMEOUT_S", 1.0)
    sock = _connect(address)
    sent = 0
    try:
        sock.recv(4096)  # the challenge
        for _ in range(40):
            try:
                sock.sendall(b"{")
            except OSError:
                break
            sent += 1
            ready = _closed(sock, 0.3)
            if ready:
                break
    finally:
        sock.close()
    assert sent < 10, f"still connected after {sent} bytes at 0.3 s each"
    wait_until(lambda: made.refused >= 1 or None, 10)


def _closed(sock: socket.socket, wait_s: float) -> bool:
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_the_accept_loop_outlives_a_failed_thread_start(
        door: tuple[ClusterDoor, str], monkeypatch: pytest.MonkeyPatch) -> None:
    made, address = door
    real = threading.Thread
    failures = [1]

    class NoThread(real):  # type: ignore[misc, valid-type]
        def start(self) -> None:
            if failures and self.name == "rankvisor-door-vet":
                failures.pop()
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(door_module.threading, "Thread", NoThread)
    first = _connect(address)
    try:
        assert first.recv(4096) == b""  # closed: no thread for it
    finally:
        first.close()
    monkeypatch.setattr(door_module.threading, "Thread", real)
    second = _connect(address)
    try:
        line = second.recv(4096).split(b"\n")[0]
        assert json.loads(line)["t"] == "challenge"
    finally:
        second.close()
    assert made.errors == 1 and made.turned_away == 1
