"""The on-failure hook: real shell commands, their environment, their log, their time limit."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from rankvisor.engine.control.hooks import LOG_NAME, run_on_failure

from tests.conftest import pid_alive, wait_until

pytestmark = pytest.mark.processes

STATUS = {
    "schema": 1, "run_id": "job-7", "exitcode": 1,
    "root_cause": {"rank": 2, "exitcode": 1, "signal": None,
                   "message": "RuntimeError: boom\n  at line 3\x00" + "z" * 3000},
}


def test_the_hook_gets_the_run_in_its_environment(tmp_path: Path) -> None:
    code = run_on_failure(
        'printf "%s|%s|%s|%s|%s\\n" "$RANKVISOR_RUN_DIR" "$RANKVISOR_RUN_ID" '
        '"$RANKVISOR_EXITCODE" "$RANKVISOR_ROOT_CAUSE_RANK" "$RANKVISOR_STATUS"; '
        'printf "%s" "$RANKVISOR_ROOT_CAUSE_MESSAGE" > msg; echo to-stderr >&2',
        str(tmp_path), STATUS)
    assert code == 0
    log = (tmp_path / LOG_NAME).read_text()
    assert f"{tmp_path}|job-7|1|2|{tmp_path / 'status.json'}\n" in log
    assert "to-stderr" in log and "exited with status 0" in log
    message = (tmp_path / "msg").read_text()  # the hook ran in the run dir
    assert message.startswith("RuntimeError: boom at line 3 z")
    assert "\n" not in message and len(message) <= 500


def test_its_exit_status_is_returned_and_the_log_is_appended(tmp_path: Path) -> None:
    assert run_on_failure("echo first; exit 3", str(tmp_path), STATUS) == 3
    assert run_on_failure("echo second", str(tmp_path), {"schema": 1, "root_cause": None}) == 0
    log = (tmp_path / LOG_NAME).read_text()
    assert log.index("first") < log.index("second")
    assert run_on_failure("kill -TERM $$", str(tmp_path), STATUS) == -signal.SIGTERM


def test_no_root_cause_leaves_the_variables_empty(tmp_path: Path) -> None:
    code = run_on_failure('test -z "$RANKVISOR_ROOT_CAUSE_RANK$RANKVISOR_ROOT_CAUSE_MESSAGE"'
                          ' && test "$RANKVISOR_EXITCODE" = 130',
                          str(tmp_path), {"schema": 1, "exitcode": 130, "root_cause": None})
    assert code == 0


def test_a_hook_past_its_time_is_killed_with_its_whole_group(tmp_path: Path) -> None:
    code = run_on_failure("sleep 300 & echo $! > child; wait", str(tmp_path), STATUS,
                          timeout_s=0.5)
    assert code == -signal.SIGKILL
    child = int((tmp_path / "child").read_text())
    wait_until(lambda: not pid_alive(child))
    assert "ran past 0.5 s" in (tmp_path / LOG_NAME).read_text()


def test_a_grandchild_holding_the_output_open_does_not_hold_the_caller(tmp_path: Path) -> None:
    # The shell exits at once; its background child keeps stdout open for 300 s.
    code = run_on_failure("sleep 300 & echo $! > child", str(tmp_path), STATUS, timeout_s=30)
    assert code == 0
    child = int((tmp_path / "child").read_text())
    assert pid_alive(child)  # it was left alone: the hook's business
    os.kill(child, signal.SIGKILL)


def test_a_run_dir_that_cannot_hold_the_log_still_runs_the_hook(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    marker = tmp_path / "ran"
    assert run_on_failure(f"touch {marker}", str(missing), STATUS) == 0
    assert marker.exists()
