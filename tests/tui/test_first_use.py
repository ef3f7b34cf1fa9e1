"""What a new user hit (issue 22), in the app: the header at 80 columns, stale notices and
statuses, the copy message, the stacks view's keys, the restart dialog's default."""

from __future__ import annotations

from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app

from tests.scenarios import scripted_info, suspect_script

from .conftest import open_stacks, wait_for


def _header(app) -> str:  # type: ignore[no-untyped-def]
    return app.main_screen.summary.text.plain


async def test_the_header_keeps_the_state_the_counts_and_the_clock_at_80_columns() -> None:
    """After the first failure the 80-column header kept only "suspect: rank 3 │ root cause:
    rank 2 │": the run's state, its counts and its clock had gone."""
    app = make_app(ScriptedSupervisor(scripted_info(4), suspect_script()))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.run_view.finished)
        await pilot.pause(0.1)
        text = _header(app)
        assert "finished" in text and "✖3 ⊘1" in text, text  # the counts, short
        assert "suspect: rank 3" in text and "root cause: rank 2" in text, text
        assert text.rstrip()[-5:].replace(":", "").isdigit(), text  # the clock, last
        assert len(text) <= 80
    async with make_app(ScriptedSupervisor(scripted_info(4), suspect_script())).run_test(
        size=(160, 48)
    ) as pilot:
        app = pilot.app
        await wait_for(pilot, lambda: app.run_view.finished)
        await pilot.pause(0.1)
        text = _header(app)  # room for every word in full
        assert "suspect: rank 3" in text and "root cause: rank 2" in text, text
        assert "3 failed" in text and "4 ranks · attempt 0" in text, text


def test_the_header_shortens_before_it_drops_and_keeps_the_clock() -> None:
    from rankvisor.engine.states import RankState
    from rankvisor.tui.model import RunView
    from rankvisor.tui.widgets.run_summary import summary_text

    run = RunView(scripted_info(4))
    for view in run.ranks:
        view.state = RankState.RUNNING
    run.finished = True
    for width in (40, 60, 80, 200):
        text = summary_text(run, elapsed=14, paused=True, status="stopping", width=width).plain
        assert text.endswith(" 00:14") and "finished" in text and "stopping" in text, text
        assert "●4" in text or "● 4 running" in text, text
        assert len(text) <= width or width == 40, text


def _footer_keys(screen) -> list[str]:  # type: ignore[no-untyped-def]
    from textual.widgets._footer import FooterKey

    return [f"{k.key_display} {k.description}" for k in screen.query(FooterKey)]


async def test_the_footer_fits_80_columns_and_keeps_help() -> None:
    """The zoom's footer ended "... s Signal r Re" at 80 columns."""
    app = make_app(ScriptedSupervisor(scripted_info(4), suspect_script()))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.run_view.finished)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(_footer_keys(app.screen)) > 3)
        keys = _footer_keys(app.screen)
        assert keys[0] == "esc Back" and "? Help" in keys, keys
        assert sum(len(k) + 1 for k in keys) <= 80, keys
    app = make_app(ScriptedSupervisor(scripted_info(4), suspect_script()))
    async with app.run_test(size=(200, 24)) as pilot:
        await pilot.press("enter")
        await wait_for(pilot, lambda: "q Quit" in _footer_keys(app.screen))  # all of them


async def test_the_footer_is_drawn_while_the_app_has_no_focus() -> None:
    """In a browser (``serve``) the page has no focus until it is clicked: the footer row
    stayed blank until then."""
    app = make_app(ScriptedSupervisor(scripted_info(4), suspect_script()))
    async with app.run_test(size=(120, 24)) as pilot:
        app.app_focus = False  # a key press would give it the focus: the action instead
        await app.run_action("errors")
        await wait_for(pilot, lambda: "esc Back" in _footer_keys(app.screen))


async def test_the_notice_of_attempt_0_s_failure_goes_with_attempt_1_and_a_stop() -> None:
    """During attempt 1 (after R) and after ``stop`` the notice line still said "run
    finished: rank 2 failed first (e: errors)", from attempt 0."""
    from typing import cast

    from rankvisor.engine.events import AttemptStarted, RankStateChanged, RunFinished
    from rankvisor.engine.result import RunProcsResult
    from rankvisor.engine.states import RankState
    from rankvisor.engine.testing import BASE_PID, ScriptedResult

    engine = ScriptedSupervisor(scripted_info(4), suspect_script())
    app = make_app(engine)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: app.run_view.finished)
        await wait_for(pilot, lambda: "failed first" in app.notices[-1].message)
        engine.emit(AttemptStarted(1, "/nonexistent/attempt_1", tuple(BASE_PID + 10 + r
                                                                        for r in range(4))))
        await wait_for(pilot, lambda: app.run_view.attempt == 1)
        assert "failed first" not in app.notices[-1].message
        assert app.notices[-1].message.startswith("attempt 1 started")
        for r in range(4):  # `rankvisor stop`: every rank ended by rankvisor's SIGTERM
            engine.emit(RankStateChanged(r, RankState.RUNNING, RankState.SIGNALLED,
                                         BASE_PID + 10 + r, exitcode=-15, attempt=1,
                                         signal_name="SIGTERM", caused_by_us=True))
        stopped = ScriptedResult(stopped={r: object() for r in range(4)})
        engine.emit(RunFinished(cast("RunProcsResult", stopped), 1, None))
        await wait_for(pilot, lambda: app.run_view.finished)
        assert app.notices[-1].message == "run finished: stopped by rankvisor, no rank failed"


async def test_restart_all_is_the_default_once_the_ranks_show_a_process_group() -> None:
    """ "[y] Rank 1 alone" stayed the way to go in a torch.distributed job."""
    from rankvisor.engine.events import RankOutput
    from rankvisor.engine.handle import RestartAll
    from rankvisor.tui.screens.confirm import RestartRankScreen
    from textual.widgets import Button, Static

    from tests.scenarios import running_script

    engine = ScriptedSupervisor(scripted_info(4), running_script(4))
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("r")
        assert isinstance(app.screen, RestartRankScreen)
        assert app.screen.focused is not None and app.screen.focused.id == "cancel"
        await pilot.press("n")
        engine.emit(RankOutput(1, "stdout", ("step 3", "rank 1/4: gloo process group up")))
        await wait_for(pilot, lambda: app.run_view.distributed)
        await pilot.press("r")
        assert isinstance(app.screen, RestartRankScreen)
        focused = app.screen.focused
        assert isinstance(focused, Button) and focused.id == "all"
        text = str(app.screen.query_one("#question", Static).render())
        assert 'rank 1 wrote "rank 1/4: gloo process group up"' in text
        assert "restarting them all is the default" in text
        await pilot.press("enter")
        await wait_for(pilot, lambda: engine.calls == [RestartAll()])


async def test_the_stacks_view_has_a_cursor_arrows_move_it_enter_and_space_fold() -> None:
    """On open no cursor showed and Down / Enter did nothing (only Tab moved); space, tried
    as "toggle", paused following on the grid behind without a word."""
    from textual.widgets import Collapsible
    from textual.widgets._collapsible import CollapsibleTitle

    from tests.scenarios import recorded_stacks, running_script

    engine = ScriptedSupervisor(scripted_info(4), running_script(4), stacks=recorded_stacks())
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await open_stacks(app, pilot)
        groups = list(screen.query(Collapsible))
        assert len(groups) >= 2
        await wait_for(pilot, lambda: isinstance(screen.focused, CollapsibleTitle))
        assert screen.focused.parent is groups[0]  # the cursor on the odd group
        await pilot.press("down")
        assert screen.focused is not None and screen.focused.parent is groups[1]
        assert groups[1].collapsed
        await pilot.press("enter")
        await wait_for(pilot, lambda: not groups[1].collapsed)
        await pilot.press("space")
        await wait_for(pilot, lambda: groups[1].collapsed)
        assert not app._paused  # the grid behind still follows
        await pilot.press("up")
        assert screen.focused is not None and screen.focused.parent is groups[0]


def test_the_quit_summary_says_a_suspect_that_is_the_root_cause_once() -> None:
    from typing import cast

    from rankvisor.engine.events import RunFinished, Suspect
    from rankvisor.engine.result import RunProcsResult
    from rankvisor.engine.testing import ScriptedResult
    from rankvisor.tui.model import RunView
    from rankvisor.tui.report import format_summary

    from tests.scenarios import failure_script

    run = RunView(scripted_info(4))
    items = failure_script()
    for item in items:
        run.apply(item)  # type: ignore[arg-type]
    reason = "rank 2: failed on its own first: FloatingPointError: loss is nan at step 23"
    failures = {r: run.ranks[r].failure for r in (0, 1, 2)}
    run.apply(RunFinished(cast("RunProcsResult", ScriptedResult(failures=failures)), 0, 2,
                          Suspect(2, reason, (2,), (reason,), "failure")))
    text = format_summary(run)
    assert "suspect:" not in text and "root cause: rank 2" in text
    assert text.count("FloatingPointError: loss is nan at step 23") == 1, text  # said once


async def test_at_80_columns_every_footer_keeps_help_and_quit_and_whole_keys() -> None:
    """Issue 34: at 80x24 the views' footers ended before ``q Quit``, and the grid's before
    ``i Input`` with a rank at a prompt; a person at 80 columns saw a footer cut short."""
    from rankvisor.engine.testing import ScriptedSupervisor
    from rankvisor.tui.app import make_app
    from rankvisor.tui.widgets.key_footer import KeyFooter
    from textual.widgets._footer import FooterKey

    from tests.scenarios import pdb_script, scripted_info
    from tests.tui.conftest import wait_for

    app = make_app(ScriptedSupervisor(scripted_info(4, stdin="pipe"), pdb_script(4)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for keys in ((), ("enter",), ("escape", "e"), ("escape", "f"), ("escape", "a"),
                     ("escape", "S")):
            await pilot.press(*keys)
            await wait_for(pilot, lambda: bool(app.screen.query(KeyFooter))
                           and bool(app.screen.query(FooterKey)))
            await pilot.pause(0.2)
            name = type(app.screen).__name__
            row = app.screen._compositor.render_strips()[-1].text
            shown = [f"{k.key_display} {k.description}" for k in app.screen.query(FooterKey)]
            assert "? Help" in shown and "q Quit" in shown, (name, row)
            for key in shown:  # each whole, in sight
                assert key in row, (name, key, row)
            if name == "MainScreen":
                assert "i Input" in shown, row
