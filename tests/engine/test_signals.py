"""engine.names.signals: one name for every valid signal, and text a person wrote."""

from __future__ import annotations

import signal

import pytest
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.names.signals import (
    check_signal,
    default_action,
    exit_signal_name,
    is_signal,
    kills_by_default,
    parse_signal,
    signal_name,
)

pytestmark = pytest.mark.processes

RTMIN, RTMAX = int(signal.SIGRTMIN), int(signal.SIGRTMAX)


def test_every_valid_signal_has_a_name_that_reads_back_as_itself() -> None:
    for sig in signal.valid_signals():
        name = signal_name(sig)
        assert name.startswith("SIG"), name
        assert parse_signal(name) == sig
        assert parse_signal(name.lower().removeprefix("sig")) == sig
        assert parse_signal(str(int(sig))) == sig


def test_standard_and_real_time_names() -> None:
    assert signal_name(signal.SIGTERM) == "SIGTERM"
    assert signal_name(9) == "SIGKILL"
    assert signal_name(signal.SIGABRT) == "SIGABRT"  # the canonical name, not SIGIOT
    assert signal_name(RTMIN) == "SIGRTMIN" and signal_name(RTMAX) == "SIGRTMAX"
    assert signal_name(RTMIN + 6) == "SIGRTMIN+6"
    assert signal_name(RTMAX - 1) == "SIGRTMAX-1"
    # Named from the nearer end of the range, as ``kill -l`` does.
    middle = (RTMAX - RTMIN) // 2
    assert signal_name(RTMIN + middle) == f"SIGRTMIN+{middle}"
    assert signal_name(RTMIN + middle + 1) == f"SIGRTMAX-{RTMAX - RTMIN - middle - 1}"


def test_invalid_numbers_are_refused_with_what_is_valid() -> None:
    for bad in (0, -1, 999, RTMAX + 1):
        assert not is_signal(bad)
        with pytest.raises(ValueError, match=rf"^{bad} is not a signal number \(valid: 1-31"):
            check_signal(bad)
        with pytest.raises(ValueError, match="is not a signal number"):
            signal_name(bad)
    for not_a_number in ("TERM", 15.0, True, None):
        assert not is_signal(not_a_number)
        with pytest.raises(ValueError, match="is not a signal number"):
            check_signal(not_a_number)
    assert check_signal(signal.SIGTERM) == 15 and type(check_signal(signal.SIGTERM)) is int


def test_text_a_person_wrote() -> None:
    assert parse_signal("SIGTERM") == parse_signal(" term ") == parse_signal("15") == 15
    assert parse_signal("sigiot") == signal.SIGABRT  # aliases too
    assert parse_signal("RTMIN+6") == parse_signal("SIGRTMIN + 6") == RTMIN + 6
    assert parse_signal("SIGRTMAX-2") == RTMAX - 2
    assert parse_signal(signal.SIGUSR1) == signal.SIGUSR1
    for text, words in (
        ("", "no signal given"),
        ("SIGFOO", "unknown signal 'SIGFOO': give a name such as SIGTERM"),
        ("0", "'0' is not a signal number"),
        ("-9", "'-9' is not a signal number"),
        ("SIGRTMIN+99", "is not a real-time signal"),
        ("SIGRTMAX+1", "is not a real-time signal"),
        ("SIGRTMIN+x", "is not a real-time signal"),
    ):
        with pytest.raises(ValueError) as e:
            parse_signal(text)
        assert words in str(e.value), (text, str(e.value))


def test_exit_codes_and_process_failures() -> None:
    assert exit_signal_name(-9) == "SIGKILL"
    assert exit_signal_name(-(RTMIN + 6)) == "SIGRTMIN+6"
    assert exit_signal_name(0) is exit_signal_name(1) is exit_signal_name(None) is None
    assert exit_signal_name(-999) is None
    failure = ProcessFailure(0, 77, -(RTMIN + 6), "/nonexistent")
    assert failure.signal_name() == "SIGRTMIN+6"
    assert f"Signal {RTMIN + 6} (SIGRTMIN+6) received by PID 77" == failure.message
    assert ProcessFailure(0, 77, 1, "/nonexistent").signal_name() == "<N/A>"


def test_default_actions_say_what_an_unhandled_signal_does() -> None:
    # SIGUSR1 "for stack dumps" and SIGQUIT "for faulthandler" both end a process that has no
    # handler: a person picking one must be told so.
    assert default_action(signal.SIGUSR1) == "terminate"
    assert default_action(signal.SIGQUIT) == "core"
    assert default_action(signal.SIGSTOP) == "stop"
    assert default_action(signal.SIGCONT) == "continue"
    assert default_action(signal.SIGCHLD) == "ignore"
    assert default_action(RTMIN + 3) == "terminate"
    assert kills_by_default(signal.SIGINT) and kills_by_default(signal.SIGSEGV)
    assert not kills_by_default(signal.SIGWINCH) and not kills_by_default(signal.SIGTSTP)
    with pytest.raises(ValueError):
        default_action(0)


@pytest.mark.parametrize(
    "sig", [signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM]
)
def test_the_table_matches_a_real_process_without_handlers(sig: signal.Signals) -> None:
    """A real process that installed no handler (``sleep``) ends as the table says."""
    import subprocess

    assert kills_by_default(sig)
    # ``sleep`` installs no handlers; the signal must end it on its own.
    proc = subprocess.Popen(["sleep", "60"], preexec_fn=_default_dispositions)
    try:
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == -sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _default_dispositions() -> None:
    """In the child before exec: every signal back to its default action (pytest or the shell
    may have left some ignored, which exec would keep)."""
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
