"""A rank at a prompt, through the Pilot on the scripted engine: its border and tile, the
header's count, the list of ranks at a prompt (p), the input line (i) with its history, the
all-ranks toggle and the question before a line that ends a debugger, a filter that does not
hide a waiting rank, and a read-only viewer that may see but not type."""

from __future__ import annotations

from pathlib import Path

from rankvisor.engine.control.server import READ_ONLY_REFUSAL
from rankvisor.engine.entry import rank_eval
from rankvisor.engine.events import RankStateChanged
from rankvisor.engine.handle import CloseInput, SendInput
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import (
    BASE_PID,
    EPOCH,
    Checkpoint,
    Prompt,
    ScriptedSupervisor,
    ScriptItem,
    not_piped,
)
from rankvisor.tui.app import make_app
from rankvisor.tui.clip import rank_log_lines
from rankvisor.tui.screens.confirm import ConfirmScreen
from rankvisor.tui.screens.prompts import PromptsScreen
from rankvisor.tui.screens.timeline import TimelineScreen
from rankvisor.tui.widgets.input_bar import InputBar
from rankvisor.tui.widgets.rank_pane import RankPane
from rankvisor.tui.widgets.rank_tiles import tile_status
from rankvisor.tui.widgets.run_summary import summary_text
from rich.text import Text
from textual.widgets import RichLog

from tests.scenarios import pdb_prompt, pdb_script, running_script, scripted_info

from .conftest import wait_for

SIZE = (120, 36)


def engine_at_prompt(
    *items: ScriptItem, nprocs: int = 4, run_dir: Path | None = None
) -> ScriptedSupervisor:
    """``nprocs`` ranks training, rank 0 at pdb's prompt, the ranks' stdin a pipe; with
    ``run_dir`` their output is written to log files there too."""
    where = {} if run_dir is None else {"run_dir": run_dir}
    info = scripted_info(nprocs, stdin="pipe", **where)  # type: ignore[arg-type]
    return ScriptedSupervisor(info, [*pdb_script(nprocs), *items], write_files=bool(where))


def pane(app, rank: int) -> RankPane:  # type: ignore[no-untyped-def]
    return app.main_screen.query_one(f"#rank-{rank}", RankPane)


def subtitle(widget) -> str:  # type: ignore[no-untyped-def]
    return Text.from_markup(widget.border_subtitle or "").plain


def bar(app) -> InputBar:  # type: ignore[no-untyped-def]
    return app.screen.query_one(InputBar)


def sent(engine: ScriptedSupervisor) -> list[object]:
    return [c for c in engine.calls if isinstance(c, (SendInput, CloseInput))]


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    pilot.app._tick()
    await pilot.pause()


async def open_input(pilot) -> InputBar:  # type: ignore[no-untyped-def]
    await pilot.press("i")
    await wait_for(pilot, lambda: pilot.app.screen.query(InputBar) and bar(pilot.app).display)
    return bar(pilot.app)


async def test_border_tile_and_header_say_a_rank_waits_until_it_goes_on() -> None:
    engine = engine_at_prompt()
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        waiting = pane(app, 0)
        assert waiting.has_class("-waiting") and not pane(app, 1).has_class("-waiting")
        assert subtitle(waiting) == "⌨ (Pdb) train.py:52"
        assert subtitle(pane(app, 1)) == "running"
        assert tile_status(app.run_view.ranks[0], 0.0) == "⌨ (Pdb)"
        header = summary_text(app.run_view, elapsed=0).plain
        assert "⌨ 1 at a prompt" in header
        # The prompt is the pane's unfinished last line, below pdb's "where" lines.
        assert rank_log_lines(waiting.log_view)[-3:] == [
            "> /job/train.py(52)train_step()", "-> loss = model(batch).sum() + x", "(Pdb) "]
        engine.execute(SendInput((0,), "c"))  # continue: the rank goes on
        await settle(pilot)
        assert not waiting.has_class("-waiting") and subtitle(waiting) == "running"
        assert "at a prompt" not in summary_text(app.run_view, elapsed=0).plain


async def test_input_line_sends_each_line_and_stays_open_and_the_pane_shows_it_typed() -> None:
    engine = engine_at_prompt()
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        line = await open_input(pilot)
        assert line.label.render().plain.startswith("INPUT rank 0")  # type: ignore[union-attr]
        assert app.focused is line.line
        await pilot.press(*"p x", "enter")
        await settle(pilot)
        assert sent(engine) == [SendInput((0,), "p x")]
        assert line.display and app.focused is line.line and line.line.value == ""
        # Typed after the prompt it answered, marked; the rank's answer below; a new prompt.
        assert rank_log_lines(pane(app, 0).log_view)[-3:] == ["(Pdb) ⌨ p x", "41", "(Pdb) "]
        await pilot.press(*"c", "enter")
        await settle(pilot)
        assert sent(engine)[-1] == SendInput((0,), "c")
        assert app.run_view.ranks[0].input_wait is None
        await pilot.press("escape")
        await pilot.pause()
        assert not line.display and app.focused is None
        await pilot.press("t")  # a rank key again, not a character of the line
        await settle(pilot)
        assert engine.calls[-1].__class__.__name__ == "TerminateRanks"


async def test_up_and_down_walk_the_ranks_history() -> None:
    engine = engine_at_prompt()
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        line = await open_input(pilot)
        for text in ("p x", "p loss"):
            await pilot.press(*text, "enter")
            await settle(pilot)
        await pilot.press(*"p y")
        seen = []
        for key in ("up", "up", "up", "down", "down", "down"):
            await pilot.press(key)
            seen.append(line.line.value)
        assert seen == ["p loss", "p x", "p x", "p loss", "p y", "p y"]
        await pilot.press("up", "enter")  # a line from the history is sent as it is
        await settle(pilot)
        assert sent(engine)[-1] == SendInput((0,), "p loss")


async def test_the_toggle_sends_each_line_to_every_rank_at_a_prompt() -> None:
    engine = engine_at_prompt(pdb_prompt(2, since=EPOCH + 40))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")  # rank 1: not at a prompt
        line = await open_input(pilot)
        assert line.rank == 1
        await pilot.press("ctrl+t")
        assert "INPUT every rank at a prompt (2)" in line.label.render().plain  # type: ignore[union-attr]
        await pilot.press(*"p x", "enter")
        await settle(pilot)
        assert sent(engine) == [SendInput((0, 2), "p x")]
        await pilot.press(*"c", "enter")
        await settle(pilot)
        assert sent(engine)[-1] == SendInput((0, 2), "c")
        assert app.run_view.waiting() == []
        await pilot.press(*"yes", "enter")  # nobody at a prompt: nothing is sent
        await settle(pilot)
        assert len(sent(engine)) == 2
        assert "no rank is at a prompt" in app.notices[-1].message
        await pilot.press("ctrl+t")  # back to rank 1 alone
        await pilot.press(*"yes", "enter")
        await settle(pilot)
        assert sent(engine)[-1] == SendInput((1,), "yes")


async def test_an_expression_after_equals_goes_to_every_rank_at_pdb(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The scripted engine never asks again: each rank's value is what came in 0.2 s (none).
    monkeypatch.setattr(rank_eval, "DEFAULT_TIMEOUT_S", 0.2)
    engine = engine_at_prompt(pdb_prompt(2, since=EPOCH + 40))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")  # rank 1 bound, not at a prompt: = asks every rank at pdb
        await open_input(pilot)
        await pilot.press(*"=x", "enter")
        await wait_for(pilot, lambda: app.notices and app.notices[-1].message.startswith("=x"))
        assert sent(engine) == [SendInput((0, 2), rank_eval.eval_line("x"))]
        assert "not at a pdb prompt: 1, 3" in app.notices[-1].message


async def test_q_to_pdb_and_eof_ask_first_and_say_what_they_do() -> None:
    engine = engine_at_prompt(Prompt(1, "continue? "))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await open_input(pilot)
        for quit_word in ("q", "quit", "exit"):
            await pilot.press(*quit_word, "enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            question = str(app.screen.query_one("#question").render())
            assert "ends rank 0" in question and "peers then fail or hang" in question
            await pilot.press("n")
            await pilot.pause()
        assert sent(engine) == []
        await pilot.press(*"q", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await settle(pilot)
        assert sent(engine) == [SendInput((0,), "q")]
        assert app.focused is bar(app).line  # back on the line after the question
        # Ctrl-D on an empty line: EOF, asked first as well.
        await pilot.press("ctrl+d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "ends rank 0" in str(app.screen.query_one("#question").render())
        await pilot.press("y")
        await settle(pilot)
        assert sent(engine)[-1] == CloseInput((0,))
        # "q" to a prompt that is not pdb's (input()) is just an answer.
        await pilot.press("escape", "l")
        await open_input(pilot)
        await pilot.press(*"q", "enter")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        assert sent(engine)[-1] == SendInput((1,), "q")


async def test_the_list_of_ranks_at_a_prompt_jumps_to_one_and_opens_its_line() -> None:
    engine = engine_at_prompt(pdb_prompt(3, since=EPOCH + 20), Prompt(2, "continue? "))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptsScreen))
        options = app.screen.query_one("#prompts")
        rows = [options.get_option_at_index(i).prompt.plain  # type: ignore[attr-defined]
                for i in range(options.option_count)]  # type: ignore[attr-defined]
        # Longest waiting first: rank 3 (since :20), rank 0 (:30), rank 2 (:60).
        assert [row.split()[0] for row in rows] == ["3", "0", "2"]
        assert "train.py:52 in train_step" in rows[0] and "(Pdb)" in rows[0]
        assert "00:00:20" in rows[0] and "continue?" in rows[2]
        await pilot.press("down", "down", "enter")
        await wait_for(pilot, lambda: app.screen.query(InputBar) and bar(app).display)
        assert app.main_screen.selected == 2 and bar(app).rank == 2
        await pilot.press(*"yes", "enter")
        await settle(pilot)
        assert sent(engine) == [SendInput((2,), "yes")]
        # The open list follows the run: the rank answered leaves it.
        await pilot.press("escape", "p")
        await wait_for(pilot, lambda: isinstance(app.screen, PromptsScreen))
        assert app.screen.query_one("#prompts").option_count == 2  # type: ignore[attr-defined]
        engine.execute(SendInput((3,), "c"))
        await settle(pilot)
        assert app.screen.query_one("#prompts").option_count == 1  # type: ignore[attr-defined]


async def test_a_filter_never_hides_a_rank_at_a_prompt(tmp_path: Path) -> None:
    engine = engine_at_prompt(run_dir=tmp_path)
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, TimelineScreen) and app.screen.lines)
        timeline = app.screen
        await pilot.press("ampersand", *"no such text", "enter")
        await settle(pilot)

        def rows() -> list[str]:
            return [strip.text for strip in timeline.query_one("#timeline", RichLog).lines]

        await wait_for(pilot, lambda: any("at a prompt" in r for r in rows()))
        assert [r for r in rows() if r.strip()] == [
            "00:00:30.000 r0    ⌨ at a prompt: (Pdb)  train.py:52 in train_step"]
        engine.execute(SendInput((0,), "c"))
        await settle(pilot)
        await wait_for(pilot, lambda: not any("at a prompt" in r for r in rows()))


async def test_a_read_only_viewer_sees_the_prompt_but_may_not_type() -> None:
    info = scripted_info(4, stdin="pipe")
    engine = ScriptedSupervisor(info, pdb_script(4), read_only=True)
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert subtitle(pane(app, 0)) == "⌨ (Pdb) train.py:52"
        line = await open_input(pilot)
        assert line.line.disabled and line.line.placeholder == READ_ONLY_REFUSAL
        assert "read-only" in line.label.render().plain  # type: ignore[union-attr]
        # Were a line sent anyway, the handle's refusal is shown as every refusal is.
        app.run_command(SendInput((0,), "p x"))
        await settle(pilot)
        assert app.notices[-1].message == READ_ONLY_REFUSAL


async def test_refusals_are_shown_and_a_run_without_a_pipe_says_why_not() -> None:
    app = make_app(ScriptedSupervisor(scripted_info(4), running_script(4)))
    async with app.run_test(size=SIZE) as pilot:
        line = await open_input(pilot)
        assert line.line.disabled and "--stdin pipe" in line.line.placeholder
        app.run_command(SendInput((0,), "yes"))
        await settle(pilot)
        assert app.notices[-1].message == not_piped("null")
    engine = engine_at_prompt(
        RankStateChanged(1, RankState.RUNNING, RankState.SUCCEEDED, BASE_PID + 1, exitcode=0))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        await open_input(pilot)
        await pilot.press(*"yes", "enter")
        await settle(pilot)
        assert app.notices[-1].message == (
            "rank 1 is not running (succeeded): nothing to send input to")


def test_a_typed_line_goes_after_the_prompt_it_answered_or_on_a_line_of_its_own() -> None:
    from rankvisor.engine.events import InputWait, RankInput, RankInputWait, RankOutput
    from rankvisor.tui.model import RunView, typed_parts

    run = RunView(scripted_info(2, stdin="pipe"))
    for r in (0, 1):
        run.apply(RankStateChanged(r, RankState.STARTING, RankState.RUNNING, BASE_PID + r))
    run.apply(RankOutput(0, "stdout", ("> /job/job.py(7)<module>()",), partial="(Pdb) "))
    run.apply(RankInputWait(0, InputWait(EPOCH, "(Pdb) ", "job.py:7 in <module>")))
    run.apply(RankInput(0, "p x\x1b]52;c;aGk=\x07", EPOCH + 1))  # a hostile line is shown inert
    run.apply(RankInputWait(0, None))
    run.apply(RankOutput(0, "stdout", ("(Pdb) 41",), partial="(Pdb) "))
    buffer = run.ranks[0].buffer
    lines = [buffer[i] for i in range(len(buffer))]
    assert lines[1][0] == "typed" and typed_parts(lines[1][1]) == ("(Pdb) ", "p x")
    assert lines[2] == ("stdout", "41") and buffer.partial == "(Pdb) "
    assert list(run.ranks[0].typed) == ["p x"]
    # Not at a prompt (a progress bar is the unfinished line): the line stands alone and
    # the bar stays where it was.
    run.apply(RankOutput(1, "stderr", (), partial=" 40%|████"))
    run.apply(RankInput(1, "yes", EPOCH + 2))
    buffer = run.ranks[1].buffer
    assert typed_parts(buffer[len(buffer) - 1][1]) == ("", "yes")
    assert buffer.partial == " 40%|████"
    # A rank that ends waits no more.
    run.apply(RankInputWait(1, InputWait(EPOCH, "name? ")))
    run.apply(RankStateChanged(1, RankState.RUNNING, RankState.FAILED, BASE_PID + 1, exitcode=1))
    assert run.waiting() == []


def test_the_zoomed_log_puts_typed_lines_back_among_the_ranks_own(tmp_path: Path) -> None:
    """A pipe does not echo: the files hold "(Pdb) 41"; the zoom shows what was typed
    between the prompt's line and the answer, by the arrival index's times."""
    import struct

    from rankvisor.engine.logfile.merged import MergedSource
    from rankvisor.engine.rundir.arrival import MAGIC, arrival_path
    from rankvisor.tui.widgets.typed_source import TypedRows

    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    out.write_text("> /job/job.py(7)<module>()\n-> y = x + 1\n(Pdb) 41\n(Pdb) done\n")
    err.write_text("warning\n")
    index = arrival_path(str(out), str(err))
    sec = 1_000_000_000

    def write_index(*records: tuple[int, int, float]) -> None:
        with open(index, "wb") as f:
            f.write(MAGIC)
            for stream, end, t in records:
                f.write(struct.pack("<Qq", end << 1 | stream, int(t * sec)))

    write_index((0, 2, 100.0), (1, 1, 100.5), (0, 3, 102.0), (0, 4, 104.0))
    typed: list[tuple[float, str]] = [(101.0, "p x")]
    rows = TypedRows(MergedSource(str(out), str(err), index), index, lambda: typed)
    assert rows.refresh() == 6
    assert rows.get_lines(0, 6) == [
        "> /job/job.py(7)<module>()", "-> y = x + 1", "warning", "p x", "(Pdb) 41", "(Pdb) done"]
    assert rows.streams(0, 6) == ["stdout", "stdout", "stderr", "stdin", "stdout", "stdout"]
    assert rows.changed_from is None
    assert list(rows.search("Pdb")) == [4, 5]  # the rank's own lines, in the view's rows
    # A line learnt after the rows that followed it were read: it goes in its place, and
    # the view is told from where to draw again.
    typed.append((103.0, "c"))
    assert rows.refresh() == 7
    assert rows.get_lines(3, 7) == ["p x", "(Pdb) 41", "c", "(Pdb) done"]
    assert rows.changed_from == 5


async def test_the_zoom_shows_what_was_typed_and_takes_the_input_line_too(tmp_path: Path) -> None:
    from rankvisor.tui.screens.zoom import ZoomScreen
    from rankvisor.tui.widgets.file_log import FileLog

    engine = engine_at_prompt(run_dir=tmp_path)
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ZoomScreen))
        await open_input(pilot)
        await pilot.press(*"p x", "enter")
        await settle(pilot)
        assert sent(engine) == [SendInput((0,), "p x")]
        log = app.screen.query_one("#both-log", FileLog)

        def tail() -> list[str]:
            return [log.get_line(i) for i in range(max(0, log.line_count - 3), log.line_count)]

        await wait_for(pilot, lambda: tail() == ["-> loss = model(batch).sum() + x", "p x",
                                                 "(Pdb) 41"])
        assert log.stream_of(log.line_count - 2) == "stdin"


async def test_a_closed_input_line_never_takes_the_focus_back() -> None:
    """i, esc, then a view (e, a zoom) and esc: the grid came back with the hidden line
    focused, and c, enter went to pdb."""
    engine = engine_at_prompt()
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for view in ("e", "enter"):
            await open_input(pilot)
            await pilot.press("escape")
            await pilot.pause()
            assert app.focused is None
            await pilot.press(view)
            await wait_for(pilot, lambda: app.screen is not app.main_screen)
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.screen is app.main_screen)
            await settle(pilot)
            assert not bar(app).display
            assert not isinstance(app.focused, type(bar(app).line)), app.focused
            await pilot.press("c")  # the app's copy, not a "c" to pdb
            await settle(pilot)
            assert bar(app).line.value == ""
        assert sent(engine) == []


async def test_the_input_line_closes_when_its_rank_ends_and_shows_when_it_has_the_keys() -> None:
    engine = engine_at_prompt(
        Checkpoint(),
        RankStateChanged(0, RankState.RUNNING, RankState.FAILED, BASE_PID, exitcode=1))
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        line = await open_input(pilot)
        assert line.has_class("-typing")  # the keys go to the rank: the bar says so
        await pilot.press("escape")
        await pilot.pause()
        assert not line.has_class("-typing")
        await open_input(pilot)
        engine.advance()
        await settle(pilot)
        assert not line.display and app.focused is None
        assert any("rank 0 ended" in n.message for n in app.notices)
        await pilot.press("q")  # a key of the app again, not a character of the line
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen)
                       or app.screen.__class__.__name__ == "QuitScreen")
        assert sent(engine) == []
