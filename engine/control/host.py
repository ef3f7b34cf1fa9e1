"""``RunHost``: what makes a Supervisor reachable from outside the process that holds it.

Every way of running (the supervisor process, ``--headless``, ``--foreground``) wraps its
Supervisor in a RunHost, so that every run is in the registry, has a control socket, and
keeps in its directory:

- ``status.json``: rewritten atomically on every lifecycle event (flushed to disk), and once
  a tick (``STATUS_TICK_S``) while the run lasts, so that each rank's ``step`` and
  ``last_output_age_s`` stay fresh for a script without a viewer (one write a tick however
  much the ranks print, not flushed to disk: an fsync a second would wake the writer for
  the disk each time; a supervisor that was SIGKILLed leaves its last status, which
  readers show as stale);
- ``events.ndjson``: the run as it started, then every lifecycle event in wire form, appended
  as it happens, so that a finished or stale run can be viewed as it was watched live.

Both live on the file system the ranks write their logs on. Before the first rank starts
(``Supervisor.before_spawn``), the host holds space there for the run's end
(``rundir.reserve``) and writes a first status.json: a rank that fills the disk at once
leaves the run with a valid status, and room to write its end.

An event's writes happen on a thread of their own, woken only by events: the event sink only
marks the status dirty and queues the encoded event, since sinks run on the engine's threads
and must not block. The tick's refresh rides the process's beat (``supervisor.ticker``), the
same wake-up as the live suspect's and the collectives' looks: an idle run wakes one thread a
second for all of them. It never waits: while the writer holds the status, the tick passes
(the writer's status is the newer one). Where nothing happened since the last status (no
event, the same live suspect, every rank's step the same), the tick writes the last status's
bytes with only its times moved on (``status.StatusTemplate``) instead of building the record
again: the same bytes, for a fraction of the CPU of an idle run. The tick writes them into a
spare inode that then trades names with status.json (``rundir.atomic.SwapWriter``), not into
a new file each time.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Callable

from .. import clock
from ..events import Event, RankOutput, RankStats, RunFinished
from ..rundir.atomic import SwapWriter
from ..rundir.reserve import SpaceReserve, reserve_bytes
from ..supervisor.ticker import Ticker
from . import registry, status, wire
from .live_status import add_live
from .record_file import RecordFile
from .server import ControlServer

if TYPE_CHECKING:
    from ..supervisor.core import Supervisor

__all__ = ["EVENTS_FILE", "RunHost"]

log = logging.getLogger(__name__)

STATUS_TICK_S = 2.0
"""While the run lasts, status.json is rewritten at least this often (its ``written_at``
is never more than two ticks old while the supervisor lives). Each rewrite replaces the file
(ext4 then starts writing the new one out): every 2 s, not every second, is half an idle
supervisor's CPU for a figure scripts read."""

EVENTS_FILE = "events.ndjson"
"""The run's lifecycle record in its directory (the first line is the run as it started)."""


class RunHost:
    """The control socket, registry entry, status.json and events.ndjson of one run.

    Construct it before ``sup.start()`` (the server replays history from the run's start),
    call ``started()`` once the ranks run (the run's directory exists then), ``close()`` at
    the end.

    Args:
        sup: The run.
        mode: How it runs, for ``ls``: "supervisor", "headless" or "foreground".
        exit_status: The run's exit code once finished (torchrun's convention); called by
            the status writer.
        on_failure: A shell command run once when the run fails (``--on-failure``).
        status_hook: Turns the status record into the one written (a multi-node run adds
            the other nodes' ranks and the cluster's root cause); ``refresh`` rewrites it.
    """

    def __init__(
        self,
        sup: Supervisor,
        *,
        mode: str,
        exit_status: Callable[[], int | None],
        on_failure: str | None = None,
        on_clients_changed: Callable[[int], None] | None = None,
        status_hook: Callable[[dict[str, object]], dict[str, object]] | None = None,
    ) -> None:
        self._sup = sup
        self._status_hook = status_hook
        self._mode = mode
        self._exit_status = exit_status
        self._on_failure = on_failure
        self.socket_path = registry.new_socket_path()
        self.started_at = clock.wall()
        self.pid = os.getpid()
        # With the pid, the start time names this process for good (a pid can be reused).
        self._pid_start = status.process_start_time(self.pid) or 0
        self._clients_listeners: list[Callable[[int], None]] = (
            [on_clients_changed] if on_clients_changed is not None else [])
        self.server = ControlServer(sup, self.socket_path,
                                    on_clients_changed=self._clients_changed)
        self._pending: deque[Event] = deque()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._changes = 0
        """Events (and ``refresh`` calls) so far: a status built after the same count
        differs from the last one in its times only (with the same live readings)."""
        self._template: tuple[object, status.StatusTemplate] | None = None
        """The last refresh's status with its times left open, and what it was built from."""
        self._events_file: RecordFile | None = None
        self._run_dir = ""
        self._refresh_file: SwapWriter | None = None
        """status.json as the tick rewrites it (two inodes that trade names)."""
        self._reserve: SpaceReserve | None = None
        self._full_said = False
        self._entry: object | None = None
        self._hook_done = threading.Event()
        self._hook_thread: threading.Thread | None = None
        self._writer = threading.Thread(target=self._write_loop, name="rankvisor-status",
                                        daemon=True)
        # On the run loop's beat when the run has one (a Supervisor in this process).
        self._ticker = Ticker("rankvisor-status", STATUS_TICK_S, self._refresh_tick,
                              beat=getattr(sup, "beat", None))
        self._unsubscribe = sup.subscribe(self._sink)
        before_spawn = getattr(sup, "before_spawn", None)
        if callable(before_spawn):
            before_spawn(self._prepare)
        self.server.start()

    # -- the sink (engine threads: never blocks) ---------------------------------------------

    def _sink(self, event: Event) -> None:
        if isinstance(event, (RankOutput, RankStats)):
            return
        self._pending.append(event)
        self._changes += 1
        self._dirty.set()

    # -- lifecycle --------------------------------------------------------------------------

    def _prepare(self, run_dir: str) -> None:
        """Before the first ranks start (``Supervisor.before_spawn``): the space held for
        the run's end, and a first status.json, on the file system they will write on. A
        rank that fills it at once would leave the run without either if they waited for
        ``started``."""
        if not run_dir:
            return
        # Not under our lock: the run's is held here, and our writer takes ours before the
        # run's (it does not run before ``started``, nor does the tick).
        self._run_dir = run_dir
        self._hold_space(len(self._sup.snapshot().ranks))
        try:
            # This node's run alone: another node's view is added from ``started`` on (its
            # board is not asked with the run's lock held).
            status.write_status(run_dir, self._local_status(), durable=False)
        except OSError as e:
            self._say_full(status.FILENAME, e)

    def _hold_space(self, ranks: int) -> None:
        """Held while the ranks write, released for the run's end (engine.rundir.reserve)."""
        if self._reserve is None:
            self._reserve = SpaceReserve(self._run_dir)
            self._reserve.hold(reserve_bytes(ranks))

    def started(self) -> str:
        """The ranks run: open the run's record, register it; returns the run's directory."""
        info = self._sup.snapshot()
        self._run_dir = info.log_dir
        # Viewers start from the run as its ranks started (with their files), as the record.
        self.server.rebase(info)
        if self._run_dir:
            self._refresh_file = SwapWriter(os.path.join(self._run_dir, status.FILENAME))
            self._hold_space(len(info.ranks))
            path = os.path.join(self._run_dir, EVENTS_FILE)
            self._events_file = RecordFile(os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
            ))
            # The run as its ranks started: the events queued since come after it, and a
            # replay folds them in (one already reflected here changes nothing).
            self._append(wire.encode_message({"t": "run", "run": wire.run_info_to_wire(info)}))
        self._entry = registry.register(
            run_dir=self._run_dir,
            run_id=info.run_id,
            socket=self.socket_path,
            supervisor_pid=self.pid,
            supervisor_start=self._pid_start,
            started=self.started_at,
            mode=self._mode,
        )
        # The first status now, not on the writer thread: once this returns (and `run -D`
        # says the run started) `status`, `attach` and `stop` can find the run by its dir.
        self._flush()
        self._writer.start()
        self._ticker.start()
        self._dirty.set()
        self._tell_viewers(self.server.clients)  # nobody yet, as a rule
        return self._run_dir

    def listen_clients(self, listener: Callable[[int], None]) -> None:
        """Also call ``listener`` with the number of clients when one comes or goes (on a
        server thread; it must not block)."""
        self._clients_listeners.append(listener)

    def _clients_changed(self, count: int) -> None:
        self._tell_viewers(count)
        for listener in list(self._clients_listeners):
            listener(count)

    def _tell_viewers(self, count: int) -> None:
        """Tell the run how many watch it (``Supervisor.viewers``): an app in this process
        (``--foreground``) always does, so such a run is never told."""
        viewers = getattr(self._sup, "viewers", None)
        if self._mode != "foreground" and callable(viewers):
            viewers(count)

    def refresh(self) -> None:
        """Rewrite status.json soon (something outside the run's events changed)."""
        self._changes += 1
        self._dirty.set()

    @property
    def run_dir(self) -> str:
        return self._run_dir

    @property
    def clients(self) -> int:
        return self.server.clients

    def close(self) -> None:
        """Final status, the failure hook's end, the socket gone; the registry entry stays
        (``ls`` lists finished runs until ``rankvisor rm``)."""
        self._ticker.stop()
        self._stop.set()
        self._dirty.set()
        if self._writer.is_alive():
            self._writer.join(10)
        else:
            self._flush()
        if self._hook_thread is not None:
            self._hook_thread.join()
        if self._refresh_file is not None:
            with self._lock:
                self._refresh_file.close()
        self._unsubscribe()
        self.server.close()
        self._release_reserve()
        if self._events_file is not None:
            # The run as it ended closes the record (a stale run's record has none).
            info = self._sup.snapshot()
            self._append(wire.encode_message({"t": "run", "run": wire.run_info_to_wire(info)}))
            if self._events_file.waiting:
                log.error("%s: %d line(s) of the run's record could not be written: %s",
                          EVENTS_FILE, self._events_file.waiting, self._events_file.last_error)
            self._events_file.close()
            self._events_file = None

    # -- the writer thread --------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            try:
                self._flush()
            except Exception:  # noqa: BLE001 - the status writer must outlive a bad step
                log.exception("status.json could not be written")
            if self._stop.is_set():
                self._flush()
                return

    def _refresh_tick(self) -> None:
        """The tick's refresh of the live figures (on the beat): not flushed to disk."""
        if self._sup.finished is not None or not self._lock.acquire(blocking=False):
            return  # the end is the writer's; a write in progress is newer than ours
        try:
            self._write_refresh()
        finally:
            self._lock.release()

    def _write_refresh(self) -> None:
        """The refresh's status, not flushed to disk: the last one's bytes with its times
        moved on where only the clock changed them, else built anew (caller holds _lock)."""
        if self._refresh_file is None or self._status_hook is not None:
            # Other nodes' ranks come without an event here: built anew every time.
            self._write_status(durable=False)
            return
        changes = self._changes
        progress = _progress(self._sup)
        live = getattr(self._sup, "live_suspect", None)
        key = (changes, live, tuple((rank, p.get("step"), p.get("last_output_age_s") is None)
                                    for rank, p in sorted(progress.items())))
        try:
            if self._template is None or self._template[0] != key:
                self._template = (key, status.StatusTemplate(self.current_status()))
            ages = {rank: p.get("last_output_age_s") for rank, p in progress.items()}
            body = self._template[1].fill(clock.wall(), ages)
            self._refresh_file.write(body)
        except OSError as e:  # the last status written stays whole (an atomic replace)
            self._say_full(status.FILENAME, e)

    def _flush(self) -> None:
        """The events queued, then the status, flushed to disk (the run's start, an event,
        its end: each a change of the run's state)."""
        with self._lock:
            if self._sup.finished is not None:
                # Every rank has ended: nothing of the run competes for the space any more.
                self._release_reserve()
            finished: RunFinished | None = None
            while self._pending:
                event = self._pending.popleft()
                self._append(wire.encode_event(event))
                if isinstance(event, RunFinished):
                    finished = event
            self._write_status()
            if finished is not None:
                self._after_finish(finished)

    def _append(self, data: bytes) -> None:
        if self._events_file is None:
            return
        # A full disk: the line waits in memory (never a cut line on disk) for the space the
        # run's end releases.
        if not self._events_file.append(data):
            self._say_full(EVENTS_FILE, self._events_file.last_error)

    def current_status(self) -> dict[str, object]:
        """The status.json record as it would be written now."""
        record = self._local_status()
        if self._status_hook is None:
            return record
        try:
            return self._status_hook(record)
        except Exception:  # noqa: BLE001 - the node's own status must still be written
            log.exception("the cluster view could not be added to status.json")
            return record

    def _local_status(self) -> dict[str, object]:
        """This process's run alone (no other node's view added)."""
        info = self._sup.snapshot()
        record = status.build_status(
            info,
            self._sup.finished,
            socket=self.socket_path,
            supervisor_pid=self.pid,
            supervisor_start=self._pid_start,
            exitcode=self._exit_status() if self._sup.finished is not None else None,
            started=self.started_at,
        )
        config = getattr(self._sup, "config", None)
        typed = tuple(getattr(config, "invocation", ()) or ())
        record["command"] = list(typed or info.command)
        record["cwd"] = getattr(config, "cwd", None) or os.getcwd()
        return add_live(record, self._sup)

    def _write_status(self, durable: bool = True) -> None:
        if not self._run_dir:
            return
        try:
            status.write_status(self._run_dir, self.current_status(), durable=durable)
        except OSError as e:  # the last status written stays whole (an atomic replace)
            self._say_full(status.FILENAME, e)

    def _release_reserve(self) -> None:
        if self._reserve is not None and self._reserve.release() and self._full_said:
            log.info("the run's end is written in the space held for it")

    def _say_full(self, what: str, error: OSError | None) -> None:
        """Say once, as a notice (viewers; headless prints it on stderr, the supervisor
        process in its supervisor.log), that the record cannot be written and what is kept."""
        if getattr(error, "errno", None) not in (errno.ENOSPC, errno.EDQUOT):
            log.warning("could not write %s: %s", what, error)
            return
        if self._full_said:
            return
        self._full_said = True
        why = getattr(error, "strerror", None) or str(error)
        message = (
            f"cannot write {what} in {self._run_dir} ({why}): the run goes on; status.json "
            "keeps its last state and the record waits in memory until space held for the "
            "run's end is released (free space on that file system to see it sooner)"
        )
        notice = getattr(self._sup, "notice", None)
        if notice is not None:
            notice(message, "error")

    def _after_finish(self, finished: RunFinished) -> None:
        failed = bool(finished.result.failures)
        if not failed or not self._on_failure or self._hook_thread is not None:
            return
        command, run_dir, record = self._on_failure, self._run_dir, self.current_status()

        def run_hook() -> None:
            from .hooks import run_on_failure

            try:
                code = run_on_failure(command, run_dir, record)
                log.info("--on-failure command exited with %s", code)
            except Exception:  # noqa: BLE001 - a hook must never take the supervisor down
                log.exception("--on-failure command could not run")

        self._hook_thread = threading.Thread(target=run_hook, name="rankvisor-on-failure")
        self._hook_thread.start()


def _progress(sup: object) -> dict[int, dict[str, object]]:
    """``Supervisor.progress_now`` (each rank's step and output age), {} without one."""
    progress = getattr(sup, "progress_now", None)
    if not callable(progress):
        return {}
    try:
        return progress()
    except Exception:  # noqa: BLE001 - the status is written whatever happens
        return {}
