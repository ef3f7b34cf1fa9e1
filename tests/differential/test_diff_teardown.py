"""A rank that our teardown stops is not a failure: torch's report against ours.

Two ranks. Rank 0 fails (raises, ``sys.exit(1)``, segfaults; as a function, and as a binary);
rank 1 prints a line and exits 0 at once. Rank 0 fails only once rank 1 has printed (it waits
for a file rank 1 creates right after the line), so the line is in rank 1's log on both sides.

torch reports one failure, rank 0: its function ranks report only the first failure, and its
binary ranks are polled here once both have exited (torch polls once a ``period``, so rank 1
has long finished when it looks). We notice rank 0's exit within a millisecond and often
catch rank 1 still exiting, in its interpreter's shutdown; that must not change the failures.
So each scenario runs several times on our side racing, and once more after both ranks have
exited (nobody is left to stop).

What is right for rank 1, decided here, whatever the timing:

* never a failure;
* a function rank whose function returned before our signal reached it succeeded (its return
  value was on disk), even if the signal then ends its shutdown: not stopped either. Only a
  signal that reached it before it returned (rare: the window is the write of its return
  value) makes it stopped;
* a binary rank cannot tell us it was done: if the teardown's SIGTERM caught it exiting, it
  is stopped (``caused_by_us``, -SIGTERM); if it had exited 0 first, it is a success;
* once both ranks have exited before anyone looks, ``stopped`` is empty (a function rank
  that returned waits for its release, as torch's waits for its parent: there, once rank 0
  is dead, rank 1 is a success).

``tests/engine`` has the deterministic versions (a rank that lingers in its shutdown).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from rankvisor import engine
from rankvisor.engine.errors import ChildFailedError

from tests.conftest import BIN, PYTHON, pid_alive, wait_until
from tests.engine import mp_funcs

pytestmark = [pytest.mark.processes, pytest.mark.torch]

OUR_RACING_RUNS_FUNCTION = 4
"""Runs per function scenario with our wait() racing the ranks (about 1 s each here)."""
OUR_RACING_RUNS_BINARY = 10
"""Runs per binary scenario (a few tenths of a second each); the SIGSEGV case catches rank 1
still exiting in most runs, the exit-1 case in a few."""

FUNCTION_CASES = [("raise", 1), ("exit", 1), ("segfault", -signal.SIGSEGV)]
BINARY_CASES = [
    (["--code", "1"], 1),
    (["--segfault"], -signal.SIGSEGV),
]


def _start_function(impl: Any, log_dir: Path, marker: Path, action: str) -> Any:
    return impl.start_processes(
        name="trainer",
        entrypoint=mp_funcs.fail_after_peer,
        args={0: (str(marker), action), 1: (str(marker), "say")},
        envs={r: {"LOCAL_RANK": str(r)} for r in (0, 1)},
        logs_specs=impl.DefaultLogsSpecs(log_dir=str(log_dir), redirects=impl.Std.ALL),
        # torch's children fork from this process, which has imported torch already: a
        # spawned one imports it again (seconds). Ours spawn, the default.
        start_method="fork" if impl is not engine else "spawn",
    )


def _start_binary(impl: Any, log_dir: Path, marker: Path, fail: list[str]) -> Any:
    script = str(BIN / "exit_with.py")
    return impl.start_processes(
        name="w",
        entrypoint=PYTHON,
        args={0: (script, "--after", str(marker), *fail), 1: (script, "--mark", str(marker))},
        envs={r: {"LOCAL_RANK": str(r)} for r in (0, 1)},
        logs_specs=impl.DefaultLogsSpecs(log_dir=str(log_dir), redirects=impl.Std.ALL),
    )


def _wait_dead(ctx: Any, ranks: list[int]) -> None:
    pids = ctx.pids()
    # Bounded, but generous: the machine may be busy.
    wait_until(lambda: not any(pid_alive(pids[r]) for r in ranks), timeout=90)


def _check_theirs(result: Any, exitcode: int, line: str) -> None:
    assert sorted(result.failures) == [0]
    assert result.failures[0].exitcode == exitcode
    assert line in Path(result.stdouts[1]).read_text()


def _check_ours(result: Any, exitcode: int, line: str, *, function: bool) -> str:
    """Assert what is right for one of our runs; return how rank 1 ended, in a word."""
    assert result is not None
    assert sorted(result.failures) == [0], result.failures
    assert result.failures[0].exitcode == exitcode and not result.failures[0].caused_by_us
    assert ChildFailedError("x", result.failures).get_first_failure()[0] == 0
    assert result.return_values == {}  # the run failed
    assert line in Path(result.stdouts[1]).read_text()
    assert set(result.stopped) <= {1}, result.stopped
    if 1 not in result.stopped:
        return "success"
    stopped = result.stopped[1]
    assert stopped.caused_by_us and stopped.exitcode == -signal.SIGTERM
    return "stopped before returning" if function else "stopped exiting"


@pytest.mark.parametrize(("action", "exitcode"), FUNCTION_CASES, ids=[c[0] for c in FUNCTION_CASES])
def test_function_rank_1_exiting_0_is_no_failure(
    torch_mp: Any, tmp_path: Path, action: str, exitcode: int
) -> None:
    marker = tmp_path / "torch.printed"
    theirs = _start_function(torch_mp, tmp_path / "torch", marker, action)
    try:
        # torch's rank 1 waits for torch's parent after returning; only rank 0 ends alone.
        _wait_dead(theirs, [0])
        _check_theirs(theirs.wait(timeout=60, period=0.1), exitcode, mp_funcs.PEER_LINE)
    finally:
        theirs.close(timeout=5)

    for run in range(OUR_RACING_RUNS_FUNCTION):
        marker = tmp_path / f"ours{run}.printed"
        ours = _start_function(engine, tmp_path / f"ours{run}", marker, action)
        _check_ours(ours.wait(timeout=60), exitcode, mp_funcs.PEER_LINE, function=True)

    # Ours wait for their release after returning too, as torch's do: once rank 0 is dead
    # and rank 1 has returned (its value on disk: it may still be writing it when rank 0,
    # which only waited for its marker, is already dead), rank 1 waits; the teardown then
    # finds its value on disk.
    marker = tmp_path / "after.printed"
    ours = _start_function(engine, tmp_path / "after", marker, action)
    _wait_dead(ours, [0])
    wait_until(lambda: os.path.exists(ours._return_file(1)), timeout=90)
    result = ours.wait(timeout=60)
    assert _check_ours(result, exitcode, mp_funcs.PEER_LINE, function=True) == "success"


@pytest.mark.parametrize(("fail", "exitcode"), BINARY_CASES, ids=["exit1", "segfault"])
def test_binary_rank_1_exiting_0_is_no_failure(
    torch_mp: Any, tmp_path: Path, fail: list[str], exitcode: int
) -> None:
    line = "out from rank 1"
    marker = tmp_path / "torch.printed"
    theirs = _start_binary(torch_mp, tmp_path / "torch", marker, fail)
    _wait_dead(theirs, [0, 1])
    _check_theirs(theirs.wait(period=0.05), exitcode, line)

    for run in range(OUR_RACING_RUNS_BINARY):
        marker = tmp_path / f"ours{run}.printed"
        ours = _start_binary(engine, tmp_path / f"ours{run}", marker, fail)
        _check_ours(ours.wait(timeout=60), exitcode, line, function=False)

    marker = tmp_path / "after.printed"
    ours = _start_binary(engine, tmp_path / "after", marker, fail)
    _wait_dead(ours, [0, 1])
    assert _check_ours(ours.wait(timeout=60), exitcode, line, function=False) == "success"
