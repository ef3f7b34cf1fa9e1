"""UI test fixtures: the scripted engine and a clock the test moves (``make_app`` also turns
the cursor blink off, so screenshots of one state never differ)."""

from __future__ import annotations

import pytest

from engine.testing import ScriptedSupervisor
from tests.scenarios import running_script, scripted_info


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def four_ranks(clock: FakeClock) -> ScriptedSupervisor:
    """Four ranks running and logging, with stats; commands answered as a Supervisor would."""
    return ScriptedSupervisor(scripted_info(4), running_script(4), clock=clock)
