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


def _share_parsed_css() -> None:
    """Parse each piece of CSS once per process, not once per app.

    Textual parses its stylesheet per app, and again from scratch on every ``reparse`` (a
    new screen, a widget class with CSS of its own): a few parses of the same text for each
    of the hundreds of apps the tests start, a tenth of an app's start. The parsed rules
    depend only on the text, where it came from, its scope and the theme's variables (all
    in the key), and nothing changes them once parsed (Textual's own cache shares them
    within an app the same way): an app sees the same rules as before."""
    from textual.css.stylesheet import Stylesheet

    parse = Stylesheet._parse_rules
    parsed: dict[tuple[object, ...], list[Any]] = {}

    def parse_once(self: Stylesheet, css: str, read_from: Any, is_default_rules: bool = False,
                   tie_breaker: int = 0, scope: str = "") -> list[Any]:
        key = (tuple(sorted(self._variables.items())), css, read_from, is_default_rules,
               tie_breaker, scope)
        rules = parsed.get(key)
        if rules is None:  # a parse that fails raises, and is not kept
            rules = parsed[key] = parse(self, css, read_from, is_default_rules, tie_breaker,
                                        scope)
        return rules

    Stylesheet._parse_rules = parse_once  # type: ignore[method-assign]


_share_parsed_css()


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
