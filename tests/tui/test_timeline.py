"""The timeline (a): every rank's lines from the files in arrival order, opened at the
suspect's last line, with the first-failure rule; search and filter; the suspect in the
error view and the grid header."""

from __future__ import annotations

from pathlib import Path

from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app

from tests.scenarios import (
    SUSPECT_REASON,
    scripted_info,
    suspect_script,
    write_timeline_files,
)

from .conftest import wait_for

SIZE = (120, 36)


def _app(tmp_path: Path):  # type: ignore[no-untyped-def]
    write_timeline_files(tmp_path)
    return make_app(ScriptedSupervisor(scripted_info(4, run_dir=tmp_path), suspect_script()))


async def test_timeline_merges_the_ranks_and_opens_at_the_suspects_last_line(
    tmp_path: Path,
) -> None:
    from rankvisor.tui.screens.timeline import TimelineScreen

    app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.run_view.suspect is not None)
        await pilot.press("a")
        screen = app.screen
        assert isinstance(screen, TimelineScreen)
        await wait_for(pilot, lambda: screen.lines != [])
        lines = screen.lines
        # Arrival order across ranks: times never go back; rank 3's stall before rank 2's
        # traceback, and the knock-on errors of ranks 0 and 1 after it.
        assert [x.t_ns for x in lines] == sorted(x.t_ns for x in lines)
        order = [(x.rank, x.text) for x in lines]
        stall = next(i for i, (r, t) in enumerate(order) if r == 3 and "stalled" in t)
        raised = next(i for i, (r, t) in enumerate(order) if r == 2 and "Traceback" in t)
        closed = [i for i, (r, t) in enumerate(order) if "Connection closed" in t]
        assert stall < raised < min(closed) and len(closed) == 2
        assert {x.rank for x in lines[:8]} == {0, 1, 2, 3}  # interleaved, not rank by rank
        # Opened at the suspect's last line; the first-failure rule sits before the traceback.
        opened = screen.shown[screen.opened_at or 0]
        assert opened is not None and opened.rank == 3 and "stalled" in opened.text
        rule = screen.shown.index(None)
        assert screen.shown[rule + 1].rank == 2  # type: ignore[union-attr]
        # Filter, then search.
        await pilot.press("ampersand", *"Connection", "enter")
        await wait_for(pilot, lambda: screen.filter_text == "Connection")
        assert [x.rank for x in screen.shown if x is not None] == [0, 1]
        await pilot.press("ampersand", "ctrl+u", "enter")
        await wait_for(pilot, lambda: screen.filter_text == "")
        await pilot.press("slash", *"FloatingPointError", "enter")
        await wait_for(pilot, lambda: screen.search_text == "FloatingPointError")
        found = screen.shown[screen.current or 0]
        assert found is not None and found.rank == 2 and "FloatingPointError" in found.text
        await pilot.press("escape")
        assert not isinstance(app.screen, TimelineScreen)


async def test_the_suspect_comes_first_in_the_error_view_and_in_the_header(
    tmp_path: Path,
) -> None:
    from rankvisor.tui.screens.errors import ErrorsScreen
    from rich.console import Console
    from textual.widgets import Static

    app = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.run_view.suspect is not None)
        summary = app.main_screen.summary
        await wait_for(pilot, lambda: "suspect: rank 3" in summary.text.plain)
        assert summary.text.plain.index("suspect: rank 3") < summary.text.plain.index(
            "root cause: rank 2"
        )
        await pilot.press("e")
        assert isinstance(app.screen, ErrorsScreen)
        blocks = list(app.screen.query("#failures Static"))
        first = blocks[0]
        assert first.has_class("suspect")
        console = Console(width=200, record=True)
        console.print(first.content)
        text = console.export_text()
        assert "SUSPECT" in text and SUSPECT_REASON in text.replace("\n  ", " ")
        assert "torch's root cause is rank 2" in text
        assert isinstance(blocks[1], Static) and blocks[1].has_class("-root-cause")


async def test_each_rank_s_progress_is_read_from_its_output() -> None:
    from tests.scenarios import running_script

    app = make_app(ScriptedSupervisor(scripted_info(4), running_script(4)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.run_view.ranks[0].progress is not None)
        # Rank 0 redraws a tqdm bar last; the others' last lines are step lines.
        bar = app.run_view.ranks[0].progress
        assert bar is not None and (bar.kind, bar.step, bar.total) == ("tqdm", 62, 100)
        assert all(app.run_view.ranks[r].progress is not None for r in range(4))
