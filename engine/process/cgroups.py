"""A cgroup per rank, where cgroups are writable: nothing a rank forks can escape its end.

Why: a process group and a walk of ``/proc`` miss a process that double-forks with
``setsid`` (its parent is gone, so no walk finds it) and drops the guard's token from its
environment; and a rank's children outlive a rank that exits 0. A cgroup keeps every
descendant, however it detaches, and the kernel can kill all of it at once.

Layout, made under the cgroup rankvisor itself is in (so the limits set above it still hold):

* ``rankvisor-<run id>-<pid>/`` for the run, and ``rank<r>-<n>/`` inside it for each spawn of
  a rank (``n`` counts spawns in the run, so a restarted rank never reuses a directory that
  its previous incarnation's dying processes still hold);
* killing: cgroup v2 where ``cgroup.kill`` exists (Linux >= 5.14; the kernel kills every
  member, new forks included); else the v1 freezer: freeze, SIGKILL every pid in
  ``cgroup.procs``, thaw (a frozen process cannot fork, so the list is complete);
* memory readings: v2's ``memory`` controller when it is delegated to the run's cgroup,
  else the v1 ``memory`` hierarchy when one is mounted (a hybrid machine kills through v2
  and reads memory from v1), else none. A rank's memory files stay open while it lives and
  are read again with ``pread`` (the stats sample reads them every few seconds).

A rank joins its cgroups before it execs its program: the spawner's child writes ``0`` to
each ``cgroup.procs`` between fork and exec (see ``engine.process.spawner.preexec_join``).
Joining after the spawn returns would race with the program's first fork. Python has no
``clone3(CLONE_INTO_CGROUP)``, and a shell trampoline changes the environment (dash drops
variables whose names are not identifiers and resets ``IFS``, ``PPID``, ``OPTIND``,
``PWD``), so the price is a full fork instead of a vfork (measured in engine/README.md).

``RANKVISOR_CGROUPS`` chooses: ``auto`` (default: v2, else v1), ``v2``, ``v1``, or ``0``
(off: the process-tree tracking of process groups, ``/proc`` walks and the guard's token).
Where no cgroup can be made (not root, no delegation, a read-only cgroupfs) the run falls
back to that tracking and says why (``RunCgroups`` is None, ``open_run``'s second value).

A run whose owner died before it could clean up (rankvisor and its guard killed at the
same moment) leaves its directories; the next run started under the same cgroup kills what
is left in them and removes them (``sweep_stale``).

This module imports only the standard library: the guard process loads it by path.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import threading
import time
from typing import NamedTuple, Optional

__all__ = [
    "CGROUPS_ENV",
    "TRACKING_CGROUP",
    "TRACKING_TREE",
    "MemoryReading",
    "RankCgroup",
    "RunCgroups",
    "cgroup_dirs_of",
    "kill_tree",
    "open_run",
    "remove_tree",
    "sweep_stale",
]

CGROUPS_ENV = "RANKVISOR_CGROUPS"
TRACKING_CGROUP = "cgroup"
TRACKING_TREE = "process-tree"

_PREFIX = "rankvisor-"
_STALE = re.compile(r"^rankvisor-.*-(\d+)(?:\.\d+)?$")
_OFF = ("0", "off", "no", "false", "none")


class MemoryReading(NamedTuple):
    """A rank's memory as its cgroup counts it: the whole tree, page cache included."""

    current_bytes: int
    oom_kills: int
    """Processes of the cgroup the OOM killer killed (v2 ``memory.events`` oom_kill, v1
    ``memory.oom_control`` oom_kill)."""


# -- small file helpers -------------------------------------------------------------------


def _read(path: str) -> Optional[str]:
    # os.open/os.read, not open(): a text file object costs more than the read, and the
    # stats pass reads a few files of every rank's cgroup each second.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        parts = []
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            parts.append(data)
        return b"".join(parts).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _pids(cgdir: str) -> list[int]:
    text = _read(os.path.join(cgdir, "cgroup.procs"))
    return [int(x) for x in text.split()] if text else []


def _subdirs(cgdir: str) -> list[str]:
    """Every cgroup under ``cgdir``, deepest first, ``cgdir`` itself last."""
    out: list[str] = []
    for root, dirs, _files in os.walk(cgdir, topdown=False):
        out.extend(os.path.join(root, d) for d in dirs)
    out.append(cgdir)
    return out


def _pgid(pid: int) -> Optional[int]:
    text = _read(f"/proc/{pid}/stat")
    try:
        return int(text.rsplit(")", 1)[1].split()[2]) if text else None
    except (IndexError, ValueError):
        return None


def _signal_listed(dirs: list[str], sig: int, skip_pgid: Optional[int] = None) -> int:
    """Send ``sig`` to every process listed in the ``cgroup.procs`` of ``dirs``.

    Each pid is pinned with a pidfd first and signalled only if it is still listed after
    that: a pid that exited and was recycled by a process outside the cgroup is skipped.
    """
    pinned: dict[int, int] = {}
    try:
        for d in dirs:
            for pid in _pids(d):
                if pid in pinned:
                    continue
                try:
                    pinned[pid] = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue
                except OSError:
                    pinned[pid] = -1  # no pidfds (old kernel): the re-read below must do
        still = {pid for d in dirs for pid in _pids(d)}
        sent = 0
        for pid, fd in pinned.items():
            if pid not in still:
                continue
            if skip_pgid is not None and _pgid(pid) == skip_pgid:
                continue
            try:
                if fd >= 0:
                    signal.pidfd_send_signal(fd, sig)
                else:
                    os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
        return sent
    finally:
        for fd in pinned.values():
            if fd >= 0:
                os.close(fd)


# -- killing and removing (also used by the guard process) --------------------------------


def kill_tree(kind: str, cgdir: str, freeze_wait_s: float = 1.0) -> None:
    """SIGKILL every process in ``cgdir`` and the cgroups below it.

    Args:
        kind: "v2" (write ``cgroup.kill``), "v1" (a freezer cgroup: freeze, kill, thaw) or
            "memory" (a v1 memory cgroup: nothing to do, the kill hierarchy kills).
        cgdir: the cgroup directory.
        freeze_wait_s: v1: how long to wait for the freeze to complete (a task in
            uninterruptible sleep delays it); the listed tasks are killed either way.
    """
    if kind == "v2":
        try:
            _write(os.path.join(cgdir, "cgroup.kill"), "1")
        except FileNotFoundError:
            pass  # removed already
        return
    if kind != "v1":
        return
    state = os.path.join(cgdir, "freezer.state")
    frozen = False
    try:
        _write(state, "FROZEN")
        # Frozen tasks cannot fork, so once the state reads FROZEN the lists are complete.
        deadline = time.monotonic() + freeze_wait_s
        pause = 0.0005
        while True:
            frozen = (_read(state) or "").strip() == "FROZEN"
            if frozen or time.monotonic() >= deadline:
                break
            time.sleep(pause)  # FREEZING: tasks are still on their way into the freezer
            pause = min(pause * 2, 0.02)
    except FileNotFoundError:
        return  # removed already
    except OSError:
        pass  # cannot freeze: kill what is listed, in passes, below
    try:
        _signal_listed(_subdirs(cgdir), signal.SIGKILL)
    finally:
        # Killed tasks die only once thawed.
        try:
            _write(state, "THAWED")
        except OSError:
            pass
    if not frozen:
        # Some task did not freeze (uninterruptible sleep) and could fork meanwhile: kill
        # whatever is still listed a few more times.
        for _ in range(3):
            time.sleep(0.01)
            if not _signal_listed(_subdirs(cgdir), signal.SIGKILL):
                break


def remove_tree(cgdir: str, timeout_s: float = 5.0) -> bool:
    """Remove ``cgdir`` and every cgroup below it once they are empty; True when gone.

    Waits up to ``timeout_s`` for the members to finish dying (the kernel refuses to remove
    a populated cgroup). Never kills: call ``kill_tree`` first.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        for d in _subdirs(cgdir):
            try:
                os.rmdir(d)
            except OSError:
                pass  # gone already, or EBUSY: still populated (and so are its parents)
        if not os.path.exists(cgdir):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)  # the killed processes are still exiting
        pause = min(pause * 2, 0.05)


# -- finding a usable hierarchy ------------------------------------------------------------


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


class _Mount(NamedTuple):
    root: str
    point: str
    fstype: str
    options: frozenset[str]


def _mounts() -> list[_Mount]:
    text = _read("/proc/self/mountinfo") or ""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        a, b = left.split(), right.split()
        if len(a) < 5 or len(b) < 3 or not b[0].startswith("cgroup"):
            continue
        out.append(_Mount(_unescape(a[3]), _unescape(a[4]), b[0], frozenset(b[2].split(","))))
    return out


def _own_cgroups(pid: str = "self") -> dict[str, str]:
    """A process's cgroup per hierarchy: "" for v2, else each controller's name."""
    out: dict[str, str] = {}
    for line in (_read(f"/proc/{pid}/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            out[""] = parts[2]
        else:
            for ctrl in parts[1].split(","):
                out[ctrl] = parts[2]
    return out


def _base(mount: _Mount, own: Optional[str], writable: bool = True) -> Optional[str]:
    """The directory of cgroup ``own`` under ``mount``, if it is there (and writable)."""
    if own is None:
        return None
    root = mount.root.rstrip("/")
    if root and not (own == root or own.startswith(root + "/")):
        return None  # the cgroup is outside what this mount shows
    path = os.path.join(mount.point, own[len(root):].lstrip("/"))
    if not os.path.isdir(path):
        return None
    if writable and not (
        os.access(path, os.W_OK | os.X_OK)
        # Moving a rank from here into a cgroup below needs write access to this one's
        # cgroup.procs too (the common ancestor of the source and the destination).
        and os.access(os.path.join(path, "cgroup.procs"), os.W_OK)
    ):
        return None
    return path


def _bases(pid: str = "self", writable: bool = True) -> dict[str, str]:
    """"v2", "freezer" and "memory" (v1) -> the directory of ``pid``'s cgroup there."""
    own = _own_cgroups(pid)
    out: dict[str, str] = {}
    for m in _mounts():
        if m.fstype == "cgroup2" and "v2" not in out:
            base = _base(m, own.get(""), writable)
            if base:
                out["v2"] = base
        elif m.fstype == "cgroup":
            for ctrl in ("freezer", "memory"):
                if ctrl in m.options and ctrl not in out:
                    base = _base(m, own.get(ctrl), writable)
                    if base:
                        out[ctrl] = base
    return out


def cgroup_dirs_of(pid: int) -> dict[str, str]:
    """Where process ``pid`` is: "v2", "freezer", "memory" -> its cgroup's directory.

    For diagnostics and tests (a test sets a memory limit on a rank's cgroup through it).
    """
    return _bases(str(pid), writable=False)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:64] or "run"


def _mkdir_unique(base: str, name: str) -> str:
    for n in range(100):
        path = os.path.join(base, name if n == 0 else f"{name}.{n}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue  # another Supervisor of this process with the same run id
    raise FileExistsError(errno.EEXIST, "no free cgroup name", os.path.join(base, name))


# -- the run's cgroups ---------------------------------------------------------------------


class RankCgroup:
    """One spawn of a rank: its cgroup (and its memory cgroup where that is elsewhere).

    Attributes:
        path: the cgroup that kills (v2, or the v1 freezer).
        memory_path: where memory is read (the same directory on v2 with the memory
            controller, a v1 memory cgroup, or None).
    """

    def __init__(self, tree: RunCgroups, path: str, memory_path: Optional[str]) -> None:
        self._tree = tree
        self.kind = tree.kind
        self.path = path
        self.memory_path = memory_path
        self._memory_kind = tree.memory_kind
        self._final: Optional[MemoryReading] = None
        self._released = False
        self._files = _OpenFiles()
        """Its memory files, open while it lives: a stats sample reads them every few
        seconds, and an open and a close each cost more than the read."""

    @property
    def join_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files a new rank writes itself into before it execs."""
        dirs = [self.path]
        if self.memory_path is not None and self.memory_path != self.path:
            dirs.append(self.memory_path)
        return tuple(os.path.join(d, "cgroup.procs") for d in dirs)

    def pids(self) -> list[int]:
        """Every process in the cgroup now."""
        return _pids(self.path)

    def signal(self, sig: int, skip_pgid: Optional[int] = None) -> int:
        """Send ``sig`` to every member outside process group ``skip_pgid``; how many got it."""
        return _signal_listed([self.path], sig, skip_pgid)

    def kill(self) -> None:
        """SIGKILL every process in the cgroup, including any forked meanwhile.

        v1: waits at most a quarter second for the freeze (this runs under the
        supervisor's lock), then kills what is listed either way.
        """
        kill_tree(self.kind, self.path, freeze_wait_s=0.25)

    def memory(self) -> Optional[MemoryReading]:
        """The memory reading now (the last one once released); None without one."""
        if self._released or self.memory_path is None:
            return self._final
        reading = _read_memory(self._memory_kind, self.memory_path, self._files)
        return reading if reading is not None else self._final

    def release(self) -> None:
        """The rank was reaped: keep its last memory reading, kill what it left, remove the
        cgroup now or, if its processes are still dying, at a later ``collect``/``close``."""
        if self._released:
            return
        self._final = self.memory()
        self._files.close()
        # Kill only if something is left: nothing can join an empty cgroup (only its
        # members fork into it), so an empty one stays empty.
        if self.pids():
            self.kill()
        self._released = True
        self._tree._release(self)

    def _remove_now(self) -> bool:
        self._files.close()
        done = True
        for d in dict.fromkeys(d for d in (self.path, self.memory_path) if d is not None):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                done = False  # EBUSY: its processes are still exiting
        return done

    def __repr__(self) -> str:
        return f"<RankCgroup {self.path}>"


class _OpenFiles:
    """Files kept open and read again from their start (``pread``); thread-safe, and
    closed for good by ``close`` (a read after it opens nothing: it reads by path)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self._closed = False

    def read(self, path: str) -> Optional[str]:
        with self._lock:
            if self._closed:
                return _read(path)
            fd = self._fds.get(path)
            if fd is None:
                try:
                    fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    return None
            try:
                data = os.pread(fd, 65536, 0)  # a cgroup's memory file: one short page
            except OSError:
                return None
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _read_memory(kind: Optional[str], d: str,
                 files: Optional[_OpenFiles] = None) -> Optional[MemoryReading]:
    read = files.read if files is not None else _read
    if kind == "v2":
        current = read(os.path.join(d, "memory.current"))
        events = read(os.path.join(d, "memory.events"))
        if current is None or events is None:
            return None
        counts = dict(line.split() for line in events.splitlines() if line.count(" ") == 1)
        return MemoryReading(int(current), int(counts.get("oom_kill", 0)))
    if kind == "v1":
        usage = read(os.path.join(d, "memory.usage_in_bytes"))
        control = read(os.path.join(d, "memory.oom_control"))
        if usage is None or control is None:
            return None
        counts = dict(line.split() for line in control.splitlines() if line.count(" ") == 1)
        return MemoryReading(int(usage), int(counts.get("oom_kill", 0)))
    return None


class RunCgroups:
    """The run's cgroup subtree(s): one ``RankCgroup`` per spawn, all removed at ``close``.

    Thread-safe. Create it with ``open_run``.

    Attributes:
        kind: how ranks are killed, "v2" (``cgroup.kill``) or "v1" (freezer).
        path: the run's directory in that hierarchy.
        memory_kind: where memory is read, "v2", "v1" or None.
        memory_path: the run's directory in the v1 memory hierarchy (None otherwise).
    """

    def __init__(
        self, kind: str, path: str, memory_kind: Optional[str], memory_path: Optional[str]
    ) -> None:
        self.kind = kind
        self.path = path
        self.memory_kind = memory_kind
        self.memory_path = memory_path
        self._lock = threading.Lock()
        self._seq = 0
        self._pending: list[RankCgroup] = []
        self._closed = False

    @property
    def tracking(self) -> str:
        return TRACKING_CGROUP

    @property
    def detail(self) -> str:
        """One line for a person: which hierarchy kills, where memory comes from."""
        how = "cgroup v2, cgroup.kill" if self.kind == "v2" else "cgroup v1 freezer"
        mem = {"v2": "memory from cgroup v2", "v1": "memory from cgroup v1"}.get(
            self.memory_kind or "", "no memory readings"
        )
        return f"cgroup ({how}; {mem}) under {os.path.dirname(self.path)}"

    @property
    def guard_dirs(self) -> list[tuple[str, str]]:
        """``(kind, directory)`` for the guard: what to kill and remove if we die."""
        out = [(self.kind, self.path)]
        if self.memory_path is not None:
            out.append(("memory", self.memory_path))
        return out

    def new_rank(self, rank: int) -> RankCgroup:
        """Make the cgroup(s) of one spawn of ``rank``.

        Raises:
            OSError: the directory could not be made (a limit on descendants, for one).
        """
        self.collect()
        with self._lock:
            if self._closed:
                raise OSError(errno.ESHUTDOWN, "the run's cgroups are closed")
            self._seq += 1
            name = f"rank{rank}-{self._seq}"
        path = os.path.join(self.path, name)
        os.mkdir(path)
        memory_path: Optional[str] = None
        if self.memory_kind == "v2":
            memory_path = path
        elif self.memory_kind == "v1" and self.memory_path is not None:
            memory_path = os.path.join(self.memory_path, name)
            try:
                os.mkdir(memory_path)
            except OSError:
                os.rmdir(path)
                raise
        return RankCgroup(self, path, memory_path)

    def _release(self, cg: RankCgroup) -> None:
        if not cg._remove_now():
            with self._lock:
                self._pending.append(cg)

    def collect(self) -> None:
        """Remove the released cgroups whose processes have finished dying."""
        with self._lock:
            pending, self._pending = self._pending, []
        left = [cg for cg in pending if not cg._remove_now()]
        if left:
            with self._lock:
                self._pending.extend(left)

    def close(self, timeout_s: float = 5.0) -> list[str]:
        """Kill everything still in the run's cgroups and remove them all.

        Returns:
            The directories that could not be removed within ``timeout_s`` (processes stuck
            in the kernel); the guard tries again after us.
        """
        with self._lock:
            self._closed = True
            self._pending = []
        kill_tree(self.kind, self.path)
        left = []
        deadline = time.monotonic() + timeout_s
        for _kind, d in self.guard_dirs:
            if not remove_tree(d, max(0.0, deadline - time.monotonic())):
                left.append(d)
        return left


# -- opening a run -------------------------------------------------------------------------


def _mode() -> str:
    wanted = os.environ.get(CGROUPS_ENV, "auto").strip().lower()
    if wanted in _OFF:
        return "off"
    if wanted in ("v1", "v2"):
        return wanted
    return "auto"


def open_run(run_id: str) -> tuple[Optional[RunCgroups], str]:
    """Make the run's cgroup subtree where cgroups are usable.

    Returns:
        ``(cgroups, detail)``: the run's cgroups and a line saying which are used, or
        ``(None, why)`` where the process-tree tracking must do (disabled by
        ``RANKVISOR_CGROUPS``, no writable hierarchy, no ``cgroup.kill`` nor freezer).
    """
    mode = _mode()
    if mode == "off":
        return None, f"process-tree ({CGROUPS_ENV}=0)"
    bases = _bases()
    sweep_stale(bases)
    name = f"{_PREFIX}{_safe(run_id)}-{os.getpid()}"
    tried: list[str] = []
    tree: Optional[RunCgroups] = None
    if mode in ("auto", "v2") and "v2" in bases:
        tree = _open_v2(bases, name, tried)
    elif mode in ("auto", "v2"):
        tried.append("no writable cgroup v2")
    if tree is None and mode in ("auto", "v1"):
        if "freezer" in bases:
            tree = _open_v1(bases, name, tried)
        else:
            tried.append("no writable cgroup v1 freezer")
    if tree is None:
        return None, "process-tree (" + "; ".join(tried) + ")"
    return tree, tree.detail


def _open_v2(bases: dict[str, str], name: str, tried: list[str]) -> Optional[RunCgroups]:
    try:
        path = _mkdir_unique(bases["v2"], name)
    except OSError as e:
        tried.append(f"cgroup v2: {e.strerror or e}")
        return None
    if not os.path.exists(os.path.join(path, "cgroup.kill")):
        os.rmdir(path)
        tried.append("cgroup v2 has no cgroup.kill (Linux < 5.14)")
        return None
    controllers = (_read(os.path.join(path, "cgroup.controllers")) or "").split()
    if "memory" in controllers:
        try:
            # The run's own cgroup holds no process, so its children may get the controller.
            _write(os.path.join(path, "cgroup.subtree_control"), "+memory")
            return RunCgroups("v2", path, "v2", None)
        except OSError:
            pass
    return RunCgroups("v2", path, *_v1_memory(bases, os.path.basename(path)))


def _open_v1(bases: dict[str, str], name: str, tried: list[str]) -> Optional[RunCgroups]:
    try:
        path = _mkdir_unique(bases["freezer"], name)
    except OSError as e:
        tried.append(f"cgroup v1 freezer: {e.strerror or e}")
        return None
    return RunCgroups("v1", path, *_v1_memory(bases, os.path.basename(path)))


def _v1_memory(bases: dict[str, str], name: str) -> tuple[Optional[str], Optional[str]]:
    if "memory" not in bases:
        return None, None
    path = os.path.join(bases["memory"], name)
    try:
        os.mkdir(path)
    except OSError:
        return None, None
    return "v1", path


def _owner_alive(pid: int, created: float) -> bool:
    """Whether ``pid`` is still the process that made a directory at time ``created``."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return False
    try:
        ticks = int(text.rsplit(")", 1)[1].split()[19])
        btime = next(
            int(line.split()[1]) for line in (_read("/proc/stat") or "").splitlines()
            if line.startswith("btime ")
        )
    except (IndexError, ValueError, StopIteration):
        return True  # cannot tell: leave it alone
    # A recycled pid belongs to a process started after the directory was made (btime has
    # whole seconds, hence the slack).
    return btime + ticks / os.sysconf("SC_CLK_TCK") <= created + 1.0


def sweep_stale(bases: Optional[dict[str, str]] = None) -> list[str]:
    """Kill and remove the run cgroups whose owner is gone; the directories removed.

    Only directories named ``rankvisor-<run id>-<pid>`` directly under our own cgroups are
    looked at, and only when ``<pid>`` is no longer the process that made them.
    """
    if bases is None:
        bases = _bases()
    removed = []
    # The killing hierarchies first: a v1 memory cgroup empties once they have killed.
    for key in sorted(bases, key=("v2", "freezer", "memory").index):
        base = bases[key]
        kind = {"v2": "v2", "freezer": "v1"}.get(key, "memory")
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for entry in names:
            m = _STALE.match(entry)
            path = os.path.join(base, entry)
            if m is None or not os.path.isdir(path):
                continue
            try:
                created = os.stat(path).st_mtime
            except OSError:
                continue
            if _owner_alive(int(m.group(1)), created):
                continue
            kill_tree(kind, path)
            if remove_tree(path, timeout_s=1.0):
                removed.append(path)
    return removed
