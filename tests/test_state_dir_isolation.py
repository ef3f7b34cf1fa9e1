"""Issue 22: the suite wrote into the user's registry (``rankvisor ls`` then listed runs
under pytest's temporary directories). Every test has a state dir of its own, so one
test's runs are never in another's list, nor in the home directory's."""

from __future__ import annotations

import os

from rankvisor.engine.control import registry

_SEEN: list[str] = []


def test_a_test_has_a_state_dir_of_its_own() -> None:
    path = registry.state_dir()
    home = os.path.join(os.path.expanduser("~"), ".local", "state", "rankvisor")
    assert path != home and not path.startswith(os.path.expanduser("~") + os.sep)
    assert registry.entries() == []
    registry.register("mine", "/tmp/rv-isolation-run", "/tmp/rv-isolation.sock")
    _SEEN.append(path)


def test_the_next_test_does_not_see_the_last_one_s_runs() -> None:
    assert registry.entries() == []
    assert registry.state_dir() not in _SEEN
