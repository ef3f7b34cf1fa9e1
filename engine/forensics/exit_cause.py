"""Why a rank ended, in words: the OOM killer, CUDA out of memory, a collective's timeout, a
crash signal, a signal from outside, a shell's ``128+N``, or rankvisor's own stop.

Two halves. ``classify`` is pure: it turns ``ExitFacts`` (the exit code, who signalled the
rank, the OOM count of its cgroup, the kernel log's line about it, its error message and the
end of its stderr) into an ``ExitCause``. ``diagnose`` gathers the facts that live in files
(the end of stderr, /dev/shm's size, the kernel log) and calls it. The supervisor calls
``diagnose`` when it records an exit, because only it knows which signals it sent, the
cgroup's count and when the rank started; the cause then travels with the rank's state
event and snapshot. A viewer that gets no cause (a recorded run of an older version, a
torchrun job watched from outside) calls ``diagnose`` itself with what it knows, without
the kernel log.

Why the kernel log and the cgroup both: the cgroup's count is exact and costs one file read,
but exists only where rankvisor could make a memory cgroup; the kernel log names the pid the
OOM killer chose wherever it is readable (root, or ``dmesg_restrict=0``), cgroup or not.

Standard library, ``engine.names.signals`` and the sanitiser only (every text that came
from a rank is made safe for a terminal here): the supervisor, the status writer and the UI
all load it.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from typing import Final

from ..events import ExitCause
from ..logfile.tail import read_tail
from ..names.signals import exit_signal_name, signal_name
from ..output.sanitize import sanitize, strip_sgr

__all__ = [
    "ExitCause",
    "ExitFacts",
    "classify",
    "diagnose",
    "faulthandler_block",
    "kernel_oom_line",
    "shm_usage",
]

TAIL_BYTES: Final = 64 * 1024
"""How much of the end of a rank's stderr is searched: a faulthandler dump of a few threads,
or a traceback under a screenful of warnings, fits; a log of gigabytes is never read."""

KMSG_BYTES: Final = 4 << 20
"""At most this much of the kernel log is read (its ring buffer is usually 128 KiB-16 MiB)."""

_TEXT_CAP: Final = 300
_DETAIL_CAP: Final = 4000

_STOP_WORDS: Final = {
    "terminate": "stopped by rankvisor (terminate)",
    "kill": "killed by rankvisor (kill)",
    "restart": "stopped by rankvisor to restart it",
    "attempt": "stopped by rankvisor for a new attempt of every rank",
    "teardown": "stopped by rankvisor after another rank failed (teardown)",
    "shutdown": "stopped by rankvisor as the run shut down",
}

_CRASHES: Final[dict[int, tuple[str, str]]] = {
    signal.SIGSEGV: ("sigsegv", "segmentation fault (SIGSEGV): the process read or wrote "
                                "memory it does not own, in native code"),
    signal.SIGBUS: ("sigbus", "bus error (SIGBUS): often a too-small /dev/shm (docker "
                              "--shm-size): shared memory ran out under a mapped page"),
    signal.SIGABRT: ("sigabrt", "aborted (SIGABRT): a native library gave up, often an "
                                "uncaught C++ exception or a failed assertion"),
    signal.SIGILL: ("sigill", "illegal instruction (SIGILL): code built for another CPU"),
    signal.SIGFPE: ("sigfpe", "arithmetic error (SIGFPE) in native code, such as an integer "
                              "division by zero"),
}

# Each: (code, words, pattern), first match wins, searched in the error message first, then
# the end of stderr from its last line up.
_MESSAGES: Final = (
    ("cuda_oom", "CUDA out of memory", re.compile(
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
        r"cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED")),
    ("nccl_timeout", "NCCL collective timed out (often a knock-on: a peer stopped joining)",
     re.compile(r"Watchdog caught collective operation timeout|"
                r"NCCL[^\n]*(?:[Tt]imed? ?out|timeout)|ProcessGroupNCCL[^\n]*[Tt]imeout")),
    ("nccl_error", "NCCL error", re.compile(
        r"NCCL error|nccl(?:InternalError|SystemError|UnhandledCudaError|InvalidUsage|"
        r"RemoteError|InvalidArgument)|NCCL WARN|ProcessGroupNCCL")),
    ("gloo_timeout", "gloo collective timed out (often a knock-on: a peer stopped joining)",
     re.compile(r"gloo[^\n]*[Tt]imed out|[Gg]loo[^\n]*timeout")),
    ("gloo_error", "gloo error (a peer's connection closed: often a knock-on of its exit)",
     re.compile(r"gloo[^\n]*(?:Connection closed by peer|Connection reset|"
                r"Connection refused)|[Gg]loo[^\n]*[Ee]rror")),
)

_EXCEPTION: Final = re.compile(r"^(?:\[[^\]]*\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|"
                               r"Interrupt|Exit|Warning)|[A-Z]\w*Error)(?::\s*(.*))?$")
_FAULT_LINES: Final = (
    "Current thread", "Thread 0x", "File ", "<no Python frame>", "Stack (most recent", "...",
    "<", "Garbage-collecting",
)
_KILLED: Final = re.compile(rb"Killed process (\d+)\b")
_OOM_KILL: Final = re.compile(rb"oom-kill:[^\n]*[,:]pid=(\d+)\b")


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """What is known about one exit; every field but ``exitcode`` may be unknown.

    Attributes:
        exitcode: torch's convention (negative: killed by that signal).
        caused_by_us: the exit was rankvisor's doing (its stop signal ended it).
        stop_reason: why rankvisor asked it to stop ("teardown", "terminate", "signal", ...).
        our_signals: signals rankvisor delivered to this process.
        oom_kills: processes of the rank's cgroup the OOM killer killed (None: no cgroup).
        kernel_oom: the kernel log's line saying the OOM killer killed this pid ("" none).
        kernel_log_read: whether the kernel log could be read at all.
        message: the error file's message (torch's ``@record``), "" when none.
        stderr_tail: the end of the rank's stderr (this incarnation's file).
        shm: /dev/shm's (size, used) bytes, for a SIGBUS.
        timer_scope: the scope of torch's file timer whose watchdog killed the rank.
    """

    exitcode: int
    caused_by_us: bool = False
    stop_reason: str | None = None
    our_signals: tuple[int, ...] = ()
    oom_kills: int | None = None
    kernel_oom: str = ""
    kernel_log_read: bool = False
    message: str = ""
    stderr_tail: str = ""
    shm: tuple[int, int] | None = None
    timer_scope: str | None = None


# -- the pure half --------------------------------------------------------------------------


def classify(facts: ExitFacts) -> ExitCause | None:
    """Why the exit in ``facts`` happened; None for exit code 0 (nothing to explain)."""
    code = facts.exitcode
    if code == 0:
        return None
    sig = -code if code < 0 else (code - 128 if 128 < code < 160 else None)
    via_shell = code > 0
    ours = set(facts.our_signals)
    oom_counted = bool(facts.oom_kills)
    if sig == signal.SIGKILL and signal.SIGKILL not in ours and (
        oom_counted or facts.kernel_oom
    ):
        return _oom(facts, via_shell)
    if facts.caused_by_us:
        return _stopped(facts)
    if code < 0 and sig in ours:
        # Our signal ended it, yet it is its own failure: it had raised before the signal
        # cut its exit short. The signal is still ours, never "from outside".
        return _raised_then_stopped(facts, sig)
    if facts.timer_scope is not None and sig is not None:
        return ExitCause("timer_expired", _cap(
            f"killed by torch's file-timer watchdog: it overran timer scope "
            f"{facts.timer_scope!r} ({signal_name(sig)})"))
    found = _from_messages(facts)
    if code < 0 and sig in _CRASHES:
        return _crash(facts, sig, found, via_shell=False)
    if via_shell and sig in _CRASHES and not found:
        return _crash(facts, sig, found, via_shell=True)
    if code < 0 and sig is not None:
        return ExitCause("outside_signal", _cap(
            f"killed by {signal_name(sig)} from outside rankvisor{_kill_hint(facts, sig)}"))
    if found is not None:
        return _with_child_oom(found, facts)
    if sig is not None and code in (128 + signal.SIGKILL, 128 + signal.SIGTERM) or (
        sig is not None and not facts.message and not _exception_line(facts.stderr_tail)
    ):
        hint = _kill_hint(facts, sig) if facts.oom_kills == 0 else ""
        return ExitCause("shell_signal", _cap(
            f"exit code {code} (128+{sig}): a process under a shell or launcher was killed "
            f"by {signal_name(sig)}{hint}, or the program called exit({code})"))
    if oom_counted:
        return ExitCause("child_oom_killed", _cap(
            f"the OOM killer killed {_processes(facts.oom_kills)} of the rank (a worker it "
            f"forked?), then it exited with code {code}"))
    exception = _exception_line(facts.message) or _exception_line(facts.stderr_tail)
    if exception:
        return ExitCause("exception", _cap(f"raised {exception} (exit code {code})"))
    if code == 127 and not facts.stderr_tail.strip():
        return ExitCause("not_started", "could not start (exit code 127)")
    return ExitCause("exit", f"exited with code {code}")


def _oom(facts: ExitFacts, via_shell: bool) -> ExitCause:
    evidence = []
    if facts.oom_kills:
        evidence.append(f"its cgroup counted {_processes(facts.oom_kills)} OOM-killed")
    if facts.kernel_oom:
        evidence.append("the kernel log names it")
    how = f"exit code {facts.exitcode}, 128+9: " if via_shell else ""
    text = f"killed by the kernel's OOM killer ({how}{'; '.join(evidence)})"
    return ExitCause("oom_killed", _cap(text), _cap(facts.kernel_oom, _DETAIL_CAP))


def _processes(n: int | None) -> str:
    return "1 process" if n == 1 else f"{n} processes"


def _stopped(facts: ExitFacts) -> ExitCause:
    code = facts.exitcode
    how = exit_signal_name(code) or f"exit code {code}"
    if facts.stop_reason == "signal":
        sig = -code if code < 0 else code - 128
        return ExitCause("stopped", f"ended by the {signal_name(sig)} sent through rankvisor")
    words = _STOP_WORDS.get(facts.stop_reason or "", "stopped by rankvisor")
    if code == -signal.SIGKILL and signal.SIGTERM in facts.our_signals:
        how = "SIGKILL after it outlived SIGTERM"
    return ExitCause("stopped", f"{words}: {how}")


_ENDED_WORDS: Final = {
    "teardown": "the teardown after another rank failed",
    "shutdown": "the shutdown of the run",
    "escalation": "the escalation",
}


def _raised_then_stopped(facts: ExitFacts, sig: int) -> ExitCause:
    """A rank that failed on its own, then was ended in its exit by our ``sig``."""
    found = _from_messages(facts)
    exception = _exception_line(facts.message) or _exception_line(facts.stderr_tail)
    own = found.text if found is not None else (f"raised {exception}" if exception else
                                                "printed a traceback of its own")
    why = _ENDED_WORDS.get(facts.stop_reason or "", facts.stop_reason or "a stop")
    # Ours first: a long message is cut at the cap, the blame never is.
    text = f"failed on its own, then rankvisor's {signal_name(sig)} ({why}) ended it as it " \
           f"exited: {own}"
    return ExitCause(found.code if found is not None else "exception", _cap(text),
                     found.detail if found is not None else "")


def _crash(
    facts: ExitFacts, sig: int, found: ExitCause | None, *, via_shell: bool
) -> ExitCause:
    code, words = _CRASHES[sig]
    text = words
    if via_shell:
        text = f"exit code {facts.exitcode}, 128+{sig}: {words}"
    detail = ""
    if sig == signal.SIGSEGV or sig == signal.SIGBUS or sig == signal.SIGABRT:
        detail = faulthandler_block(facts.stderr_tail)
        if detail:
            where = _top_frame(detail)
            if where:
                text += f"; in {where}"
        elif sig == signal.SIGSEGV:
            text += " (no Python stack in stderr: set PYTHONFAULTHANDLER=1 to get one)"
    if sig == signal.SIGBUS and facts.shm is not None:
        size, used = facts.shm
        text += f"; /dev/shm here: {_size(size)}, {_size(used)} used"
    if found is not None:
        text += f"; after: {found.text}"
        detail = "\n".join(x for x in (detail, found.detail) if x)
    return ExitCause(code, _cap(text), _cap(detail, _DETAIL_CAP))


def _kill_hint(facts: ExitFacts, sig: int) -> str:
    if sig != signal.SIGKILL:
        return ""
    if facts.oom_kills == 0:
        return " (not the OOM killer: its cgroup counted none)"
    if facts.kernel_log_read:
        return " (the kernel log names no OOM kill of it)"
    return (" (another process, or the kernel's OOM killer: no memory cgroup to count, "
            "and the kernel log is not readable)")


def _with_child_oom(found: ExitCause, facts: ExitFacts) -> ExitCause:
    if not facts.oom_kills:
        return found
    return ExitCause(found.code, _cap(
        f"{found.text}; the OOM killer also killed {_processes(facts.oom_kills)} of the rank"),
        found.detail)


def _from_messages(facts: ExitFacts) -> ExitCause | None:
    for source in (facts.message, facts.stderr_tail):
        if not source:
            continue
        lines = [ln for ln in source.splitlines() if ln.strip()]
        for line in reversed(lines):
            for code, words, pattern in _MESSAGES:
                if pattern.search(line):
                    said = _clean(line)
                    head = words.split(" (")[0]
                    if said.lower().startswith(head.lower()):
                        said = said[len(head):].lstrip(" .:")
                    text = f"{words}: {said}" if said else words
                    return ExitCause(code, _cap(text), _cap(line, 2000))
    return None


def _clean(line: str) -> str:
    """A message line without torch's ``[rankN]:`` prefix and exception name."""
    line = re.sub(r"^\[[^\]]*\]:\s*", "", line.strip())
    match = _EXCEPTION.match(line)
    if match and match.group(2):
        return match.group(2)
    return line


def _exception_line(text: str) -> str:
    """The last "SomeError: message" line of a traceback in ``text``, "" when none."""
    if not text:
        return ""
    lines = text.splitlines()
    saw_traceback = any("Traceback (most recent call last)" in ln for ln in lines)
    for line in reversed(lines):
        stripped = re.sub(r"^\[[^\]]*\]:\s*", "", line.strip())
        match = _EXCEPTION.match(stripped)
        if match and (saw_traceback or match.group(2) is not None):
            return stripped
    return ""


def faulthandler_block(text: str) -> str:
    """The last "Fatal Python error: ..." block that faulthandler wrote in ``text``: the
    error line and each thread's frames, most recent call first; "" when there is none."""
    lines = text.splitlines()
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if "Fatal Python error:" in lines[i]:
            start = i
            break
    if start is None:
        return ""
    out = [lines[start].strip()]
    for line in lines[start + 1:]:
        stripped = line.strip()
        if stripped and not stripped.startswith(_FAULT_LINES):
            break  # "Extension modules: ...", or the program's own output again
        if stripped:
            out.append(line.rstrip())
    return "\n".join(out[:60])


def _top_frame(block: str) -> str:
    """``name (file:line)`` of the most recent call of the crashing thread (the one marked
    "Current thread"; faulthandler lists the threads in no fixed order)."""
    lines = block.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("Current thread")), 0)
    for line in lines[start:]:
        match = re.match(r'\s*File "(.*)", line (\d+) in (.*)$', line)
        if match:
            return f"{match.group(3)} ({os.path.basename(match.group(1))}:{match.group(2)})"
    return ""


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns


def _cap(text: str, cap: int = _TEXT_CAP) -> str:
    """``text`` made safe for a terminal (a rank writes anything), on one line unless it
    is a detail, and at most ``cap`` characters."""
    text = strip_sgr(sanitize(text))
    text = text if cap > _TEXT_CAP else " ".join(text.split())
    return text if len(text) <= cap else text[: cap - 1] + "\u2026"


# -- the half that reads files --------------------------------------------------------------


def _tail(path: str, max_bytes: int = TAIL_BYTES) -> str:
    return read_tail(path, max_bytes)[0]


def shm_usage(path: str = "/dev/shm") -> tuple[int, int] | None:
    """(size, used) bytes of the file system at ``path``, None where it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    size = st.f_blocks * st.f_frsize
    return size, size - st.f_bfree * st.f_frsize


def kernel_oom_line(
    pid: int, *, not_before_s: float | None = None, kmsg: str = "/dev/kmsg"
) -> tuple[str, bool]:
    """The kernel log's line saying the OOM killer killed ``pid``, and whether the log
    could be read at all (root, or ``kernel.dmesg_restrict=0``).

    ``not_before_s``: ignore records older than this ``clock.monotonic()`` value (the
    rank's start, give or take a second): a pid recycled since an older kill is not it.
    Reads ``/dev/kmsg`` without blocking (the records there now, up to ``KMSG_BYTES``).
    """
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "", False
    found = ""
    total = 0
    want = str(pid).encode()
    try:
        while total < KMSG_BYTES:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break  # every record read
            except BrokenPipeError:
                continue  # the ring buffer overwrote the record we were at: read on
            except OSError:
                break
            if not record:
                break
            total += len(record)
            if want not in record:
                continue
            head, _, body = record.partition(b";")
            match = _KILLED.search(body) or _OOM_KILL.search(body)
            if match is None or match.group(1) != want:
                continue
            if not_before_s is not None:
                try:
                    stamp_s = int(head.split(b",")[2]) / 1e6
                except (IndexError, ValueError):
                    stamp_s = None
                if stamp_s is not None and stamp_s < not_before_s - 1.0:
                    continue
            found = body.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    finally:
        os.close(fd)
    return found, True


def diagnose(
    exitcode: int | None,
    *,
    caused_by_us: bool = False,
    stop_reason: str | None = None,
    our_signals: tuple[int, ...] = (),
    oom_kills: int | None = None,
    message: str = "",
    stderr_path: str = "",
    pid: int | None = None,
    started_monotonic: float | None = None,
    kernel_log: bool = False,
    timer_scope: str | None = None,
) -> ExitCause | None:
    """Gather what the files say about one exit and ``classify`` it.

    Reads only what the exit needs: the end of stderr when the rank ended on its own,
    /dev/shm's size for a SIGBUS, and the kernel log (``kernel_log`` True, the supervisor
    only) for a SIGKILL rankvisor did not send that no cgroup explains.
    """
    if exitcode is None or exitcode == 0:
        return None
    sig = -exitcode if exitcode < 0 else (exitcode - 128 if 128 < exitcode < 160 else None)
    kernel_oom, read = "", False
    if (
        kernel_log and pid and sig == signal.SIGKILL and signal.SIGKILL not in our_signals
        and not oom_kills
    ):
        kernel_oom, read = kernel_oom_line(pid, not_before_s=started_monotonic)
    facts = ExitFacts(
        exitcode=exitcode,
        caused_by_us=caused_by_us,
        stop_reason=stop_reason,
        our_signals=tuple(our_signals),
        oom_kills=oom_kills,
        kernel_oom=kernel_oom,
        kernel_log_read=read,
        message=message,
        stderr_tail="" if caused_by_us else _tail(stderr_path),
        shm=shm_usage() if sig == signal.SIGBUS else None,
        timer_scope=timer_scope,
    )
    return classify(facts)
