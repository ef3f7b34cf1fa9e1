"""MultiprocessContext: function ranks with real processes, real signals and real files."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest
from rankvisor.engine import DefaultLogsSpecs, RunProcsResult, Std, start_processes
from rankvisor.engine.errors import ChildFailedError
from rankvisor.engine.multiprocess_context import MultiprocessContext

from tests.conftest import pid_alive, wait_until
from tests.engine import mp_funcs

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]


def _start(
    tmp_path: Path,
    fn: Callable[..., Any],
    args: dict[int, tuple[Any, ...]],
    *,
    envs: dict[int, dict[str, str]] | None = None,
    start_method: str = "spawn",
    redirects: Std = Std.ALL,
) -> MultiprocessContext:
    ctx = start_processes(
        name="trainer",
        entrypoint=fn,
        args=args,
        envs=envs or {r: {} for r in args},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path / "logs"), redirects=redirects),
        start_method=start_method,
    )
    assert isinstance(ctx, MultiprocessContext)
    return ctx


def _finish(ctx: MultiprocessContext) -> RunProcsResult:
    # Bounded: a hung rank must fail the test, not hang it (pytest-timeout is the backstop).
    result = ctx.wait(timeout=60)
    assert result is not None, "the run did not finish within 60 s"
    return result


def _read(path: str) -> str:
    return Path(path).read_text()


# -- success ---------------------------------------------------------------------------------


def test_return_values_and_per_rank_env(tmp_path: Path) -> None:
    envs = {r: {"LOCAL_RANK": str(r)} for r in range(2)}
    ctx = _start(tmp_path, mp_funcs.echo, {0: ("a",), 1: ({"b": [1]},)}, envs=envs)
    result = _finish(ctx)
    assert not result.is_failed()
    assert result.return_values == {0: "a", 1: {"b": [1]}}
    for rank in range(2):
        lines = _read(result.stdouts[rank]).splitlines()
        # The module of the function is imported after the redirect (torch: to the console).
        assert lines[0].startswith(mp_funcs.IMPORT_MARK)
        assert f"echo LOCAL_RANK={rank}" in lines[1]


def test_c_printf_and_os_system_land_in_stdout_log(tmp_path: Path) -> None:
    result = _finish(_start(tmp_path, mp_funcs.all_outputs, {0: (0,), 1: (1,)}))
    assert result.return_values == {0: 0, 1: 1}
    for rank in range(2):
        out = _read(result.stdouts[rank]).splitlines()
        assert out[1:] == [f"python stdout {rank}", f"c printf {rank}", f"os.system {rank}"]
        assert _read(result.stderrs[rank]) == f"python stderr {rank}\n"


def test_env_is_applied_before_the_users_module_is_imported(tmp_path: Path) -> None:
    envs = {0: {"RV_MP_MARK": "set-for-rank-0"}}
    ctx = _start(tmp_path, mp_funcs.env_at_import_and_call, {0: ("RV_MP_MARK",)}, envs=envs)
    result = _finish(ctx)
    assert result.return_values == {0: ("set-for-rank-0", "set-for-rank-0")}


def test_sys_exit_zero_is_a_return_of_none(tmp_path: Path) -> None:
    result = _finish(_start(tmp_path, mp_funcs.exit_with, {0: (0,)}))
    assert result.return_values == {0: None} and not result.is_failed()


def test_return_value_larger_than_any_pipe(tmp_path: Path) -> None:
    # torch pushes return values through a pipe the parent drains while polling; ours go
    # through a file written before the exit, so size cannot block either side.
    nbytes = 80 * 1024 * 1024
    result = _finish(_start(tmp_path, mp_funcs.big_return, {0: (nbytes,), 1: (3,)}))
    assert len(result.return_values[0]) == nbytes
    assert result.return_values[1] == b"xxx"


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_other_start_methods(tmp_path: Path, start_method: str) -> None:
    result = _finish(_start(tmp_path, mp_funcs.echo, {0: (1,), 1: (2,)}, start_method=start_method))
    assert result.return_values == {0: 1, 1: 2}
    assert "echo LOCAL_RANK=" in _read(result.stdouts[1])


def test_fork_runs_a_closure(tmp_path: Path) -> None:
    # Under fork nothing is pickled, so a local function works, as with torch.
    offset = 40

    def add(x: int) -> int:
        return x + offset

    result = _finish(_start(tmp_path, add, {0: (1,), 1: (2,)}, start_method="fork"))
    assert result.return_values == {0: 41, 1: 42}


# -- failures --------------------------------------------------------------------------------


def test_exception_exits_1_with_error_json_and_traceback_in_stderr_log(tmp_path: Path) -> None:
    result = _finish(_start(tmp_path, mp_funcs.raise_error, {0: ("boom",)}))
    failure = result.failures[0]
    assert failure.exitcode == 1 and not failure.caused_by_us
    assert isinstance(failure.message, dict)
    assert failure.message["message"] == "RuntimeError: boom"
    assert "raise_error" in failure.message["extraInfo"]["py_callstack"]
    # torch's stderr.log has only the first line: its redirect ends before the traceback.
    err = _read(result.stderrs[0])
    assert err.startswith("about to raise boom\nTraceback (most recent call last):\n")
    assert err.endswith("RuntimeError: boom\n")
    assert "_mp_bootstrap" not in err  # the user's frames, not ours


def test_sys_exit_code_is_the_exit_code(tmp_path: Path) -> None:
    failure = _finish(_start(tmp_path, mp_funcs.exit_with, {0: (3,)})).failures[0]
    assert failure.exitcode == 3
    assert failure.error_file == "<N/A>"  # record writes nothing for SystemExit, as torch


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_signal_death_is_minus_signum(tmp_path: Path, sig: signal.Signals) -> None:
    ctx = _start(tmp_path, mp_funcs.kill_self, {0: (int(sig),)})
    failure = _finish(ctx).failures[0]
    assert failure.exitcode == -sig
    assert failure.message == f"Signal {int(sig)} ({sig.name}) received by PID {failure.pid}"
    if sig == signal.SIGSEGV:
        # record() enabled faulthandler on fd 2, which is stderr.log for the whole life.
        assert "Segmentation fault" in _read(ctx.stderrs[0])


def test_os_exit_zero_is_a_failure_that_says_why(tmp_path: Path) -> None:
    # torch: neither success nor failure, wait() never returns.
    result = _finish(_start(tmp_path, mp_funcs.hard_exit_zero, {0: ()}))
    failure = result.failures[0]
    assert failure.exitcode == 0
    assert "without returning from hard_exit_zero" in str(failure.message)
    assert result.return_values == {}


def test_keyboard_interrupt_is_a_sigint_death(tmp_path: Path) -> None:
    # torch swallows KeyboardInterrupt into exit 0 (and then hangs, as for os._exit(0)).
    ready = tmp_path / "ready"
    ctx = _start(tmp_path, mp_funcs.sleep_forever, {0: (str(ready),)})
    wait_until(ready.exists)
    os.kill(ctx.pids()[0], signal.SIGINT)
    failure = _finish(ctx).failures[0]
    assert failure.exitcode == -signal.SIGINT
    assert "KeyboardInterrupt" in _read(ctx.stderrs[0])


def test_every_failure_is_reported_and_teardown_kills_are_stopped(tmp_path: Path) -> None:
    go = tmp_path / "go"
    args = {
        0: (str(go), "raise", 7),
        1: (str(go), "exit", 3),
        2: (str(go), "sleep", 0),  # never fails by itself: we kill it in the teardown
    }
    ctx = _start(tmp_path, mp_funcs.wait_for_file_then, args)
    pids = ctx.pids()
    go.touch()
    # Both failures happen before wait() looks, so neither is a teardown kill.
    wait_until(lambda: not pid_alive(pids[0]) and not pid_alive(pids[1]))
    result = _finish(ctx)
    failures = result.failures
    assert sorted(failures) == [0, 1]  # torch reports one
    assert (failures[0].exitcode, failures[0].caused_by_us) == (1, False)
    assert (failures[1].exitcode, failures[1].caused_by_us) == (3, False)
    # The rank our teardown killed did not fail: it is listed apart.
    assert sorted(result.stopped) == [2]
    assert (result.stopped[2].exitcode, result.stopped[2].caused_by_us) == (-signal.SIGTERM, True)
    assert result.return_values == {}
    root_rank, _ = ChildFailedError("trainer", failures).get_first_failure()
    assert root_rank in (0, 1)


def test_a_rank_caught_by_the_teardown_after_returning_succeeded(tmp_path: Path) -> None:
    # Rank 1 returns, then stays in its interpreter's shutdown (an exit handler) until the
    # teardown that rank 0's failure starts kills it: its function finished, so it is
    # neither a failure nor stopped. Without the handler the same race happens now and
    # then, decided by how soon the teardown comes; here it happens every time.
    marker = str(tmp_path / "returned")
    ctx = _start(
        tmp_path, mp_funcs.fail_after_peer, {0: (marker, "raise"), 1: (marker, "linger")}
    )
    result = _finish(ctx)
    assert sorted(result.failures) == [0] and result.failures[0].exitcode == 1
    assert result.stopped == {}
    assert result.return_values == {}  # the run failed
    assert mp_funcs.PEER_LINE in _read(result.stdouts[1])
    assert not pid_alive(ctx.pids()[1])


def test_a_rank_stopped_before_returning_is_stopped(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ctx = _start(tmp_path, mp_funcs.sleep_forever, {0: (str(ready),), 1: (str(ready),)})
    wait_until(ready.exists)
    ctx.close(timeout=5)
    result = ctx.wait(timeout=0)
    assert result is not None and not result.is_failed()
    assert sorted(result.stopped) == [0, 1]
    assert all(f.caused_by_us and f.exitcode == -signal.SIGTERM for f in result.stopped.values())
    assert result.return_values == {}


def test_unpicklable_argument_starts_nothing(tmp_path: Path) -> None:
    before = set(multiprocessing.active_children())
    with pytest.raises(Exception, match="pickle"):
        _start(tmp_path, mp_funcs.echo, {0: (1,), 1: (lambda: 0,)})
    assert set(multiprocessing.active_children()) == before


def test_start_twice_raises_torchs_error(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ctx = _start(tmp_path, mp_funcs.sleep_forever, {0: (str(ready),)})
    try:
        with pytest.raises(ValueError, match="already initialized"):
            ctx.start()
    finally:
        ctx.close(timeout=5)


def test_wait_with_timeout_returns_none_while_running(tmp_path: Path) -> None:
    ctx = _start(tmp_path, mp_funcs.sleep_forever, {0: ()})
    try:
        assert ctx.wait(timeout=0) is None
        assert ctx.wait(timeout=0.2, period=0.05) is None
    finally:
        ctx.close(timeout=5)


# -- process control -------------------------------------------------------------------------


def test_each_rank_leads_its_own_session(tmp_path: Path) -> None:
    ctx = _start(tmp_path, mp_funcs.session_info, {0: (), 1: ()})
    result = _finish(ctx)
    assert sorted(result.return_values) == [0, 1]
    for rank, (pid, pgid, sid) in result.return_values.items():
        assert pid == ctx.pids()[rank]
        assert pid == pgid == sid
        assert sid != os.getsid(0)


@pytest.mark.parametrize("new_session", [False, True], ids=["in-group", "own-session"])
def test_close_kills_grandchildren(tmp_path: Path, new_session: bool) -> None:
    # torch signals the rank's pid only, so its children live on. A grandchild that
    # left the group is found among the rank's descendants before the signal.
    pid_file = tmp_path / "grandchild.pid"
    ctx = _start(tmp_path, mp_funcs.with_grandchild, {0: (str(pid_file), new_session)})
    wait_until(pid_file.exists)
    grandchild = int(pid_file.read_text())
    rank_pid = ctx.pids()[0]
    assert pid_alive(grandchild)
    ctx.close(timeout=5)
    assert not pid_alive(rank_pid)
    wait_until(lambda: not pid_alive(grandchild))


def test_close_escalates_to_sigkill(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ctx = _start(tmp_path, mp_funcs.ignore_sigterm, {0: (str(ready),)})
    wait_until(ready.exists)
    ctx.close(timeout=0.5)
    assert not pid_alive(ctx.pids()[0])
    result = ctx.wait(timeout=0)
    assert result is not None and result.failures == {}
    failure = result.stopped[0]
    assert (failure.exitcode, failure.caused_by_us) == (-signal.SIGKILL, True)


def test_numa_binding_sets_the_planned_affinity(tmp_path: Path) -> None:
    from rankvisor.engine.process import numa

    options = numa.NumaOptions(numa.AffinityMode.NODE, should_fall_back_if_binding_fails=True)
    ctx = start_processes(
        name="trainer",
        entrypoint=mp_funcs.affinity,
        args={0: ()},
        envs={0: {}},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path / "logs")),
        numa_options=options,
    )
    planned = numa.plan(options, 1)[0]
    expected = set(planned) if planned is not None else set(os.sched_getaffinity(0))
    assert _finish(ctx).return_values == {0: expected}


_PARENT = textwrap.dedent(
    """
    import sys, time
    from rankvisor.engine import DefaultLogsSpecs, start_processes
    from tests.engine import mp_funcs

    if __name__ == "__main__":
        ctx = start_processes(
            "p", mp_funcs.sleep_forever, {0: (sys.argv[1],)}, {0: {}},
            DefaultLogsSpecs(log_dir=sys.argv[2]),
        )
        print("RANK_PID", ctx.pids()[0], flush=True)
        if sys.argv[3] == "wait":
            ctx.wait()  # SIGTERM turns into an uncaught SignalException here
        else:
            time.sleep(600)  # killed by the test
    """
)


def _parent(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ready), str(tmp_path / "logs"), mode],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # Other lines come first: the parent's import of mp_funcs prints a mark.
    line = ""
    while not line.startswith("RANK_PID"):
        line = proc.stdout.readline()
        assert line, "the parent script ended early"
    rank_pid = int(line.split()[1])
    wait_until(ready.exists, timeout=30)
    return proc, rank_pid


def test_ranks_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    parent, rank_pid = _parent(tmp_path, "sleep")
    parent.kill()  # SIGKILL: no atexit, no close(); only PR_SET_PDEATHSIG is left
    parent.wait(timeout=30)
    wait_until(lambda: not pid_alive(rank_pid))


def test_uncaught_signal_exception_does_not_hang_exit(tmp_path: Path) -> None:
    # torch: the parent hangs at exit for ever, joining ranks that wait for it.
    parent, rank_pid = _parent(tmp_path, "wait")
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 1  # the uncaught SignalException
    wait_until(lambda: not pid_alive(rank_pid))
