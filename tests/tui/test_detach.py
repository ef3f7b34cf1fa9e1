"""Quitting a viewer of a run that goes on without it: detach, terminate, cancel, finished.

The scripted engine stands for a run in a supervisor process (``detachable=True``) or in
this process (the default); ``calls`` records what the app asked of it.
"""

from __future__ import annotations

import pytest
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app
from rankvisor.tui.screens.confirm import ConfirmScreen, QuitScreen
from textual import events

from tests.scenarios import running_script, scripted_info, suspect_script
from tests.tui.conftest import wait_for


def _asked(engine: ScriptedSupervisor, what: str) -> bool:
    return any(isinstance(c, tuple) and c[0] == what for c in engine.calls)


@pytest.mark.asyncio
async def test_q_then_d_detaches_and_never_stops_a_rank() -> None:
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), detachable=True)
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("d")
        await wait_for(pilot, lambda: app.return_value is not None)
    assert app.detached and app.return_value == 0
    assert _asked(engine, "detach") and not _asked(engine, "shutdown")
    assert all(info.state.is_alive for info in engine.snapshot().ranks)


@pytest.mark.asyncio
async def test_q_then_t_terminates_the_run_and_cancel_does_nothing() -> None:
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), detachable=True,
                                obey_term=True)
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("q")
        await pilot.press("n")
        assert not isinstance(app.screen, QuitScreen) and app.return_value is None
        await pilot.press("q", "t")
        await wait_for(pilot, lambda: app.return_value is not None)
    assert _asked(engine, "shutdown") and not app.detached


@pytest.mark.asyncio
async def test_quitting_a_finished_run_prints_its_end_not_a_detach() -> None:
    engine = ScriptedSupervisor(scripted_info(4), suspect_script(), detachable=True)
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.run_view.finished)
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None)
    assert not app.detached and app.return_value == 1  # a rank failed
    assert not _asked(engine, "shutdown")


@pytest.mark.asyncio
async def test_d_on_a_run_inside_this_process_says_why_not() -> None:
    engine = ScriptedSupervisor(scripted_info(4), running_script(4))
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("d")
        await pilot.pause()
        assert app.return_value is None and not app.detached
        assert "--foreground" in app.notices[-1].message
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)  # the old question: terminate and quit


@pytest.mark.asyncio
@pytest.mark.parametrize("quit_keys", [("q",), ("d",), ("q", "d")])
@pytest.mark.parametrize("then", ["e", "enter", "question_mark", "i"])
async def test_a_key_pressed_while_the_app_quits_ends_in_no_traceback(
    quit_keys: tuple[str, ...], then: str
) -> None:
    """``q`` then ``e`` (a finished run quits at once), ``d`` then ``e``: the view's screen
    was pushed on an app closing, and Textual ended in a traceback."""
    finished = quit_keys == ("q",)
    script = suspect_script() if finished else running_script(4)
    engine = ScriptedSupervisor(scripted_info(4), script, detachable=True, obey_term=True)
    app = make_app(engine)
    async with app.run_test(size=(120, 36)) as pilot:
        if finished:
            await wait_for(pilot, lambda: app.run_view.finished)
        # As a terminal sends them: in one read, queued before the first is handled.
        for key in (*quit_keys, then, then):
            char = "?" if key == "question_mark" else key if len(key) == 1 else None
            app.post_message(events.Key(key, char))
        await wait_for(pilot, lambda: app.return_value is not None)
    assert app.return_value in (0, 1)
    assert app._exception is None
