"""UI test fixtures: the scripted engine and a clock the test moves (``make_app`` also turns
the cursor blink off, so screenshots of one state never differ), and ``wait_for``, the one
way a UI test waits for something; ``open_stacks`` opens the stacks view (S) and waits for its
dump."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
from rankvisor.engine.testing import ScriptedSupervisor

from tests.scenarios import running_script, scripted_info


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def wait_for(
    pilot: Any, predicate: Callable[[], object], timeout: float = 10.0, *, step: float = 0.02
) -> None:
    """Let the app run in steps of ``step`` seconds until ``predicate()`` holds; fail the
    test after ``timeout`` (the app works on its own loop and threads: a fixed pause would
    be too short on a busy machine and wasted on an idle one)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout:g}s: {predicate}")
        await pilot.pause(step)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def four_ranks(clock: FakeClock) -> ScriptedSupervisor:
    """Four ranks running and logging, with stats; commands answered as a Supervisor would."""
    return ScriptedSupervisor(scripted_info(4), running_script(4), clock=clock)


async def open_stacks(app: Any, pilot: Any, timeout: float = 10.0) -> Any:
    """Press S and wait for the stacks view's dump (and its collectives); the screen."""
    from rankvisor.tui.screens.stacks import StacksScreen

    await pilot.press("S")
    screen = app.screen
    assert isinstance(screen, StacksScreen)
    await wait_for(pilot, lambda: screen.dump is not None and screen.collectives is not None,
                   timeout=timeout)
    return screen
