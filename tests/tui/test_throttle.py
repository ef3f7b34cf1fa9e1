"""The app under load (a flood that keeps the UI thread busy): panes other than the selected
one, and the tiles, are drawn every third drain tick, the selected pane every tick; what they
show is never behind the model once drawn. The load is set, not made (``THROTTLE_LOAD``
below zero: the app counts as busy at every tick), and the ticks are called by the test, so
the counts do not depend on the machine."""

from __future__ import annotations

from typing import Any

import pytest
from rankvisor.engine.events import RankOutput
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui import app as app_module
from rankvisor.tui.app import make_app
from rankvisor.tui.widgets.rank_tiles import RankTiles

from tests.scenarios import running_script, scripted_info

from .conftest import FakeClock


async def test_busy_the_tiles_are_drawn_every_third_tick_and_each_second(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_module, "THROTTLE_LOAD", -1.0)
    nprocs = 64
    sup = ScriptedSupervisor(scripted_info(nprocs), running_script(nprocs), clock=clock)
    app = make_app(sup, clock=clock, throttle=True, drain_hz=0.001)  # the test ticks
    drawn: list[int] = []
    show = RankTiles.show

    def counted(self: RankTiles, *args: Any, **kwargs: Any) -> None:
        drawn.append(app._ticks)
        show(self, *args, **kwargs)

    monkeypatch.setattr(RankTiles, "show", counted)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app._last_key = 0.0  # no key pressed lately
        drawn.clear()
        for tick in range(12):
            for r in range(nprocs):
                line = (f"rank {r} line {tick}",)
                sup.emit(RankOutput(r, "stdout", line, first_line=1000 + tick))
            app._tick()
        assert len(drawn) == 4 and all(t % 3 == 0 for t in drawn), drawn
        # A new second: the tiles are drawn whatever the tick (their clocks and CPU).
        clock.advance(1.0)
        app._tick()
        assert len(drawn) == 5
        await pilot.pause()
        # What they show is the model's, as of the last draw: each tile its rank's last line.
        tiles = app.main_screen.tiles
        text = "".join(seg.text for y in range(tiles.size.height)
                       for seg in tiles.render_line(y))
        assert text.count("line 11") >= 16 and "line 10" not in text, text
