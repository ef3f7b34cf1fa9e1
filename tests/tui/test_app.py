"""Behaviour of the app through the Pilot, on the scripted engine: keys issue the right
commands, panes change state, the countdown shows, destructive keys ask first."""

from __future__ import annotations

import io
import signal
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest
from rankvisor.engine.events import RankOutput, RankStateChanged, RunFinished
from rankvisor.engine.handle import (
    KillRanks,
    RestartAll,
    RestartRank,
    SignalRanks,
    TerminateRanks,
)
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import (
    BASE_PID,
    EPOCH,
    ScriptedFailure,
    ScriptedResult,
    ScriptedSupervisor,
    ScriptItem,
)
from rankvisor.tui.app import make_app
from rankvisor.tui.report import format_summary
from rankvisor.tui.screens.confirm import ConfirmScreen, RestartRankScreen
from rankvisor.tui.screens.errors import ErrorsScreen
from rankvisor.tui.screens.help import HelpScreen
from rankvisor.tui.screens.main import MainScreen
from rankvisor.tui.screens.signal_picker import SignalPicker
from rankvisor.tui.widgets.rank_log import RankLog
from rankvisor.tui.widgets.rank_pane import RankPane
from rich.console import Console
from rich.text import Text
from textual.screen import ModalScreen
from textual.widgets import Static

from tests.scenarios import failure_script, running_script, scripted_info

from .conftest import FakeClock, wait_for

if TYPE_CHECKING:
    from rankvisor.engine.errors import ProcessFailure
    from rankvisor.engine.pcontext import RunProcsResult

SIZE = (120, 36)


def pane(app, rank: int) -> RankPane:  # type: ignore[no-untyped-def]
    return app.main_screen.query_one(f"#rank-{rank}", RankPane)


def subtitle(widget) -> str:  # type: ignore[no-untyped-def]
    return Text.from_markup(widget.border_subtitle or "").plain


def as_text(renderable) -> str:  # type: ignore[no-untyped-def]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    pilot.app._tick()
    await pilot.pause()


async def test_t_terminates_selected_rank_and_shows_countdown(
    four_ranks: ScriptedSupervisor, clock: FakeClock
) -> None:
    app = make_app(four_ranks, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("t")
        await settle(pilot)
        assert four_ranks.calls == [TerminateRanks((0,))]
        assert pane(app, 0).has_class("-terminating")
        assert "SIGKILL in 30s" in subtitle(pane(app, 0))
        clock.advance(12.2)
        await settle(pilot)
        assert "SIGKILL in 18s" in subtitle(pane(app, 0))
        # The deadline passes: the engine SIGKILLs it; the pane says so.
        four_ranks.expire_escalations()
        await settle(pilot)
        assert pane(app, 0).has_class("-signalled")
        assert "SIGKILL" in subtitle(pane(app, 0))
        assert "SIGKILL in" not in subtitle(pane(app, 0))
        assert pane(app, 1).has_class("-running")


async def test_selection_moves_with_vim_keys_and_arrows(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.main_screen
        assert screen.mode == "grid" and screen.grid_shape == (2, 2)
        seen = []
        for key in ("l", "j", "h", "k", "right", "down", "left", "up"):
            await pilot.press(key)
            seen.append(screen.selected)
        assert seen == [1, 3, 2, 0, 1, 3, 2, 0]
        await pilot.press("l", "K")
        await settle(pilot)
        assert four_ranks.calls == [KillRanks((1,))]
        assert pane(app, 1).has_class("-signalled")
        assert pane(app, 1).selected
        assert not pane(app, 0).selected


async def test_quick_moves_settle_on_the_last_one(four_ranks: ScriptedSupervisor) -> None:
    """Regression: two moves before the first was handled used to bounce forever."""
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.main_screen
        screen.action_move(1, 0)
        screen.action_move(0, 1)
        await pilot.pause()
        await pilot.pause()
        assert screen.selected == 3 and app.selected == 3
        await pilot.press("t")
        await settle(pilot)
        assert four_ranks.calls == [TerminateRanks((3,))]


async def test_click_selects_and_double_click_zooms(four_ranks: ScriptedSupervisor) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen

    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.click("#rank-2")
        await pilot.pause()
        assert app.main_screen.selected == 2 and pane(app, 2).selected
        await pilot.click("#rank-1", times=2)
        await pilot.pause()
        assert isinstance(app.screen, ZoomScreen) and app.screen.rank == 1


async def test_signal_picker_sends_the_chosen_signal(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j", "s")
        assert isinstance(app.screen, SignalPicker)
        await pilot.press("enter")  # SIGCONT is highlighted: harmless, sent at once
        await settle(pilot)
        await pilot.press("s", "down", "enter")  # SIGUSR1 ends an unhandled rank: asks
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        await pilot.press("s", "escape")
        await settle(pilot)
        assert four_ranks.calls == [
            SignalRanks((2,), signal.SIGCONT),
            SignalRanks((2,), signal.SIGUSR1),
        ]
        assert isinstance(app.screen, MainScreen)


async def test_restart_rank_keeps_its_earlier_lines(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        before = app.run_view.ranks[0].buffer.tail(2)
        await pilot.press("r")
        assert isinstance(app.screen, RestartRankScreen)
        await pilot.press("y")
        await settle(pilot)
        assert four_ranks.calls == [RestartRank(0)]
        view = app.run_view.ranks[0]
        # These ranks ignore SIGTERM: it stays RESTARTING until the SIGKILL deadline.
        assert view.state is RankState.RESTARTING
        four_ranks.expire_escalations()
        await settle(pilot)
        assert view.state is RankState.RUNNING
        assert view.pid == BASE_PID + 100
        assert view.restart_count == 1
        assert len(view.earlier) == 1
        lines = view.buffer.tail(10)
        assert lines[-2].startswith("── restart 1 · pid")
        assert before[-1] in lines
        assert "↻1" in str(pane(app, 0).query_one("RankHeader").render())


async def test_all_rank_keys_ask_first(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("T")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert four_ranks.calls == []
        await pilot.press("R")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert four_ranks.calls == []
        await pilot.press("T", "y")
        await settle(pilot)
        assert four_ranks.calls == [TerminateRanks(None)]
        assert all(pane(app, r).has_class("-terminating") for r in range(4))
        await pilot.press("R", "y")
        await settle(pilot)
        assert four_ranks.calls[-1] == RestartAll()
        assert all(pane(app, r).has_class("-restarting") for r in range(4))
        four_ranks.expire_escalations()  # the SIGKILL deadline: then the new attempt starts
        await settle(pilot)
        assert app.run_view.attempt == 1
        assert all(pane(app, r).has_class("-running") for r in range(4))


async def test_quit_while_running_asks_then_shuts_down(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert app.is_running and four_ranks.calls == []
        await pilot.press("q", "y")
        await wait_for(pilot, lambda: app.return_value is not None)  # shut down, then exited
    assert four_ranks.calls == [("shutdown", None)]
    assert app.return_value == 1
    assert all(view.state is RankState.SIGNALLED for view in app.run_view.ranks)


async def test_quit_after_all_ranks_exited_needs_no_confirmation() -> None:
    script = [
        *running_script(2, with_stats=False),
        *(
            RankStateChanged(r, RankState.RUNNING, RankState.SUCCEEDED, BASE_PID + r, exitcode=0)
            for r in range(2)
        ),
    ]
    engine = ScriptedSupervisor(scripted_info(2), script)
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # The app stays open after every rank exited, so the logs can be read.
        assert app.is_running
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None)  # shut down, then exited
    assert engine.calls == [("shutdown", None)]
    assert app.return_value == 0


async def test_restarting_one_of_several_ranks_warns_and_offers_restart_all(
    four_ranks: ScriptedSupervisor,
) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, RestartRankScreen)
        text = str(app.screen.query_one("#question", Static).render())
        for words in ("torch.distributed", "gloo", "NCCL", "usually fail", "attempt 1"):
            assert words in text
        await pilot.press("n")  # cancelled: nothing sent
        await settle(pilot)
        assert isinstance(app.screen, MainScreen) and four_ranks.calls == []
        await pilot.press("r")
        await pilot.press("a")  # the whole group instead, without a second question
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        assert four_ranks.calls == [RestartAll()]


async def test_restarting_the_only_rank_asks_nothing() -> None:
    engine = ScriptedSupervisor(
        scripted_info(1), running_script(1, steps=5, with_stats=False), obey_term=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        assert engine.calls == [RestartRank(0)]


async def test_rank_keys_do_nothing_under_a_dialog(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("t", "K", "r")
        await settle(pilot)
        assert four_ranks.calls == []
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_refused_command_is_a_notification_not_a_crash() -> None:
    script = [
        *running_script(2, with_stats=False),
        RankStateChanged(0, RankState.RUNNING, RankState.FAILED, BASE_PID, exitcode=3),
    ]
    engine = ScriptedSupervisor(scripted_info(2), script)
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("t")
        await settle(pilot)
        assert engine.calls == [TerminateRanks((0,))]
        messages = [n.message for n in app.notices]
        assert "rank 0 is not running (failed): nothing to terminate" in messages
        assert pane(app, 0).has_class("-failed")
        assert "exit 3" in subtitle(pane(app, 0))


async def test_log_text_is_never_markup(four_ranks: ScriptedSupervisor) -> None:
    line = "[rank0]: [bold]x[/bold] [link=http://a]b[/link]"
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        four_ranks.emit(RankOutput(1, "stdout", (line, "\x1b]0;evil title\x07\x1b[31mred\x1b[0m")))
        await settle(pilot)
        log = pane(app, 1).query_one(RankLog)
        rows = [log.render_line(y).text for y in range(log.size.height)]
        assert any(row.rstrip() == line for row in rows), rows
        assert any(row.rstrip() == "red" for row in rows), rows
        assert not any("\x1b" in row for row in rows)


async def test_space_pauses_following(four_ranks: ScriptedSupervisor) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        log = pane(app, 2).query_one(RankLog)
        await settle(pilot)
        assert log.follow and log.scroll_y == log.max_scroll_y > 0
        await pilot.press("space")
        at = log.scroll_y
        four_ranks.emit(RankOutput(2, "stdout", tuple(f"new {i}" for i in range(50))))
        await settle(pilot)
        assert log.paused and log.scroll_y == at < log.max_scroll_y
        await pilot.press("space")
        await settle(pilot)
        assert log.follow and log.scroll_y == log.max_scroll_y
        assert log.render_line(log.size.height - 1).text.startswith("new 49")


async def test_error_view_lists_root_cause_first() -> None:
    engine = ScriptedSupervisor(scripted_info(4), failure_script())
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.run_view.root_cause() == 2
        assert pane(app, 2).has_class("-root-cause")
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ErrorsScreen)
        blocks = list(app.screen.query(".failure"))
        assert len(blocks) == 3
        assert blocks[0].has_class("-root-cause")
        first = as_text(blocks[0].content)
        assert "ROOT CAUSE" in first and "rank 2" in first
        assert "FloatingPointError: loss is nan at step 23 [rank2]" in first
        assert "train.py:52 in train_step" in first
        second = as_text(blocks[1].content)
        assert "No error.json" in second and "Connection closed by peer" in second
        order = [view.rank for view in app.run_view.failures()]
        assert order == [2, 0, 1]
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


def _teardown_script() -> list[ScriptItem]:
    """2 ranks: rank 0 fails on its own; the teardown that follows SIGTERMs rank 1."""
    failure = ScriptedFailure(0, BASE_PID, 1, "", {}, "", int(EPOCH + 42))
    stopped = ScriptedFailure(
        1, BASE_PID + 1, -signal.SIGTERM, "", {}, f"Signal 15 (SIGTERM) received by PID "
        f"{BASE_PID + 1}", int(EPOCH + 42)
    )
    return [
        *running_script(2, steps=5, with_stats=False),
        RankOutput(0, "stderr", ("RuntimeError: rank 0 broke",)),
        RankStateChanged(
            0, RankState.RUNNING, RankState.FAILED, BASE_PID, exitcode=1,
            failure=cast("ProcessFailure", failure), t=EPOCH + 42,
        ),
        RankStateChanged(
            1, RankState.RUNNING, RankState.SIGNALLED, BASE_PID + 1, exitcode=-signal.SIGTERM,
            signal_name="SIGTERM", failure=cast("ProcessFailure", stopped), caused_by_us=True,
            t=EPOCH + 42,
        ),
        RunFinished(
            cast("RunProcsResult", ScriptedResult(failures={0: failure})), 0, 0
        ),
    ]


async def test_a_rank_stopped_by_the_teardown_is_listed_apart_not_failed() -> None:
    engine = ScriptedSupervisor(scripted_info(2), _teardown_script())
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.run_view.root_cause() == 0
        assert [v.rank for v in app.run_view.failures()] == [0]
        assert [v.rank for v in app.run_view.stopped()] == [1]
        assert pane(app, 0).has_class("-root-cause") and not pane(app, 1).has_class("-root-cause")
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ErrorsScreen)
        (block,) = app.screen.query(".failure")
        assert block.has_class("-root-cause") and "rank 0" in as_text(block.content)
        (stopped,) = app.screen.query(".stopped")
        text = as_text(stopped.content)
        assert "Stopped by rankvisor (not failures)" in text
        assert f"rank 1  SIGTERM  pid {BASE_PID + 1}" in text
        box = app.screen.query_one("#failures")
        assert "1 failed rank(s) · 1 stopped by rankvisor" in str(box.border_title)
        summary = format_summary(app.run_view)
    assert f"root cause: rank 0 (pid {BASE_PID}) exit 1" in summary
    assert f"stopped by rankvisor: rank 1 (pid {BASE_PID + 1}) SIGTERM" in summary
    assert "also failed" not in summary and "no root cause" not in summary
    # After the root cause and what it printed.
    assert summary.index("stopped by rankvisor") > summary.index("root cause: rank 0")


async def test_every_rank_stopped_by_a_person_blames_nobody() -> None:
    engine = ScriptedSupervisor(
        scripted_info(2), running_script(2, steps=5, with_stats=False), obey_term=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("T")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        assert engine.calls == [TerminateRanks(None)]
        assert app.run_view.finished and app.run_view.root_cause() is None
        assert app.run_view.failures() == []
        assert [v.rank for v in app.run_view.stopped()] == [0, 1]
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ErrorsScreen)
        assert not list(app.screen.query(".failure"))
        (words,) = app.screen.query(".no-failures")
        assert "No rank has failed: the run was stopped by rankvisor." in as_text(words.content)
        (stopped,) = app.screen.query(".stopped")
        text = as_text(stopped.content)
        assert "rank 0  SIGTERM" in text and "rank 1  SIGTERM" in text
        assert "ROOT CAUSE" not in text
        summary = format_summary(app.run_view)
    assert "no root cause: the run was stopped by rankvisor" in summary
    assert "root cause: rank" not in summary and "also failed" not in summary
    for r in (0, 1):
        assert f"stopped by rankvisor: rank {r} (pid {BASE_PID + r}) SIGTERM" in summary


async def test_many_ranks_use_tiles_and_a_focused_pane() -> None:
    engine = ScriptedSupervisor(scripted_info(32), running_script(32, steps=5))
    app = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.main_screen
        assert screen.mode == "list"
        focus = screen.query_one("#focus", RankPane)
        assert focus.rank == 0
        for _ in range(25):
            await pilot.press("j")
        assert screen.selected == 25 and focus.rank == 25
        tiles = screen.query_one("#tiles")
        assert tiles.scroll_y > 0  # paged so the selected tile is visible
        await pilot.press("K")
        await settle(pilot)
        assert engine.calls == [KillRanks((25,))]
        assert focus.has_class("-signalled")
        await pilot.press("end")
        assert screen.selected == 31


async def test_grid_layout_switches_with_size_and_g(four_ranks: ScriptedSupervisor) -> None:
    engine = ScriptedSupervisor(scripted_info(8), running_script(8, steps=5))
    app = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.main_screen.mode == "list"
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert app.main_screen.mode == "grid"
        assert app.main_screen.grid_shape == (4, 2)
        await pilot.press("g")
        assert app.main_screen.mode == "list"


async def test_a_silent_running_rank_is_shown_quiet(
    four_ranks: ScriptedSupervisor, clock: FakeClock
) -> None:
    """Absolute "quiet Ns" while no peer has written twice (no usual gap to compare with);
    once one has, a silence is read against its peers' usual gap instead."""
    app = make_app(four_ranks, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "quiet" not in subtitle(pane(app, 3))
        clock.advance(14.5)
        app._show(None)
        assert "quiet 14s" in subtitle(pane(app, 3))
        four_ranks.emit(RankOutput(0, "stdout", ("still going",)))
        await settle(pilot)
        # Rank 0 wrote again after 14.5 s: rank 3's 14.5 s is its peers' usual gap.
        assert "quiet" not in subtitle(pane(app, 3))
        assert "quiet" not in subtitle(pane(app, 0))
        clock.advance(50)
        app._show(None)
        assert "⚠ silent 64s" in subtitle(pane(app, 3))
        # Rank 0's peers never wrote twice: its silence can only be read absolutely.
        assert "quiet 50s" in subtitle(pane(app, 0))
        four_ranks.emit(RankOutput(3, "stderr", ("woke up",)))
        await settle(pilot)
        assert "quiet" not in subtitle(pane(app, 3))
        assert "silent" not in subtitle(pane(app, 3))


def test_run_tui_prints_the_root_cause_and_returns_the_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rankvisor.tui.run import run_tui

    engine = ScriptedSupervisor(scripted_info(4), failure_script(), obey_term=True)

    async def quit_at_once(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.pause()
        await pilot.press("q")  # rank 3 still runs: asks first
        assert isinstance(pilot.app.screen, ConfirmScreen)
        await pilot.press("y")

    code = run_tui(engine, headless=True, auto_pilot=quit_at_once, sync_start=True)
    assert code == 1
    assert engine.calls == [("shutdown", None)]
    out = capsys.readouterr().out
    assert "root cause: rank 2 (pid 41002) exit 1" in out
    assert "FloatingPointError: loss is nan at step 23 [rank2]" in out
    # Quitting stopped rank 3: listed apart, after the failures, not as one of them.
    assert "stopped by rankvisor: rank 3 (pid 41003) SIGTERM" in out
    assert "also failed: rank 3" not in out


async def test_command_palette_offers_the_rank_actions(four_ranks: ScriptedSupervisor) -> None:
    from textual.command import CommandPalette

    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"SIGKILL selected")
        await wait_for(pilot, lambda: "SIGKILL selected" in _palette_choice(app))
        await pilot.press("enter")
        await settle(pilot)
        assert four_ranks.calls == [KillRanks((0,))]


async def test_zoom_search_next_previous_and_wrap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rankvisor.tui.screens.zoom import ZoomScreen
    from rankvisor.tui.widgets.file_log import FileLog

    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=120), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j", "enter")
        assert isinstance(app.screen, ZoomScreen) and app.screen.rank == 2
        assert app.screen.streams == "both"  # both streams, merged in arrival order
        log = app.screen.query_one("#both-log", FileLog)
        await wait_for(pilot, lambda: log.line_count == 130)
        lines = [log.get_line(i) for i in range(log.line_count)]
        epochs = [i for i, line in enumerate(lines) if "epoch 1" in line]  # 1, 10, 11
        assert len(epochs) == 3
        await pilot.press("home")  # to the top: follow stops
        await pilot.press("slash", *"epoch 1", "enter")
        await wait_for(pilot, lambda: log.current_match == epochs[0])
        await pilot.press("n")
        await wait_for(pilot, lambda: log.current_match == epochs[1])
        await pilot.press("n")
        await wait_for(pilot, lambda: log.current_match == epochs[2])
        await pilot.press("n")
        await wait_for(pilot, lambda: log.current_match == epochs[0])  # wrapped to the top
        assert "wrapped" in app.screen.status
        await pilot.press("N")
        await wait_for(pilot, lambda: log.current_match == epochs[2])  # and back over the end
        await pilot.press("o")
        assert app.screen.streams == "stdout"
        await pilot.press("o")
        assert app.screen.streams == "stderr"
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


def _palette_choice(app) -> str:  # type: ignore[no-untyped-def]
    """The command the palette would run on enter ("" while it has none highlighted)."""
    from textual.command import CommandList

    commands = app.screen.query_one(CommandList)
    if commands.highlighted is None:
        return ""
    return str(commands.get_option_at_index(commands.highlighted).prompt)


@pytest.mark.parametrize("how", ["restart all", "restart one"])
async def test_failure_after_a_restart_quotes_only_its_own_stderr(
    how: str, tmp_path: Path
) -> None:
    # Attempt 0 wrote OLD-ATTEMPT-0 to stderr; the next incarnation exits 3 silently (or
    # after a line of its own): neither the error view nor the quit summary may quote the
    # earlier life's lines as this failure's last stderr lines.
    engine = ScriptedSupervisor(
        scripted_info(2, run_dir=tmp_path),
        running_script(2, steps=5, with_stats=False),
        obey_term=True,
        write_files=True,
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        engine.emit(RankOutput(0, "stderr", ("OLD-ATTEMPT-0: gloo connection reset",)))
        await settle(pilot)
        await pilot.press("R" if how == "restart all" else "r")
        assert isinstance(app.screen, ModalScreen)
        await pilot.press("y")
        await settle(pilot)
        view = app.run_view.ranks[0]
        await wait_for(pilot, lambda: view.state is RankState.RUNNING and view.restart_count == 1)
        new_line = ""
        if how == "restart one":
            new_line = "NEW-LIFE: rank 0 lost its peers"
            engine.emit(RankOutput(0, "stderr", (new_line,)))
        engine.rank_exits(0, 3)
        await settle(pilot)
        await wait_for(pilot, lambda: app.run_view.finished)
        assert [v.rank for v in app.run_view.failures()] == [0]
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ErrorsScreen)
        (block,) = app.screen.query(".failure")
        report = as_text(block.content)
        summary = format_summary(app.run_view)
    assert "OLD-ATTEMPT-0" not in report
    assert "OLD-ATTEMPT-0" not in summary
    if new_line:
        assert new_line in report and new_line in summary
    else:
        assert "(stderr is empty)" in report
        assert "stderr is empty" in summary
    # The earlier life's file still holds its line: only the report left it out.
    assert "OLD-ATTEMPT-0" in (tmp_path / "attempt_0" / "0" / "stderr.log").read_text()


async def test_the_header_and_pane_call_a_rank_we_stopped_stopped_not_failed() -> None:
    """Rank 1 was ended by the teardown's SIGTERM: its pane says "stopped", and the header
    counts it apart from the one real failure."""
    from rankvisor.tui.widgets.run_summary import RunSummary

    engine = ScriptedSupervisor(scripted_info(2), _teardown_script())
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert subtitle(pane(app, 1)).startswith("stopped · SIGTERM")
        assert subtitle(pane(app, 0)).startswith("failed · exit 1")
        header = as_text(app.main_screen.query_one(RunSummary).render())
        assert "1 failed" in header and "1 stopped by rankvisor" in header
        assert "signalled" not in header


async def test_a_run_freezes_the_heap_once_drawn_and_panes_cache_only_their_rows(
    four_ranks: ScriptedSupervisor,
) -> None:
    """What keeps the garbage collector's full passes short under a flood of lines (the
    UI benchmark's key-to-screen tail): the long-lived heap frozen after the first frame,
    and each pane's strip cache sized to its rows."""
    import gc

    from rankvisor.tui.widgets.rank_log import MIN_CACHED_STRIPS

    assert gc.get_freeze_count() == 0
    app = make_app(four_ranks, freeze_heap=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert gc.get_freeze_count() > 10_000  # the modules, classes and widgets
            log = pane(app, 0).query_one(RankLog)
            assert log._strips.maxsize == max(MIN_CACHED_STRIPS, log.size.height + 8)
            assert log._strips.maxsize < 100
    finally:
        gc.unfreeze()  # this test process goes on: let its objects be collected again
    plain = make_app(four_ranks)  # as the tests drive it: nothing frozen
    async with plain.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert gc.get_freeze_count() == 0


async def test_the_header_names_no_knock_on_rank_as_root_cause_while_the_run_tears_down() -> None:
    """The demo: rank 2 raised, rank 1's collective failed on the connection rank 2 closed
    (its error.json of the same second, its exit reaped first); while rank 3 was torn down
    (it ignores SIGTERM) the header said ``root cause: rank 1``."""
    from rankvisor.engine.testing import EPOCH, ScriptedFailure
    from rankvisor.tui.widgets.run_summary import summary_text

    closed = "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer"
    items: list[object] = list(running_script(4, steps=4))
    for rank, last in ((1, closed), (2, "FloatingPointError: loss is nan")):
        failure = ScriptedFailure(rank, BASE_PID + rank, 1, "", {}, last, int(EPOCH + 42))
        items += [
            RankOutput(rank, "stderr", ("Traceback (most recent call last):", last)),
            RankStateChanged(rank, RankState.RUNNING, RankState.FAILED, BASE_PID + rank,
                             exitcode=1, failure=failure, t=EPOCH + 42.5),  # type: ignore[arg-type]
        ]
    # The teardown: SIGTERM to ranks 0 and 3, which ignore it; the run goes on.
    items += [RankStateChanged(r, RankState.RUNNING, RankState.TERMINATING, BASE_PID + r)
              for r in (0, 3)]
    engine = ScriptedSupervisor(scripted_info(4), items)  # type: ignore[arg-type]
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.run_view.ranks[3].state is RankState.TERMINATING)
        await pilot.pause()
        assert app.run_view.ranks[3].state is RankState.TERMINATING
        assert not app.run_view.finished
        assert app.run_view.root_cause() == 2
        assert "root cause: rank 2" in summary_text(app.run_view, elapsed=50).plain
        assert [v.rank for v in app.run_view.failures()] == [2, 1]


async def test_the_elapsed_time_is_the_runs_not_the_viewers() -> None:
    """A viewer that attached to a run after it ended counted up to its own attach: a run
    of 20 s that ended 80 s ago read 100 s."""
    import dataclasses
    import time as wall

    started = wall.time() - 100
    info = dataclasses.replace(scripted_info(2), started_at=started)
    items: list[object] = list(running_script(2, steps=2))
    items += [RankStateChanged(r, RankState.RUNNING, RankState.SUCCEEDED, BASE_PID + r,
                               exitcode=0, t=started + 19 + r) for r in (0, 1)]
    result = ScriptedResult(failures={}, stdouts={}, stderrs={})
    items.append(RunFinished(result, 0, None))  # type: ignore[arg-type]
    app = make_app(ScriptedSupervisor(info, items))  # type: ignore[arg-type]
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.run_view.finished)
        elapsed = app.summary_args()["elapsed"]
    assert 19 < elapsed < 21, elapsed  # the run's 20 s, from its start to its last exit


async def test_no_dialog_is_offered_for_a_rank_that_is_gone() -> None:
    """A signal picker for a rank that had ended, "Terminate all ranks?" with none running:
    each answer was then refused. One line says why instead."""
    items: list[object] = list(running_script(2, steps=2))
    items.append(RankStateChanged(1, RankState.RUNNING, RankState.SUCCEEDED, BASE_PID + 1,
                                  exitcode=0))
    engine = ScriptedSupervisor(scripted_info(2), items)  # type: ignore[arg-type]
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.run_view.ranks[1].state is RankState.SUCCEEDED)
        await pilot.press("l", "s")
        await pilot.pause()
        assert not isinstance(app.screen, ModalScreen)
        assert app.notices[-1].message == "rank 1 is not running (succeeded): no signal to send"
        await pilot.press("h", "s")  # rank 0 runs: the picker
        await wait_for(pilot, lambda: isinstance(app.screen, SignalPicker))
        await pilot.press("escape")
        engine.emit(RankStateChanged(0, RankState.RUNNING, RankState.FAILED, BASE_PID,
                                     exitcode=1))
        await wait_for(pilot, lambda: not app.run_view.alive)
        await pilot.press("T")
        await pilot.pause()
        assert not isinstance(app.screen, ModalScreen)
        assert app.notices[-1].message == "no rank is running: nothing to terminate"
