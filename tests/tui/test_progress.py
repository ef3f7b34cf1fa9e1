"""Progress in the panes, straggler marks, and the all-ranks strip, on the scripted engine:
``straggler_script`` has rank 5 fall behind its peers' steps and rank 6 go silent."""

from __future__ import annotations

from rankvisor.engine.events import RankOutput
from rankvisor.engine.forensics.progress import Progress
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app
from rankvisor.tui.model import RunView
from rankvisor.tui.widgets.progress_strip import strip_text
from rankvisor.tui.widgets.rank_pane import RankPane, header_text, progress_text
from rankvisor.tui.widgets.rank_tiles import tile_status

from tests.scenarios import (
    LAGGING_RANK,
    SILENT_RANK,
    play_rounds,
    running_script,
    scripted_info,
    straggler_script,
)

from .conftest import FakeClock


def subtitle(pane: RankPane) -> str:
    text = pane.border_subtitle
    return text.plain if hasattr(text, "plain") else str(text)


async def test_a_lagging_and_a_silent_rank_are_marked_in_the_grid() -> None:
    clock = FakeClock()
    engine = ScriptedSupervisor(scripted_info(8), straggler_script(8), clock=clock)
    app = make_app(engine, clock=clock)
    async with app.run_test(size=(160, 48)) as pilot:
        await play_rounds(pilot, engine, clock.advance, 12)
        screen = app.main_screen
        assert screen.mode == "grid"
        panes = {pane.rank: pane for pane in screen.panes}
        # Rank 5 wrote step 72 while the median is 120: 48 behind (the threshold is 6).
        assert "⚠ 48 behind" in subtitle(panes[LAGGING_RANK])
        # Rank 6 wrote nothing for 6 s while its peers write every second.
        assert "⚠ silent 6s" in subtitle(panes[SILENT_RANK])
        for rank, pane in panes.items():
            assert pane.has_class("-straggler") == (rank in (LAGGING_RANK, SILENT_RANK))
            assert "quiet" not in subtitle(pane)  # a relative reading replaces it
        assert header_text(app.run_view.ranks[0], width=80).plain.startswith(
            "pid 41000  step 120"
        )
        strip = screen.strip.text
        assert "median step 120" in strip.plain
        assert "stragglers: 5, 6" in strip.plain
        # One cell per rank after the label: the stragglers' red, the others' green.
        cells = [span for span in strip.spans if span.end - span.start == 1]
        styles = [str(span.style) for span in cells[:8]]
        assert [i for i, style in enumerate(styles) if "red" in style] == [5, 6]
        assert all("green" in styles[i] for i in (0, 1, 2, 3, 4, 7))
        assert strip.plain[7 + SILENT_RANK] == "▁"  # silent 6 usual gaps: the lowest bar
        # It writes again: no longer silent (and back to keeping up once it catches up).
        engine.emit(RankOutput(SILENT_RANK, "stdout", ("step   120 | loss 1.0",)))
        await pilot.pause(0.2)
        app._show(None)
        assert not panes[SILENT_RANK].has_class("-straggler")
        assert "⚠ straggler: 5" in screen.strip.text.plain


async def test_the_tiles_show_the_step_or_the_mark() -> None:
    clock = FakeClock()
    engine = ScriptedSupervisor(scripted_info(8), straggler_script(8), clock=clock)
    app = make_app(engine, clock=clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await play_rounds(pilot, engine, clock.advance, 12)
        assert app.main_screen.mode == "list"
        ranks = app.run_view.ranks
        now = clock()
        assert tile_status(ranks[0], now) == "step 120"
        assert tile_status(ranks[LAGGING_RANK], now) == "⚠-48"
        assert tile_status(ranks[SILENT_RANK], now) == "⚠6s"
        assert "stragglers: 5, 6" in app.main_screen.strip.text.plain


def test_ranks_are_compared_on_the_kind_they_share() -> None:
    """Rank 0 also draws a tqdm bar: the ranks are still compared on their step lines, and a
    warning that quotes an old step does not move a rank back."""
    run = RunView(scripted_info(3))
    for view in run.ranks:
        view.state = RankState.RUNNING
    run.add_output(RankOutput(0, "stdout", ("step 40",), partial=" 62%|██▏  | 62/100"))
    run.add_output(RankOutput(1, "stdout", ("step 39", "WARNING: clipped at step 17")))
    run.add_output(RankOutput(2, "stdout", ("step 30",)))
    run.update_progress(0.0)
    assert run.progress_kind == "step" and run.median_step == 39
    assert [v.shown_progress for v in run.ranks] == [
        Progress("step", 40), Progress("step", 39), Progress("step", 30)
    ]
    assert [v.straggler for v in run.ranks] == ["", "", "behind"]
    assert progress_text(Progress("tqdm", 62, 100)) == "62/100"
    assert progress_text(Progress("epoch", 3), compact=True) == "ep3"


def test_the_strip_fits_many_ranks_at_80_columns() -> None:
    run = RunView(scripted_info(64))
    text = strip_text(run, 0.0, width=80)
    assert text.cell_len <= 80
    assert text.plain.startswith(" ranks ") and len(text.plain) >= 7 + 64  # a cell each
    many = RunView(scripted_info(512))
    text = strip_text(many, 0.0, width=80)
    assert text.plain.startswith(" ranks/8 ") and text.cell_len <= 80  # 64 cells of 8


async def test_the_grid_of_four_shows_each_rank_s_step() -> None:
    app = make_app(ScriptedSupervisor(scripted_info(4), running_script(4)))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.2)
        steps = [v.shown_progress.step if v.shown_progress else None for v in app.run_view.ranks]
        assert steps == [39, 38, 37, 39]  # rank 1's "(step 17)" warning is not progress
        assert "median step 38.5" in app.main_screen.strip.text.plain


def test_the_demo_s_bars_are_compared_not_a_warning_s_step() -> None:
    """Issue 22: the demo's four bars all read 29/200, ranks 0-2 printed "step 20" and ranks
    1 and 3 a warning "(step 25)": nobody is behind, and each header shows its bar."""
    run = RunView(scripted_info(4))
    for view in run.ranks:
        view.state = RankState.RUNNING
    bar = "\rtrain  14%|██▊                 | 29/200 [2.9s<17.1s, 10.0it/s]"
    warning = "UserWarning: rank {r}: WARNING grad norm 12 clipped to 1.0 (step 25)"
    for r in range(4):
        run.add_output(RankOutput(r, "stdout", (f"rank {r}/4: gloo process group up",)))
        lines = ("\rstep   20 | loss 1.0312 | lr 0.05",) if r != 3 else ()
        run.add_output(RankOutput(r, "stdout", lines, partial=bar))
        if r in (1, 3):
            run.add_output(RankOutput(r, "stderr", (warning.format(r=r),)))
    run.update_progress(0.0)
    assert run.progress_kind == "tqdm" and run.median_step == 29
    assert [v.shown_progress for v in run.ranks] == [Progress("tqdm", 29, 200)] * 4
    assert [v.straggler for v in run.ranks] == [""] * 4
    # Without the bars, the step lines are compared, never the warning's step.
    run = RunView(scripted_info(4))
    for view in run.ranks:
        view.state = RankState.RUNNING
    for r in range(4):
        run.add_output(RankOutput(r, "stdout", ("step   20 | loss 1.0",) if r != 3 else ()))
        if r in (1, 3):
            run.add_output(RankOutput(r, "stderr", (warning.format(r=r),)))
    run.update_progress(0.0)
    assert run.median_step == 20
    assert [v.straggler for v in run.ranks] == [""] * 4


def test_a_quiet_start_makes_no_straggler_until_the_start_up_threshold() -> None:
    """DDP's set-up or a dataset's load after a few start-up lines: no rank has a cadence
    yet, so silence flags nobody before the start-up threshold, which the reason names."""
    run = RunView(scripted_info(4))
    for view in run.ranks:
        view.state = RankState.RUNNING
        for t, line in enumerate(("starting", "loading", "ready")):
            run.add_output(RankOutput(view.rank, "stdout", (line,)))
            view.saw_output(t / 10)
    for now in (6.0, 26.0):
        run.update_progress(now)
        assert [v.straggler for v in run.ranks] == ["", "", "", ""], now
    run.update_progress(31.0)
    assert {v.straggler for v in run.ranks} == {"silent"}
    assert run.ranks[0].straggler_reason == "silent 30.8 s, past the 30 s start-up threshold"
