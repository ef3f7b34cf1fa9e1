"""``RemoteHandle``: a run's supervisor in another process, held like one in this process.

It speaks the control protocol (``engine.control.wire``) over the supervisor's Unix socket
and implements ``SupervisorHandle``: commands are round trips, events arrive on one reader
thread that calls the sinks (as engine threads do in-process). ``watch`` gives a viewer that
comes late the whole story: the run as it started, every lifecycle event since, the recent
lines of each rank's current files (the files are the record), then the live events, with
no line twice and none missing. Lines the server had to drop for us (we read too slowly) are
announced by a "skipped" marker and read back from the files here.
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from .. import clock
from ..events import (
    AttemptStarted,
    Event,
    EventSink,
    RankOutput,
    RankRestarted,
    RankStats,
    RunFinished,
    SupervisorNotice,
)
from ..forensics.stacks import DEFAULT_TIMEOUT_S
from ..forensics.worker_server import DEFAULT_TIMEOUT_S as ASK_TIMEOUT_S
from ..handle import (
    Command,
    CommandResult,
    DumpStacks,
    ReadCollectives,
    RunInfo,
    TerminateRanks,
    command_problem,
    term_timeout,
)
from ..logfile.merged import MergedSource
from ..logfile.store import LogStore
from ..process.wakeup import Wakeup
from ..rundir.arrival import arrival_path
from . import wire

__all__ = ["NoAnswer", "ProtocolMismatch", "RemoteHandle", "recent_output"]

log = logging.getLogger(__name__)

RECENT_LINES: Final = 5000
"""Lines of each rank's files a watcher gets before the live events."""
REREAD_LINES: Final = 500
"""At most this many lines of a skipped stretch (the last ones) are read back from the file.
A stretch is skipped because we read too slowly; reading thousands of lines back on the
reader thread (under the viewer's GIL) for each one would keep us behind for good, while a
pane shows the last few dozen. The files keep every line."""
UNREAD_WAIT_S: Final = 0.25
"""The longest a skipped stretch waits to be read back while the viewer is still behind."""
ANSWER_TIMEOUT_S: Final = 10.0


class ProtocolMismatch(ConnectionError):
    """The supervisor speaks another protocol version; ``str()`` is one line naming both."""


class NoAnswer(ConnectionError):
    """Connected, but no welcome came (the peer check refused us, or the supervisor hangs)."""


class ForeignPeer(NoAnswer):
    """The socket is served by another user's process: nothing was sent to it."""


def _check_peer(sock: socket.socket, socket_path: str) -> None:
    """Refuse a server that is neither this user nor root (SO_PEERCRED of the listener):
    a status.json anyone could write may name anyone's socket, and a command sent to a
    fake would be 'carried out' by it."""
    pid, uid, _gid = wire.peer_credentials(sock)
    if uid not in (os.getuid(), 0):
        raise ForeignPeer(
            f"the socket {socket_path} is served by another user (uid {uid}, pid {pid}), "
            "not by your supervisor: nothing was sent to it"
        )


def _connect(sock: socket.socket, socket_path: str, deadline: float) -> None:
    """``connect`` within the deadline, again after EAGAIN: a Unix socket whose backlog is
    full refuses at once instead of waiting, which under load is only a matter of time."""
    pause = 0.002
    while True:
        sock.settimeout(max(0.001, deadline - clock.monotonic()))
        try:
            sock.connect(socket_path)
            return
        except BlockingIOError:
            if clock.monotonic() + pause >= deadline:
                raise
        time.sleep(pause)
        pause = min(0.05, pause * 2)


class _Pending:
    __slots__ = ("done", "message")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: dict[str, Any] | None = None


class _Watcher:
    """A sink subscribed with ``watch``: replayed first, then live with duplicates trimmed."""

    __slots__ = ("replayed", "seen", "sink")

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.replayed = False
        self.seen: dict[tuple[int, str], tuple[int, int]] = {}
        """(rank, stream) -> (attempt, lines of that file already delivered from it), kept
        until the live stream has passed that point."""


class RemoteHandle:
    """A ``SupervisorHandle`` over a control socket; make one with ``connect``."""

    def __init__(self, sock: socket.socket, welcome: dict[str, Any], rest: bytearray,
                 *, read_only: bool, recent_lines: int = RECENT_LINES,
                 reread_lines: int = REREAD_LINES,
                 answer_timeout_s: float = ANSWER_TIMEOUT_S,
                 pass_over_skipped: bool = False) -> None:
        self._sock = sock
        self._buf = rest
        self.bytes_read = 0
        """Bytes received from the supervisor since the welcome (a viewer's cost)."""
        self._heard_at = clock.monotonic()
        self.read_only = read_only
        self.supervisor_pid: int = int(welcome.get("supervisor_pid", 0))
        self.recent_lines = recent_lines
        self.reread_lines = reread_lines
        self.pass_over_skipped = pass_over_skipped
        """A skipped stretch that newer lines of its stream follow is not read back (a
        viewer whose panes show the newest lines, and follow the files under a flood)."""
        self.answer_timeout_s = answer_timeout_s
        self._initial = wire.run_info_from_wire(welcome["initial"])
        now = wire.run_info_from_wire(welcome["now"])
        self._now = now
        self.run_dir: str = now.log_dir
        self._history: list[Event] = []
        self.finished: RunFinished | None = None
        self._finished_event = threading.Event()
        self._gone = threading.Event()
        self._over = threading.Event()
        """Set when the run finished or the connection ended: what ``wait`` waits for."""
        # Set after the sinks heard "went away" and before ``_over``: see ``connected``.
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._sinks: tuple[EventSink, ...] = ()
        self._watchers: tuple[_Watcher, ...] = ()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._detached = False
        self._reason = ""
        self._stores: dict[str, LogStore] = {}
        self._unread: dict[tuple[int, str], tuple[int, int, int, float]] = {}
        """(rank, stream) -> (attempt, first line, count, when) of the newest skipped stretch
        not read back yet (``_skipped``)."""
        # Where each rank's lines go now (updated by RankRestarted), for re-reading.
        self._paths: dict[int, tuple[int, str, str]] = {
            r.rank: (r.attempt, r.stdout_path, r.stderr_path) for r in now.ranks
        }
        self._filtered = {"filtered_stdout": now.filtered_stdout_path,
                          "filtered_stderr": now.filtered_stderr_path}
        self._follows_files = welcome.get("follows_files") is True
        """The supervisor takes "follow" (``follow_files``)."""
        self._incarnations: dict[int, tuple[int, int]] = {
            r.rank: (r.attempt, r.restart_count) for r in now.ranks
        }
        self._followed: set[int] = set()
        """Ranks whose lines the supervisor no longer sends us (we read their files)."""
        for data in welcome.get("history", ()):
            event = wire.event_from_wire(data)
            if event is not None:
                self._take(event)
        self._wakeup = Wakeup()
        self._reader = threading.Thread(target=self._read_loop, name="rankvisor-remote",
                                        daemon=True)
        self._reader.start()

    @classmethod
    def connect(cls, socket_path: str, *, read_only: bool = False, timeout_s: float = 5.0,
                name: str = "", recent_lines: int = RECENT_LINES,
                reread_lines: int = REREAD_LINES,
                pass_over_skipped: bool = False) -> RemoteHandle:
        """Connect, say hello, read the welcome.

        Raises FileNotFoundError / ConnectionRefusedError when nobody listens (a stale run),
        ProtocolMismatch when the supervisor speaks another version, NoAnswer when no
        welcome comes within ``timeout_s``.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                _connect(sock, socket_path, clock.monotonic() + timeout_s)
            except (TimeoutError, socket.timeout, BlockingIOError):
                raise NoAnswer(f"no answer from {socket_path} within {timeout_s} s") from None
            _check_peer(sock, socket_path)
        except BaseException:
            sock.close()
            raise
        return cls.over(sock, socket_path, read_only=read_only, timeout_s=timeout_s, name=name,
                        recent_lines=recent_lines, reread_lines=reread_lines,
                        pass_over_skipped=pass_over_skipped)

    @classmethod
    def over(cls, sock: socket.socket, where: str, *, read_only: bool = False,
             timeout_s: float = 5.0, name: str = "", recent_lines: int = RECENT_LINES,
             reread_lines: int = REREAD_LINES, pass_over_skipped: bool = False) -> RemoteHandle:
        """Say hello on ``sock`` (connected, and vetted where the door asks it: the
        cluster's TCP door) and read the welcome; ``sock`` is closed on any failure."""
        socket_path = where
        try:
            sock.settimeout(timeout_s)
            sock.sendall(wire.encode_message({
                "t": "hello", "protocol": wire.PROTOCOL_VERSION,
                "version": wire.package_version(), "read_only": read_only, "name": name,
            }))
            buf = bytearray()
            line = wire.read_line(sock, buf)
            if line is None:
                raise NoAnswer(
                    f"the supervisor at {socket_path} closed the connection or said nothing "
                    f"within {timeout_s} s (is it another user's?)"
                )
            message = wire.decode_message(line)
            theirs = message.get("protocol")
            if type(theirs) is not int or theirs != wire.PROTOCOL_VERSION:
                raise ProtocolMismatch(
                    f"this rankvisor speaks protocol {wire.PROTOCOL_VERSION} "
                    f"(rankvisor {wire.package_version()}), the supervisor {theirs} "
                    f"(rankvisor {message.get('version', '?')}): attach with the version "
                    "that started the run"
                )
            if message["t"] != "welcome":
                raise NoAnswer(f"the supervisor refused us: {message.get('message', message)}")
            sock.settimeout(None)
            return cls(sock, message, buf, read_only=read_only, recent_lines=recent_lines,
                       reread_lines=reread_lines, pass_over_skipped=pass_over_skipped)
        except BaseException:
            sock.close()
            raise

    # -- SupervisorHandle ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """False once the connection is gone (the supervisor exited, or detach()). The
        reader turns it false after the sinks heard "went away" and before it wakes
        ``wait``: whoever sees it false saw the notice, and ``wait`` back for a link that
        went sees it false (a loaded run once saw each of the two broken)."""
        return not self._ended.is_set()

    @property
    def detachable(self) -> bool:
        """True: the run lives in its supervisor process; closing this handle leaves it."""
        return True

    def silent_s(self) -> float:
        """Seconds since the supervisor last sent us anything. It sends a line a second at
        least (an ``alive`` when it has nothing else): a long silence means it is not
        answering (SIGSTOPped, stuck), and what the viewer shows of the ranks is that old."""
        return max(0.0, clock.monotonic() - self._heard_at)

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        """Add ``sink`` for every later live event (on the reader thread)."""
        with self._lock:
            self._sinks = (*self._sinks, sink)

        def unsubscribe() -> None:
            with self._lock:
                self._sinks = tuple(s for s in self._sinks if s is not sink)

        return unsubscribe

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        """The run as it started; ``sink`` then gets the history, recent file lines, live."""
        watcher = _Watcher(sink)
        with self._lock:
            self._watchers = (*self._watchers, watcher)

        def unsubscribe() -> None:
            with self._lock:
                self._watchers = tuple(w for w in self._watchers if w is not watcher)

        if self._gone.is_set():
            self._replay(watcher)  # the reader is gone: nothing can overtake the replay
            self._tell_gone((watcher.sink,))
        else:
            self._wakeup.wake()  # the reader replays before its next message
        return self._initial, unsubscribe

    def start(self) -> None:
        """Nothing to do: the supervisor process started its ranks itself."""

    def execute(self, command: Command) -> CommandResult:
        """Send ``command``, wait for its result (CommandResult(False, ...) without one)."""
        problem = command_problem(command)
        if problem is not None:
            return CommandResult(False, problem)
        try:
            data = wire.command_to_wire(command)
        except wire.WireError as e:
            return CommandResult(False, str(e))
        # A stack dump waits for py-spy (bounded per rank): give it that long on top.
        wait = self.answer_timeout_s + (
            DEFAULT_TIMEOUT_S if isinstance(command, DumpStacks)
            else ASK_TIMEOUT_S if isinstance(command, ReadCollectives) else 0.0
        )
        answer = self._ask({"t": "command", "command": data}, wait)
        if answer is None:
            return CommandResult(False, self._no_answer(wait))
        return wire.result_from_wire(answer)

    def snapshot(self) -> RunInfo:
        """The run now, asked of the supervisor (NoAnswer when it does not answer)."""
        answer = self._ask({"t": "snapshot?"})
        if answer is None:
            raise NoAnswer(self._no_answer())
        return wire.run_info_from_wire(answer["run"])

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Terminate every rank (with escalation), wait for the run's end, disconnect."""
        result = self.execute(TerminateRanks(None, timeout_s=timeout_s))
        if result.ok:
            t = term_timeout(timeout_s, self._initial.term_timeout_s)
            self.wait(2 * t + 5)
        # Refused (a read-only viewer, no rank running): nothing will end, nothing to wait for.
        self.detach()

    def detach(self) -> None:
        """Stop watching and close the connection; never stops a rank."""
        with self._lock:
            self._detached = True
            self._sinks = ()
            self._watchers = ()
        if not self._gone.is_set():
            try:
                with self._send_lock:
                    self._sock.sendall(wire.encode_message({"t": "bye"}))
            except OSError:
                pass
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5)

    def wait(self, timeout_s: float | None = None) -> RunFinished | None:
        """The run's RunFinished once it came; None at the timeout or if the link went."""
        self._over.wait(timeout_s)
        return self.finished

    # -- requests --------------------------------------------------------------------------

    def request(self, kind: str, fields: dict[str, Any] | None = None,
                wait_s: float | None = None) -> dict[str, Any] | None:
        """A request a room above the control's serves (``cluster?``, ``read?``): its
        answer, or None when none came within ``wait_s`` (the answer timeout)."""
        return self._ask({"t": kind, **(fields or {})}, wait_s)

    def _ask(self, message: dict[str, Any], wait_s: float | None = None) -> dict[str, Any] | None:
        if self._gone.is_set():
            return None
        request_id = next(self._ids)
        pending = _Pending()
        with self._lock:
            self._pending[request_id] = pending
        try:
            with self._send_lock:
                self._sock.sendall(wire.encode_message({**message, "id": request_id}))
            pending.done.wait(self.answer_timeout_s if wait_s is None else wait_s)
        except OSError:
            pass
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        return pending.message

    def _no_answer(self, wait_s: float | None = None) -> str:
        if self._gone.is_set():
            return f"not carried out: the supervisor went away ({self._reason or 'closed'})"
        waited = self.answer_timeout_s if wait_s is None else wait_s
        return f"no answer from the supervisor within {waited:g} s"

    def follow_files(self, rank: int, attempt: int, restart_count: int) -> bool:
        """Say that this viewer shows ``rank`` from its files now (its pane follows them under
        a flood: ``engine.logfile.follow``), as of that incarnation: the supervisor then
        sends none of its stdout and stderr lines until the rank's next incarnation, only a
        skipped marker now and then, which reaches the sinks as an empty batch of that
        stream (the cue to look at the files). Lines a viewer would throw away cost neither
        process a thing. False (nothing changes) when the supervisor does not take it, the
        connection is gone, or the rank has run again since."""
        if not self._follows_files or self._gone.is_set():
            return False
        with self._lock:
            if self._incarnations.get(rank) != (attempt, restart_count):
                return False
            self._followed.add(rank)
        message = {"t": "follow", "rank": rank, "attempt": attempt,
                   "restart_count": restart_count}
        try:
            with self._send_lock:
                self._sock.sendall(wire.encode_message(message))
        except OSError:
            return False
        return True

    # -- the reader thread -----------------------------------------------------------------

    def _read_loop(self) -> None:
        sock, buf = self._sock, self._buf
        try:
            while True:
                self._replay_new()
                end = buf.find(b"\n")
                if end < 0:
                    if self._unread:
                        ready, _, _ = select.select([sock.fileno(), self._wakeup.fd], [], [], 0)
                        # Caught up (nothing more to read): the stretches nothing followed;
                        # still behind: those that waited long enough.
                        self._read_back(None, 0.0 if not ready else UNREAD_WAIT_S)
                    ready, _, _ = select.select(
                        [sock.fileno(), self._wakeup.fd], [], [],
                        UNREAD_WAIT_S if self._unread else None,
                    )
                    if self._wakeup.fd in ready:
                        self._wakeup.drain()
                    if sock.fileno() in ready:
                        data = sock.recv(1 << 20)
                        if not data:
                            break
                        self.bytes_read += len(data)
                        self._heard_at = clock.monotonic()
                        buf += data
                    continue
                line = bytes(buf[: end + 1])
                del buf[: end + 1]
                try:
                    self._handle(wire.decode_message(line))
                except wire.WireError as e:
                    log.warning("ignored a bad line from the supervisor: %s", e)
        except OSError as e:
            self._reason = self._reason or str(e)
        except Exception:  # noqa: BLE001 - the reader must always report the end
            log.exception("the control connection's reader failed")
        finally:
            if self._unread:
                try:  # the stretches nothing followed before the end: still read back
                    self._read_back(None)
                except Exception:  # noqa: BLE001 - the reader must always report the end
                    log.exception("reading skipped lines back failed")
            self._gone.set()
            self._sock.close()
            self._wakeup.close()
            with self._lock:
                for pending in self._pending.values():
                    pending.done.set()
                detached = self._detached
                sinks = (*self._sinks, *(w.sink for w in self._watchers if w.replayed))
            try:
                for store in self._stores.values():
                    store.close()
                if not detached:
                    self._tell_gone(sinks)
            finally:
                self._ended.set()
                self._over.set()  # last: who ``wait``ed for the end sees connected False

    def _tell_gone(self, sinks: tuple[EventSink, ...]) -> None:
        finished = " after the run finished" if self.finished is not None else ""
        notice = SupervisorNotice(
            f"the supervisor (pid {self.supervisor_pid}) went away{finished}"
            + (f": {self._reason}" if self._reason else ""),
            "information" if self.finished is not None else "error",
        )
        for sink in sinks:
            _call(sink, notice)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["t"]
        if kind in ("o", "ev"):
            event = wire.event_from_wire(message)
            if event is not None:
                if self._unread and isinstance(event, RankOutput):
                    self._passed(event)
                self._take(event)
                self._deliver(event)
        elif kind == "skipped":
            self._skipped(message)
        elif kind in ("result", "snapshot") or "id" in message:
            with self._lock:
                pending = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if pending is not None:
                pending.message = message
                pending.done.set()
        elif kind in ("bye", "error"):
            self._reason = str(message.get("reason") or message.get("message") or "")
        # Any other type is from a newer supervisor: nothing for us in it.

    def _take(self, event: Event) -> None:
        """Keep what a later watcher replays, and where each rank writes now."""
        if isinstance(event, (RankOutput, RankStats)):
            return
        self._history.append(event)
        if isinstance(event, RankRestarted):
            self._paths[event.rank] = (event.attempt, event.stdout_path, event.stderr_path)
            with self._lock:  # new files: the supervisor sends their lines again
                self._incarnations[event.rank] = (event.attempt, event.restart_count)
                self._followed.discard(event.rank)
        elif isinstance(event, AttemptStarted):
            for stream, path in self._filtered.items():
                if path:
                    self._filtered[stream] = os.path.join(event.log_dir, os.path.basename(path))
        elif isinstance(event, RunFinished):
            self.finished = event
            self._finished_event.set()
            self._over.set()

    def _deliver(self, event: Event) -> None:
        sinks, watchers = self._sinks, self._watchers
        for sink in sinks:
            _call(sink, event)
        for watcher in watchers:
            if not watcher.replayed:
                continue
            if isinstance(event, RankOutput):
                trimmed = _trim(watcher, event)
                if trimmed is not None:
                    _call(watcher.sink, trimmed)
                continue
            if isinstance(event, (RankRestarted,)):
                # A new file: its line numbers start again.
                for key in [k for k in watcher.seen if k[0] == event.rank]:
                    del watcher.seen[key]
            _call(watcher.sink, event)

    def _skipped(self, message: dict[str, Any]) -> None:
        """Note a skipped stretch, to be read back from the file before the next live lines
        of its stream, when the reader has caught up with the socket, or ``UNREAD_WAIT_S``
        later, whichever comes first; with ``pass_over_skipped``, not at all once newer
        lines of its stream came (``_passed``).

        Under a flood a stretch is followed by live lines of its stream within moments, and
        a pane shows the newest lines: reading every stretch back only kept a viewer that
        was behind further behind, reading the files on its reader thread. A stretch nothing
        followed (the last of a rank's output) is read back in every case."""
        try:
            rank, stream = int(message["rank"]), str(message["stream"])
            attempt, first = int(message.get("attempt", 0)), int(message["first_line"])
            count = int(message["count"])
        except (KeyError, TypeError, ValueError):
            return
        if stream in ("stdout", "stderr"):
            with self._lock:
                followed = rank in self._followed
            if followed:  # we read its files: this says only that they grew
                self._deliver(RankOutput(rank, stream, (),  # type: ignore[arg-type]
                                         attempt=attempt, first_line=first + count))
                return
        key = (rank, stream)
        since = clock.monotonic()
        older = self._unread.get(key)
        if older is not None and older[0] == attempt and older[1] + older[2] == first:
            first, count, since = older[1], older[2] + count, older[3]  # the stretch grew
        # (A stretch after another that was not read back passes it over: it is newer.)
        self._unread[key] = (attempt, first, count, since)

    def _passed(self, event: RankOutput) -> None:
        """Live lines of a stream with a stretch not read back: the stretch is passed over
        when they come after it (what a pane shows is newer), due at once otherwise."""
        key = (event.rank, event.stream)
        unread = self._unread.get(key)
        if unread is None:
            return
        attempt, first, count, _ = unread
        if (
            self.pass_over_skipped
            and attempt == event.attempt
            and event.first_line >= first + count
        ):
            del self._unread[key]
        else:
            self._read_back(key)  # before the live lines: a stream's lines stay in order

    def _read_back(self, key: tuple[int, str] | None, waited_s: float = 0.0) -> None:
        """Read back the stretch of ``key`` (None: every stretch that waited ``waited_s``),
        as an output batch of its last ``reread_lines`` lines."""
        if key is None:
            due = clock.monotonic() - waited_s
            keys = [k for k, unread in self._unread.items() if unread[3] <= due]
        else:
            keys = [key]
        for rank, stream in keys:
            unread = self._unread.pop((rank, stream), None)
            if unread is None:
                continue
            attempt, first, count, _ = unread
            path = self._path_of(rank, stream)
            start = max(first, first + count - self.reread_lines)
            lines, end = self._read_lines(path, start, first + count) if path else ([], -1)
            if lines:
                self._deliver(RankOutput(rank, stream, tuple(lines),  # type: ignore[arg-type]
                                         attempt=attempt, first_line=start, end_byte=end))

    def _path_of(self, rank: int, stream: str) -> str:
        if stream.startswith("filtered_"):
            return self._filtered.get(stream, "")
        _, out, err = self._paths.get(rank, (0, "", ""))
        return out if stream == "stdout" else err

    def _read_lines(self, path: str, start: int, stop: int) -> tuple[list[str], int]:
        store = self._stores.get(path)
        if store is None:
            store = self._stores[path] = LogStore(path, tail_lines=0)
        store.refresh()
        return store.lines_and_end(start, stop)

    # -- replay ---------------------------------------------------------------------------

    def _replay_new(self) -> None:
        for watcher in self._watchers:
            if not watcher.replayed:
                self._replay(watcher)

    def _replay(self, watcher: _Watcher) -> None:
        """History, then each rank's recent file lines in arrival order (reader thread)."""
        for event in list(self._history):
            _call(watcher.sink, event)
        for rank in sorted(self._paths):
            attempt, out, err = self._paths[rank]
            if not out and not err:
                continue
            for batch in self._recent(rank, attempt, out, err, watcher):
                _call(watcher.sink, batch)
        watcher.replayed = True

    def _recent(self, rank: int, attempt: int, out: str, err: str,
                watcher: _Watcher) -> list[RankOutput]:
        batches, counts = recent_output(rank, attempt, out, err, self.recent_lines)
        for stream, count in counts.items():
            watcher.seen[(rank, stream)] = (attempt, count)
        return batches


def recent_output(rank: int, attempt: int, out: str, err: str,
                  lines: int) -> tuple[list[RankOutput], dict[str, int]]:
    """The last ``lines`` lines of a rank's two files, interleaved as they arrived (the
    arrival index beside them), as RankOutput batches with their line numbers, then each
    file's unfinished last line; and how many complete lines each file held when read (live
    lines from there on are new)."""
    source = MergedSource(out, err, arrival_path(out, err))
    try:
        rows = source.refresh()
        counts = {
            stream: store.line_count
            for stream, store in zip(("stdout", "stderr"), source.stores, strict=True)
        }
        batches: list[RankOutput] = []
        row = max(0, rows - lines)
        order = source.order
        while row < rows:
            stream_no, line = order.locate(row)
            count = 1
            while row + count < rows and order.locate(row + count) == (stream_no, line + count):
                count += 1
            text, end = source.stores[stream_no].lines_and_end(line, line + count)
            batches.append(RankOutput(rank, "stderr" if stream_no else "stdout",
                                      tuple(text), attempt=attempt, first_line=line,
                                      end_byte=end))
            row += count
        # The unfinished last line (a progress bar redrawn with \r) is part of what the
        # rank shows now: a late viewer gets it too, after the complete lines.
        for stream, partial in source.partials():
            batches.append(RankOutput(rank, stream, (), partial, attempt=attempt,
                                      first_line=counts[stream]))
        return batches, counts
    finally:
        source.close()


def _trim(watcher: _Watcher, event: RankOutput) -> RankOutput | None:
    """``event`` without the lines the watcher already got from the files (None: all)."""
    key = (event.rank, event.stream)
    seen = watcher.seen.get(key)
    if seen is None:
        return event
    attempt, upto = seen
    if attempt != event.attempt:
        del watcher.seen[key]
        return event
    end = event.first_line + len(event.lines)
    if end >= upto:
        del watcher.seen[key]  # the live stream has caught up with what the files gave
    if event.first_line >= upto:
        return event
    skip = upto - event.first_line
    if skip >= len(event.lines) and not (end >= upto and event.partial):
        return None
    return RankOutput(event.rank, event.stream, event.lines[skip:], event.partial,
                      event.attempt, event.first_line + min(skip, len(event.lines)),
                      end_byte=event.end_byte)


def _call(sink: EventSink, event: Event) -> None:
    try:
        sink(event)
    except Exception:  # noqa: BLE001 - one bad sink must not stop the others
        log.exception("event sink %r failed on %r", sink, type(event).__name__)
