"""No orphans, even when rankvisor itself is SIGKILLed.

PR_SET_PDEATHSIG (set on every rank by the spawner) kills a rank when rankvisor dies, but
not the rank's own children: a DataLoader worker, a compile worker, or a ``setsid`` daemon
the rank started would be re-parented to init and live on. So each Supervisor starts one
tiny guard process:

* it is not our child in any way that matters: its own session (a Ctrl-C or a hang-up
  aimed at our terminal does not reach it) and no death signal;
* it holds the read end of a pipe whose only write end lives in the supervisor (not
  inheritable, so no rank holds it open). The kernel closes that end when we die, however
  we die, and the guard reads EOF;
* we tell it, line by line, which processes are ranks (``R pid pgid starttime``) and which
  descendants the stats sampler has seen (``D pid starttime``); it pins each one with a
  pidfd, after checking the starttime, so a recycled pid is never hit;
* every rank also carries ``RANKVISOR_GUARD=<token>`` in its environment, inherited by all
  its descendants, including ones that left the process group or whose parent is gone.

On EOF the guard SIGKILLs every rank's process group, every pinned process, and then
sweeps /proc for processes carrying the token, until a sweep finds nothing new. A clean
``Supervisor.shutdown`` closes the pipe too, so the same sweep removes stragglers.

Where the run uses cgroups (``engine.process.cgroups``) we also tell it the run's cgroup
directories (``C kind path``): on EOF it kills everything in them first (nothing in a
cgroup can escape, token or not) and removes them last. If the guard itself is killed, the
supervisor starts a new one with the same token and tells it everything again
(``restart_if_dead``), so killing the guard and then us still leaves nothing behind.

This file is also the guard program itself (``python -I -S engine/process/guard.py FD``):
it imports only the stdlib, so the guard starts in a few milliseconds and never imports the
engine. The token reaches it as the first line on the pipe (``T token``), never on its
command line: any user can read a command line (``ps``), and a process that knew the token
could set it in its own environment and have the guard kill it.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import types

__all__ = ["GUARD_ENV", "Guard", "starttime"]

GUARD_ENV = "RANKVISOR_GUARD"
"""Environment variable every rank (and so every descendant) carries."""

_PRUNE_ABOVE = 256
"""Pinned processes beyond which the guard closes the pidfds of those already dead."""


def starttime(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22).

    Together with the pid it names one process for ever: a recycled pid gets a new one.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        # The command name (field 2) may contain spaces and ')' : split after the last ')'.
        return int(data.rsplit(b")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


class Guard:
    """The supervisor's side of the guard: starts it, feeds it, and lets it go.

    All methods are thread-safe and never block for long (one small pipe write). If the
    guard died (someone killed it), feeding it becomes a no-op and ``alive`` turns False;
    the ranks still have PDEATHSIG.
    """

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._wfd: int | None = None
        self._sent: set[int] = set()
        self._replay: dict[str, str] = {}
        """What a replacement guard must be told again: rank and cgroup lines by key."""
        self._closing = False
        self._watch: tuple[int, int] | None = None  # (guard pid, its pidfd)

    @property
    def env(self) -> dict[str, str]:
        """What every rank's environment must contain."""
        return {GUARD_ENV: self.token}

    @property
    def pid(self) -> int | None:
        """The guard's pid, None before start."""
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        """Whether the guard process is still there."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the guard process (idempotent)."""
        with self._lock:
            if self._proc is not None:
                return
            rfd, wfd = os.pipe()  # both non-inheritable (PEP 446): ranks never hold them
            # The token first, through the pipe (not argv: see the module docstring). The
            # pipe is empty and the line far below PIPE_BUF, so this write cannot block.
            os.write(wfd, f"T {self.token}\n".encode())
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", os.path.abspath(__file__), str(rfd)],
                    pass_fds=(rfd,),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    # Its own session: terminal signals aimed at us must not reach it.
                    start_new_session=True,
                    close_fds=True,
                )
            except BaseException:
                os.close(wfd)
                raise
            finally:
                os.close(rfd)
            self._wfd = wfd

    def add_rank(self, pid: int, pgid: int | None = None) -> None:
        """Pin a rank process; on our death its process group is killed too."""
        st = starttime(pid)
        if st is not None:
            line = f"R {pid} {pgid if pgid is not None else pid} {st}\n"
            self._replay[f"R{pid}"] = line
            self._send(line)

    def add_descendants(self, pids: list[int]) -> None:
        """Pin descendants the first time they are seen (others are already pinned)."""
        lines = []
        for pid in pids:
            if pid in self._sent:
                continue
            st = starttime(pid)
            if st is not None:
                self._sent.add(pid)
                lines.append(f"D {pid} {st}\n")
        if lines:
            self._send("".join(lines))

    def forget(self, pid: int) -> None:
        """A rank was reaped: the guard can drop its pidfd."""
        self._sent.discard(pid)
        self._replay.pop(f"R{pid}", None)
        self._send(f"X {pid}\n")

    def close(self, wait_s: float = 5.0) -> None:
        """Close our end: the guard kills whatever still carries our token, then exits.

        Waits up to ``wait_s`` for that sweep so a caller that then checks for leftovers
        sees them gone.
        """
        with self._lock:
            self._closing = True
            wfd, self._wfd = self._wfd, None
            proc = self._proc
        if wfd is not None:
            os.close(wfd)
        if proc is not None:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass  # the guard lives on and finishes its sweep on its own
        if self._watch is not None:
            os.close(self._watch[1])
            self._watch = None

    def add_cgroup(self, kind: str, path: str) -> None:
        """A cgroup directory of the run: on our death the guard kills everything in it
        and removes it (``kind``: "v2", "v1" freezer, or "memory": removed only)."""
        line = f"C {kind} {path}\n"
        self._replay[f"C{path}"] = line
        self._send(line)

    def watch_fd(self) -> int | None:
        """A pidfd of the guard process, readable once it has died (None before start)."""
        proc = self._proc
        if proc is None:
            return None
        if self._watch is None or self._watch[0] != proc.pid:
            if self._watch is not None:
                os.close(self._watch[1])
            try:
                self._watch = (proc.pid, os.pidfd_open(proc.pid))
            except OSError:
                return None
        return self._watch[1]

    def restart_if_dead(self) -> int | None:
        """If the guard process died (someone killed it), start a new one with the same
        token and tell it every rank and cgroup again; the new pid, else None.

        The descendants it had pinned are not replayed: the sampler reports them again.
        """
        with self._lock:
            proc = self._proc
            if proc is None or self._closing or proc.poll() is None:
                return None
            if self._wfd is not None:
                os.close(self._wfd)
                self._wfd = None
            self._proc = None
            self._sent.clear()
            lines = "".join(self._replay.values())
        self.start()
        if lines:
            self._send(lines)
        return self.pid

    def _send(self, text: str) -> None:
        with self._lock:
            if self._wfd is None:
                return
            try:
                os.write(self._wfd, text.encode())
            except OSError:
                # EPIPE: the guard is gone; stop feeding it.
                os.close(self._wfd)
                self._wfd = None


# --------------------------------------------------------------------------------------
# The guard program. Only the stdlib, and nothing that could block on our dead parent.


def _pin(pid: int, st: int) -> int | None:
    """A pidfd for ``pid`` if it is still the process that started at ``st``."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    # Opened first, checked second: if the starttime matches now, the pidfd refers to it.
    if starttime(pid) != st:
        os.close(fd)
        return None
    return fd


def _kill_fd(fd: int) -> None:
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass  # already dead


def _dead(fd: int) -> bool:
    # A pidfd polls readable once its process has exited.
    r, _, _ = select.select([fd], [], [], 0)
    return bool(r)


_PF_KTHREAD = 0x00200000
"""A kernel thread (/proc/<pid>/stat's flags): it never has an environment."""


def in_exec(stat: bytes, cmdline: bytes, environ: bytes) -> bool:
    """Whether a process reads as one inside an exec: neither its arguments nor its
    environment are there yet (the new program's memory is set up, its strings are not),
    and it is no kernel thread and no zombie, which read so for good. Right after a spawn
    this window is common: a process caught in it may carry the token a moment later.
    ``cmdline`` must be read before ``environ``: arguments present mean the exec is done."""
    if cmdline or environ:
        return False
    try:
        fields = stat.rsplit(b")", 1)[1].split()
        state, flags = fields[0], int(fields[6])
    except (IndexError, ValueError):
        return False
    return state not in (b"Z", b"X") and not flags & _PF_KTHREAD


def _sweep_token(token: bytes, killed: set[tuple[int, int]]) -> int:
    """SIGKILL every process whose environment carries our token; count the new ones and
    those caught inside an exec (``in_exec``: the next sweep reads them again)."""
    needle = b"\0" + GUARD_ENV.encode() + b"=" + token + b"\0"
    me = os.getpid()
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read(1)
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            if not env:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    found += in_exec(f.read(), cmdline, env)
                continue
        except OSError:
            continue  # not ours to read, or gone
        env = b"\0" + env
        if not env.endswith(b"\0"):
            env += b"\0"
        if needle not in env:
            continue
        st = starttime(pid)
        if st is None or (pid, st) in killed:
            continue
        fd = _pin(pid, st)
        if fd is None:
            continue
        _kill_fd(fd)
        os.close(fd)
        killed.add((pid, st))
        found += 1
    return found


def sweep(token: bytes, killed: set[tuple[int, int]]) -> None:
    """Sweep for the token until a pass finds nothing new (at most 50 passes). A process
    that forked during a pass has a child carrying the token, and one caught inside an
    exec shows it a moment later: the next pass catches both."""
    for _ in range(50):
        if _sweep_token(token, killed) == 0:
            return
        time.sleep(0.01)


def _guard_main(rfd: int) -> None:
    # Terminal-generated signals are for the supervisor, never for us.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    pinned: dict[int, tuple[int, int]] = {}  # pid -> (pidfd, starttime)
    groups: dict[int, int] = {}  # rank pid -> its process group
    token = b""  # from the first line, "T <token>"; without one there is nothing to sweep
    cgroup_dirs: dict[str, str] = {}  # the run's cgroup directories -> kind
    cgroups: types.ModuleType | None = None
    prune_at = _PRUNE_ABOVE
    buf = b""
    while True:
        chunk = os.read(rfd, 65536)  # blocks until a line or EOF (the supervisor is gone)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            parts = line.split()
            try:
                if parts[0] == b"T":
                    token = parts[1]
                elif parts[0] == b"R":
                    pid, pgid, st = int(parts[1]), int(parts[2]), int(parts[3])
                    fd = _pin(pid, st)
                    if fd is not None:
                        pinned[pid] = (fd, st)
                        groups[pid] = pgid
                elif parts[0] == b"D":
                    pid, st = int(parts[1]), int(parts[2])
                    if pid not in pinned:
                        fd = _pin(pid, st)
                        if fd is not None:
                            pinned[pid] = (fd, st)
                elif parts[0] == b"C":
                    kind, path = line.decode().split(" ", 2)[1:]
                    cgroup_dirs[path] = kind
                    if cgroups is None:
                        cgroups = _cgroups_module()
                elif parts[0] == b"X":
                    pid = int(parts[1])
                    groups.pop(pid, None)
                    entry = pinned.pop(pid, None)
                    if entry is not None:
                        os.close(entry[0])
            except (IndexError, ValueError):
                continue
        if len(pinned) > prune_at:
            for pid, (fd, _) in list(pinned.items()):
                if pid not in groups and _dead(fd):
                    os.close(fd)
                    del pinned[pid]
            # Next time at twice what is left: a pass over every pinned process after each
            # read made a start of N ranks (N reads, sometimes) cost N^2 here.
            prune_at = max(_PRUNE_ABOVE, 2 * len(pinned))

    # EOF: the supervisor has gone (or shut down). Kill the cgroups first (nothing escapes
    # them), then the groups, so nothing forks on.
    if cgroups is not None:
        for path, kind in cgroup_dirs.items():
            cgroups.kill_tree(kind, path)
    killed: set[tuple[int, int]] = set()
    for pgid in groups.values():
        # A group id is not reused while any member lives, so this reaches the rank's
        # group (leader possibly already dead from PDEATHSIG) or, if empty, nothing.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for pid, (fd, st) in pinned.items():
        _kill_fd(fd)
        killed.add((pid, st))
    if token:
        sweep(token, killed)
    if cgroups is not None:
        for path in cgroup_dirs:
            cgroups.remove_tree(path, timeout_s=5.0)


def _cgroups_module() -> types.ModuleType | None:
    # engine/process/cgroups.py imports only the stdlib; load it from beside this file
    # (this program runs isolated, without the engine on its path), once, while we know
    # the files are there.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import cgroups  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return cgroups


if __name__ == "__main__":
    _guard_main(int(sys.argv[1]))
