"""SubprocessContext and start_processes with binary ranks: real processes end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine import (
    DefaultLogsSpecs,
    SignalException,
    Std,
    SubprocessContext,
    start_processes,
)
from rankvisor.engine.errors import ChildFailedError

from tests.conftest import BIN, PYTHON, pid_alive, wait_until

pytestmark = pytest.mark.processes


def _start(tmp_path: Path, scripts: list[list[str]], **specs: Any) -> SubprocessContext:
    specs.setdefault("redirects", Std.ALL)
    ctx = start_processes(
        name="w",
        entrypoint=PYTHON,
        args={r: tuple(argv) for r, argv in enumerate(scripts)},
        envs={r: {"LOCAL_RANK": str(r)} for r in range(len(scripts))},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path), **specs),
    )
    assert isinstance(ctx, SubprocessContext)
    return ctx


def _exit_with(*args: str) -> list[str]:
    return [str(BIN / "exit_with.py"), *args]


def test_success_result_and_logs(tmp_path: Path) -> None:
    ctx = _start(tmp_path, [_exit_with(), _exit_with()])
    result = ctx.wait()
    assert result is not None and not result.is_failed()
    assert result.return_values == {0: None, 1: None}
    for r in (0, 1):
        assert Path(result.stdouts[r]).read_text() == f"out from rank {r}\n"
        assert Path(result.stderrs[r]).read_text() == f"err from rank {r}\n"
    assert set(ctx.pids()) == {0, 1}


def test_failure_lists_our_teardown_kills_apart_as_stopped(tmp_path: Path) -> None:
    ctx = _start(tmp_path, [_exit_with("--sleep", "600"), _exit_with("--code", "3")])
    result = ctx.wait()
    assert result is not None and result.return_values == {}
    # torch lists both as failures; the rank our teardown killed did not fail.
    assert set(result.failures) == {1} and set(result.stopped) == {0}
    real, ours = result.failures[1], result.stopped[0]
    assert (real.exitcode, real.caused_by_us) == (3, False)
    assert (ours.exitcode, ours.caused_by_us) == (-signal.SIGTERM, True)
    assert ours.message == f"Signal 15 (SIGTERM) received by PID {ours.pid}"
    assert ChildFailedError("w", result.failures).get_first_failure()[0] == 1


def test_a_rank_that_exited_0_before_the_teardown_is_a_success(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    ctx = _start(
        tmp_path, [_exit_with("--after", str(mark), "--code", "1"), _exit_with("--mark", str(mark))]
    )
    pids = ctx.pids()
    # Both are gone before wait() looks: the teardown has nobody to signal.
    wait_until(lambda: not pid_alive(pids[0]) and not pid_alive(pids[1]))
    result = ctx.wait()
    assert result is not None
    assert set(result.failures) == {0} and result.stopped == {}
    assert Path(result.stdouts[1]).read_text() == "out from rank 1\n"


def test_signal_death_message(tmp_path: Path) -> None:
    ctx = _start(tmp_path, [_exit_with("--signal", "SIGKILL")])
    result = ctx.wait()
    assert result is not None
    failure = result.failures[0]
    assert failure.exitcode == -9 and not failure.caused_by_us
    assert failure.message == f"Signal 9 (SIGKILL) received by PID {failure.pid}"


def test_recorded_exception_is_read_back(tmp_path: Path) -> None:
    ctx = _start(tmp_path, [[str(BIN / "raise_recorded.py"), "nope"]])
    result = ctx.wait()
    assert result is not None
    failure = result.failures[0]
    assert failure.exitcode == 1 and failure.error_file == ctx.error_files[0]
    assert failure.message["message"] == "ValueError: nope"  # type: ignore[index]


def test_wait_notices_an_exit_without_sleeping_the_period(tmp_path: Path) -> None:
    """torch sleeps `period` between polls; we wake on the exit (ratio, not a wall time)."""
    ctx = _start(tmp_path, [_exit_with("--sleep", "0.2")])
    t0 = time.monotonic()
    result = ctx.wait(period=30)
    elapsed = time.monotonic() - t0
    assert result is not None and not result.is_failed()
    assert elapsed / 30 < 0.5


def test_wait_timeout_returns_none_and_zero_polls(tmp_path: Path) -> None:
    ctx = _start(tmp_path, [_exit_with("--sleep", "600")])
    try:
        assert ctx.wait(0) is None
        assert ctx.wait(timeout=0.2, period=0.05) is None
    finally:
        ctx.close()


def test_close_escalates_to_sigkill_and_is_bounded(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    ctx = _start(tmp_path, [[str(BIN / "ignore_sigterm.py"), str(pidfile)]])
    wait_until(pidfile.exists)
    pid = int(pidfile.read_text())
    timeout = 0.5
    t0 = time.monotonic()
    ctx.close(timeout=timeout)  # type: ignore[arg-type]
    elapsed = time.monotonic() - t0
    assert not pid_alive(pid)
    assert ctx.subprocess_handlers[0].rank_process.exitcode == -signal.SIGKILL
    assert 1 <= elapsed / timeout < 4  # waited the grace, then SIGKILL, then little more
    t0 = time.monotonic()
    ctx.close()  # idempotent and immediate
    assert time.monotonic() - t0 < timeout


def test_close_takes_the_whole_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    ctx = _start(tmp_path, [[str(BIN / "spawn_tree.py"), str(pidfile)]])
    wait_until(pidfile.exists)
    child, escaped = (int(x) for x in pidfile.read_text().split())
    ctx.close()
    wait_until(lambda: not pid_alive(child) and not pid_alive(escaped))


def test_validation_before_anything_is_created(tmp_path: Path) -> None:
    with pytest.raises(
        RuntimeError, match=r"envs, local rank mapping mismatch, expected: \{0, 1\}"
    ):
        start_processes(
            "w", PYTHON, {0: (), 1: ()}, {0: {}}, DefaultLogsSpecs(log_dir=str(tmp_path))
        )
    with pytest.raises(RuntimeError, match="args, local rank mapping mismatch"):
        start_processes(
            "w", PYTHON, {0: (), 2: ()}, {0: {}, 1: {}}, DefaultLogsSpecs(log_dir=str(tmp_path))
        )
    assert list(tmp_path.iterdir()) == []  # no run dir was made


@pytest.mark.parametrize("kind", ["missing", "not_executable"])
def test_bad_binary_names_path_and_rank_and_starts_nothing(tmp_path: Path, kind: str) -> None:
    program = tmp_path / "prog"
    if kind == "not_executable":
        program.write_text("#!/bin/sh\n")
    before = set(os.listdir("/proc"))
    with pytest.raises(OSError) as info:
        start_processes(
            "w",
            str(program),
            {0: (), 1: ()},
            {0: {}, 1: {}},
            DefaultLogsSpecs(log_dir=str(tmp_path / "logs")),
        )
    assert isinstance(info.value, FileNotFoundError if kind == "missing" else PermissionError)
    assert "local rank 0" in str(info.value) and str(program) in str(info.value)
    children = [
        p for p in set(os.listdir("/proc")) - before if p.isdigit() and _ppid(int(p)) == os.getpid()
    ]
    assert children == []


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_failure_while_starting_rank_k_closes_the_earlier_ranks(tmp_path: Path) -> None:
    """torch leaves rank 0 running and unreachable when rank 1 cannot start."""
    ctx = SubprocessContext(
        name="w",
        entrypoint="sleep",
        args={0: ("600",), 1: ("600",)},
        envs={0: {}, 1: {"BAD": "nul\0byte"}},  # Popen refuses rank 1's environment
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)),
    )
    with pytest.raises(ValueError, match="null byte"):
        ctx.start()
    assert set(ctx.pids()) == {0}
    assert not pid_alive(ctx.pids()[0])
    ctx.close()


def test_signal_handlers_installed_then_restored(tmp_path: Path) -> None:
    """torch never restores the handlers it installs."""
    before = signal.getsignal(signal.SIGTERM)
    ctx = _start(tmp_path, [_exit_with("--sleep", "600")])
    try:
        assert signal.getsignal(signal.SIGTERM) is not before
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(SignalException) as info:
            ctx.wait()
        assert info.value.sigval == signal.SIGTERM
        ctx.close(info.value.sigval)
    finally:
        ctx.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_signals_to_handle_from_env_and_not_off_the_main_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGUSR2, NOT_A_SIGNAL")
    before = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM)}
    ctx = _start(tmp_path, [_exit_with()])
    assert signal.getsignal(signal.SIGUSR2) is not before[signal.SIGUSR2]
    assert signal.getsignal(signal.SIGTERM) is before[signal.SIGTERM]
    ctx.wait()
    assert signal.getsignal(signal.SIGUSR2) is before[signal.SIGUSR2]

    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(_start(tmp_path / "t", [_exit_with()])))
    t.start()
    t.join()
    assert signal.getsignal(signal.SIGUSR2) is before[signal.SIGUSR2]
    box[0].wait()


def test_tee_prefixes_and_duplicate_filters(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    say = str(BIN / "say.py")
    ctx = start_processes(
        name="w",
        entrypoint=PYTHON,
        args={0: (say, "out:apple keep", "out:plain"), 1: (say, "out:apple too", "err:e1")},
        envs={0: {}, 1: {}},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path), tee=Std.ALL),
        log_line_prefixes={1: "[custom-1]:"},
        duplicate_stdout_filters=["apple"],
        duplicate_stderr_filters=["nothing matches"],
    )
    result = ctx.wait()
    assert result is not None and not result.is_failed()
    out, err = capfd.readouterr()
    assert sorted(out.splitlines()) == ["[custom-1]:apple too", "[w0]:apple keep", "[w0]:plain"]
    assert err.splitlines() == ["[custom-1]:e1"]
    attempt = Path(result.stdouts[0]).parent.parent
    assert sorted((attempt / "filtered_stdout.log").read_text().splitlines()) == [
        "[custom-1]:apple too",
        "[w0]:apple keep",
    ]
    assert (attempt / "filtered_stderr.log").read_text() == ""
    assert ctx.filtered_stdout is not None and ctx.filtered_stdout.closed


def test_local_ranks_filter_keeps_the_filtered_ranks_output_on_disk(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """torch sends rank 1's console output to /dev/null; we write it to its file."""
    say = str(BIN / "say.py")
    ctx = start_processes(
        name="w",
        entrypoint=PYTHON,
        args={0: (say, "out:zero"), 1: (say, "out:one")},
        envs={0: {}, 1: {}},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path), local_ranks_filter={0}),
    )
    result = ctx.wait()
    assert result is not None
    assert capfd.readouterr().out == "zero\n"
    assert Path(result.stdouts[1]).read_text() == "one\n"


def test_forgotten_close_with_tee_does_not_hang_the_interpreter(tmp_path: Path) -> None:
    """With torch this program never exits."""
    code = f"""
import sys
from rankvisor.engine import DefaultLogsSpecs, Std, start_processes
ctx = start_processes("w", "sleep", {{0: ("600",)}}, {{0: {{}}}},
                      DefaultLogsSpecs(log_dir={str(tmp_path)!r}, tee=Std.ALL))
print(ctx.pids()[0], flush=True)
"""
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    wait_until(lambda: not pid_alive(int(out.stdout.split()[0])))


def test_no_file_handles_left_open(tmp_path: Path) -> None:
    """torch keeps the log files of exited ranks open until close()."""

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    _start(tmp_path / "warm", [_exit_with()]).wait()
    before = fds()
    for i in range(3):
        ctx = _start(tmp_path / str(i), [_exit_with(), _exit_with()])
        assert ctx.wait() is not None
    assert fds() == before


def test_args_are_stringified(tmp_path: Path) -> None:
    echo = "import sys; print(*sys.argv[1:], sep=chr(10))"
    ctx = start_processes(
        "w",
        PYTHON,
        {0: ("-c", echo, 1, 2.5, ["x"])},
        {0: {}},
        DefaultLogsSpecs(log_dir=str(tmp_path), redirects=Std.OUT),
    )
    result = ctx.wait()
    assert result is not None
    assert Path(result.stdouts[0]).read_text() == "1\n2.5\n['x']\n"
