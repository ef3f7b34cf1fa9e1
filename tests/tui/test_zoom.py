"""The zoomed view shows both streams in arrival order, searches all it shows, shows the
unfinished last line and wraps long lines; the filtered view's "both" search covers both."""

from __future__ import annotations

from pathlib import Path

from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app
from rankvisor.tui.widgets.file_log import FileLog

from tests.scenarios import TRACEBACK, failure_script, running_script, scripted_info

from .conftest import wait_for

SIZE = (120, 36)


def _rows(log: FileLog) -> list[str]:
    """The text of the rows the log draws now."""
    height = log.scrollable_content_region.height
    return ["".join(seg.text for seg in log.render_line(y)) for y in range(height)]


async def test_zoom_shows_the_traceback_after_the_lines_before_it(tmp_path: Path) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen

    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), failure_script(tmp_path), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j", "enter")
        assert isinstance(app.screen, ZoomScreen) and app.screen.rank == 2
        stdout_path = scripted_info(4, run_dir=tmp_path).ranks[2].stdout_path
        stdout_lines = Path(stdout_path).read_text().count("\n")
        traceback = TRACEBACK.splitlines()
        log = app.screen.query_one("#both-log", FileLog)
        assert log.display and log.wrap  # merged, wrapped: where tracebacks are
        total = stdout_lines + len(traceback)
        await wait_for(pilot, lambda: log.line_count == total)
        # The traceback comes after the stdout lines written before it, and is on screen.
        assert [log.get_line(i) for i in range(stdout_lines, total)] == traceback
        assert log.stream_of(total - 1) == "stderr" and log.stream_of(0) == "stdout"
        assert any("FloatingPointError: loss is nan" in row for row in _rows(log))
        # `/` searches everything shown: a stderr line is found from the top.
        await pilot.press("home", "slash", *"FloatingPointError", "enter")
        await wait_for(pilot, lambda: log.current_match is not None)
        assert "FloatingPointError" in log.get_line(log.current_match or 0)
        assert log.stream_of(log.current_match or 0) == "stderr"
        assert "no match" not in app.screen.status


async def test_zoom_shows_the_unfinished_line_and_wraps_long_lines(tmp_path: Path) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen

    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=30), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        assert isinstance(app.screen, ZoomScreen) and app.screen.rank == 0
        log = app.screen.query_one("#both-log", FileLog)
        await wait_for(pilot, lambda: log.line_count > 0)
        rank = scripted_info(4, run_dir=tmp_path).ranks[0]
        # A progress bar: no newline yet. It shows after the complete lines.
        with open(rank.stdout_path, "a") as f:
            f.write(" 47%|████▋     | 47/100")
        await wait_for(pilot, lambda: log.partials == [("stdout", " 47%|████▋     | 47/100")])
        await wait_for(pilot, lambda: any("47/100" in row for row in _rows(log)))
        # A line far wider than the screen: wrapped, its end is on screen.
        long = "x" * 300 + " END-OF-LONG-LINE"
        with open(rank.stderr_path, "a") as f:
            f.write(long + "\n")
        count = log.line_count
        await wait_for(pilot, lambda: log.line_count == count + 1)
        await wait_for(pilot, lambda: any("END-OF-LONG-LINE" in row for row in _rows(log)))
        assert any("47/100" in row for row in _rows(log))  # still last
        # `w`: cut instead; `right` then moves by many columns, not one.
        await pilot.press("w")
        assert not log.wrap
        await pilot.pause()
        assert not any("END-OF-LONG-LINE" in row for row in _rows(log))
        await pilot.press("right")
        await wait_for(pilot, lambda: log.scroll_x >= 8)
        await pilot.press("w")
        assert log.wrap and log.scroll_x == 0


async def test_filtered_both_search_finds_a_line_in_the_stderr_half(tmp_path: Path) -> None:
    from rankvisor.tui.screens.filtered import FilteredScreen

    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=30), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        screen = app.screen
        assert isinstance(screen, FilteredScreen) and screen.streams == "both"
        out = screen.query_one("#stdout-log", FileLog)
        err = screen.query_one("#stderr-log", FileLog)
        await wait_for(pilot, lambda: out.line_count > 0 and err.line_count == 2)
        assert screen.active_log() is out
        # Only the stderr half has it.
        await pilot.press("slash", *"grad norm", "enter")
        await wait_for(pilot, lambda: err.current_match is not None or screen.status == "no match")
        assert err.current_match == 0
        assert screen.active_log() is err


async def test_the_status_of_a_match_goes_when_o_shows_another_stream(tmp_path: Path) -> None:
    """Issue 22: ``/WARNING``, ``n``, then ``o``: the title still said "match at line 4" over
    a stream of 2 lines."""
    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=30), write_files=True
    )
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l", "enter")  # rank 1: it writes warnings to stderr
        log = app.screen.query_one("#both-log", FileLog)
        await wait_for(pilot, lambda: log.line_count > 0)
        await pilot.press("slash", *"WARNING", "enter")
        await wait_for(pilot, lambda: "match at line" in app.screen.status)
        await pilot.press("o")
        assert app.screen.streams != "both"
        assert "match at line" not in app.screen.status
        assert app.screen.status == "n: find in this stream"
        await pilot.press("n")
        await wait_for(pilot, lambda: "match at line" in app.screen.status
                       or "no match" in app.screen.status)
