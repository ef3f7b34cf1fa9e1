"""A live suspect in the viewer's model: named by the supervisor's notice while the run
hangs, shown in the header bar and the quit summary (with the dumps saved in the run dir),
forgotten at a new attempt, and replaced by the suspect of the failure."""

from __future__ import annotations

from pathlib import Path

from rankvisor.engine.events import (
    LIVE_SUSPECT_PREFIX,
    AttemptStarted,
    SupervisorNotice,
)
from rankvisor.tui.model import RunView
from rankvisor.tui.report import format_summary
from rankvisor.tui.widgets.run_summary import summary_text

from tests.scenarios import scripted_info

WORDS = ("rank 1: never entered all_reduce #5 on pg 0, where ranks 0 and 2 waited (torch's "
         "Flight Recorder; its last was #4) (live, still hanging)")


def test_the_live_suspect_is_in_the_header_and_the_summary(tmp_path: Path) -> None:
    run = RunView(scripted_info(3))
    run.log_dir = str(tmp_path)
    (tmp_path / "collectives").mkdir()
    capture = tmp_path / "collectives" / "20260101-000000-000000001.json"
    capture.write_text("{}")
    run.apply(SupervisorNotice("rank 0: something else", "warning"))
    assert run.live_suspect == ""
    run.apply(SupervisorNotice(f"{LIVE_SUSPECT_PREFIX}{WORDS} (dumps: x)", "warning"))
    assert run.live_suspect.startswith("rank 1: never entered all_reduce #5")
    assert "live suspect: rank 1 " in summary_text(run, elapsed=1.0).plain
    summary = format_summary(run)
    assert f"  live suspect (while it hung): {WORDS}" in summary
    assert f"  collectives saved: {capture}" in summary
    run.apply(AttemptStarted(1, str(tmp_path / "attempt_1"), (1, 2, 3)))
    assert run.live_suspect == ""
