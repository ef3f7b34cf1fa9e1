"""One daemon thread that notices rank exits as they happen, by waiting on pidfds.

A pidfd becomes readable when its process exits, so one ``epoll_wait`` over all live ranks
sleeps until something happens and wakes within microseconds of an exit. The thread then
reaps the rank (through its ``Popen``, under the rank's lock, so a signal is never sent to a
reaped, possibly recycled pid), stamps the real exit time, and notifies everyone blocked in
``wait_any`` through one Condition.

Ranks without a pidfd (kernels before 5.3) are polled with ``waitpid(WNOHANG)`` every 10 ms.
Reaping happens here, so nothing else in the process should ``waitpid`` these children.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Iterable, Optional, Protocol

from .. import clock
from .wakeup import Wakeup

__all__ = ["Watched", "watcher"]

_NO_PIDFD_PERIOD_MS = 10
"""How often ranks without a pidfd are polled: bounds how late their exit is seen."""
_BUSY_RETRY_MS = 1
"""Retry delay when an exited rank could not be reaped yet (another thread held its lock)."""


class Watched(Protocol):
    """What the watcher needs of a process."""

    @property
    def pidfd(self) -> Optional[int]: ...

    def _observe_exit(self, now_ns: int) -> bool:
        """Reap if exited (stamping ``now_ns``); True once the exit code is known."""


class ExitWatcher:
    """Watches processes and wakes waiters when any of them exits.

    pidfds live in one epoll set: registering from another thread needs no wake-up (epoll
    sees new members at once), so spawning a batch of ranks costs the watcher nothing.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        """Notified (``notify_all``) after every batch of exits; waiters re-check their procs."""
        self._lock = threading.Lock()
        self._by_fd: dict[int, Watched] = {}
        self._no_fd: list[Watched] = []
        self._epoll = select.epoll()
        self._wakeup = Wakeup()
        self._epoll.register(self._wakeup.fd, select.EPOLLIN)
        self._thread: Optional[threading.Thread] = None

    def add_many(self, procs: Iterable[Watched]) -> None:
        """Start watching ``procs`` (right after they were spawned; idempotent)."""
        procs = list(procs)
        if not procs:
            return
        wake = False
        with self._lock:
            for proc in procs:
                fd = proc.pidfd
                if fd is None:
                    if proc not in self._no_fd:  # adding twice is harmless
                        self._no_fd.append(proc)
                        wake = True  # the loop must switch to its polling period
                elif self._by_fd.get(fd) is not proc:
                    if fd in self._by_fd:  # a closed rank's number, reused: replace it
                        _unregister(self._epoll, fd)
                    self._by_fd[fd] = proc
                    self._epoll.register(fd, select.EPOLLIN)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="rankvisor-exit-watcher", daemon=True
                )
                self._thread.start()
        if wake:
            self._wakeup.wake()

    def remove(self, proc: Watched) -> None:
        """Stop watching ``proc`` (before its pidfd is closed, so the number can be reused)."""
        self.remove_many((proc,))

    def remove_many(self, procs: Iterable[Watched]) -> None:
        """``remove`` for several processes, under one acquisition of the lock."""
        with self._lock:
            for proc in procs:
                fd = proc.pidfd
                if fd is not None and self._by_fd.get(fd) is proc:
                    del self._by_fd[fd]
                    _unregister(self._epoll, fd)
                elif proc in self._no_fd:
                    self._no_fd.remove(proc)

    def notify(self) -> None:
        """Wake waiters after an exit observed outside this thread (``RankProcess.poll``)."""
        with self.cond:
            self.cond.notify_all()

    def _run(self) -> None:
        retry = False
        while True:
            with self._lock:
                polling = bool(self._no_fd)
            if retry:
                timeout = _BUSY_RETRY_MS / 1000
            elif polling:
                timeout = _NO_PIDFD_PERIOD_MS / 1000
            else:
                timeout = -1  # sleep until an exit (or a rank without pidfd arrives)
            events = self._epoll.poll(timeout)
            now = clock.wall_ns()
            retry = False
            exited: list[Watched] = []
            with self._lock:
                ready = [self._by_fd.get(fd) for fd, _ in events if fd != self._wakeup.fd]
                no_fd = list(self._no_fd)
            if any(fd == self._wakeup.fd for fd, _ in events):
                self._wakeup.drain()
            for proc in ready:
                if proc is None:
                    continue
                if proc._observe_exit(now):
                    exited.append(proc)
                else:
                    retry = True  # readable but another thread holds its Popen: retry soon
            for proc in no_fd:
                if proc._observe_exit(now):
                    exited.append(proc)
            if exited:
                self.remove_many(exited)
                self.notify()


def _unregister(epoll: select.epoll, fd: int) -> None:
    try:
        epoll.unregister(fd)
    except OSError:
        pass  # closed already: the kernel dropped it from the set itself


_watcher: Optional[ExitWatcher] = None
_watcher_lock = threading.Lock()


def watcher() -> ExitWatcher:
    """The process-wide watcher (created on first use)."""
    global _watcher
    if _watcher is None:
        with _watcher_lock:
            if _watcher is None:
                _watcher = ExitWatcher()
    return _watcher


def _reset_after_fork() -> None:
    # A forked child has no watcher thread and none of these children: start afresh.
    global _watcher, _watcher_lock
    _watcher = None
    _watcher_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)
