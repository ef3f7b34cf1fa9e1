"""What a person hit using the app in tmux: signals that killed a rank unasked, notices over
the newest log lines, no way to copy a traceback out, and small things (a SIGSTOPped rank
counted as running, a clock that ran on after the run finished, "1 lines", a second Quit in
the command palette that did not ask, a quit summary of the last attempt only, ``[`` that
said nothing, joiners that broke the error view's borders)."""

from __future__ import annotations

import io
import signal
from pathlib import Path

import pytest
from rankvisor.engine.events import AttemptStarted, RankOutput, RankStateChanged, RankStats
from rankvisor.engine.handle import SignalRanks
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import BASE_PID, EPOCH, ScriptedSupervisor
from rankvisor.tui.app import make_app
from rankvisor.tui.report import format_summary
from rankvisor.tui.screens.confirm import ConfirmScreen
from rankvisor.tui.screens.errors import ErrorsScreen
from rankvisor.tui.screens.main import MainScreen
from rankvisor.tui.screens.signal_picker import SIGNALS, SignalPicker
from rankvisor.tui.widgets.ansi import display_text
from rankvisor.tui.widgets.failure_report import render_failure
from rankvisor.tui.widgets.rank_pane import RankPane
from rich.console import Console
from rich.text import Text

from tests.scenarios import failure_script, running_script, scripted_info

from .conftest import FakeClock, wait_for

SIZE = (120, 36)


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    pilot.app._tick()
    await pilot.pause()


def highlighted_signal(app) -> str:  # type: ignore[no-untyped-def]
    from textual.widgets import OptionList

    options = app.screen.query_one(OptionList)
    assert options.highlighted is not None
    return str(options.get_option_at_index(options.highlighted).id)


# -- signals -------------------------------------------------------------------------------


async def test_signal_picker_labels_what_an_unhandled_signal_does_and_preselects_a_safe_one(
    four_ranks: ScriptedSupervisor,
) -> None:
    from textual.widgets import OptionList

    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s")
        assert isinstance(app.screen, SignalPicker)
        options = app.screen.query_one(OptionList)
        prompts = {
            str(options.get_option_at_index(i).id): options.get_option_at_index(i).prompt
            for i in range(options.option_count)
        }
        labels = {k: p.plain if isinstance(p, Text) else str(p) for k, p in prompts.items()}
        assert "terminates" in labels["SIGUSR1"]
        assert "core dump" in labels["SIGQUIT"]
        assert "pauses" in labels["SIGSTOP"] and "resumes" in labels["SIGCONT"]
        # Enter with nothing moved must never send a signal that ends an unhandled rank.
        assert highlighted_signal(app) == "SIGCONT"
        await pilot.press("enter")
        await settle(pilot)
        assert four_ranks.calls == [SignalRanks((0,), signal.SIGCONT)]


async def test_a_signal_that_would_end_the_rank_asks_first_naming_rank_and_effect(
    four_ranks: ScriptedSupervisor,
) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        usr1 = [name for name, _ in SIGNALS].index(signal.SIGUSR1)
        cont = [name for name, _ in SIGNALS].index(signal.SIGCONT)
        await pilot.press("j", "s", *["down"] * (usr1 - cont))
        assert highlighted_signal(app) == "SIGUSR1"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        question = str(app.screen.query_one("#question").render())
        assert "rank 2" in question and "terminates" in question
        await pilot.press("n")
        await settle(pilot)
        assert four_ranks.calls == []
        await pilot.press("s", "up", "enter")  # SIGSTOP: pauses; asks too
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "pauses rank 2" in str(app.screen.query_one("#question").render())
        await pilot.press("y")
        await settle(pilot)
        assert four_ranks.calls == [SignalRanks((2,), signal.SIGSTOP)]
        assert isinstance(app.screen, MainScreen)


# -- notices -------------------------------------------------------------------------------


async def test_notices_go_to_a_line_of_their_own_never_over_a_pane(
    four_ranks: ScriptedSupervisor,
) -> None:
    from rankvisor.tui.screens.notices import NoticesScreen
    from rankvisor.tui.widgets.notice_bar import NoticeBar

    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for n in range(3):
            app.notify(f"notice number {n}", severity="warning")
        await settle(pilot)
        assert not list(app.screen.query("Toast")), "a toast covers the bottom-right pane"
        bar = app.main_screen.query_one(NoticeBar)
        assert "notice number 2" in bar.text.plain and "3 notices" in bar.text.plain
        for pane in app.main_screen.query(RankPane):
            assert not pane.region.overlaps(bar.region)
        await pilot.press("m")
        assert isinstance(app.screen, NoticesScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        # The log views get the same line, between their logs and their footer.
        await pilot.press("e")
        await wait_for(pilot, lambda: bool(app.screen.query(NoticeBar)))
        assert "notice number 2" in app.screen.query_one(NoticeBar).text.plain


async def test_the_root_cause_stays_in_the_header_at_80x24() -> None:
    engine = ScriptedSupervisor(scripted_info(4), failure_script())
    app = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        summary = app.main_screen.summary
        assert "root cause: rank 2" in summary.text.plain
        assert summary.text.cell_len <= summary.size.width  # nothing cut off


# -- copy out ------------------------------------------------------------------------------


async def test_c_copies_the_selected_ranks_visible_lines_and_says_so(
    four_ranks: ScriptedSupervisor,
) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("l", "c")  # rank 1
        await settle(pilot)
        copied = app.clipboard.splitlines()
        pane = app.main_screen.query_one("#rank-1", RankPane)
        assert len(copied) == pane.log_view.scrollable_content_region.height
        assert copied[-1] == "UserWarning: rank 1: WARNING grad norm 1e4 clipped (step 17)"
        assert "\x1b" not in app.clipboard  # plain text, no colours
        # Issue 22: OSC 52 may go nowhere (tmux's default set-clipboard external): what was
        # sent is said, not that it was copied.
        assert app.notices[-1].message == (
            f"sent {len(copied)} lines of rank 1 to the terminal's clipboard (OSC 52)")


async def test_c_in_the_error_view_copies_the_root_cause_traceback() -> None:
    engine = ScriptedSupervisor(scripted_info(4), failure_script())
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)
        assert isinstance(app.screen, ErrorsScreen)
        await pilot.press("c")
        await settle(pilot)
        assert app.clipboard.startswith("Traceback (most recent call last):")
        assert app.clipboard.endswith("FloatingPointError: loss is nan at step 23 [rank2]")
        assert "the traceback of rank 2" in app.notices[-1].message


async def test_c_in_the_zoom_copies_the_lines_in_sight(tmp_path: Path) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen
    from rankvisor.tui.widgets.file_log import FileLog

    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=20), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        assert isinstance(app.screen, ZoomScreen)
        (log,) = [shown for shown in app.screen.query(FileLog) if shown.display]
        await wait_for(pilot, lambda: log.line_count > 0)
        await pilot.press("c")
        await settle(pilot)
        assert "step    19 | loss" in app.clipboard
        assert "of rank 0" in app.notices[-1].message


# -- small ones ----------------------------------------------------------------------------


async def test_a_sigstopped_rank_is_counted_as_stopped_not_running(
    four_ranks: ScriptedSupervisor,
) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        four_ranks.emit(
            RankStats(1, BASE_PID + 1, "stopped", 0.0, 1 << 20, 1, 0, (1,), 1, 0, 20.0, EPOCH)
        )
        await settle(pilot)
        header = app.main_screen.summary.text.plain
        assert "3 running" in header and "1 stopped" in header


async def test_the_clock_stops_when_the_run_finishes(clock: FakeClock) -> None:
    engine = ScriptedSupervisor(scripted_info(2), [], clock=clock)
    app = make_app(engine, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        for r in range(2):
            engine.emit(RankStateChanged(r, RankState.STARTING, RankState.RUNNING, BASE_PID + r))
        clock.advance(5)
        for r in range(2):
            engine.rank_exits(r, 0)
        await settle(pilot)
        assert app.run_view.finished
        before = app.main_screen.summary.text.plain
        assert before.endswith("00:05")
        clock.advance(125)
        await settle(pilot)
        assert app.main_screen.summary.text.plain == before


async def test_textual_quit_in_the_palette_is_gone_and_asks_first(
    four_ranks: ScriptedSupervisor,
) -> None:
    app = make_app(four_ranks)
    async with app.run_test(size=SIZE) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert [t for t in titles if "Quit" in t] == ["Quit rankvisor"]
        await app.run_action("quit")  # Textual's own action, from any binding left
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.is_running


@pytest.mark.parametrize("announced_first", [False, True], ids=["supervisor", "announced"])
async def test_quit_summary_covers_every_attempt(announced_first: bool) -> None:
    engine = ScriptedSupervisor(scripted_info(4), failure_script())
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        engine.emit(
            RankStateChanged(3, RankState.RUNNING, RankState.SIGNALLED, BASE_PID + 3,
                             exitcode=-15, signal_name="SIGTERM", caused_by_us=True)
        )
        attempt = AttemptStarted(1, "/nonexistent/rankvisor/run_0/attempt_1", ())
        if announced_first:
            engine.emit(attempt)
        # The Supervisor starts the new attempt's ranks first, then says AttemptStarted.
        for r in range(4):
            old = app.run_view.ranks[r].state
            engine.emit(
                RankStateChanged(r, old, RankState.STARTING, BASE_PID + 10 + r,
                                 restart_count=1, attempt=1)
            )
        if not announced_first:
            engine.emit(attempt)
        await settle(pilot)
        out = format_summary(app.run_view)
        assert "earlier attempt 0: 3 failed, 1 signalled; root cause rank 2 (exit 1)" in out
        assert out.count("earlier attempt") == 1
        assert "attempt 1)" in out.splitlines()[0]


async def test_square_brackets_say_when_there_is_no_other_run(tmp_path: Path) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen

    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=5), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        assert isinstance(app.screen, ZoomScreen)
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert "no earlier run" in app.notices[-1].message
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert "no later run" in app.notices[-1].message


async def test_one_line_is_one_line_not_one_lines(tmp_path: Path) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen
    from rankvisor.tui.widgets.file_log import FileLog

    engine = ScriptedSupervisor(scripted_info(1, run_dir=tmp_path), [], write_files=True)
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        engine.emit(RankStateChanged(0, RankState.STARTING, RankState.RUNNING, BASE_PID))
        engine.emit(RankOutput(0, "stdout", ("only line",)))
        await settle(pilot)
        await pilot.press("enter")
        assert isinstance(app.screen, ZoomScreen)
        (log,) = [shown for shown in app.screen.query(FileLog) if shown.display]
        await wait_for(pilot, lambda: log.line_count == 1)
        title = Text.from_markup(str(log.border_title or "")).plain
        assert "1 line" in title and "1 lines" not in title


def test_joiners_do_not_push_the_error_views_border() -> None:
    """Rich counts "⚠️" and a ZWJ family as two cells each; tmux draws one and six. Without
    the joiners both agree, so every line of a box ends at the same column on screen."""
    from rankvisor.tui.model import RankView
    from rich.cells import get_character_cell_size

    view = RankView(rank=0, exitcode=1, state=RankState.FAILED)
    lines = ["⚠️ gloo: connection reset by 👨\u200d👩\u200d👧 peer", "plain line"]
    console = Console(width=60, record=True, file=io.StringIO())
    console.print(render_failure(view, root_cause=True, stderr_tail=lines, width=60))
    boxed = [line for line in console.export_text().splitlines() if line.startswith("│")]
    assert boxed
    # How wide a terminal that measures each code point draws each line (rich's table of one
    # code point's width, as wcwidth's: no grapheme clusters).
    widths = {sum(get_character_cell_size(ch) for ch in line) for line in boxed}
    assert widths == {60}
    assert "gloo: connection reset" in display_text(lines[0]).plain


async def test_tiles_at_80x24_spend_no_room_on_the_ranks_own_prefix() -> None:
    script = list(running_script(16, steps=8))
    for r in (5, 6):
        script.append(RankOutput(r, "stderr", (f"rank {r}: RuntimeError: Connection closed",)))
        script.append(
            RankStateChanged(r, RankState.RUNNING, RankState.FAILED, BASE_PID + r, exitcode=1, t=r)
        )
    app = make_app(ScriptedSupervisor(scripted_info(16), script))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "root cause: rank 5" in app.main_screen.summary.text.plain
        tiles = app.main_screen.tiles
        row = tiles.render_line(5 - int(tiles.scroll_offset.y)).text
        assert row.lstrip().startswith("5 ") and "RuntimeError: Conn" in row
        assert "rank 5:" not in row
