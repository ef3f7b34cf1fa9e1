"""Signal numbers and names, computed one way for the whole project.

Python's ``signal.Signals`` names only SIGRTMIN and SIGRTMAX among the real-time signals:
``signal.Signals(40)`` raises ValueError, so anything that named a signal that way could
fail in the middle of its work (a notice, an event, an error message) for a perfectly valid
signal. Here every valid number has a name, real-time ones included ("SIGRTMIN+6", as
``kill -l`` spells them), and text a person typed ("TERM", "sigusr1", "15", "SIGRTMIN+6")
becomes a number or a ``ValueError`` whose message says what is accepted.

Pure: the standard library only, so the CLI and the UI may import it.
"""

from __future__ import annotations

import signal
from typing import Final, Literal

__all__ = [
    "DEFAULT_ACTIONS",
    "DefaultAction",
    "check_signal",
    "check_stop_signal",
    "default_action",
    "exit_signal_name",
    "is_signal",
    "kills_by_default",
    "parse_signal",
    "signal_name",
    "stop_signal_names",
]

DefaultAction = Literal["terminate", "core", "stop", "continue", "ignore"]
"""What a signal does to a process that installed no handler for it (POSIX)."""

DEFAULT_ACTIONS: Final[dict[str, DefaultAction]] = {
    "SIGHUP": "terminate",
    "SIGINT": "terminate",
    "SIGQUIT": "core",
    "SIGILL": "core",
    "SIGTRAP": "core",
    "SIGABRT": "core",
    "SIGBUS": "core",
    "SIGFPE": "core",
    "SIGKILL": "terminate",
    "SIGUSR1": "terminate",
    "SIGSEGV": "core",
    "SIGUSR2": "terminate",
    "SIGPIPE": "terminate",
    "SIGALRM": "terminate",
    "SIGTERM": "terminate",
    "SIGSTKFLT": "terminate",
    "SIGCHLD": "ignore",
    "SIGCONT": "continue",
    "SIGSTOP": "stop",
    "SIGTSTP": "stop",
    "SIGTTIN": "stop",
    "SIGTTOU": "stop",
    "SIGURG": "ignore",
    "SIGXCPU": "core",
    "SIGXFSZ": "core",
    "SIGVTALRM": "terminate",
    "SIGPROF": "terminate",
    "SIGWINCH": "ignore",
    "SIGIO": "terminate",
    "SIGPWR": "terminate",
    "SIGSYS": "core",
}
"""The default action of each standard signal, by name (signal(7)); real-time signals
terminate. A person picking a signal needs this: SIGUSR1 "for stack dumps" kills a rank that
never installed a handler for it."""

_VALID: frozenset[int] = frozenset(int(s) for s in signal.valid_signals())
_RTMIN = int(getattr(signal, "SIGRTMIN", 0))
_RTMAX = int(getattr(signal, "SIGRTMAX", 0))


def _ranges() -> str:
    """The valid numbers as "1-31, 34-64", for error messages."""
    out: list[str] = []
    numbers = sorted(_VALID)
    start = prev = numbers[0]
    for n in numbers[1:] + [-1]:
        if n != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = n
        prev = n
    return ", ".join(out)


def is_signal(signum: object) -> bool:
    """Whether ``signum`` is an ``int`` this system can deliver (0, the "probe", is not)."""
    return isinstance(signum, int) and not isinstance(signum, bool) and signum in _VALID


def check_signal(signum: object) -> int:
    """``signum`` as a plain ``int`` if it is a valid signal number.

    Raises:
        ValueError: with a message for a person, for anything else (0, -1, 999, "TERM").
    """
    if not is_signal(signum):
        raise ValueError(f"{signum!r} is not a signal number (valid: {_ranges()})")
    assert isinstance(signum, int)
    return int(signum)


def signal_name(signum: int) -> str:
    """"SIGTERM" for 15, "SIGRTMIN+6" for 40 (on Linux); never raises for a valid number.

    Real-time signals are named from the nearer end, as ``kill -l`` does: SIGRTMIN+1 up to
    the middle of the range, SIGRTMAX-k above it.

    Raises:
        ValueError: ``signum`` is not a valid signal number.
    """
    n = check_signal(signum)
    if _RTMIN < n < _RTMAX:
        if n - _RTMIN <= (_RTMAX - _RTMIN) // 2:
            return f"SIGRTMIN+{n - _RTMIN}"
        return f"SIGRTMAX-{_RTMAX - n}"
    try:
        return signal.Signals(n).name
    except ValueError:  # valid, yet unknown to Python (a platform oddity): still say which
        return f"signal {n}"


def exit_signal_name(exitcode: int | None) -> str | None:
    """The name of the signal an exit code ``-N`` reports; None for any other exit code."""
    if exitcode is None or exitcode >= 0 or not is_signal(-exitcode):
        return None
    return signal_name(-exitcode)


def default_action(signum: int) -> DefaultAction:
    """What ``signum`` does to a process with no handler for it ("terminate" for the
    real-time signals and for any this table does not know: the cautious answer).

    Raises:
        ValueError: ``signum`` is not a valid signal number.
    """
    name = signal_name(signum)
    return DEFAULT_ACTIONS.get(name, "terminate")


def kills_by_default(signum: int) -> bool:
    """Whether ``signum`` ends a process that has no handler for it (with or without a core)."""
    return default_action(signum) in ("terminate", "core")


def parse_signal(text: str | int) -> int:
    """A signal number from what a person wrote: "SIGTERM", "term", "15", "SIGRTMIN+6".

    Names are case-insensitive and the "SIG" prefix is optional; aliases ("SIGIOT") are
    accepted; "RTMIN+k" / "RTMAX-k" name real-time signals.

    Raises:
        ValueError: with a message for a person, naming what was not understood.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return check_signal(text)
    raw = str(text).strip()
    hint = f"give a name such as SIGTERM or TERM, or a number ({_ranges()})"
    if not raw:
        raise ValueError(f"no signal given: {hint}")
    try:
        number = int(raw)
    except ValueError:
        pass
    else:
        if not is_signal(number):
            raise ValueError(f"{raw!r} is not a signal number (valid: {_ranges()})")
        return number
    name = raw.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    for base_name, base in (("SIGRTMIN", _RTMIN), ("SIGRTMAX", _RTMAX)):
        if base and name.startswith(base_name) and name != base_name:
            rest = name[len(base_name):].replace(" ", "")
            op, digits = rest[:1], rest[1:]
            if op in "+-" and digits.isdigit():
                number = base + (int(digits) if op == "+" else -int(digits))
                if _RTMIN <= number <= _RTMAX and is_signal(number):
                    return number
            raise ValueError(
                f"{raw!r} is not a real-time signal: SIGRTMIN+k and SIGRTMAX-k must lie "
                f"between SIGRTMIN ({_RTMIN}) and SIGRTMAX ({_RTMAX})"
            )
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {raw!r}: {hint}") from None


def _named(*names: str) -> frozenset[int]:
    return frozenset(int(getattr(signal, n)) for n in names if hasattr(signal, n))


_NOT_STOP_SIGNALS: dict[frozenset[int], str] = {
    _named("SIGKILL", "SIGSTOP"): "it cannot be caught",
    _named("SIGCHLD", "SIGURG", "SIGWINCH", "SIGCONT"): (
        "it comes in normal operation (a rank exiting, a terminal resized)"
    ),
    _named("SIGTSTP", "SIGTTIN", "SIGTTOU"): "it is job control, not a request to stop",
    _named("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGTRAP", "SIGSYS", "SIGABRT"): (
        "it reports a fault of rankvisor itself"
    ),
}
"""Signals that cannot mean "stop the run", with why: handling them would make a run end
by itself (SIGCHLD comes the first time a rank exits) or hang (a fault handler returning)."""


def stop_signal_names() -> str:
    """The signals that may stop a run, for an error message ("SIGHUP, SIGINT, ...")."""
    refused = frozenset().union(*_NOT_STOP_SIGNALS)
    plain = [
        signal_name(n) for n in sorted(_VALID) if n not in refused and not _RTMIN <= n <= _RTMAX
    ]
    if _RTMIN and _RTMAX:
        plain.append("SIGRTMIN..SIGRTMAX")
    return ", ".join(plain)


def check_stop_signal(signum: int) -> int:
    """``signum`` if it can mean "stop the run" when it reaches rankvisor.

    The accepted ones are those whose default action ends a process and that come from
    outside (a person, a scheduler, a terminal closing): SIGTERM, SIGINT, SIGHUP, SIGUSR1...

    Raises:
        ValueError: naming why it cannot, and what is accepted.
    """
    n = check_signal(signum)
    for group, why in _NOT_STOP_SIGNALS.items():
        if n in group:
            raise ValueError(
                f"{signal_name(n)} cannot stop a run: {why}; accepted: {stop_signal_names()}"
            )
    return n
