"""Text from a rank's error.json never acts on the terminal: headless report, error view, summary.

An OSC 52 clipboard write, an OSC 2 title and a clear-screen in the message and traceback of
an error.json, with a timestamp that is no time and an ``extraInfo`` of the wrong shape: the
headless report and the TUI's error view and quit summary show the words, never the escapes,
and none of them crashes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.events import RankOutput, RankStateChanged, RunFinished
from rankvisor.engine.result import RunProcsResult
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import BASE_PID, EPOCH, ScriptedResult, ScriptedSupervisor
from rankvisor.tui.app import make_app
from rankvisor.tui.report import format_summary
from rankvisor.tui.screens.errors import ErrorsScreen

from tests.conftest import BIN
from tests.scenarios import running_script, scripted_info

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: "rm -rf ~" into the clipboard
TITLE = "\x1b]2;pwned\x07"
CLEAR = "\x1b[2J"
HOSTILE = f"{CLIPBOARD}{TITLE}{CLEAR}ValueError: visible words"


def _no_terminal_escapes(text: str) -> None:
    assert "\x1b]" not in text and "\x1b[2J" not in text and "\x07" not in text


def test_headless_report_shows_the_words_not_the_escapes(tmp_path: Path) -> None:
    error = json.dumps({
        "message": {"message": HOSTILE, "extraInfo": {
            "py_callstack": f"Traceback (most recent call last):\n{TITLE}\n{HOSTILE}",
            "timestamp": "1" * 30,
        }},
    })
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
        "--term-timeout", "5", "--log-dir", str(tmp_path), str(BIN / "write_error_json.py"),
        error,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "ValueError: visible words" in proc.stderr
    _no_terminal_escapes(proc.stderr)
    _no_terminal_escapes(proc.stdout)


def _failure(tmp_path: Path, data: dict[str, Any]) -> ProcessFailure:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(data))
    return ProcessFailure(0, BASE_PID, 1, str(path), exit_time_ns=int(EPOCH + 42) * 10**9)


def _screen_text(app: Any) -> str:
    """The screen's characters, line by line, as Textual composed them for the terminal."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


async def _show(failure: ProcessFailure) -> tuple[str, str]:
    """The error view's text and the quit summary for a run whose rank 0 has ``failure``."""
    script = [
        *running_script(2, steps=3, with_stats=False),
        RankOutput(0, "stderr", (HOSTILE,)),
        RankStateChanged(0, RankState.RUNNING, RankState.FAILED, BASE_PID, exitcode=1,
                         failure=failure, t=EPOCH + 42),
        RankStateChanged(1, RankState.RUNNING, RankState.SUCCEEDED, BASE_PID + 1, exitcode=0,
                         t=EPOCH + 43),
        RunFinished(cast(RunProcsResult, ScriptedResult(failures={0: failure})), 0, 0),
    ]
    app = make_app(ScriptedSupervisor(scripted_info(2), script))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ErrorsScreen)
        # What the terminal is given: every line of the screen, as the driver would write it.
        shown = _screen_text(app)
        summary = format_summary(app.run_view)
    return shown, summary


async def test_error_view_and_summary_of_a_hostile_error_file(tmp_path: Path) -> None:
    failure = _failure(tmp_path, {"message": {"message": HOSTILE, "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\n  File \"x.py\", line 1\n{HOSTILE}",
        "timestamp": 1e300,
    }}})
    shown, summary = await _show(failure)
    assert "visible words" in summary
    _no_terminal_escapes(summary)
    assert "visible words" in shown
    _no_terminal_escapes(shown)


async def test_error_view_of_odd_shapes_does_not_crash(tmp_path: Path) -> None:
    for data in (
        {"message": {"message": HOSTILE, "extraInfo": None}},
        {"message": {"message": HOSTILE, "extraInfo": [1, 2]}},
        {"message": HOSTILE, "timestamp": float("inf")},
        {"message": HOSTILE, "timestamp": 10**22},
    ):
        shown, summary = await _show(_failure(tmp_path, data))
        assert "visible words" in shown and "visible words" in summary
        _no_terminal_escapes(summary)
