"""Wake-ups for the output pump: inotify, watchfiles, or a slow poll, behind one small API.

A waker answers one question for the pump thread: "when should I look at the files again,
and which ones?". ``wait(timeout)`` blocks until a watched file changes, ``poke()`` is called
(from any thread), or ``timeout`` passes, and returns a ``Wake`` naming the directories in
which something changed (or ``dirs=None``: look at every file).

- ``InotifyWaker`` (Linux, the default): blocks in ``poll()`` on an inotify descriptor and a
  self-pipe, so an idle pump costs nothing and a change wakes it at once (plus ``debounce``
  to batch a burst of writes).
- ``WatchfilesWaker`` (watchfiles' public ``watch()``; used where ctypes inotify is
  unavailable): watchfiles' own loop steps every ``step_ms``, which costs some idle CPU.
- ``PollWaker``: wakes every ``interval`` and asks to look at everything. The fallback for
  filesystems where change notifications do not arrive (NFS written by other hosts).

Files that do not exist yet: the waker watches the nearest existing ancestor directory and
moves the watch down as directories appear, so a file is picked up as soon as it is created.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from ..process.wakeup import Wakeup
from . import inotify

__all__ = ["InotifyWaker", "PollWaker", "Wake", "WatchfilesWaker", "Waker", "make_waker"]

logger = logging.getLogger(__name__)


class Wake(NamedTuple):
    """Why ``wait`` returned."""

    dirs: frozenset[str] | None
    """Directories in which files changed; None means look at every file (poll tick, poke,
    lost events)."""
    created: bool = False
    """Something was created, moved in or removed: retry files not opened yet and check
    whether an open file was replaced."""


class Waker:
    """The poll waker, and the base of the notifying ones: a self-pipe to wake ``wait``."""

    mode = "poll"

    def __init__(self, interval: float = 0.25) -> None:
        self._interval = interval
        self._wakeup = Wakeup()
        self._poller = select.poll()
        self._poller.register(self._wakeup.fd, select.POLLIN)

    def watch(self, file_path: str) -> None:
        """Make sure changes to ``file_path`` (existing or not) will wake ``wait``."""

    def unwatch(self, file_path: str) -> None:
        """Forget ``file_path`` (its directory may stay watched)."""

    def poke(self) -> None:
        """Wake ``wait`` now (thread-safe; used by add/remove/stop)."""
        self._wakeup.wake()

    def _drain_pipe(self) -> None:
        try:
            self._wakeup.drain()
        except OSError:
            pass  # closed: ``close`` raced a last wait

    def wait(self, timeout: float, busy: bool = False, debounce: float | None = None) -> Wake:
        """Block until the next look at the files is due (``timeout`` is ignored here:
        polling looks every ``interval``). ``busy``: the last look found a lot to read;
        notifying wakers then skip their debounce. ``debounce``: this wait's, instead of the
        waker's own (the inotify waker; the others keep theirs)."""
        if self._poller.poll(self._interval * 1000):
            self._drain_pipe()
        return Wake(None)

    def close(self) -> None:
        """Release descriptors (idempotent)."""
        self._wakeup.close()


PollWaker = Waker


WATCHED_SWEEP_S = 5.0
"""The pump's safety sweep while every file it follows is watched (``InotifyWaker``); a file
with no watch (out of watches, a directory not made yet) keeps the pump's own, quicker one."""

_RESOLVE_TRIES = 8
"""Tries to watch a file's nearest directory while directories on its path are removed."""


def _nearest_existing_dir(path: str) -> str:
    d = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(d):
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return d


class InotifyWaker(Waker):
    """Wake on inotify events for the directories of the watched files."""

    mode = "inotify"

    def __init__(self, debounce: float = 0.002) -> None:
        super().__init__()
        self._dirs = inotify.DirWatcher()
        self._poller.register(self._dirs.fileno(), select.POLLIN)
        self._debounce = debounce
        self._lock = threading.Lock()
        self._files: set[str] = set()
        self._unresolved: set[str] = set()
        """Files whose own directory is not watched yet (it does not exist)."""
        self._arrived: set[str] = set()
        """Directories watched since the last ``wait``: a file written in one before its
        watch began sends no event, so the next wake-up names them as changed."""

    def watch(self, file_path: str) -> None:
        with self._lock:
            self._files.add(file_path)
            self._unresolved.add(file_path)
        self._resolve()

    def unwatch(self, file_path: str) -> None:
        with self._lock:
            self._files.discard(file_path)
            self._unresolved.discard(file_path)

    def _resolve(self) -> None:
        with self._lock:
            pending = list(self._unresolved)
        for path in pending:
            own = os.path.dirname(os.path.abspath(path))
            for _ in range(_RESOLVE_TRIES):
                target = _nearest_existing_dir(path)
                try:
                    self._dirs.watch_dir(target)
                except FileNotFoundError:
                    continue  # removed as we looked: its parent, or it made again
                except OSError as e:
                    # Out of watches (ENOSPC): the pump's periodic sweep still reads the
                    # file, only later.
                    logger.warning("cannot watch %s for %s: %s", target, path, e)
                    break
                # A directory made below an ancestor after its watch is in place wakes us;
                # one made between the look and the watch does not: look again, go down.
                if target == own or _nearest_existing_dir(path) == target:
                    break
            else:
                logger.warning("cannot watch a directory for %s: its path keeps changing", path)
                continue
            if not self._dirs.watching(target):
                continue
            if target == own:
                with self._lock:
                    self._unresolved.discard(path)
                    self._arrived.add(own)

    def wait(self, timeout: float, busy: bool = False, debounce: float | None = None) -> Wake:
        if timeout is not None and not self._unresolved:
            # Every file's directory is watched: the sweep is a net for a lost event only
            # (an overflow says so itself), not the way lines arrive.
            timeout = max(timeout, WATCHED_SWEEP_S)
        ready = self._poller.poll(None if timeout is None else timeout * 1000)
        if not ready:
            return Wake(None)  # a safety sweep: nothing is lost if an event was
        poked = any(fd == self._wakeup.fd for fd, _ in ready)
        if poked:
            self._drain_pipe()
        pause = self._debounce if debounce is None else debounce
        if pause and not busy:
            # Let a burst of writes land: one read for all of it. Not when busy: the files
            # have filled up while we read them, and a pump that sleeps while 32 busy ranks
            # keep the cores loses its turn for a whole scheduler period.
            time.sleep(pause)
        events = self._dirs.read()
        if events is None:  # the kernel queue overflowed: events were lost
            self._mark_all_unresolved()
            self._resolve()
            return Wake(None, True)
        created = False
        fired: set[str] = set()
        gone = False
        for directory, _, mask in events:
            if mask & inotify.IN_IGNORED:
                continue  # bookkeeping of a fired one-shot watch (or of a removal)
            fired.add(directory)
            if mask & ~(inotify.IN_MODIFY | inotify.IN_CLOSE_WRITE):
                created = True
                gone = gone or bool(mask & (inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF))
        # Re-arm before the pump reads: a write after this point wakes us again, a write
        # before it is read now.
        for directory in fired:
            try:
                # Another directory under the same name (made again while its spent watch
                # could not tell): its files are looked at as created ones.
                created |= self._dirs.watch_dir(directory, rearm=True)
            except OSError:
                gone = True  # removed meanwhile: watch an ancestor until it comes back
        if gone:
            self._mark_all_unresolved()
        if created or gone:
            self._resolve()
        with self._lock:
            arrived, self._arrived = self._arrived, set()
        if poked:
            return Wake(None, True)
        if arrived:
            # A directory made again (a new attempt) may hold files written before we could
            # watch it: look at them as at created ones.
            fired |= arrived
            created = True
        return Wake(frozenset(fired), created)

    def _mark_all_unresolved(self) -> None:
        # A watched directory went away (or events were lost): files in it must be watched
        # again through an ancestor until it comes back.
        with self._lock:
            self._unresolved.update(self._files)

    def close(self) -> None:
        super().close()
        self._dirs.close()


class WatchfilesWaker(Waker):
    """Wake through watchfiles' ``watch()`` (its public API), where the kernel's inotify
    cannot be had through ctypes: it steps every ``step_ms`` while waiting, which costs some
    idle CPU. One ``watch()`` generator serves while the directories and the timeout stay
    the same; a poke ends it (its stop event) and the next wait makes a new one."""

    mode = "watchfiles"

    def __init__(self, step_ms: int = 5, debounce_ms: int = 10) -> None:
        super().__init__()
        self._step_ms = step_ms
        self._debounce_ms = debounce_ms
        self._files: set[str] = set()
        self._key: tuple[tuple[str, ...], int] | None = None
        self._changes: Iterator[set[tuple[Any, str]]] | None = None
        self._poked = threading.Event()

    def watch(self, file_path: str) -> None:
        self._files.add(file_path)

    def unwatch(self, file_path: str) -> None:
        self._files.discard(file_path)

    def poke(self) -> None:
        self._poked.set()

    def is_set(self) -> bool:
        """The stop event ``watch()`` checks every step: true when poked."""
        return self._poked.is_set()

    def wait(self, timeout: float, busy: bool = False, debounce: float | None = None) -> Wake:
        import watchfiles

        dirs = tuple(sorted({_nearest_existing_dir(f) for f in list(self._files)}))
        key = (dirs, max(1, int(timeout * 1000)))
        if key != self._key or self._changes is None:
            self._end()
            self._key = key
            if dirs:
                self._changes = watchfiles.watch(
                    *dirs, watch_filter=None, debounce=self._debounce_ms, step=self._step_ms,
                    stop_event=self, rust_timeout=key[1], yield_on_timeout=True,
                    raise_interrupt=False, recursive=False, ignore_permission_denied=True,
                )
        if self._changes is None:
            self._poked.wait(timeout)
            self._poked.clear()
            return Wake(None, True)
        changes = next(self._changes, None)
        if changes is None:
            self._changes = None  # it ended: poked
        if self._poked.is_set() or changes is None:
            self._poked.clear()
            return Wake(None, True)
        if not changes:  # its timeout: a sweep
            return Wake(None)
        changed = frozenset(os.path.dirname(path) for _, path in changes)
        created = any(change != watchfiles.Change.modified for change, _ in changes)
        return Wake(changed, created)

    def _end(self) -> None:
        changes, self._changes = self._changes, None
        if changes is not None:
            changes.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        super().close()
        self._end()


def make_waker(mode: str, *, poll_interval: float, debounce: float) -> Waker:
    """Build the waker for ``mode`` ("inotify", "watchfiles" or "poll"), falling back to the
    next one that works ("inotify" -> "watchfiles" -> "poll")."""
    if mode == "inotify":
        if inotify.available():
            try:
                return InotifyWaker(debounce=debounce)
            except OSError as e:
                logger.warning("inotify unavailable (%s); polling every %ss", e, poll_interval)
                return PollWaker(poll_interval)
        mode = "watchfiles"
    if mode == "watchfiles":
        try:
            import watchfiles  # noqa: F401
        except ImportError:
            return PollWaker(poll_interval)
        return WatchfilesWaker(debounce_ms=max(1, int(debounce * 1000)))
    return PollWaker(poll_interval)
