"""The engine stays UI-free and light: checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(stmt: str, names: tuple[str, ...]) -> list[str]:
    code = f"import sys; {stmt}; print([m for m in {names!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip())  # noqa: S307 - our own literal list


def test_engine_imports_no_ui_and_no_torch() -> None:
    assert _loaded_after("import engine", ("textual", "rich", "tui", "torch")) == []


def test_engine_events_and_states_are_plain() -> None:
    loaded = _loaded_after(
        "import engine.events, engine.states, engine.handle", ("textual", "rich", "torch")
    )
    assert loaded == []


def test_supervisor_exports_are_lazy() -> None:
    """``engine.Supervisor`` / ``engine.SupervisorConfig`` load nothing at ``import engine``."""
    lazy = (
        "engine.supervisor.core", "engine.supervisor.run_config", "engine.supervisor.monitor",
        "engine.output.pump", "engine.supervisor.stats", "engine.process.guard",
        "engine.supervisor.timer_watchdog", "engine.multiprocess_context",
    )
    assert _loaded_after("import engine", lazy) == []
    loaded = _loaded_after(
        "import engine; engine.Supervisor; engine.SupervisorConfig",
        ("engine.supervisor.core", "engine.supervisor.run_config", "textual", "rich", "torch"),
    )
    assert loaded == ["engine.supervisor.core", "engine.supervisor.run_config"]


def test_sub_package_faces_load_nothing_until_asked() -> None:
    """Importing a room of the engine loads none of its modules until a name is used."""
    modules = (
        "engine.output.pump", "engine.logfile.store", "engine.process.guard",
        "engine.supervisor.core",
    )
    stmt = "import engine.output, engine.logfile, engine.process, engine.supervisor"
    assert _loaded_after(stmt, modules) == []
    assert _loaded_after(f"{stmt}; engine.logfile.LogStore", modules) == ["engine.logfile.store"]
