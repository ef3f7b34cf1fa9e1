"""End to end: the app on the real Supervisor with real processes (wiring, not pixels).

A rank terminated from the keyboard is gone; a restarted rank runs again and its earlier log
is kept on disk and in the pane; quitting shuts the run down.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import pytest
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.tui.app import RankvisorApp
from rankvisor.tui.screens.confirm import ConfirmScreen
from rankvisor.tui.screens.zoom import ZoomScreen
from rankvisor.tui.widgets.file_log import FileLog

from tests.conftest import BIN, pid_alive

from .conftest import wait_for

pytestmark = pytest.mark.processes


def _supervisor(tmp_path: Path, nprocs: int, *args: str) -> Supervisor:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = SupervisorConfig(
        entrypoint=sys.executable,
        args=("-u", str(BIN / "sv_rank.py"), "--pid-dir", str(pid_dir), "--print", "3", *args),
        nprocs=nprocs,
        log_dir=str(tmp_path / "logs"),
        term_timeout=3.0,
        sample_interval=0.5,
    )
    return Supervisor(config)


def _pids(tmp_path: Path, rank: int, restart: int = 0) -> list[int]:
    path = tmp_path / "pids" / f"{rank}.{restart}.pids"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


async def _wait(pilot, predicate: Callable[[], object], timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """``wait_for`` with room for real processes (spawns, exits, escalations)."""
    await wait_for(pilot, predicate, timeout, step=0.05)


async def _quit(pilot, app: RankvisorApp) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("q")
    if isinstance(app.screen, ConfirmScreen):
        await pilot.press("y")
    # Shut down, then exited (the last engine events are in the model by then).
    await _wait(pilot, lambda: app.return_value is not None, timeout=30)


async def test_rank_terminated_from_the_keyboard_is_gone(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, 2)
    app = RankvisorApp(sup)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            ranks = app.run_view.ranks
            await _wait(pilot, lambda: all(v.state is RankState.RUNNING for v in ranks))
            await _wait(pilot, lambda: _pids(tmp_path, 0) and _pids(tmp_path, 1))
            await _wait(pilot, lambda: "rank 1 ready" in ranks[1].last_line)
            pid1 = _pids(tmp_path, 1)[0]
            pid0 = _pids(tmp_path, 0)[0]
            assert ranks[1].pid == pid1
            await pilot.press("l", "t")
            await _wait(pilot, lambda: ranks[1].state is RankState.SIGNALLED)
            pane = app.main_screen.query_one("#rank-1")
            await _wait(pilot, lambda: pane.has_class("-signalled"))
            assert ranks[1].signal_name == "SIGTERM" and ranks[1].caused_by_us
            assert not pid_alive(pid1)
            assert ranks[0].state is RankState.RUNNING and pid_alive(pid0)
            await _quit(pilot, app)
        assert not pid_alive(pid0)
    finally:
        sup.shutdown()


async def test_restarted_rank_runs_again_with_its_earlier_log_kept(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, 1)
    app = RankvisorApp(sup)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            view = app.run_view.ranks[0]
            # Its lines can come before its paths (the app fetches those off the UI thread
            # once the ranks started): wait for both.
            await _wait(pilot, lambda: "rank 0 ready" in view.last_line and view.stdout_path)
            first_pid = view.pid
            first_log = Path(view.stdout_path)
            await pilot.press("r")
            await _wait(pilot, lambda: view.restart_count == 1 and view.state is RankState.RUNNING)
            await _wait(pilot, lambda: "rank 0 ready" in view.last_line and view.pid != first_pid)
            assert first_pid is not None and not pid_alive(first_pid)
            assert view.pid is not None and pid_alive(view.pid)
            # The earlier incarnation's log is still on disk, beside the new one ...
            assert Path(view.stdout_path) != first_log
            assert "rank 0 ready" in first_log.read_text()
            assert "rank 0 ready" in Path(view.stdout_path).read_text()
            # ... and in the pane, before the restart marker.
            lines = view.buffer.tail(20)
            marker = next(i for i, line in enumerate(lines) if line.startswith("── restart 1"))
            assert any(line.startswith("rank 0 ready") for line in lines[:marker])
            assert any(line.startswith("rank 0 ready") for line in lines[marker:])
            # The zoomed view reads the new file, and '[' goes back to the earlier one.
            await pilot.press("enter", "o")  # stdout alone
            assert isinstance(app.screen, ZoomScreen)
            log = app.screen.query_one("#stdout-log", FileLog)
            await _wait(pilot, lambda: log.line_count >= 4)
            assert log.path == view.stdout_path
            await pilot.press("left_square_bracket")
            await _wait(
                pilot, lambda: app.screen.query_one("#stdout-log", FileLog).path == str(first_log)
            )
            await pilot.press("escape")
            await _quit(pilot, app)
        assert view.pid is not None and not pid_alive(view.pid)
    finally:
        sup.shutdown()


def test_app_ended_without_quit_prints_final_states_not_terminating(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    """As when rankvisor gets SIGTERM in TUI mode: the app exits before the ranks are shut
    down; run_tui shuts them down afterwards and the summary must show how they ended."""
    from rankvisor.tui.run import run_tui

    sup = _supervisor(tmp_path, 2)

    async def leave_without_quitting(pilot) -> None:  # type: ignore[no-untyped-def]
        app = pilot.app
        await _wait(pilot, lambda: all(_pids(tmp_path, r) for r in range(2)))
        app.exit(None)  # no confirmation, no shutdown: run_tui must do it

    code = run_tui(sup, headless=True, auto_pilot=leave_without_quitting)
    out = capsys.readouterr().out
    assert code == 1
    assert "terminating" not in out
    assert "2 signalled" in out and "no root cause: the run was stopped by rankvisor" in out
    for rank in range(2):
        assert not any(pid_alive(pid) for pid in _pids(tmp_path, rank))
