"""What a frame costs the screen: under a flood a key waits for the frame in progress and
then for its own, so neither may be a whole screen's when a pane's worth would do.

Counted, not timed: the screen's layouts (``Screen._refresh_layout``) and its full frames
(``Compositor.render_full_update``) while panes grow and while the selection moves. A layout
is a full arrangement and a full frame of every widget (50-150 ms at 160x48 with 8 flooding
panes on a 2-core machine, against 20-30 ms for a frame of the panes that changed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from rankvisor.engine.events import RankOutput
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui import app as app_module
from rankvisor.tui.app import make_app
from rankvisor.tui.widgets.rank_log import RankLog
from textual._compositor import Compositor
from textual.screen import Screen

from tests.scenarios import running_script, scripted_info

from .conftest import FakeClock


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    counts = {"layouts": 0, "full frames": 0}
    layout = Screen._refresh_layout
    full = Compositor.render_full_update

    def counted_layout(self: Screen[Any], *args: Any, **kwargs: Any) -> None:
        counts["layouts"] += 1
        layout(self, *args, **kwargs)

    def counted_full(self: Compositor, *args: Any, **kwargs: Any) -> Any:
        counts["full frames"] += 1
        return full(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Screen, "_refresh_layout", counted_layout)
        patch.setattr(Compositor, "render_full_update", counted_full)
        yield counts


def _ticked_app(
    clock: FakeClock, nprocs: int, *, throttle: bool
) -> tuple[ScriptedSupervisor, Any]:
    """A run of ``nprocs`` running ranks and its app, whose drain ticks the test calls."""
    sup = ScriptedSupervisor(scripted_info(nprocs), running_script(nprocs), clock=clock)
    return sup, make_app(sup, clock=clock, throttle=throttle, drain_hz=0.001)


@asynccontextmanager
async def _shown(clock: FakeClock, nprocs: int, lines: int) -> AsyncIterator[tuple[Any, Any, Any]]:
    """The app of ``nprocs`` ranks at 160x48, after a drain tick that drew ``lines`` lines
    of each rank: (supervisor, app, pilot)."""
    sup, app = _ticked_app(clock, nprocs, throttle=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        _emit(sup, nprocs, 0, lines)
        app._tick()
        await pilot.pause()
        yield sup, app, pilot


def _rows(log: RankLog) -> list[str]:
    return ["".join(s.text for s in log.render_line(y)).rstrip() for y in range(log.size.height)]


def _emit(sup: ScriptedSupervisor, nprocs: int, tick: int, count: int) -> None:
    for r in range(nprocs):
        lines = tuple(f"rank {r} tick {tick} line {i}" for i in range(count))
        sup.emit(RankOutput(r, "stdout", lines, first_line=10_000 * (tick + 1)))


def _marked_regions(monkeypatch: pytest.MonkeyPatch, widget: Any) -> list[Any]:
    """Every ``widget.refresh`` call's regions from now on (``()``: the whole widget)."""
    marked: list[Any] = []
    refresh = type(widget).refresh

    def counted(self: Any, *regions: Any, **kwargs: Any) -> Any:
        if self is widget:
            marked.append(regions)
        return refresh(self, *regions, **kwargs)

    monkeypatch.setattr(type(widget), "refresh", counted)
    return marked


async def test_growing_panes_follow_their_last_line_without_a_layout(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    nprocs = 8
    # Every pane scrolls: more lines than rows.
    async with _shown(clock, nprocs, 50) as (sup, app, pilot):
        with _counting(monkeypatch) as counts:
            for tick in range(1, 9):
                _emit(sup, nprocs, tick, 7 + tick)  # a different count each time
                if tick % 2:  # an unfinished line comes and goes: a row more, a row less
                    sup.emit(RankOutput(3, "stdout", (), first_line=0, partial="50%|#####"))
                app._tick()
                await pilot.pause()
                if tick % 2:
                    assert _rows(app.main_screen.panes[3].log_view)[-1] == "50%|#####"
        assert counts == {"layouts": 0, "full frames": 0}, counts
        for pane in app.main_screen.panes:
            rows = [row for row in _rows(pane.log_view) if row]
            assert rows[-1] == f"rank {pane.rank} tick 8 line 14", (pane.rank, rows[-3:])
            log = pane.log_view
            assert log.scroll_y == log.max_scroll_y and log.follow
        # A pane scrolled up by a person stays on its lines while the others grow.
        held = app.main_screen.panes[5].log_view
        held.scroll_to(y=10, animate=False, immediate=True)
        await pilot.pause()
        before = _rows(held)
        _emit(sup, nprocs, 9, 20)
        app._tick()
        await pilot.pause()
        assert _rows(held) == before and held.scroll_y == 10
        assert held.max_scroll_y > 10


async def test_a_selection_move_redraws_its_panes_not_the_screen(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    nprocs = 8
    async with _shown(clock, nprocs, 50) as (sup, app, pilot):
        screen = app.main_screen
        for key in "lllhhjk":  # every pane the selection reaches below has been shown
            await pilot.press(key)
        await pilot.pause()
        with _counting(monkeypatch) as counts:
            for key in "lhlhjk":
                before = screen.selected
                await pilot.press(key)
                await pilot.pause()
                assert screen.selected != before
                assert screen.panes[screen.selected].selected
                assert not screen.panes[before].selected
        assert counts == {"layouts": 0, "full frames": 0}, counts


async def test_a_move_in_the_tiles_repaints_two_rows_and_shows_what_a_full_repaint_does(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 ranks: tiles beside a focus pane. A move marks the rows of the two tiles that show
    it, not the 40 rows of every tile (each tile changes at every frame of a flood, and the
    key's frame waited for them all); what shows is what a repaint of every tile shows."""
    nprocs = 64
    async with _shown(clock, nprocs, 5) as (sup, app, pilot):
        tiles = app.main_screen.tiles
        assert app.main_screen.mode == "list" and tiles.rows > tiles.size.height
        marked = _marked_regions(monkeypatch, tiles)
        for key in "jjjkj":
            await pilot.press(key)
            await pilot.pause()
            assert len(marked[-1]) == 2 and all(r.height == 1 for r in marked[-1])
            shown = app.export_screenshot()
            tiles.refresh()
            await pilot.pause()
            assert app.export_screenshot() == shown
        # Far down the list the tiles scroll: then every row is new.
        await pilot.press("end")
        await pilot.pause()
        assert marked[-1] == () and app.main_screen.selected == nprocs - 1
        shown = app.export_screenshot()
        tiles.refresh()
        await pilot.pause()
        assert app.export_screenshot() == shown


async def test_a_drain_tick_waits_for_the_frame_of_a_key(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    nprocs = 8
    sup, app = _ticked_app(clock, nprocs, throttle=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        ticks = app._ticks
        app.hold_ticks_for_frame()  # as a key does, once the screen has it
        app._tick()
        assert app._ticks == ticks  # held until a frame is drawn
        await pilot.press("l")  # moves the selection: held again, then its frame
        await pilot.pause()
        app._tick()
        assert app._ticks == ticks + 1 and app.main_screen.selected == 1
        # A frame that never comes holds the ticks no longer than KEY_FRAME_WAIT_S.
        monkeypatch.setattr(app_module, "KEY_FRAME_WAIT_S", 0.0)
        app.hold_ticks_for_frame()
        app._tick()
        assert app._ticks == ticks + 2


async def test_the_focus_pane_shows_another_rank_repainting_its_edges_not_its_rows(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 ranks: a move binds the focus pane to the next rank. Its title and state line are
    its border's top and bottom rows: those are marked, not the pane's 44 rows (its log
    repaints its own), and what shows is what a repaint of the whole pane shows."""
    nprocs = 64
    async with _shown(clock, nprocs, 5) as (sup, app, pilot):
        focus = app.main_screen.focus_pane
        marked = _marked_regions(monkeypatch, focus)
        for key in "jjk":
            marked.clear()
            await pilot.press(key)
            await pilot.pause()
            rank = app.main_screen.selected
            assert focus.rank == rank and f"rank {rank}" in focus.border_title
            assert marked and all(regions for regions in marked), marked  # no whole repaint
            rows = {r.y + focus.content_offset.y for regions in marked for r in regions}
            assert all(r.height == 1 for regions in marked for r in regions)
            assert rows <= {0, focus.outer_size.height - 1}, rows
            shown = app.export_screenshot()
            focus.refresh()
            await pilot.pause()
            assert app.export_screenshot() == shown


@pytest.mark.parametrize("nprocs", [8, 64])  # panes in a grid; tiles beside a focus pane
async def test_a_move_draws_its_frame_before_its_handler_returns(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, nprocs: int
) -> None:
    """The frame of a move is drawn in the move itself (``frame_now``), with everything the
    move changed: no widget is left waiting for a repaint, and no later frame is needed.
    What shows is what a repaint of every widget shows."""
    from rankvisor.tui.app import RankvisorApp

    async with _shown(clock, nprocs, 5) as (sup, app, pilot):
        screen = app.main_screen
        frames: list[int] = []
        display = RankvisorApp._display

        def counted(self: Any, shown: Any, renderable: Any) -> None:
            if renderable is not None:
                frames.append(screen.selected)
            display(self, shown, renderable)

        monkeypatch.setattr(RankvisorApp, "_display", counted)
        drawn_now = 0
        for step in (1, -1, 1):
            before, old = len(frames), screen.selected
            screen.action_move(0, step)  # as the key's binding calls it
            assert screen.selected != old
            now = len(frames) > before
            if now:
                drawn_now += 1
                assert frames[-1] == screen.selected
                left = [w for w in screen._compositor.visible_widgets if w._repaint_required]
                assert not left and not screen._dirty_widgets, left
            await pilot.pause()
            if now:
                assert len(frames) == before + 1, "the move's frame missed some of it"
            shown = app.export_screenshot()
            for widget in screen.walk_children():
                widget.refresh()
            await pilot.pause()
            assert app.export_screenshot() == shown
        if nprocs == 64:
            # Repaints only (the panes' selection borders in the grid are a restyle, which
            # takes Textual's own way): each move drawn at once.
            assert drawn_now == 3
