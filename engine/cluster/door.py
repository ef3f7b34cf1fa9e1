"""The cluster's door: each node's supervisor served over TCP to the other nodes' viewers.

A viewer on one node reaches the ranks of another through that node's own supervisor: its
control protocol (``engine/control/PROTOCOL.md``), unchanged, on a TCP socket bound to the
address this node used for the rendezvous. Nobody gets a byte of the run without the run's
secret (made at the first round, kept in the rendezvous store, which only the job's nodes
reach): on connect the door sends a fresh nonce; the client answers with its own nonce and
an HMAC-SHA256 of both under the secret; the door answers with its own HMAC, so that the
client knows the door holds the secret too; only then does the control protocol begin (the
client's hello). A wrong or missing proof closes the connection: the secret itself never
travels. The bytes after it are not encrypted (see the README's trust boundary).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import socket
import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..control.client import RemoteHandle
    from ..control.server import ControlServer

__all__ = ["ClusterDoor", "DoorRefused", "connect_door", "new_secret", "reach_address"]

log = logging.getLogger(__name__)

PROOF_TIMEOUT_S: Final = 5.0
"""A client that has not proven itself by then is closed."""
MAX_PROOF: Final = 1024
_CLIENT_TAG: Final = b"rankvisor-door client\0"
_SERVER_TAG: Final = b"rankvisor-door server\0"


class DoorRefused(ConnectionError):
    """The door closed on us (a wrong secret), or it could not prove it holds the secret."""


def new_secret() -> str:
    """A run's secret: 32 random bytes, as hex."""
    return secrets.token_hex(32)


def _mac(secret: str, tag: bytes, door_nonce: str, client_nonce: str) -> str:
    message = tag + door_nonce.encode() + b"\0" + client_nonce.encode()
    return hmac.new(bytes.fromhex(secret), message, hashlib.sha256).hexdigest()


def _line(sock: socket.socket, limit: int = MAX_PROOF) -> dict[str, Any] | None:
    """One JSON line from ``sock`` (byte by byte: nothing after it is taken from the
    control protocol that follows); None on a close, a bad or over-long line."""
    data = bytearray()
    while len(data) <= limit:
        byte = sock.recv(1)
        if not byte:
            return None
        if byte == b"\n":
            try:
                value = json.loads(bytes(data))
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
        data += byte
    return None


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def reach_address(endpoint_host: str, local_addr: str | None = None) -> str:
    """This node's address as the others reach it: ``--local-addr``, else the source
    address of the route to the rendezvous host (no packet is sent)."""
    if local_addr:
        return local_addr
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((endpoint_host or "127.0.0.1", 9))
        return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


class ClusterDoor:
    """A TCP listener that vets each client with the run's secret, then hands it to
    ``server`` (the node's ``ControlServer``). ``secret`` may change at a new round."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.secret: str | None = None
        self.refused = 0
        """Connections closed for a wrong or missing proof (tests, the supervisor's log)."""
        self._listener: socket.socket | None = None
        self._closing = False
        self._thread: threading.Thread | None = None

    def start(self, address: str, port: int = 0) -> str:
        """Listen on ``address`` (an ephemeral port by default); ``HOST:PORT`` to publish."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(64)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept_loop, name="rankvisor-door",
                                        daemon=True)
        self._thread.start()
        host, bound = listener.getsockname()[:2]
        return f"{host}:{bound}"

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                if self._closing:
                    return
                continue
            threading.Thread(target=self._vet, args=(sock, peer), name="rankvisor-door-vet",
                             daemon=True).start()

    def _vet(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        who = f"{peer[0]}:{peer[1]}"
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.settimeout(PROOF_TIMEOUT_S)
            nonce = secrets.token_hex(16)
            _send(sock, {"t": "challenge", "door": 1, "nonce": nonce})
            proof = _line(sock)
            secret = self.secret
            theirs = str((proof or {}).get("nonce", ""))[:64]
            if (secret is None or proof is None or proof.get("t") != "proof"
                    or not hmac.compare_digest(str(proof.get("mac", "")),
                                               _mac(secret, _CLIENT_TAG, nonce, theirs))):
                self.refused += 1
                log.warning("door: refused %s (no proof of the run's secret)", who)
                sock.close()
                return
            _send(sock, {"t": "proven", "mac": _mac(secret, _SERVER_TAG, nonce, theirs)})
            sock.settimeout(None)
        except OSError:
            sock.close()
            return
        self.server.adopt(sock, f"(door {who})")

    def close(self) -> None:
        self._closing = True
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        if self._thread is not None:
            self._thread.join(5)


def connect_door(address: str, secret: str, *, name: str = "", read_only: bool = False,
                 timeout_s: float = 5.0, recent_lines: int = 0) -> RemoteHandle:
    """A ``RemoteHandle`` on another node's supervisor through its door.

    Its files are on that node: ``recent_lines`` defaults to 0 (nothing is read from local
    paths) and lines come live, or through ``read?`` requests.

    Raises:
        DoorRefused: the door closed on our proof, or could not prove its own.
        OSError: nobody listens there, or the link is down (a timeout).
    """
    from ..control.client import RemoteHandle

    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        challenge = _line(sock)
        if challenge is None or challenge.get("t") != "challenge":
            raise DoorRefused(f"{address} is no rankvisor door")
        door_nonce = str(challenge.get("nonce", ""))
        mine = secrets.token_hex(16)
        _send(sock, {"t": "proof", "nonce": mine,
                     "mac": _mac(secret, _CLIENT_TAG, door_nonce, mine)})
        answer = _line(sock)
        if answer is None:
            raise DoorRefused(f"the door at {address} refused us: the run's secret differs "
                              "(another run, or a new round since)")
        if not hmac.compare_digest(str(answer.get("mac", "")),
                                   _mac(secret, _SERVER_TAG, door_nonce, mine)):
            raise DoorRefused(f"the door at {address} could not prove it holds the run's "
                              "secret: not connecting")
    except BaseException:
        sock.close()
        raise
    return RemoteHandle.over(sock, address, read_only=read_only, timeout_s=timeout_s,
                             name=name, recent_lines=recent_lines, reread_lines=0)
