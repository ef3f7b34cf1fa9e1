"""The cluster's door: each node's supervisor served over TCP to the other nodes' viewers.

A viewer on one node reaches the ranks of another through that node's own supervisor: its
control protocol (``engine/control/PROTOCOL.md``), unchanged, on a TCP socket bound to the
address this node used for the rendezvous. Nobody gets a byte of the run without the run's
secret (derived from the run's nonce in the rendezvous store and the cluster key, which the
store never sees: ``door_key``; reading the store is not enough): on connect the door
sends a fresh nonce; the client answers with its own nonce and an HMAC-SHA256 of both
under the secret; the door answers with its own HMAC, so that the client knows the door
holds the secret too; only then does the control protocol begin (the client's hello). A
wrong or missing proof closes the connection: the secret itself never travels. The bytes
after it are not encrypted (docs/reliability.md, the trust boundary).

Anyone who reaches the port may connect, so what an unproven client costs is bounded: at
most ``MAX_UNPROVEN`` are vetted at once, ``MAX_UNPROVEN_PER_HOST`` of them from one address
(one thread each; one more is closed at once, so that one host's flood leaves the other
nodes' viewers a way in), each
has ``PROOF_TIMEOUT_S`` for the whole exchange (not per byte read: a byte every few seconds
is closed on time), and the accept loop outlives any error (no thread to be had under a
pids limit, no descriptor left) with a short pause, so that the door never closes for good.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from .. import clock

if TYPE_CHECKING:
    from ..control.client import RemoteHandle
    from ..control.server import ControlServer

__all__ = ["ClusterDoor", "DoorRefused", "connect_door", "new_secret", "reach_address"]

log = logging.getLogger(__name__)

PROOF_TIMEOUT_S: Final = 5.0
"""A client that has not proven itself by then (from its connect) is closed."""
MAX_UNPROVEN: Final = 32
"""Clients vetted at once; the others are closed on accept (the viewers of a job are a
handful, and each proves itself in a round trip)."""
MAX_UNPROVEN_PER_HOST: Final = 8
_ERROR_PAUSE_S: Final = 0.1
"""The accept loop's pause after an error (EMFILE would otherwise spin it)."""
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


def _line(sock: socket.socket, limit: int = MAX_PROOF,
          deadline: float | None = None) -> dict[str, Any] | None:
    """One JSON line from ``sock`` (byte by byte: nothing after it is taken from the
    control protocol that follows); None on a close, a bad or over-long line. With a
    ``deadline`` (``clock.monotonic()``), the whole line must come by then (TimeoutError)."""
    data = bytearray()
    while len(data) <= limit:
        if deadline is not None:
            left = deadline - clock.monotonic()
            if left <= 0:
                raise TimeoutError("the proof did not come in time")
            sock.settimeout(left)
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
        self.turned_away = 0
        """Connections closed on accept: ``MAX_UNPROVEN`` were being vetted, or no thread."""
        self.errors = 0
        """Errors the accept loop outlived."""
        self._unproven: dict[str, int] = {}
        """Address -> clients of it being vetted (under ``_lock``)."""
        self._lock = threading.Lock()
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
                self._accept_one(self._listener)
            except Exception as e:  # never the end of the door: a pause, and on
                if self._closing:
                    return
                self.errors += 1
                if self.errors == 1 or self.errors % 100 == 0:
                    log.warning("door: accept failed (%s); the door stays open (%d errors)",
                                e, self.errors)
                time.sleep(_ERROR_PAUSE_S)

    def _accept_one(self, listener: socket.socket) -> None:
        sock, peer = listener.accept()
        host = str(peer[0])
        with self._lock:
            taken = sum(self._unproven.values()) >= MAX_UNPROVEN or (
                self._unproven.get(host, 0) >= MAX_UNPROVEN_PER_HOST)
            if not taken:
                self._unproven[host] = self._unproven.get(host, 0) + 1
        if taken:
            self.turned_away += 1
            sock.close()
            return
        try:
            threading.Thread(target=self._vet, args=(sock, peer), name="rankvisor-door-vet",
                             daemon=True).start()
        except BaseException:
            self._vetted(host)
            self.turned_away += 1
            sock.close()
            raise

    def _vetted(self, host: str) -> None:
        with self._lock:
            left = self._unproven.get(host, 0) - 1
            if left > 0:
                self._unproven[host] = left
            else:
                self._unproven.pop(host, None)

    def _vet(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        try:
            proven = self._prove(sock, peer)
        finally:
            self._vetted(str(peer[0]))
        if proven:
            self.server.adopt(sock, f"(door {peer[0]}:{peer[1]})")

    def _prove(self, sock: socket.socket, peer: tuple[str, int]) -> bool:
        """The exchange of proofs, within ``PROOF_TIMEOUT_S`` of the connect; False (the
        socket closed) when the client did not prove itself."""
        who = f"{peer[0]}:{peer[1]}"
        deadline = clock.monotonic() + PROOF_TIMEOUT_S
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.settimeout(PROOF_TIMEOUT_S)
            nonce = secrets.token_hex(16)
            _send(sock, {"t": "challenge", "door": 1, "nonce": nonce})
            proof = _line(sock, deadline=deadline)
            secret = self.secret
            theirs = str((proof or {}).get("nonce", ""))[:64]
            if (secret is None or proof is None or proof.get("t") != "proof"
                    or not hmac.compare_digest(str(proof.get("mac", "")),
                                               _mac(secret, _CLIENT_TAG, nonce, theirs))):
                self.refused += 1
                log.warning("door: refused %s (no proof of the run's secret)", who)
                sock.close()
                return False
            sock.settimeout(max(0.001, deadline - clock.monotonic()))
            _send(sock, {"t": "proven", "mac": _mac(secret, _SERVER_TAG, nonce, theirs)})
            sock.settimeout(None)
        except OSError:  # TimeoutError among them: out of time
            self.refused += 1
            sock.close()
            return False
        return True

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
                              "(another run, a new round since, or that host's cluster key "
                              "is not this one's: RANKVISOR_CLUSTER_KEY or cluster.key in "
                              "the state directory)")
        if not hmac.compare_digest(str(answer.get("mac", "")),
                                   _mac(secret, _SERVER_TAG, door_nonce, mine)):
            raise DoorRefused(f"the door at {address} could not prove it holds the run's "
                              "secret: not connecting")
    except BaseException:
        sock.close()
        raise
    return RemoteHandle.over(sock, address, read_only=read_only, timeout_s=timeout_s,
                             name=name, recent_lines=recent_lines, reread_lines=0)
