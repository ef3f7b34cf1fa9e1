"""The engine stays UI-free and light: checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.processes


def _loaded_after(stmt: str, names: tuple[str, ...]) -> list[str]:
    code = f"import sys; {stmt}; print([m for m in {names!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip())  # noqa: S307 - our own literal list


E = "rankvisor.engine"


def test_engine_imports_no_ui_and_no_torch() -> None:
    assert _loaded_after("from rankvisor import engine", ("textual", "rich", "rankvisor.tui",
                                                          "torch")) == []


def test_engine_events_and_states_are_plain() -> None:
    loaded = _loaded_after(
        f"import {E}.events, {E}.states, {E}.handle", ("textual", "rich", "torch")
    )
    assert loaded == []


def test_supervisor_exports_are_lazy() -> None:
    """``engine.Supervisor`` / ``engine.SupervisorConfig`` load nothing at ``import engine``."""
    lazy = tuple(f"{E}.{m}" for m in (
        "supervisor.core", "supervisor.run_config", "supervisor.monitor", "output.pump",
        "supervisor.stats", "process.guard", "supervisor.timer_watchdog", "multiprocess_context",
    ))
    assert _loaded_after("from rankvisor import engine", lazy) == []
    loaded = _loaded_after(
        "from rankvisor import engine; engine.Supervisor; engine.SupervisorConfig",
        (f"{E}.supervisor.core", f"{E}.supervisor.run_config", "textual", "rich", "torch"),
    )
    assert loaded == [f"{E}.supervisor.core", f"{E}.supervisor.run_config"]


def test_sub_package_faces_load_nothing_until_asked() -> None:
    """Importing a room of the engine loads none of its modules until a name is used."""
    modules = (f"{E}.output.pump", f"{E}.logfile.store", f"{E}.process.guard",
               f"{E}.supervisor.core")
    stmt = f"import {E}.output, {E}.logfile, {E}.process, {E}.supervisor"
    assert _loaded_after(stmt, modules) == []
    assert _loaded_after(f"{stmt}; {E}.logfile.LogStore", modules) == [f"{E}.logfile.store"]
