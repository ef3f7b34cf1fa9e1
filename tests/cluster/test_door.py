"""The cluster's door on loopback (for machines where the two-host tests are skipped): the
run's secret proven both ways by HMAC, a client without it refused before a byte of the run,
``read?`` limited to a rank's own files, ``cluster?`` refused to a read-only viewer."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rankvisor.engine.cluster.door import ClusterDoor, DoorRefused, connect_door, new_secret
from rankvisor.engine.cluster.requests import read_request
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.server import ControlServer
from rankvisor.engine.handle import RankInfo, RunInfo
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import ScriptedSupervisor


@pytest.fixture
def door(tmp_path: Path) -> Iterator[tuple[ClusterDoor, str, Path]]:
    out = tmp_path / "attempt_0" / "0" / "stdout.log"
    out.parent.mkdir(parents=True)
    out.write_bytes(b"secret line of rank 0\n\xff raw\n")
    rank = RankInfo(0, RankState.RUNNING, None, 0, 0, str(out), str(out.with_name("stderr.log")),
                    "")
    sup = ScriptedSupervisor(RunInfo("r", 1, "door", str(tmp_path), 0, 5.0, ranks=(rank,)))
    server = ControlServer(sup, str(tmp_path / "s.sock"))
    server.start()
    server.add_request("read?", read_request(sup))
    made = ClusterDoor(server)
    made.secret = new_secret()
    address = made.start("127.0.0.1")
    try:
        yield made, address, out
    finally:
        made.close()
        server.close()


def test_the_right_secret_opens_the_door_and_reads_a_ranks_file(
        door: tuple[ClusterDoor, str, Path]) -> None:
    made, address, out = door
    assert made.secret is not None
    handle = connect_door(address, made.secret)
    try:
        assert handle.snapshot().run_id == "door"
        answer = handle.request("read?", {"rank": 0, "stream": "stdout", "offset": 7})
        assert answer is not None and answer["t"] == "read"
        assert base64.b64decode(answer["data"]) == out.read_bytes()[7:]
        assert answer["size"] == out.stat().st_size
        for bad in ({"rank": 3, "stream": "stdout"}, {"rank": 0, "stream": "/etc/passwd"}):
            refused = handle.request("read?", bad)
            assert refused is not None and refused["t"] == "error", refused
    finally:
        handle.detach()
    assert made.refused == 0


def test_a_client_without_the_secret_gets_nothing(door: tuple[ClusterDoor, str, Path]) -> None:
    made, address, _out = door
    with pytest.raises(DoorRefused, match="secret differs"):
        connect_door(address, new_secret())
    # A viewer that skips the proof and says hello gets the nonce, then the door closes.
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.settimeout(10)
        raw.sendall(b'{"t":"hello","protocol":1,"version":"x","read_only":false,"name":""}\n')
        got = b""
        while chunk := raw.recv(4096):
            got += chunk
    first, _, rest = got.partition(b"\n")
    assert json.loads(first)["t"] == "challenge"
    assert rest == b"" and b"secret line" not in got
    assert made.refused == 2


def test_the_client_refuses_a_door_that_cannot_prove_the_secret() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    address = "127.0.0.1:%d" % listener.getsockname()[1]

    def impostor() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b'{"t":"challenge","door":1,"nonce":"ab"}\n')
            conn.recv(4096)  # the proof: an HMAC, useless without the secret
            conn.sendall(b'{"t":"proven","mac":"00"}\n')

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    try:
        with pytest.raises(DoorRefused, match="could not prove"):
            connect_door(address, new_secret())
    finally:
        thread.join(5)
        listener.close()


def test_a_read_only_viewer_is_not_given_the_secret(tmp_path: Path) -> None:
    from rankvisor.engine.cluster.board import StatusBoard
    from rankvisor.engine.cluster.requests import cluster_request

    sup = ScriptedSupervisor(RunInfo("r", 0, "ro", str(tmp_path), 0, 5.0))
    server = ControlServer(sup, str(tmp_path / "s.sock"))
    server.start()
    server.add_request("cluster?", cluster_request(StatusBoard(host="h"), lambda: "ab" * 32))
    try:
        for read_only, expect in ((True, "error"), (False, "cluster")):
            handle = RemoteHandle.connect(server.socket_path, read_only=read_only)
            try:
                answer = handle.request("cluster?")
                assert answer is not None and answer["t"] == expect, answer
                assert ("ab" * 32 in json.dumps(answer)) is (not read_only)
            finally:
                handle.detach()
    finally:
        server.close()
