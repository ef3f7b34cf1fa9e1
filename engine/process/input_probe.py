"""Is a rank blocked reading its stdin pipe? Read from /proc, without touching the rank.

A thread blocked in ``read(fd, ...)`` shows it in ``/proc/PID/task/TID/syscall``: the system
call's number (``read`` is 0 on x86_64, 63 on aarch64; ``readv`` too) and its first argument,
the fd. The fd need not be 0: torch's distributed pdb opens ``/dev/stdin`` again, so the fd
is resolved (``/proc/PID/fd/N`` -> ``pipe:[INODE]``) and compared with the pipe's inode.
Where the syscall files cannot be read (a stricter ptrace policy), the thread's ``wchan``
(``pipe_read``) and an fd of the process on the pipe say the same, less exactly.

Cost is what matters (it runs for every rank several times a second): the main thread's
syscall file stays open and is re-read with one ``pread`` (about 2 us); every thread and the
rank's direct children are looked at only on ``deep`` passes, which the caller spaces out.
"""

from __future__ import annotations

import os
import platform

__all__ = ["READ_SYSCALLS", "StdinProbe"]

READ_SYSCALLS: dict[str, frozenset[int]] = {
    "x86_64": frozenset({0, 19}),  # read, readv
    "aarch64": frozenset({63, 65}),
    "arm64": frozenset({63, 65}),
    "riscv64": frozenset({63, 65}),
    "ppc64le": frozenset({3, 145}),
    "s390x": frozenset({3, 145}),
}
"""The numbers of ``read`` and ``readv`` on each architecture."""

_READS = READ_SYSCALLS.get(platform.machine(), frozenset({0, 19}))
_READ_PREFIXES = tuple(f"{n} ".encode() for n in sorted(_READS))
"""How a syscall line of a read starts: most lines are rejected on this alone."""
_PIPE_WCHANS = ("pipe_read", "pipe_wait")


class StdinProbe:
    """Answers "is ``pid`` (or one of its threads or children) reading pipe ``inode``?".

    Not thread-safe: one caller (the supervisor's input watch thread).
    """

    def __init__(self) -> None:
        self._main: dict[int, int] = {}
        """pid -> an open fd on /proc/PID/syscall (its main thread)."""
        self._no_syscall = False
        """The syscall files could not be read here: wchan is used instead."""

    def waiting(self, pid: int, inode: int, *, deep: bool = False) -> bool:
        """Whether ``pid``'s main thread (with ``deep``: any thread, or a direct child's
        main thread) is blocked reading the pipe ``inode``."""
        if self._main_reads(pid, inode):
            return True
        if not deep:
            return False
        for tid in _listdir(f"/proc/{pid}/task"):
            if tid != str(pid) and self._reads(f"/proc/{pid}/task/{tid}", pid, inode):
                return True
        for child in _children(pid):
            if self._reads(f"/proc/{child}", child, inode):
                return True
        return False

    def pids(self) -> set[int]:
        """The processes whose file is held open."""
        return set(self._main)

    def forget(self, pid: int) -> None:
        """The process ended (or is no longer watched): let go of its file."""
        fd = self._main.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for pid in list(self._main):
            self.forget(pid)

    def _main_reads(self, pid: int, inode: int) -> bool:
        if self._no_syscall:
            return self._reads(f"/proc/{pid}", pid, inode)
        fd = self._main.get(pid)
        try:
            if fd is None:
                fd = self._main[pid] = os.open(f"/proc/{pid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
            line = os.pread(fd, 128, 0)
        except PermissionError:
            self.forget(pid)
            self._no_syscall = True
            return self._reads(f"/proc/{pid}", pid, inode)
        except OSError:
            self.forget(pid)
            return False
        return _reads_pipe(line, pid, inode)

    def _reads(self, task_dir: str, pid: int, inode: int) -> bool:
        """One thread (``task_dir``: /proc/PID or /proc/PID/task/TID), opened for this look."""
        if not self._no_syscall:
            try:
                with open(f"{task_dir}/syscall", "rb") as f:
                    return _reads_pipe(f.read(128), pid, inode)
            except PermissionError:
                self._no_syscall = True
            except OSError:
                return False
        try:
            with open(f"{task_dir}/wchan", "rb") as f:
                wchan = f.read(64).decode("ascii", "replace")
        except OSError:
            return False
        return any(w in wchan for w in _PIPE_WCHANS) and _holds_pipe(pid, inode)


def _reads_pipe(line: bytes, pid: int, inode: int) -> bool:
    if not line.startswith(_READ_PREFIXES):
        return False
    parts = line.split(None, 2)
    try:
        fd = int(parts[1], 16)
        return os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{inode}]"
    except (OSError, ValueError):
        return False


def _holds_pipe(pid: int, inode: int) -> bool:
    target = f"pipe:[{inode}]"
    for fd in _listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return f.read().decode().split()
    except OSError:
        return []


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
