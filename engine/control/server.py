"""``ControlServer``: one run's ``SupervisorHandle`` served to viewers over a Unix socket.

Plain threads and blocking sockets (no event loop), so it runs inside any process: one accept
thread, and per client a reader (hello, commands, snapshot requests) and a writer that drains
the client's own bounded queue of encoded lines.

The event sink runs on the engine's threads (the output pump above all), so it must cost the
same whether a client reads or not: it encodes an event once, then appends the same bytes to
every client's queue under one short lock, and never touches a socket. A client that stops
reading fills its queue; from then on its output batches are dropped and replaced by one
"skipped" marker per stretch of lines (the client reads those lines from the files, which are
the record); lifecycle events are never dropped, but a client so far behind that even they
pass a generous bound is disconnected with a line saying why. A viewer whose pane shows a
rank from its files (under a flood: ``engine.logfile.follow``) says so ("follow"); from then
until that rank's next incarnation its stdout and stderr batches are only counted into that
client's skipped markers, never encoded: the marker tells the viewer to look at the files,
and the lines it would have thrown away cost neither side a thing.

Security: the socket's directory is created 0700 when missing, the socket is chmod 0600, and
every connection's peer credentials (SO_PEERCRED) must be our uid or root; any other peer is
closed before a byte is written or read.
"""

from __future__ import annotations

import collections
import logging
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from .. import clock
from ..events import Event, RankOutput, RankRestarted, RankStats
from ..handle import Command, CommandResult, DumpStacks, RunInfo, SupervisorHandle, reads_only
from ..output.text_batch import LineBlock
from . import audit, wire

__all__ = ["READ_ONLY_DUMP_REFUSAL", "READ_ONLY_REFUSAL", "ControlServer"]

log = logging.getLogger(__name__)

READ_ONLY_REFUSAL: Final = (
    "read-only viewer: commands are refused (attach without --read-only, or serve with --control)"
)
READ_ONLY_DUMP_REFUSAL: Final = (
    "read-only viewer: only a nonblocking stack dump is allowed (it does not pause the ranks;"
    " native frames need a blocking one)"
)
OUTPUT_QUEUE_BYTES: Final = 4 << 20
"""A client's queue past which its output batches are dropped (and marked skipped)."""
LIFECYCLE_QUEUE_BYTES: Final = 64 << 20
"""A client's queue past which it is disconnected: it has stopped reading for good."""
LISTEN_BACKLOG: Final = 1024
"""Connections the kernel holds before accept: a burst of hundreds of viewers and scripts
(a Unix socket refuses with EAGAIN when full; the client retries within its timeout)."""

HELLO_TIMEOUT_S: Final = 10.0
MAX_LINE: Final = 1 << 20
"""The longest line a client may send (its messages are small)."""
ALIVE_EVERY_S: Final = 1.0
"""A client sent nothing this long gets an ``alive`` line: a viewer tells a supervisor that
has nothing to say from one that stopped answering (SIGSTOPped, stuck), and judges no rank
from a stream that old (``RemoteHandle.silent_s``)."""
_ALIVE: Final = wire.encode_message({"t": "alive"})
_SEND_CHUNK: Final = 1 << 18
_GIVE_UP_S: Final = 2.0
"""How long a doomed client's writer tries to deliver its last line before closing."""


class _Skip:
    """A "skipped" marker still in a queue: grows while lines of its stream keep dropping."""

    __slots__ = ("attempt", "count", "first_line", "rank", "stream")

    def __init__(self, rank: int, stream: str, attempt: int, first_line: int, count: int):
        self.rank, self.stream, self.attempt = rank, stream, attempt
        self.first_line, self.count = first_line, count

    def encode(self) -> bytes:
        return wire.encode_skipped(self.rank, self.stream, self.attempt, self.first_line,
                                   self.count)


_SKIP_SIZE: Final = 120
"""What a marker counts for in a queue's bytes."""


def _estimate(event: RankOutput) -> int:
    """About the bytes ``event`` takes encoded (it is encoded only if some client takes it):
    the text, a separator per line, the fields around it. A pump's ``LineBlock`` is measured
    by its bytes (each line with its newline), never made into lines for it."""
    lines = event.lines
    text = (len(lines.data) if isinstance(lines, LineBlock)
            else sum(map(len, lines)) + len(lines))
    return text + len(event.partial) + 64


class _Client:
    def __init__(self, server: ControlServer, sock: socket.socket, peer_pid: int,
                 who: str) -> None:
        self.sock = sock
        self.peer_pid = peer_pid
        self.who = who
        """The peer as the audit lines name it: pid and uid, or the door's address."""
        self.name = ""
        self.read_only = False
        self.queue: collections.deque[bytes | _Skip] = collections.deque()
        self.queued = 0
        self.skips: dict[tuple[int, str], _Skip] = {}
        self.dropped_lines = 0
        self.dropping = False
        """Output is being dropped until the queue drains to half its bound."""
        self.follows: set[int] = set()
        """Ranks this viewer reads from their files (until their next incarnation)."""
        self.closed = False
        """No more queueing; the writer sends what is queued (the reason line) then stops."""
        self.give_up = 0.0
        self.wake = threading.Condition(server._lock)
        self.writer: threading.Thread | None = None


class ControlServer:
    """Serves ``handle`` on ``socket_path`` (see the module docstring).

    Args:
        handle: the run (a Supervisor). The server subscribes to it and takes its snapshot
            at once: construct it before ``handle.start()`` so the history a late viewer
            replays begins at the run's start.
        socket_path: where to listen (at most 107 bytes: sun_path).
        on_clients_changed: called with the number of clients when one comes or goes
            (on a server thread; must not block).
        queue_bytes: a client's queue bound for output (beyond it: dropped, marked skipped).
        lifecycle_bytes: a client's queue bound for everything (beyond it: disconnected).
    """

    def __init__(
        self,
        handle: SupervisorHandle,
        socket_path: str,
        *,
        on_clients_changed: Callable[[int], None] | None = None,
        queue_bytes: int = OUTPUT_QUEUE_BYTES,
        lifecycle_bytes: int = LIFECYCLE_QUEUE_BYTES,
    ) -> None:
        self.handle = handle
        self.socket_path = socket_path
        self._on_clients_changed = on_clients_changed
        self._queue_bytes = queue_bytes
        self._lifecycle_bytes = max(lifecycle_bytes, queue_bytes)
        self._lock = threading.Lock()
        self._clients: list[_Client] = []
        self._history: list[bytes] = []
        """Every lifecycle event so far, encoded, without its newline."""
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None
        self._closing = False
        self._readers: list[threading.Thread] = []
        self._requests: dict[str, Callable[[dict[str, Any], bool], dict[str, Any]]] = {}
        # Subscribe first, then look: an event between the two is in the history and may
        # already show in the snapshot; a viewer folding it again lands where it would.
        self._unsubscribe = handle.subscribe(self._sink)
        first = handle.snapshot()
        self._initial = wire.run_info_to_wire(first)
        self._incarnations: dict[int, tuple[int, int]] = {
            r.rank: (r.attempt, r.restart_count) for r in first.ranks
        }
        """rank -> (attempt, restart count) of its files now: a viewer's "follow" names the
        incarnation it read, so one that crossed a restart on its way is not taken."""

    # -- the sink (engine threads) -------------------------------------------------------

    def _sink(self, event: Event) -> None:
        kind = type(event)
        if kind is RankOutput:
            self._sink_output(event)  # type: ignore[arg-type]
            return
        if kind is RankStats and not self._clients:
            return  # superseded by the next sample: nobody to send this one to
        data = wire.encode_event(event)
        with self._lock:
            if kind is RankStats:
                for client in self._clients:
                    # A sample is superseded by the next: a full queue just goes without.
                    if not client.closed and client.queued + len(data) <= self._queue_bytes:
                        self._put(client, data)
            else:
                self._history.append(data[:-1])
                if isinstance(event, RankRestarted):  # new files: every viewer gets lines
                    self._incarnations[event.rank] = (event.attempt, event.restart_count)
                    for client in self._clients:
                        client.follows.discard(event.rank)
                for client in self._clients:
                    self._offer_lifecycle(client, data)

    def _sink_output(self, event: RankOutput) -> None:
        """Queue a batch for every client that takes it; encode it only if one does.

        Under a flood the pump calls this for every batch of every rank: a batch no client
        can take (none connected, or every queue is over its bound and being drained) is
        only counted into the clients' skipped markers, never encoded."""
        with self._lock:
            if not self._clients:
                return
            followed = event.stream in ("stdout", "stderr")
            wanted = [c for c in self._clients if not (followed and event.rank in c.follows)]
            size = _estimate(event) if wanted else 0
            takers = [c for c in wanted if self._takes(c, size)]
            for client in self._clients:
                if not client.closed and client not in takers:
                    self._drop_output(client, event)
        if not takers:
            return
        data = wire.encode_event(event)
        with self._lock:
            for client in takers:
                if client.closed:
                    continue
                if client in self._clients:
                    self._put(client, data)

    def _takes(self, client: _Client, size: int) -> bool:
        """Whether ``client``'s queue takes another output batch of ``size`` bytes (lock held).

        Once its queue overflowed, a client takes no output until the queue has drained to
        half the bound: one long skipped stretch per rank instead of many short ones, each
        of which the viewer would read back from the files."""
        if client.closed:
            return False
        if client.dropping:
            if client.queued > self._queue_bytes // 2:
                return False
            client.dropping = False
        if client.queued + size <= self._queue_bytes:
            return True
        client.dropping = True
        return False

    def _put(self, client: _Client, item: bytes | _Skip) -> None:
        client.queue.append(item)
        client.queued += _SKIP_SIZE if isinstance(item, _Skip) else len(item)
        if len(client.queue) == 1:
            client.wake.notify()

    def _drop_output(self, client: _Client, event: RankOutput) -> None:
        """Count ``event``'s lines into the client's skipped marker for its stream."""
        if not event.lines:
            return  # only a progress bar's redraw: the next batch carries a newer one
        client.dropped_lines += len(event.lines)
        key = (event.rank, event.stream)
        skip = client.skips.get(key)
        if (
            skip is not None
            and skip.attempt == event.attempt
            and skip.first_line + skip.count == event.first_line
        ):
            skip.count += len(event.lines)
            return
        skip = _Skip(event.rank, event.stream, event.attempt, event.first_line, len(event.lines))
        client.skips[key] = skip
        self._offer_lifecycle(client, skip)

    def _offer_lifecycle(self, client: _Client, item: bytes | _Skip) -> None:
        if client.closed:
            return
        size = _SKIP_SIZE if isinstance(item, _Skip) else len(item)  # type: ignore[arg-type]
        if client.queued + size <= self._lifecycle_bytes:
            self._put(client, item)
            return
        self._doom(client, "too far behind: the viewer stopped reading and "
                   f"{client.queued + size} bytes of events piled up for it")

    def _doom(self, client: _Client, reason: str) -> None:
        """Drop the client's queue, queue the reason line, let the writer close (lock held)."""
        log.warning("disconnecting viewer %r (pid %s): %s", client.name, client.peer_pid, reason)
        client.queue.clear()
        client.skips.clear()
        client.queued = 0
        self._put(client, wire.encode_message({"t": "bye", "reason": reason}))
        client.closed = True
        client.give_up = clock.monotonic() + _GIVE_UP_S
        client.wake.notify()

    # -- listening -----------------------------------------------------------------------

    def start(self) -> None:
        """Bind the socket (its directory 0700 when created here, the socket 0600), accept."""
        directory = os.path.dirname(os.path.abspath(self.socket_path))
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._remove_stale_socket()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.socket_path)
            os.chmod(self.socket_path, 0o600)
            listener.listen(LISTEN_BACKLOG)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._accepter = threading.Thread(
            target=self._accept_loop, name="rankvisor-control-accept", daemon=True
        )
        self._accepter.start()

    def _remove_stale_socket(self) -> None:
        try:
            st = os.lstat(self.socket_path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise FileExistsError(f"{self.socket_path} exists and is no socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.socket_path)
        except ConnectionRefusedError:
            os.unlink(self.socket_path)  # left by a supervisor that died: nobody listens
            return
        finally:
            probe.close()
        raise FileExistsError(f"another supervisor listens on {self.socket_path}")

    def rebase(self, info: RunInfo) -> None:
        """Give viewers ``info`` as the run's beginning from now on: the run as its ranks
        started, with their files (the snapshot taken at construction has none, the run's
        directory did not exist yet, and without them a viewer cannot keep a restarted
        rank's first files as an earlier incarnation). The history stays whole: the events
        already reflected in ``info`` fold into it again to the same place."""
        with self._lock:
            self._initial = wire.run_info_to_wire(info)

    @property
    def clients(self) -> int:
        """Viewers connected now (past the hello)."""
        with self._lock:
            return len(self._clients)

    @property
    def queued_bytes(self) -> list[int]:
        """Bytes waiting in each client's queue now (what a slow viewer costs us)."""
        with self._lock:
            return [c.queued for c in self._clients]

    @property
    def dropped_lines(self) -> int:
        """Output lines dropped for slow clients so far (each told by a skipped marker)."""
        with self._lock:
            return sum(c.dropped_lines for c in self._clients)

    def add_request(self, kind: str,
                    handler: Callable[[dict[str, Any], bool], dict[str, Any]]) -> None:
        """Answer messages of type ``kind`` with ``handler(message, read_only)``'s message
        (its ``id`` added): requests a room above the control's adds (``cluster?``)."""
        self._requests[kind] = handler

    def adopt(self, sock: socket.socket, name: str) -> None:
        """Serve ``sock``, a connection another listener accepted and vetted (the cluster's
        TCP door), as if it had come to the Unix socket; it speaks the hello first."""
        reader = threading.Thread(target=self._serve, args=(sock, 0, name, name.strip("()")),
                                  name="rankvisor-control-client", daemon=True)
        self._readers = [t for t in self._readers if t.is_alive()]
        self._readers.append(reader)
        reader.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._closing:
                    return
                time.sleep(0.05)  # EMFILE and the like: do not spin
                continue
            try:
                pid, uid, _gid = wire.peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            if uid not in (os.getuid(), 0):
                # Not a byte to another user: not even that a supervisor is here.
                log.warning("refused a connection from uid %d (pid %d)", uid, pid)
                sock.close()
                continue
            reader = threading.Thread(
                target=self._serve, args=(sock, pid, "", f"pid {pid} uid {uid}"),
                name="rankvisor-control-client",
                daemon=True,
            )
            self._readers = [t for t in self._readers if t.is_alive()]
            self._readers.append(reader)
            reader.start()

    # -- one client: its reader thread -----------------------------------------------------

    def _serve(self, sock: socket.socket, peer_pid: int, via: str, who: str) -> None:
        client = _Client(self, sock, peer_pid, who)
        client.name = via
        try:
            if self._handshake(client):
                self._read_loop(client)
        except OSError:
            pass
        except Exception:  # noqa: BLE001 - a bad client must not leave its socket behind
            log.exception("viewer %r (pid %s) failed", client.name, peer_pid)
        finally:
            self._drop(client)
            if client.writer is not None:
                client.writer.join()
            sock.close()

    def _handshake(self, client: _Client) -> bool:
        sock = client.sock
        buf = bytearray()
        line = wire.read_line(sock, buf, max_line=MAX_LINE, chunk=65536,
                              deadline=clock.monotonic() + HELLO_TIMEOUT_S)
        if line is None:
            return False
        try:
            hello = wire.decode_message(line)
        except wire.WireError as e:
            sock.sendall(wire.encode_error(f"expected a hello: {e}"))
            return False
        if hello.get("t") != "hello":
            sock.sendall(wire.encode_error(f"expected a hello, not {hello.get('t')!r}"))
            return False
        theirs = hello.get("protocol")
        if type(theirs) is not int or theirs != wire.PROTOCOL_VERSION:  # not true, not 1.0
            sock.sendall(wire.encode_error(
                f"this supervisor speaks protocol {wire.PROTOCOL_VERSION} "
                f"(rankvisor {wire.package_version()}), the viewer {theirs} "
                f"(rankvisor {hello.get('version', '?')})"
            ))
            return False
        client.name = " ".join(filter(None, (str(hello.get("name", "")), client.name)))
        client.read_only = bool(hello.get("read_only", False))
        audit.connected(client.who, str(hello.get("name", ""))[:80], client.read_only)
        now = wire.encode_message({"now": wire.run_info_to_wire(self.handle.snapshot())})
        head = wire.encode_message({
            "t": "welcome",
            "protocol": wire.PROTOCOL_VERSION,
            "version": wire.package_version(),
            "supervisor_pid": os.getpid(),
            "read_only": client.read_only,
            "follows_files": True,
            "initial": self._initial,
        })
        with self._lock:
            if self._closing:
                return False
            # Cut the history and join the broadcast at one instant: no event is lost or
            # delivered twice between the welcome and the live stream.
            history = b",".join(self._history)
            welcome = b"".join((
                head[:-2], b',"history":[', history, b"],", now[1:]
            ))
            client.queue.append(welcome)
            client.queued = len(welcome)
            self._clients.append(client)
            count = len(self._clients)
        client.rest = buf  # type: ignore[attr-defined]
        client.writer = threading.Thread(
            target=self._write_loop, args=(client,), name="rankvisor-control-writer",
            daemon=True,
        )
        client.writer.start()
        self._clients_changed(count)
        sock.settimeout(None)
        return True

    def _read_loop(self, client: _Client) -> None:
        buf: bytearray = client.rest  # type: ignore[attr-defined]
        while True:
            line = wire.read_line(client.sock, buf, max_line=MAX_LINE, chunk=65536)
            if line is None:
                return
            try:
                message = wire.decode_message(line)
            except wire.WireError as e:
                self._reply(client, wire.encode_message({"t": "error", "message": str(e)}))
                continue
            kind = message["t"]
            if kind == "command":
                self._reply(client, wire.encode_result(message.get("id"), self._run(client,
                                                                                    message)))
            elif kind == "snapshot?":
                run = wire.run_info_to_wire(self.handle.snapshot())
                self._reply(client, wire.encode_message(
                    {"t": "snapshot", "id": message.get("id"), "run": run}
                ))
            elif kind == "bye":
                return
            elif kind == "follow":
                self._follow(client, message)
            elif kind in self._requests:
                try:
                    answer = self._requests[kind](message, client.read_only)
                except Exception as e:  # noqa: BLE001 - the viewer gets the reason
                    log.exception("request %r failed", kind)
                    answer = {"t": "error", "message": f"{kind} failed: {e}"}
                self._reply(client, wire.encode_message({**answer, "id": message.get("id")}))
            else:
                self._reply(client, wire.encode_message({
                    "t": "error",
                    "message": f"unknown message type {kind!r} ignored (this supervisor "
                    f"speaks protocol {wire.PROTOCOL_VERSION})",
                }))

    def _follow(self, client: _Client, message: dict[str, Any]) -> None:
        """A viewer reads a rank's files: send it no more of that incarnation's lines."""
        try:
            rank = message["rank"]
            seen = (message["attempt"], message["restart_count"])
            if not all(type(v) is int for v in (rank, *seen)):
                raise TypeError
        except (KeyError, TypeError):
            self._reply(client, wire.encode_message({
                "t": "error", "message": "follow: needs integer rank, attempt, restart_count"
            }))
            return
        with self._lock:
            if self._incarnations.get(rank) == seen:
                client.follows.add(rank)

    def _run(self, client: _Client, message: dict[str, Any]) -> CommandResult:
        try:
            command = wire.command_from_wire(message.get("command"))
        except wire.WireError as e:
            result = CommandResult(False, READ_ONLY_REFUSAL if client.read_only
                                   else f"not carried out: {e}")
            audit.log_command(client.who, None, result)
            return result
        result = self._carry_out(client, command)
        audit.log_command(client.who, command, result)
        return result

    def _carry_out(self, client: _Client, command: Command) -> CommandResult:
        if client.read_only and not reads_only(command):
            # The exceptions read the ranks without pausing them.
            if isinstance(command, DumpStacks):
                return CommandResult(False, READ_ONLY_DUMP_REFUSAL)
            return CommandResult(False, READ_ONLY_REFUSAL)
        try:
            return self.handle.execute(command)
        except Exception as e:  # noqa: BLE001 - the viewer gets the reason, the server lives
            log.exception("command failed: %s", audit.described(command))
            return CommandResult(False, f"the supervisor failed on it: {e}")

    def _reply(self, client: _Client, data: bytes) -> None:
        with self._lock:
            self._offer_lifecycle(client, data)

    # -- one client: its writer thread ------------------------------------------------------

    def _write_loop(self, client: _Client) -> None:
        sock = client.sock
        while True:
            with self._lock:
                while not client.queue and not client.closed:
                    if not client.wake.wait(ALIVE_EVERY_S):
                        self._put(client, _ALIVE)  # nothing else to say: that we live
                if not client.queue:
                    break
                parts: list[bytes] = []
                size = 0
                while client.queue and size < _SEND_CHUNK:
                    item = client.queue.popleft()
                    if isinstance(item, _Skip):
                        if client.skips.get((item.rank, item.stream)) is item:
                            del client.skips[(item.rank, item.stream)]
                        client.queued -= _SKIP_SIZE
                        item = item.encode()
                    else:
                        client.queued -= len(item)
                    parts.append(item)
                    size += len(item)
            if not self._send(client, b"".join(parts)):
                break
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the reader, which closes the socket
        except OSError:
            pass

    def _send(self, client: _Client, data: bytes) -> bool:
        """Send all of ``data``; False when the peer is gone or a doomed client gives up."""
        view = memoryview(data)
        poller = select.poll()
        poller.register(client.sock, select.POLLOUT)
        while view:
            try:
                sent = client.sock.send(view, socket.MSG_DONTWAIT)
            except BlockingIOError:
                # The client does not read: wait, but look up now and then in case it
                # was disconnected meanwhile (it may never read again).
                poller.poll(250)
                if client.closed and client.give_up and clock.monotonic() > client.give_up:
                    return False
                continue
            except OSError:
                return False
            view = view[sent:]
        return True

    # -- closing -----------------------------------------------------------------------------

    def _drop(self, client: _Client) -> None:
        with self._lock:
            client.closed = True
            if not client.give_up:
                client.give_up = clock.monotonic()
            client.wake.notify()
            present = client in self._clients
            if present:
                self._clients.remove(client)
            count = len(self._clients)
        if present:
            self._clients_changed(count)

    def _clients_changed(self, count: int) -> None:
        if self._on_clients_changed is not None:
            try:
                self._on_clients_changed(count)
            except Exception:  # noqa: BLE001 - a callback must not take a viewer down
                log.exception("on_clients_changed failed")

    def close(self) -> None:
        """Stop listening, close every client, unlink the socket, unsubscribe."""
        with self._lock:
            self._closing = True
            clients = list(self._clients)
        self._unsubscribe()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
            except OSError:
                pass
            self._listener.close()
            try:
                os.unlink(self.socket_path)
            except FileNotFoundError:
                pass
        for client in clients:
            with self._lock:
                self._doom(client, "the supervisor is closing")
            try:
                client.sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        if self._accepter is not None:
            self._accepter.join(timeout=5)
        for reader in list(self._readers):
            reader.join(timeout=_GIVE_UP_S + 3)
