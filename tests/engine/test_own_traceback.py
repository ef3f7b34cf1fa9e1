"""A rank's own traceback, read from its stderr file, past torch's log lines at exit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rankvisor.engine.forensics.own_traceback import own_traceback_before
from rankvisor.engine.logfile.torch_log import is_torch_log_line

_RAISED = (
    "Traceback (most recent call last):\n"
    '  File "job.py", line 3, in <module>\n'
    "[rank2]: RuntimeError: Timed out waiting 3000ms for send operation to complete\n"
)
_SERVER = (
    "[rank2]:[W1201 19:30:13.696085449 WorkerServer.cpp:144] [c10d] Server shutting down\n"
    "[rank2]:[W1201 19:30:13.700275068 WorkerServer.cpp:139] [c10d] Server exited\n"
)


def _written(tmp_path: Path, text: str) -> tuple[str, int]:
    path = tmp_path / "stderr.log"
    path.write_text(text)
    return str(path), os.stat(path).st_mtime_ns


def test_torch_s_server_lines_after_the_traceback_are_skipped(tmp_path: Path) -> None:
    path, mtime = _written(tmp_path, _RAISED + _SERVER)
    assert own_traceback_before(path, mtime).endswith("RuntimeError: Timed out waiting 3000ms "
                                                      "for send operation to complete")
    assert all(is_torch_log_line(ln) for ln in _SERVER.splitlines())
    assert not any(is_torch_log_line(ln) for ln in _RAISED.splitlines())


def test_written_after_the_bound_or_not_an_exception_is_not_own(tmp_path: Path) -> None:
    path, mtime = _written(tmp_path, _RAISED)
    assert own_traceback_before(path, mtime - 1) == ""
    assert own_traceback_before(path, None) == ""
    path, mtime = _written(tmp_path, _RAISED + "KeyboardInterrupt\n")
    assert own_traceback_before(path, time.time_ns() + 10**9) == ""
    path, mtime = _written(tmp_path, "step 4\n" + _SERVER)
    assert own_traceback_before(path, mtime) == ""


def test_a_rank_that_raised_then_died_of_sigabrt_is_told_by_its_exception(
    tmp_path: Path,
) -> None:
    # torch's threads may end a rank that raised with SIGABRT on its way out: status.json's
    # message is its exception, not "Signal 6 (SIGABRT) received by PID".
    from rankvisor.engine.control.status import failure_message
    from rankvisor.engine.errors import ProcessFailure

    path, _ = _written(tmp_path, _RAISED + _SERVER + "terminate called without an active "
                       "exception\n")
    aborted = ProcessFailure(3, 4242, -6, "")
    assert failure_message(aborted, path).endswith("send operation to complete")
    stopped = ProcessFailure(3, 4242, -15, "", caused_by_us=True)
    assert failure_message(stopped, path).startswith("Signal 15 (SIGTERM)")


_ABORTED_BY_A_PEER = (
    "terminate called after throwing an instance of 'gloo::IoException'\n"
    "  what():  [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
    "peer [10.0.0.2]:47466\n"
)
_C10_BACKTRACE = "".join(f"frame #{i}: <unknown function> + 0x{i:x}0 (libtorch.so)\n"
                         for i in range(50))


@pytest.mark.parametrize("after", [
    pytest.param(_ABORTED_BY_A_PEER, id="gloo-io-exception"),
    pytest.param(_SERVER + _ABORTED_BY_A_PEER, id="server-lines-then-abort"),
    pytest.param("terminate called after throwing an instance of 'c10::Error'\n  what():  "
                 "boom\nException raised from run at x.cpp:1 (most recent call first):\n"
                 + _C10_BACKTRACE, id="c10-error-with-a-long-backtrace"),
])
def test_the_runtime_s_terminate_and_what_follows_it_are_not_the_rank_s(
    tmp_path: Path, after: str,
) -> None:
    # A rank that raised may be aborted on its way out by the connection its peers closed
    # when they went down with it: the exception it raised is still what it said last.
    from rankvisor.engine.control.status import failure_message
    from rankvisor.engine.errors import ProcessFailure
    from rankvisor.engine.forensics.own_traceback import raised_line

    path, mtime = _written(tmp_path, _RAISED + after)
    assert raised_line(path).endswith("send operation to complete")
    assert own_traceback_before(path, mtime).endswith("send operation to complete")
    assert failure_message(ProcessFailure(2, 4242, -6, ""), path).endswith(
        "send operation to complete")
    # A rank that only aborted (no exception of its own) says nothing of its own.
    path, _ = _written(tmp_path, "step 9\n" + after)
    assert raised_line(path) == ""


def test_a_traceback_the_stop_signal_cut_short_is_own(tmp_path: Path) -> None:
    # Python writes a traceback a line at a time: our SIGTERM can end the rank between its
    # frames and its exception line. It had raised on its own all the same.
    from rankvisor.engine.forensics.own_traceback import CUT_SHORT

    frames = ('Traceback (most recent call last):\n  File "input_all.py", line 5, in <module>\n'
              '    input("name? ")\n    ^^^^^^^^^^^^^^^\n')
    for cut in (frames, frames.split("\n")[0] + "\n", "[rank0]:" + frames.split("\n")[0]
                + "\n[rank0]:  File \"x.py\", line 1, in <module>\n"):
        path, mtime = _written(tmp_path, "ready\n" + cut)
        assert own_traceback_before(path, mtime) == CUT_SHORT, cut
        assert own_traceback_before(path, mtime - 1) == ""
    # Frames then a line of another kind (the job went on printing) is no cut traceback.
    path, mtime = _written(tmp_path, frames + "step 5\n")
    assert own_traceback_before(path, mtime) == ""


_SENT = 10**18  # when our stop signal went (ns); the stderr files are dated around it


@pytest.mark.parametrize(("written", "caught", "exited", "own"), [
    # Raised, then exited 1 the moment our SIGTERM reached its shutdown (it may have had a
    # handler, or we could not tell): its own failure (the gloo timeout that CI met).
    (_SENT - 10**8, None, _SENT + 10**6, True),
    (_SENT - 10**8, True, _SENT + 10**6, True),
    # A handler of ours-to-catch printed its traceback after the signal: ours.
    (_SENT + 10**6, True, _SENT + 10**7, False),
    (_SENT + 10**6, None, _SENT + 10**7, False),
    # No handler: the signal ended it on arrival, so what it wrote before its exit counts.
    (_SENT + 10**6, False, _SENT + 10**7, True),
    (_SENT + 10**8, False, _SENT + 10**7, False),
], ids=["raised-before-unknown", "raised-before-caught", "handler-printed-after",
        "printed-after-unknown", "no-handler-cut-shutdown", "written-after-exit"])
def test_a_rank_that_raised_before_our_stop_signal_failed_on_its_own(
    tmp_path: Path, written: int, caught: bool | None, exited: int, own: bool
) -> None:
    from rankvisor.engine.forensics.own_traceback import raised_before_stop

    path, _ = _written(tmp_path, _RAISED + _SERVER)
    os.utime(path, ns=(written, written))
    assert raised_before_stop(path, _SENT, caught, exited) is own
    assert raised_before_stop(path, None, caught, exited) is False  # we sent no stop
