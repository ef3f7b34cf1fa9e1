"""pdb attached to a rank that is running, without a change to its script (PEP 768).

Python 3.14 lets a process run code in another Python process of the same version
(``sys.remote_exec``); ``python -m pdb -p PID`` builds on it: the target stops at its next
safe point and talks to the attaching pdb over a local socket. ``attach_problem`` says in
one line why that cannot work here (the rank's Python older than 3.14, the rank gone, the
kernel refusing to let us trace it), offering the stacks (``S`` in the TUI, ``rankvisor
stack``) instead; ``attach_pdb`` runs the rank's own interpreter's pdb on the caller's
terminal and returns its exit code. The rank's own interpreter attaches (``/proc/PID/exe``):
``remote_exec`` needs the same version on both sides.

Tracing permission is the kernel's: with Yama's ``ptrace_scope=1`` (Ubuntu's default) only
the rank's ancestors and the tracer it named (its supervisor, see ``spawner``) and their
descendants may attach; 2 needs CAP_SYS_PTRACE, 3 forbids it.
"""

from __future__ import annotations

import os
import subprocess
from typing import Final

from ..process.proc_table import read_entry
from .stacks import yama_ptrace_scope

__all__ = ["MIN_VERSION", "attach_command", "attach_pdb", "attach_problem", "python_version"]

MIN_VERSION: Final = (3, 14)
_STACKS: Final = "press S in the TUI, or run `rankvisor stack`, for its Python stack instead"


def python_version(exe: str) -> tuple[int, int] | None:
    """The ``(major, minor)`` of the interpreter ``exe``; None if it does not answer as one."""
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def attach_command(pid: int, exe: str | None = None) -> list[str]:
    """``python -m pdb -p PID``, with the rank's own interpreter unless ``exe`` is given."""
    return [exe or os.readlink(f"/proc/{pid}/exe"), "-m", "pdb", "-p", str(pid)]


def attach_problem(
    pid: int, *, version: tuple[int, int] | None = None, label: str = "the rank"
) -> str | None:
    """Why pdb cannot attach to ``pid``, in one line; None when it can be tried.

    Args:
        version: The rank's Python version, when known (else asked of its interpreter).
        label: How the line names the process ("rank 3").
    """
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        return f"{label} (pid {pid}) is not running"
    except OSError as e:
        return f"cannot inspect {label} (pid {pid}): {e.strerror}; {_STACKS}"
    found = version or python_version(exe)
    if found is None:
        return f"{label} does not run Python ({os.path.basename(exe)}); {_STACKS}"
    if found < MIN_VERSION:
        return (
            f"attaching pdb to a running rank needs Python 3.14 or later (PEP 768); "
            f"{label} runs Python {found[0]}.{found[1]}: {_STACKS}"
        )
    scope = yama_ptrace_scope()
    if scope == 3:
        return f"the kernel forbids tracing processes (Yama ptrace_scope=3); {_STACKS}"
    if scope == 2 and os.geteuid() != 0:
        return f"the kernel lets only root attach (Yama ptrace_scope=2); {_STACKS}"
    if scope == 1 and os.geteuid() != 0 and not _is_ancestor(os.getpid(), pid):
        return (
            "the kernel (Yama ptrace_scope=1) lets only the rank's supervisor and its "
            f"children attach, not this process; {_STACKS}"
        )
    return None


def _is_ancestor(me: int, pid: int) -> bool:
    """Whether ``me`` is among ``pid``'s ancestors (whom Yama's scope 1 lets trace it; a
    tracer the rank named itself, its supervisor, is not seen from here)."""
    seen = 0
    while pid > 1 and seen < 4096:
        entry = read_entry(pid)
        if entry is None:
            return False
        pid, seen = entry.ppid, seen + 1
        if pid == me:
            return True
    return False


def attach_pdb(pid: int, *, label: str = "the rank") -> int:
    """Attach pdb to ``pid`` on this terminal until the person detaches; pdb's exit code.

    Raises:
        RuntimeError: ``attach_problem``'s line, when it cannot work.
    """
    problem = attach_problem(pid, label=label)
    if problem is not None:
        raise RuntimeError(problem)
    return subprocess.call(attach_command(pid))
