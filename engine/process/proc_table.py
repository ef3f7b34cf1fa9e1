"""Process identities and trees read straight from /proc (Linux), for signalling safely.

A pid alone can name a different process tomorrow; ``(pid, starttime)`` names one process
for ever (starttime: clock ticks since boot, /proc/<pid>/stat field 22).

Descendants are found by walking ``/proc/<pid>/task/<tid>/children`` down from the rank
(``find_descendants``): it reads only the rank's own tree, two small reads per process (for
32 childless ranks, about a third of the cost of a scan of a 150-process machine, and it does
not grow with what else runs). That file needs CONFIG_PROC_CHILDREN; where the kernel lacks
it, one pass over /proc/*/stat is used instead (``scan``, about 1.5 ms for 70 processes), and
callers that signal many ranks take one table and share it (``needs_scan``).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Iterable, NamedTuple, Optional

from .. import clock

__all__ = [
    "ProcEntry",
    "ProcTable",
    "descendants",
    "find_descendants",
    "is_stopped",
    "needs_scan",
    "read_entry",
    "read_environ",
    "scan",
    "signal_checked",
    "started_wall",
    "stat_fields",
    "stat_fields_at",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK")


class ProcEntry(NamedTuple):
    """One line of the process table."""

    pid: int
    ppid: int
    pgid: int
    starttime: int
    threads: int = 0
    """How many threads it had when read (0: not known)."""


def stat_fields(pid: int) -> Optional[list[bytes]]:
    """The fields of /proc/<pid>/stat from field 3 (state) on, or None if there is no such
    process (or it is unreadable).

    ``fields[0]`` is field 3 (state), so field ``n`` of proc(5) is ``fields[n - 3]``.
    """
    # os.open/os.read rather than open(): half the cost, and a scan reads every process.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return stat_fields_at(fd)
    finally:
        os.close(fd)


def stat_fields_at(fd: int) -> Optional[list[bytes]]:
    """``stat_fields`` from an open /proc/<pid>/stat (read afresh from its start: a reader
    that samples a process often keeps it open); None once the process is gone (reaped)."""
    try:
        data = os.pread(fd, 2048, 0)  # one line, a few hundred bytes
    except OSError:
        return None
    # Field 2 (comm) may hold spaces and ')': the other fields follow the last ')'.
    try:
        return data[data.rindex(b")") + 2 :].split()
    except ValueError:
        return None


def is_stopped(pid: int) -> bool:
    """True if ``pid`` is stopped by a signal (SIGSTOP, SIGTSTP) or a tracer: state T or t."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] in (b"T", b"t")


def started_wall(starttime: int) -> float:
    """When a process started (``clock.wall()``), from its /proc start time in clock ticks
    since boot: read against the boot clock now, not the kernel's whole-second boot time,
    so that two readings of one process agree to a tick."""
    return clock.wall() - (clock.since_boot() - starttime / _CLK_TCK)


def read_entry(pid: int) -> Optional[ProcEntry]:
    """The /proc entry of ``pid``, or None if there is no such process (or it is unreadable)."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    try:
        # ppid is field 4, pgrp 5, num_threads 20, starttime 22.
        return ProcEntry(pid, int(fields[1]), int(fields[2]), int(fields[19]), int(fields[17]))
    except (ValueError, IndexError):
        return None


class ProcTable(dict[int, ProcEntry]):
    """A snapshot of the process table, by pid, with a children index built once."""

    _children: Optional[dict[int, list[ProcEntry]]] = None

    def children(self) -> dict[int, list[ProcEntry]]:
        if self._children is None:
            index: dict[int, list[ProcEntry]] = {}
            for entry in self.values():
                index.setdefault(entry.ppid, []).append(entry)
            self._children = index
        return self._children


def scan() -> ProcTable:
    """Every process visible in /proc, by pid."""
    table = ProcTable()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        entry = read_entry(int(name))
        if entry is not None:
            table[entry.pid] = entry
    return table


def descendants(root: int, table: ProcTable) -> list[ProcEntry]:
    """All descendants of ``root`` in ``table`` (children first, then theirs), root excluded."""
    children = table.children()
    found: list[ProcEntry] = []
    frontier = [root]
    seen = {root}
    while frontier:
        nxt: list[int] = []
        for pid in frontier:
            for child in children.get(pid, ()):
                if child.pid not in seen:
                    seen.add(child.pid)
                    found.append(child)
                    nxt.append(child.pid)
        frontier = nxt
    return found


_children_files: Optional[bool] = None


def needs_scan() -> bool:
    """True where /proc/<pid>/task/<tid>/children is missing (CONFIG_PROC_CHILDREN off), so
    descendants can only be found from a full ``scan()`` (probed once)."""
    global _children_files
    if _children_files is None:
        tid = threading.get_native_id()
        _children_files = os.path.exists(f"/proc/{os.getpid()}/task/{tid}/children")
    return not _children_files


def _read_all(path: str) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # the thread or the process is gone
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _children_pids(pid: int, threads: int) -> list[int]:
    # Every thread's list: a child belongs to the thread that forked it (children of a thread
    # that ended move to another thread of the same process). A process that had one thread
    # when its stat was read needs no listing of its tasks (half the cost): a thread started
    # since could only have forked since, which any walk can miss.
    if threads == 1:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []  # gone: nothing below it any more
    kids: list[int] = []
    for tid in tids:
        data = _read_all(f"/proc/{pid}/task/{tid}/children")
        if data:
            kids.extend(int(x) for x in data.split())
    return kids


def find_descendants(root: int, top: Optional[ProcEntry] = None) -> list[ProcEntry]:
    """All live descendants of ``root`` (children first), root excluded, read right now.

    Walks the children files of ``root``'s tree only; falls back to a full ``scan()`` where
    the kernel has no such files. Each entry is read after its parent listed it and kept only
    if its ppid still names that parent, so a pid recycled meanwhile is never taken for a
    descendant. ``top``: ``root``'s own entry when the caller has just read it.
    """
    if needs_scan():
        return descendants(root, scan())
    if top is None:
        top = read_entry(root)
    if top is None:
        return []
    found: list[ProcEntry] = []
    frontier = [top]
    seen = {root}
    while frontier:
        nxt: list[ProcEntry] = []
        for parent in frontier:
            for pid in _children_pids(parent.pid, parent.threads):
                if pid in seen:
                    continue
                entry = read_entry(pid)
                if entry is None or entry.ppid != parent.pid:
                    continue  # exited (or re-parented) since its parent listed it
                seen.add(pid)
                found.append(entry)
                nxt.append(entry)
        frontier = nxt
    return found


def signal_checked(entries: Iterable[ProcEntry], sig: int) -> int:
    """Send ``sig`` to each process that is still the one named by ``(pid, starttime)``.

    With pidfds the check cannot race: the pidfd is opened first, then the starttime is
    compared, so the signal goes to exactly the process that was checked. Without pidfds
    a tiny window remains between the check and ``os.kill``.

    Returns:
        How many processes were signalled.
    """
    sent = 0
    for entry in entries:
        try:
            fd = os.pidfd_open(entry.pid)
        except ProcessLookupError:
            continue  # gone already
        except (AttributeError, OSError):
            fd = -1  # no pidfd support: fall back to the create-time check below
        try:
            now = read_entry(entry.pid)
            if now is None or now.starttime != entry.starttime:
                continue  # exited, or the pid now belongs to someone else
            if fd >= 0:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(entry.pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
        finally:
            if fd >= 0:
                os.close(fd)
    return sent


def read_environ(pid: int) -> dict[str, str] | None:
    """``pid``'s environment as it was when it started (``/proc/<pid>/environ``); None when
    the process is gone or not ours to read. Names and values are decoded leniently: an
    environment may hold any bytes."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env
