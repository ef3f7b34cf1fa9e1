"""status.json: its fields, atomic rewrites, and running / finished / stale from real processes."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
from pathlib import Path

import pytest
from rankvisor.engine.control.status import (
    SCHEMA,
    build_status,
    effective_state,
    process_start_time,
    read_status,
    supervisor_alive,
    write_status,
)
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.events import InputWait, RunFinished
from rankvisor.engine.result import RunProcsResult
from rankvisor.engine.states import RankState

from tests.control.runs import Supervisors, failed_finish, run_info

pytestmark = pytest.mark.processes

FIELDS = {"schema", "run_id", "run_dir", "socket", "supervisor_pid", "supervisor_start", "state",
          "attempt", "finished", "exitcode", "ranks", "root_cause", "suspect", "started",
          "updated", "written_at", "tracking"}
RANK_FIELDS = {
    "rank", "local_rank", "pid", "state", "exitcode", "signal", "restart_count", "exit_cause",
    "input_wait",
}


def test_a_running_run_has_every_field_and_no_root_cause(tmp_path: Path) -> None:
    info = run_info("job", str(tmp_path), [RankState.RUNNING, RankState.STARTING])
    s = build_status(info, None, socket="/s/x.sock", supervisor_pid=12, supervisor_start=34,
                     exitcode=None, started=100.5)
    assert set(s) == FIELDS
    assert s["suspect"] is None  # only a finished run that failed has one
    assert s["schema"] == SCHEMA == 1
    assert (s["run_id"], s["run_dir"], s["socket"]) == ("job", str(tmp_path), "/s/x.sock")
    assert (s["supervisor_pid"], s["supervisor_start"], s["started"]) == (12, 34, 100.5)
    assert (s["state"], s["finished"], s["exitcode"], s["root_cause"]) == (
        "running", False, None, None)
    assert [set(r) for r in s["ranks"]] == [RANK_FIELDS, RANK_FIELDS]
    assert [(r["rank"], r["local_rank"], r["state"]) for r in s["ranks"]] == [
        (0, 0, "running"), (1, 1, "starting")]
    assert s["tracking"] == "process-tree"
    json.dumps(s)  # plain JSON all through


def test_a_failed_run_names_its_root_cause_and_signals(tmp_path: Path) -> None:
    info = run_info("job", str(tmp_path), [RankState.SIGNALLED, RankState.FAILED],
                    exitcodes=[-int(signal.SIGKILL), 3], finished=True)
    finished = failed_finish(1, 3, 2)
    stderr = tmp_path / "stderr.log"
    stderr.write_text("starting\nValueError: bad shape\n\n")
    finished.result.stderrs[1] = str(stderr)
    s = build_status(info, finished, socket="", supervisor_pid=1, supervisor_start=1,
                     exitcode=1, started=0.0)
    assert (s["state"], s["finished"], s["exitcode"]) == ("finished", True, 1)
    assert [(r["exitcode"], r["signal"]) for r in s["ranks"]] == [(-9, "SIGKILL"), (3, None)]
    assert s["root_cause"] == {"rank": 1, "exitcode": 3, "signal": None,
                               "message": "ValueError: bad shape"}
    finished.result.stderrs[1] = str(tmp_path / "absent.log")
    s = build_status(info, finished, socket="", supervisor_pid=1, supervisor_start=1,
                     exitcode=1, started=0.0)
    assert s["root_cause"]["message"] == "exit code 3"


def test_the_root_cause_message_comes_from_the_error_file(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"message": {
        "message": "RuntimeError: boom\n" + "x" * 5000,
        "extraInfo": {"py_callstack": "", "timestamp": "1"}}}))
    failure = ProcessFailure(0, 99, 1, str(error_file))
    result = RunProcsResult(failures={0: failure})
    killed = ProcessFailure(1, 98, -int(signal.SIGTERM), "")
    finished = RunFinished(result=result, attempt=2, root_cause_rank=0)
    info = run_info("j", str(tmp_path), [RankState.FAILED], finished=True)
    s = build_status(info, finished, socket="", supervisor_pid=1, supervisor_start=1,
                     exitcode=1, started=0.0)
    cause = s["root_cause"]
    assert cause["message"].startswith("RuntimeError: boom")
    assert len(cause["message"]) <= 2000
    assert s["attempt"] == 2
    result2 = RunProcsResult(failures={1: killed})
    s2 = build_status(info, RunFinished(result2, 0, 1), socket="", supervisor_pid=1,
                      supervisor_start=1, exitcode=1, started=0.0)
    assert s2["root_cause"] == {"rank": 1, "exitcode": -15, "signal": "SIGTERM",
                                "message": "Signal 15 (SIGTERM) received by PID 98"}


def test_write_then_read_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    status = {"schema": 1, "run_id": "a", "state": "running", "ranks": []}
    path = write_status(str(tmp_path), status)
    assert path == str(tmp_path / "status.json")
    assert read_status(str(tmp_path)) == status
    assert os.listdir(tmp_path) == ["status.json"]


def test_read_status_never_raises_on_bad_content(tmp_path: Path) -> None:
    assert read_status(str(tmp_path)) is None
    for content in (b"", b"{", b"[1, 2]", b"\xff\xfe", b'{"schema": "1"}', b"null"):
        (tmp_path / "status.json").write_bytes(content)
        assert read_status(str(tmp_path)) is None, content


def test_a_reader_never_sees_a_torn_file_while_it_is_rewritten(tmp_path: Path) -> None:
    big = {"schema": 1, "ranks": [{"rank": i, "pad": "y" * 200} for i in range(2000)]}
    small = {"schema": 1, "ranks": []}
    write_status(str(tmp_path), small)
    stop = threading.Event()
    bad: list[object] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            got = read_status(str(tmp_path))
            reads += 1
            if got not in (big, small):
                bad.append(got)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(60):
        write_status(str(tmp_path), big if i % 2 == 0 else small)
    stop.set()
    t.join()
    assert reads > 0 and bad == []
    assert os.listdir(tmp_path) == ["status.json"]


def test_start_time_tells_a_live_process_from_a_dead_or_reused_pid(
        supervisors: Supervisors) -> None:
    proc = supervisors.live()
    start = process_start_time(proc.pid)
    assert start is not None and start > 0
    assert supervisor_alive(proc.pid, start)
    assert not supervisor_alive(proc.pid, start + 1)  # the pid, reused by another process
    pid, dead_start = supervisors.dead()
    assert process_start_time(pid) is None
    assert not supervisor_alive(pid, dead_start)
    assert not supervisor_alive(0, None) and not supervisor_alive("12", None)


def test_a_zombie_supervisor_is_not_alive(supervisors: Supervisors) -> None:
    proc = supervisors.live()
    start = process_start_time(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    from tests.conftest import wait_until
    wait_until(lambda: process_start_time(proc.pid) is None)  # a zombie until reaped
    assert not supervisor_alive(proc.pid, start)


def test_effective_state(supervisors: Supervisors) -> None:
    proc = supervisors.live()
    start = process_start_time(proc.pid)
    running = {"state": "running", "finished": False, "supervisor_pid": proc.pid,
               "supervisor_start": start}
    assert effective_state(running) == "running"
    assert effective_state({**running, "supervisor_start": (start or 0) + 7}) == "stale"
    pid, dead_start = supervisors.dead()
    assert effective_state({**running, "supervisor_pid": pid,
                            "supervisor_start": dead_start}) == "stale"
    assert effective_state({**running, "supervisor_pid": pid, "state": "finished",
                            "finished": True}) == "finished"


def test_a_rank_at_a_prompt_has_its_input_wait(tmp_path: Path) -> None:
    info = run_info("job", str(tmp_path), [RankState.RUNNING, RankState.RUNNING])
    wait = InputWait(since=123.5, prompt="(Pdb) ", where="job.py:7 in <module>")
    info = dataclasses.replace(
        info, ranks=(dataclasses.replace(info.ranks[0], input_wait=wait), info.ranks[1]))
    s = build_status(info, None, socket="/s/x.sock", supervisor_pid=12, supervisor_start=34,
                     exitcode=None, started=100.5)
    assert s["ranks"][0]["input_wait"] == {
        "since": 123.5, "prompt": "(Pdb) ", "where": "job.py:7 in <module>"}
    assert s["ranks"][1]["input_wait"] is None


@pytest.mark.parametrize("ages", [
    {0: 1.5, 1: None, 2: 12345.7},
    {0: None, 1: None, 2: None},
    {},  # no progress read this time: every age null
])
def test_a_refresh_writes_the_bytes_a_full_encode_gives_with_the_times_moved_on(ages) -> None:
    # The tick's status where nothing happened: the last record's bytes, its times filled in.
    from rankvisor.engine.control.status import StatusTemplate, encode_status

    record = {
        "schema": 1, "run_id": "r", "state": "running", "updated": 1.0, "written_at": 1.0,
        "command": ["python", "train.py", '"written_at": 3', "-age-0"],
        "ranks": [{"rank": r, "pid": 100 + r, "step": 7, "last_output_age_s": 0.1}
                  for r in range(3)] + [{"rank": 3, "pid": 103, "state": "succeeded"}],
        "suspect": None,
    }
    template = StatusTemplate(record)
    for now in (1_765_000_000.125, 1_765_000_002.5):
        moved = {**record, "updated": now, "written_at": now,
                 "ranks": [{**r, "last_output_age_s": ages.get(r["rank"])}
                           if "last_output_age_s" in r else r for r in record["ranks"]]}
        assert template.fill(now, ages) == encode_status(moved)
