"""How the screens look, as SVG snapshots at 80x24 and 160x48 (scripted engine, fixed clock:
no real pid, path or time can appear). Regenerate with ``pytest --snapshot-update`` only after
looking at the report; ``screenshots/make_screenshots.py`` draws the same scenes for the docs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app

from tests.scenarios import (
    failure_script,
    pdb_script,
    play_rounds,
    recorded_collectives,
    recorded_stacks,
    running_script,
    scripted_info,
    straggler_script,
    suspect_script,
    write_timeline_files,
)

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((160, 48), id="160x48")]


async def _settle(pilot) -> None:  # type: ignore[no-untyped-def]
    """Let the off-thread file indexing and searching finish, then draw."""
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause(0.05)


@pytest.mark.parametrize("size", SIZES)
def test_grid_four_ranks_running(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """Four green panes in a 2x2 grid, rank 0 selected (heavy border); each has pid, CPU
    sparkline, RSS and NUMA in its header; rank 0 ends with a progress bar, ranks 1 and 3
    with a stderr warning in the warning colour."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4))
    assert snap_compare(make_app(engine), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_failed_rank_error_view(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """The error view: rank 2 first, marked ROOT CAUSE, with its error.json traceback in
    panels; ranks 0 and 1 below, without error.json, showing exit 1 and their last stderr."""
    engine = ScriptedSupervisor(scripted_info(4), failure_script())
    assert snap_compare(make_app(engine), press=["e"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_zoom_with_search(snap_compare, size, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rank 2 zoomed: its stdout and stderr logs (it wrote stdout only) merged in arrival
    order, read from disk with line numbers, long lines wrapped; every "epoch 2" is
    highlighted and the current match (line 2x) is brighter; the title says where."""
    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4, steps=120), write_files=True
    )

    async def search(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("j", "enter")
        await _settle(pilot)
        await pilot.press("slash", *"epoch 2", "enter")
        await _settle(pilot)

    assert snap_compare(make_app(engine), run_before=search, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_filtered_view(snap_compare, size, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """filtered_stdout.log (lines with "epoch" of every rank, prefixed) above
    filtered_stderr.log (the WARNING lines of ranks 1 and 3)."""
    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp_path), running_script(4), write_files=True
    )

    async def open_filtered(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("f")
        await _settle(pilot)

    assert snap_compare(make_app(engine), run_before=open_filtered, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_grid_32_ranks(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """32 ranks: one-line tiles (state, CPU, RSS, latest line) beside the selected rank's
    full pane; at 160 columns the tiles fill two columns, at 80 they scroll."""
    engine = ScriptedSupervisor(scripted_info(32), running_script(32, steps=6))
    assert snap_compare(make_app(engine), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_stragglers(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """8 ranks after 12 one-second rounds: rank 5 is 48 steps behind the median, rank 6
    silent 6 s; the strip above the ranks has their cells red and names them; at 160x48 each
    pane's header shows its step and the stragglers' borders say why, at 80x24 the tiles do."""
    from tests.tui.conftest import FakeClock

    clock = FakeClock()
    engine = ScriptedSupervisor(scripted_info(8), straggler_script(8), clock=clock)

    async def rounds(pilot) -> None:  # type: ignore[no-untyped-def]
        await play_rounds(pilot, engine, clock.advance, 12)

    assert snap_compare(make_app(engine, clock=clock), run_before=rounds, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """The ? screen over the grid: every key, grouped."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4))
    assert snap_compare(make_app(engine), press=["question_mark"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_quit_asks_to_detach(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """q while ranks run in a supervisor process of their own: a dialog whose focused,
    default answer is Detach [d] (the run goes on), then Terminate all [t] and Cancel [n],
    each with its key shown literally (not eaten as markup)."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), detachable=True)
    assert snap_compare(make_app(engine), press=["q"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_timeline_at_the_suspect(snap_compare, size, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The timeline: every rank's lines by arrival time (UTC, milliseconds), each rank in its
    colour; opened at rank 3's last line, marked "suspect's last line"; a red "first
    failure" rule before rank 2's traceback, the "Connection closed" errors of ranks 0 and 1
    after it; the grid header above says suspect: rank 3 before root cause: rank 2."""
    write_timeline_files(tmp_path)
    engine = ScriptedSupervisor(scripted_info(4, run_dir=tmp_path), suspect_script())

    async def open_timeline(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot)
        await pilot.press("a")
        await _settle(pilot)

    assert snap_compare(make_app(engine), run_before=open_timeline, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_stacks_view(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """S: the collectives first (rank 3 never entered all_reduce #5: the verdict, then a row
    per rank, rank 3's marked odd); the merged stacks of a recorded dump of the demo below,
    rank 3 (in _stall) first, marked odd and highlighted, open on its frames; ranks 0, 1, 2
    (in _train) closed below; the saved file's path at the bottom."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), stacks=recorded_stacks(),
                                collectives=recorded_collectives(4, skipped=3))

    async def open_stacks(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("S")
        await _settle(pilot)

    assert snap_compare(make_app(engine), run_before=open_stacks, terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_rank_at_a_prompt_with_the_input_line_open(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """Rank 0 stopped at pdb in train_step: its border says "⌨ (Pdb) train.py:52" in the
    accent colour, the header "⌨ 1 at a prompt"; the input line (i) is open on it, "INPUT
    rank 0" on its label, "p lo" being typed; the pane shows the line sent before, dim and
    marked after its prompt ("(Pdb) ⌨ p x"), the rank's answer 41 and the prompt again; the
    footer lists the line's keys (ctrl+d EOF, esc leave, ctrl+t all at a prompt)."""
    engine = ScriptedSupervisor(scripted_info(4, stdin="pipe"), pdb_script(4))

    async def answer(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("i")
        await _settle(pilot)
        await pilot.press(*"p x", "enter")
        await _settle(pilot)
        await pilot.press(*"p lo")
        await _settle(pilot)
        pilot.app._tick()

    assert snap_compare(make_app(engine), run_before=answer, terminal_size=size)
