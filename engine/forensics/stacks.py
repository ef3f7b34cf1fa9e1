"""The Python stack of every rank, taken with py-spy, merged into groups, saved with the run.

When a job hangs, the question is where each rank is stuck, and which rank is not where the
others are. ``dump_stacks`` runs one ``py-spy dump --json`` per rank, all at once, each bounded
by a timeout; ``merge`` groups the ranks whose main threads have the same stack (the same
functions in the same files, innermost first; line numbers may differ) and puts the odd group,
the smallest, first: "ranks 0, 2, 3: all_reduce <- train_step <- main" and "rank 1:
stuck_in_data_loader <- main" (the idea of LLNL's STAT tool). ``save_dump`` writes the merged
view and then each rank's full dump, every thread, to ``<run_dir>/stacks/<time>.txt``.

How long a dump takes, measured on a 2-core VM shared with other jobs (load average 5; py-spy
0.4.3; idle Python 3.11 ranks with two threads; ``dump_stacks`` of N ranks at once, 5 runs,
median and worst):

=======  ===============  ===============  ===============
ranks    nonblocking      blocking         native
=======  ===============  ===============  ===============
1        39 ms / 51 ms    15 ms / 75 ms    183 ms / 344 ms
4        71 ms / 88 ms    84 ms / 125 ms   546 ms / 727 ms
8        348 ms / 362 ms  250 ms / 359 ms  941 ms / 1.1 s
=======  ===============  ===============  ===============

Ranks are dumped in parallel, so the cost grows with ranks per core, not ranks. The
supervisor's capture before a SIGKILL starts ``KILL_DUMP_BUDGET_S`` before the deadline (see
``engine.supervisor.stack_capture``), and its py-spy calls are bounded by the time left: on a
machine too busy for that, the ranks are killed on time without a stack, never late.

Permissions: reading another process's memory needs ptrace rights over it. As root (with
CAP_SYS_PTRACE) that is always so. As the ranks' own user it is so unless the kernel's Yama
module says ``ptrace_scope=1`` (Ubuntu's default): then only a process's ancestors may trace
it, and a py-spy started by the supervisor is the ranks' sibling, not their ancestor. Ranks
rankvisor starts therefore allow their supervisor and its descendants as tracers
(``prctl(PR_SET_PTRACER, supervisor_pid)`` between fork and exec, see
``engine.process.spawner.ptracer_for_ranks``), which is exactly the py-spy it runs. In a
container without CAP_SYS_PTRACE no dump can work: ``explain`` says so in one line, with the
fix (``--cap-add SYS_PTRACE``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from itertools import islice
from typing import Any, Final

from .. import clock
from ..output.safe_text import one_line
from ..process.proc_table import find_descendants

_BOOTSTRAP_FILE: Final = "py_bootstrap.py"
"""engine/process/py_bootstrap.py, or the copy of it the ranks load (see there)."""

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "KILL_DUMP_BUDGET_S",
    "NATIVE_NEEDS_BLOCKING",
    "STACKS_DIR",
    "Frame",
    "RankStack",
    "SavedDump",
    "StackDump",
    "StackGroup",
    "ThreadStack",
    "dump_file_name",
    "dump_stacks",
    "explain",
    "find_py_spy",
    "has_ptrace_capability",
    "latest_dump",
    "list_dumps",
    "merge",
    "save_dump",
    "yama_ptrace_scope",
]

STACKS_DIR: Final = "stacks"
"""Where a run's dumps are kept, below its run directory."""

DEFAULT_TIMEOUT_S: Final = 5.0
"""How long one rank's py-spy may take before it is killed and the rank reported without a
stack: more than four times the slowest dump measured above (native, 8 ranks), so only a
rank py-spy cannot read hits it (one in uninterruptible sleep, say)."""

KILL_DUMP_BUDGET_S: Final = 1.0
"""How long before a SIGKILL deadline the supervisor starts the dump of the ranks it is about
to kill (nonblocking): about three times the slowest nonblocking dump of 8 ranks on 2 loaded
cores measured above."""

NATIVE_NEEDS_BLOCKING: Final = (
    "native frames need a blocking dump (py-spy pauses each rank while it reads it); "
    "a nonblocking dump has Python frames only"
)

_SUMMARY_FRAMES: Final = 6
"""Frames in a group's one-line summary, innermost first; the rest are in its full stack."""

_HIDDEN: Final = frozenset({"<module>"})
"""Frames left out of the one-line summary (every main thread ends in one)."""

_PR_SYS_PTRACE_BIT: Final = 19
"""CAP_SYS_PTRACE's bit in /proc/self/status CapEff."""


# -- the data -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a stack: a function, its file and the line it is at."""

    name: str
    filename: str
    line: int = 0
    code: str = field(default="", compare=False)
    """The source line it is at, read where the rank runs when the dump is taken (as a
    debugger does); "" for native frames and files that cannot be read."""

    @property
    def is_address(self) -> bool:
        """A native frame py-spy found no symbol for: its name is an address."""
        return self.name.startswith("0x")

    @property
    def short_filename(self) -> str:
        return os.path.basename(self.filename) or self.filename

    def label(self) -> str:
        """``all_reduce (distributed_c10d.py:2501)``, as py-spy prints it."""
        where = f"{self.short_filename}:{self.line}" if self.line else self.short_filename
        return f"{self.name} ({where})"


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread of a rank: innermost frame first."""

    thread_id: int
    name: str
    frames: tuple[Frame, ...]
    main: bool = False
    active: bool = False
    owns_gil: bool = False


@dataclass(frozen=True, slots=True)
class RankStack:
    """What a dump got of one rank: its threads (main thread first), or why not."""

    rank: int
    pid: int
    threads: tuple[ThreadStack, ...] = ()
    error: str = ""
    """Why there is no stack, in one line ("" when there is one)."""
    dumped_pid: int = 0
    """The process read: the rank's own pid, or a Python descendant of a rank that is not
    Python itself (a shell script that runs python)."""

    @property
    def main_thread(self) -> ThreadStack | None:
        return self.threads[0] if self.threads else None

    def key(self) -> tuple[tuple[str, str], ...]:
        """What makes two stacks "the same": the main thread's functions and files (a native
        frame without a symbol counts by its library: its address differs in every process)."""
        main = self.main_thread
        if main is None:
            return ()
        return tuple(("0x?" if f.is_address else f.name, f.filename) for f in main.frames)


@dataclass(frozen=True, slots=True)
class StackGroup:
    """Ranks whose main threads have the same stack (or the same error, when ``error``)."""

    ranks: tuple[int, ...]
    frames: tuple[Frame, ...]
    """The first rank's frames, innermost first."""
    odd: bool = False
    """One of the smallest groups while a larger one exists: the ranks that stand out."""
    lines: tuple[tuple[int, ...], ...] = ()
    """Per frame, every line the group's ranks are at (two when they differ)."""
    error: str = ""
    collective: str = ""
    """The collective its ranks wait in ("all_reduce #5 on pg 0"), when torch's Flight
    Recorder says: ranks in the same frame at different collective numbers are two groups."""

    def who(self) -> str:
        head = "rank" if len(self.ranks) == 1 else "ranks"
        at = f" (in {self.collective})" if self.collective else ""
        return f"{head} {', '.join(map(str, self.ranks))}{at}"

    def summary(self) -> str:
        """``ranks 0, 2, 3: all_reduce <- train_step <- main``."""
        if self.error:
            return f"{self.who()}: no stack: {self.error}"
        names = [f.name for f in self.frames if f.name not in _HIDDEN and not f.is_address]
        names = names or [f.name for f in self.frames]
        text = " <- ".join(names[:_SUMMARY_FRAMES])
        if len(names) > _SUMMARY_FRAMES:
            text += " <- ..."
        return f"{self.who()}: {text or '(empty stack)'}"

    def frame_lines(self) -> list[str]:
        """The full stack, one frame a line, with every line number the ranks are at."""
        out = []
        for i, f in enumerate(self.frames):
            at = self.lines[i] if i < len(self.lines) else (f.line,)
            where = ", ".join(str(n) for n in at if n)
            out.append(f"{f.name} ({f.short_filename}{':' + where if where else ''})")
            if f.code:
                out.append(f"    {f.code}")
        return out


@dataclass(frozen=True, slots=True)
class StackDump:
    """One dump of some ranks: each rank's stacks, merged into groups, and where it is saved."""

    time: float
    """``clock.wall()`` when the dump began."""
    ranks: tuple[RankStack, ...]
    groups: tuple[StackGroup, ...] = ()
    native: bool = False
    nonblocking: bool = False
    reason: str = ""
    """Why it was taken, for a person: "asked", "before SIGKILL (teardown)", ..."""
    path: str = ""
    """The saved file ("" when not saved)."""
    problem: str = ""
    """One line when no rank could be read at all for one reason (py-spy missing, ptrace
    not permitted): the thing to fix."""

    @property
    def captured(self) -> tuple[int, ...]:
        """The ranks that have a stack."""
        return tuple(r.rank for r in self.ranks if r.threads)

    def merged_text(self) -> str:
        """The groups, odd first, one line each (with a marker on the odd ones)."""
        lines = []
        if self.problem:
            lines.append(f"no stacks: {self.problem}")
        for g in self.groups:
            lines.append(("odd  " if g.odd else "     ") + g.summary())
        return "\n".join(lines)

    def full_text(self) -> str:
        """Everything: a header, the merged view, each group's frames, each rank's threads."""
        mode = "native" if self.native else ("nonblocking" if self.nonblocking else "blocking")
        head = [
            f"stacks of {len(self.ranks)} rank(s) at "
            f"{datetime.fromtimestamp(self.time).isoformat(timespec='milliseconds')} "
            f"(py-spy dump, {mode}{', ' + self.reason if self.reason else ''})",
            "",
            "merged (ranks whose main threads have the same stack; the odd group first):",
            self.merged_text(),
        ]
        for g in self.groups:
            if g.frames:
                head += ["", f"{g.who()}:", *(f"    {line}" for line in g.frame_lines())]
        for r in self.ranks:
            head += ["", f"--- rank {r.rank} (pid {r.pid}"
                     + (f", read from its Python descendant {r.dumped_pid}"
                        if r.dumped_pid and r.dumped_pid != r.pid else "") + ") ---"]
            if r.error:
                head.append(f"no stack: {r.error}")
            for t in r.threads:
                flags = ", ".join(x for x in ("main" if t.main else "",
                                             "active" if t.active else "idle",
                                             "holds the GIL" if t.owns_gil else "") if x)
                named = f': "{t.name}"' if t.name else ""
                head.append(f"Thread {t.thread_id} ({flags}){named}")
                for f in t.frames:
                    head += [f"    {f.label()}"] + ([f"        {f.code}"] if f.code else [])
        return "\n".join(head) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (the wire and ``rankvisor stack --json``)."""
        return {
            "time": self.time,
            "native": self.native,
            "nonblocking": self.nonblocking,
            "reason": self.reason,
            "path": self.path,
            "problem": self.problem,
            "groups": [
                {"ranks": list(g.ranks), "odd": g.odd, "summary": g.summary(),
                 "error": g.error, "frames": [_frame_dict(f) for f in g.frames],
                 "lines": [list(x) for x in g.lines], "collective": g.collective}
                for g in self.groups
            ],
            "ranks": [
                {"rank": r.rank, "pid": r.pid, "dumped_pid": r.dumped_pid, "error": r.error,
                 "threads": [
                     {"thread_id": t.thread_id, "name": t.name, "main": t.main,
                      "active": t.active, "owns_gil": t.owns_gil,
                      "frames": [_frame_dict(f) for f in t.frames]}
                     for t in r.threads
                 ]}
                for r in self.ranks
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StackDump:
        """Back from ``to_dict``'s data (unknown keys ignored, missing ones defaulted)."""
        groups = tuple(
            StackGroup(
                ranks=tuple(int(x) for x in g.get("ranks", ())),
                frames=tuple(_frame(f) for f in g.get("frames", ())),
                odd=bool(g.get("odd", False)),
                lines=tuple(tuple(int(n) for n in x) for x in g.get("lines", ())),
                error=str(g.get("error", "")),
                collective=str(g.get("collective", "")),
            )
            for g in data.get("groups", ())
        )
        ranks = tuple(
            RankStack(
                rank=int(r.get("rank", 0)),
                pid=int(r.get("pid", 0)),
                dumped_pid=int(r.get("dumped_pid", 0)),
                error=str(r.get("error", "")),
                threads=tuple(
                    ThreadStack(
                        thread_id=int(t.get("thread_id", 0)),
                        name=one_line(t.get("name", ""), _NAME_CAP),
                        main=bool(t.get("main", False)), active=bool(t.get("active", False)),
                        owns_gil=bool(t.get("owns_gil", False)),
                        frames=tuple(_frame(f) for f in t.get("frames", ())),
                    )
                    for t in r.get("threads", ())
                ),
            )
            for r in data.get("ranks", ())
        )
        return cls(
            time=float(data.get("time", 0.0)), ranks=ranks, groups=groups,
            native=bool(data.get("native", False)),
            nonblocking=bool(data.get("nonblocking", False)),
            reason=str(data.get("reason", "")), path=str(data.get("path", "")),
            problem=str(data.get("problem", "")),
        )


def _frame_dict(f: Frame) -> dict[str, Any]:
    return {"name": f.name, "filename": f.filename, "line": f.line, "code": f.code}


def _frame(d: Mapping[str, Any]) -> Frame:
    # A rank names its own functions and files: hostile text, shown on a terminal.
    return Frame(one_line(d.get("name", "?"), _NAME_CAP),
                 one_line(d.get("filename", ""), _NAME_CAP), int(d.get("line") or 0),
                 one_line(d.get("code") or "", _SOURCE_CHARS))


_NAME_CAP: Final = 1000
"""Characters kept of a frame's function or file name, or a thread's name."""


def source_line(pid: int, filename: str, line: int) -> str:
    """Line ``line`` of ``filename`` as process ``pid`` sees it (its root and working
    directory: a relative name, a container), stripped and made safe to show; "" when it
    cannot be read."""
    if line <= 0 or not filename or filename.startswith("<"):
        return ""
    path = filename if os.path.isabs(filename) else os.path.join(f"/proc/{pid}/cwd", filename)
    seen = f"/proc/{pid}/root{path}" if os.path.isabs(path) else path
    for candidate in (seen, path):
        try:  # read, not linecache: the supervisor lives long and the files change
            with open(candidate, "rb") as f:
                raw = next(islice(f, line - 1, line), b"")
        except OSError:
            continue
        return one_line(raw.decode("utf-8", "replace").strip(), _SOURCE_CHARS)
    return ""


_SOURCE_CHARS: Final = 160


# -- merging --------------------------------------------------------------------------------


def merge(
    ranks: Sequence[RankStack], collectives: Mapping[int, str] | None = None
) -> tuple[StackGroup, ...]:
    """Group ranks by their main thread's stack; the odd (smallest) groups first, marked.

    Ranks without a stack are grouped by their error, after the others, and are never odd:
    a rank that exited is no evidence of where the others are stuck. ``collectives``
    (rank -> the collective it waits in) splits a group whose ranks wait in different ones.
    """
    labels = collectives or {}
    by_key: dict[tuple[Any, ...], list[RankStack]] = {}
    by_error: dict[str, list[int]] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        if r.threads:
            by_key.setdefault((r.key(), labels.get(r.rank, "")), []).append(r)
        else:
            by_error.setdefault(r.error or "no thread", []).append(r.rank)
    groups = []
    for members in by_key.values():
        main = members[0].main_thread
        assert main is not None
        lines = tuple(
            tuple(sorted({m.threads[0].frames[i].line for m in members}))
            for i in range(len(main.frames))
        )
        groups.append(StackGroup(tuple(m.rank for m in members), main.frames, lines=lines,
                                 collective=labels.get(members[0].rank, "")))
    sizes = [len(g.ranks) for g in groups]
    smallest = min(sizes, default=0)
    standout = bool(sizes) and smallest < max(sizes)
    groups = [
        StackGroup(g.ranks, g.frames, odd=standout and len(g.ranks) == smallest, lines=g.lines,
                   collective=g.collective)
        for g in groups
    ]
    groups.sort(key=lambda g: (len(g.ranks), g.ranks[0]))
    groups += [StackGroup(tuple(rs), (), error=e) for e, rs in by_error.items()]
    return tuple(groups)


# -- running py-spy --------------------------------------------------------------------------


def find_py_spy() -> str | None:
    """The py-spy program: beside this interpreter (its wheel puts it there), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def yama_ptrace_scope() -> int | None:
    """The kernel's ``kernel.yama.ptrace_scope`` (0-3), None where Yama is absent."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def has_ptrace_capability() -> bool:
    """Whether this process holds CAP_SYS_PTRACE (root outside a restricted container)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _PR_SYS_PTRACE_BIT & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def explain(stderr: str, pid: int) -> str:
    """py-spy's complaint about ``pid`` as one line a person can act on."""
    text = stderr or ""
    if "os error 13" in text or "os error 1)" in text or "Operation not permitted" in text:
        return _permission_line(pid)
    if not os.path.exists(f"/proc/{pid}"):
        return "exited before it could be read"
    if "Failed to find python version" in text:
        return ("not a Python process (or its interpreter has not started yet), and no Python "
                "process below it")
    first = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in first if not ln.startswith(("Stack backtrace", "0:", "1:"))]
    return "py-spy: " + (lines[0].removeprefix("Error: ") if lines else "failed without a word")


def _permission_line(pid: int) -> str:
    scope = yama_ptrace_scope()
    cap = has_ptrace_capability()
    owner = _owner(pid)
    if scope == 3:
        return ("ptrace is switched off on this machine (kernel.yama.ptrace_scope=3, until a "
                "reboot): no process's stack can be read")
    if not cap and owner is not None and owner != os.geteuid():
        return (f"the rank runs as uid {owner}, rankvisor as uid {os.geteuid()}: run rankvisor "
                "as the ranks' user, or as root")
    if scope == 2 and not cap:
        return ("only root may read another process's stack here (kernel.yama.ptrace_scope=2):"
                " run rankvisor as root, or `sudo sysctl kernel.yama.ptrace_scope=1`")
    if scope == 1 and not cap:
        return ("the rank did not allow rankvisor to read it (kernel.yama.ptrace_scope=1: only "
                "ancestors may): ranks rankvisor starts allow it; for others run as root or "
                "`sudo sysctl kernel.yama.ptrace_scope=0`")
    if cap:
        return ("the kernel refused to let py-spy read it although rankvisor holds "
                "CAP_SYS_PTRACE: a security module (AppArmor, SELinux, seccomp) or another "
                "PID namespace forbids it")
    return ("ptrace is not permitted (no CAP_SYS_PTRACE: a container?): start the container "
            "with --cap-add SYS_PTRACE (docker run, or securityContext.capabilities in k8s)")


def _py_spy(
    program: str, pid: int, native: bool, nonblocking: bool, timeout_s: float
) -> tuple[list[dict[str, Any]] | None, str]:
    argv = [program, "dump", "--pid", str(pid), "--json"]
    if native:
        argv.append("--native")
    if nonblocking:
        argv.append("--nonblocking")
    try:
        # Bounded: a py-spy that hangs (a rank in D state) is killed at the timeout, and
        # the rank is reported without a stack rather than holding up the others.
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"py-spy did not answer within {timeout_s:g} s"
    except OSError as e:
        return None, f"py-spy could not start: {e.strerror or e}"
    if out.returncode != 0:
        return None, explain(out.stderr, pid)
    try:
        data = json.loads(out.stdout)
    except ValueError:
        return None, "py-spy answered something that is not JSON"
    if not isinstance(data, list):
        return None, "py-spy answered something that is not a list of threads"
    return data, ""


def without_bootstrap(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A stack without the outermost frames of rankvisor's bootstrap of a Python rank
    (``engine.process.py_bootstrap``: its ``-c`` line and the frames that run the script),
    so that a rank's stack reads as it would without it."""
    end = len(frames)
    if end >= 2 and frames[-1].filename == "<string>" and _is_bootstrap(frames[-2]):
        end -= 1  # the -c line that loads it
    while end and _is_bootstrap(frames[end - 1]):
        end -= 1
    return frames[:end] if end else frames


def _is_bootstrap(f: Frame) -> bool:
    return os.path.basename(f.filename) == _BOOTSTRAP_FILE and f.name in (
        "main", "_run_script", "_run_module")


def _threads(data: list[dict[str, Any]], pid: int) -> tuple[ThreadStack, ...]:
    out = []
    for t in data:
        if not isinstance(t, dict):
            continue
        tid = int(t.get("os_thread_id") or t.get("thread_id") or 0)
        # py-spy reads names from the ``threading`` module's table of threads; a process that
        # never imported ``threading`` (a script run from a venv, whose site runs no .pth file
        # that imports it, or a rank under rankvisor's bootstrap) has none. The thread whose id
        # is the pid is the main thread.
        name = one_line(t.get("thread_name") or ("MainThread" if tid == pid else ""), _NAME_CAP)
        frames = without_bootstrap(
            tuple(_frame(f) for f in t.get("frames") or () if isinstance(f, dict))
        )
        out.append(ThreadStack(
            thread_id=tid,
            name=name,
            frames=tuple(
                f if f.is_address else replace(f, code=source_line(pid, f.filename, f.line))
                for f in frames
            ),
            main=tid == pid or name == "MainThread",
            active=bool(t.get("active", False)),
            owns_gil=bool(t.get("owns_gil", False)),
        ))
    # The main thread first: it is the one that runs the training loop.
    out.sort(key=lambda t: (not t.main, t.thread_id))
    return tuple(out)


_RETRY_PAUSE_S: Final = 0.02
"""The pause before a dump that failed in passing is tried again."""

_READ_RETRIES: Final = 3
"""How many more times a dump that failed in passing is tried, within the rank's time."""


def _passing(error: str) -> bool:
    """A failure that the next try may not meet: py-spy's own complaint (a nonblocking read
    of a running interpreter can catch a frame or thread list while it changes, "Failed to
    get stack traces"), not one that says why no try can work (permissions, not Python, the
    process gone, py-spy missing or slow)."""
    return error.startswith("py-spy: ")


def _py_spy_again(
    program: str, pid: int, native: bool, nonblocking: bool, first_s: float, deadline: float
) -> tuple[list[dict[str, Any]] | None, str]:
    """py-spy on ``pid`` (``first_s`` for the first try), tried again while it fails in
    passing and time is left before ``deadline``."""
    data, error = _py_spy(program, pid, native, nonblocking, first_s)
    for _ in range(_READ_RETRIES):
        if data is not None or not _passing(error):
            break
        time.sleep(_RETRY_PAUSE_S)
        left = deadline - clock.monotonic()
        if left <= 0:
            break
        data, error = _py_spy(program, pid, native, nonblocking, left)
    return data, error


def _dump_rank(
    program: str, rank: int, pid: int, native: bool, nonblocking: bool, timeout_s: float
) -> RankStack:
    deadline = clock.monotonic() + timeout_s
    data, error = _py_spy_again(program, pid, native, nonblocking, timeout_s, deadline)
    if data is not None:
        return RankStack(rank, pid, _threads(data, pid), dumped_pid=pid)
    if error.startswith("not a Python process"):
        # A rank that is a shell script or a launcher: read its first Python descendant.
        for entry in find_descendants(pid):
            left = deadline - clock.monotonic()
            if left <= 0:
                break
            if not _looks_like_python(entry.pid):
                continue
            data, err = _py_spy_again(program, entry.pid, native, nonblocking, left, deadline)
            if data is not None:
                return RankStack(rank, pid, _threads(data, entry.pid), dumped_pid=entry.pid)
            error = err if not err.startswith("not a Python process") else error
    return RankStack(rank, pid, error=error)


def _looks_like_python(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.startswith(("python", "pypy"))


def dump_stacks(
    targets: Mapping[int, int],
    *,
    native: bool = False,
    nonblocking: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    reason: str = "",
    workers: int = 32,
) -> StackDump:
    """Dump each rank's stack (``targets``: rank -> pid), up to ``workers`` at once, and
    merge them.

    A person waiting on a dump gets every rank in parallel; a reading nobody waits for (the
    live suspect's) passes ``workers=1`` and reads them one after another on its own thread,
    so an idle supervisor never wakes a thread per rank.

    Never raises for a rank that cannot be read: it gets an ``error`` line instead, and a
    cause shared by every rank (py-spy missing, ptrace not permitted) becomes ``problem``.
    Blocks for at most about ``timeout_s`` per ``workers`` ranks.
    """
    started = clock.wall()
    program = find_py_spy()
    if native and nonblocking:
        return StackDump(started, (), native=native, nonblocking=nonblocking, reason=reason,
                         problem=NATIVE_NEEDS_BLOCKING)
    if program is None:
        problem = ("py-spy is not installed: `pip install py-spy` (rankvisor depends on it; "
                   "it ships its own binary)")
        return StackDump(started, tuple(RankStack(r, p, error=problem)
                                        for r, p in sorted(targets.items())),
                         native=native, nonblocking=nonblocking, reason=reason, problem=problem)
    items = sorted(targets.items())
    if not items:
        return StackDump(started, (), native=native, nonblocking=nonblocking, reason=reason)
    def one(item: tuple[int, int]) -> RankStack:
        return _dump_rank(program, item[0], item[1], native, nonblocking, timeout_s)

    if workers <= 1:
        ranks = tuple(map(one, items))
    else:
        with ThreadPoolExecutor(max_workers=min(len(items), workers),
                                thread_name_prefix="rankvisor-py-spy") as pool:
            ranks = tuple(pool.map(one, items))
    errors = {r.error for r in ranks if not r.threads}
    problem = ""
    if not any(r.threads for r in ranks) and len(errors) == 1:
        only = next(iter(errors))
        if "ptrace" in only or "uid" in only or "py-spy" in only:
            problem = only
    return StackDump(started, ranks, merge(ranks), native=native, nonblocking=nonblocking,
                     reason=reason, problem=problem)


# -- saving ---------------------------------------------------------------------------------


def dump_file_name(t: float, tz: tzinfo | None = None) -> str:
    """``20260101-080017.123.txt``: the dump's time, sortable, to the millisecond."""
    stamp = datetime.fromtimestamp(t, tz)
    return f"{stamp:%Y%m%d-%H%M%S}.{stamp.microsecond // 1000:03d}.txt"


def save_dump(dump: StackDump, run_dir: str, tz: tzinfo | None = None) -> StackDump:
    """Write ``dump`` to ``<run_dir>/stacks/<time>.txt``; the dump with its ``path`` set.

    Never overwrites: two dumps in the same millisecond get ``-2``, ``-3``... Raises OSError
    when the directory cannot be made or the file written.
    """
    folder = os.path.join(run_dir, STACKS_DIR)
    os.makedirs(folder, exist_ok=True)
    name = dump_file_name(dump.time, tz)
    path = os.path.join(folder, name)
    n = 1
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            n += 1
            path = os.path.join(folder, f"{name[:-4]}-{n}.txt")
    saved = _with_path(dump, path)
    with os.fdopen(fd, "w") as f:
        f.write(saved.full_text())
    try:  # beside it, the dump as data: a viewer shows it again once no rank runs
        with open(path[:-4] + ".json", "w") as f:
            json.dump(saved.to_dict(), f)
    except OSError:
        pass  # the text is the record; without its data a viewer shows the text
    return saved


def latest_dump(run_dir: str) -> StackDump | SavedDump | None:
    """The run's newest saved dump: as data when it was saved with it (``save_dump``), else
    as its text file's first lines (a dump saved before the data was); None without any."""
    saved = list_dumps(run_dir)
    if not saved:
        return None
    newest = saved[-1]
    try:
        with open(newest.path[:-4] + ".json", "rb") as f:
            data = json.loads(f.read(1 << 24))
        if isinstance(data, dict):
            return StackDump.from_dict(data)
    except (OSError, ValueError, TypeError):
        pass
    return newest


def _with_path(dump: StackDump, path: str) -> StackDump:
    return StackDump(dump.time, dump.ranks, dump.groups, dump.native, dump.nonblocking,
                     dump.reason, path, dump.problem)


@dataclass(frozen=True, slots=True)
class SavedDump:
    """One dump file of a run, for a list (the error view)."""

    path: str
    first_line: str = ""
    merged: tuple[str, ...] = field(default_factory=tuple)


def list_dumps(run_dir: str) -> list[SavedDump]:
    """The run's saved dumps, oldest first, each with its header and merged lines."""
    folder = os.path.join(run_dir, STACKS_DIR)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".txt"))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, errors="replace") as f:
                head = f.read(64 * 1024).split("\n\n", 2)
        except OSError:
            continue
        first = head[0].strip() if head else ""
        merged: tuple[str, ...] = ()
        if len(head) > 1:
            merged = tuple(ln.strip() for ln in head[1].splitlines()[1:] if ln.strip())
        out.append(SavedDump(path, first, merged))
    return out
