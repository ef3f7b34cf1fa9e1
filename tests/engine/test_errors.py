"""error.json writing and reading, ProcessFailure, ChildFailedError, record."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.errors import ChildFailedError, ErrorHandler, ProcessFailure, record
from rankvisor.engine.errors.error_file import MAX_ERROR_FILE_BYTES, read_error_file

from tests.conftest import BIN, PYTHON

pytestmark = pytest.mark.processes

NS = 1_000_000_000


def _torch_shape(message: str, ts: int, callstack: str = "Traceback...\n") -> dict:
    return {"message": {"message": message, "extraInfo": {"py_callstack": callstack,
                                                          "timestamp": str(ts)}}}


def test_record_in_a_real_process_writes_torchs_schema(tmp_path: Path) -> None:
    error_file = tmp_path / "error.json"
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)}
    proc = subprocess.run(
        [PYTHON, str(BIN / "raise_recorded.py"), "bad input"], env=env, capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 1
    raw = error_file.read_text()
    assert "\n" not in raw  # one line, json.dumps default separators, like torch
    data = json.loads(raw)
    assert list(data) == ["message"]
    assert list(data["message"]) == ["message", "extraInfo"]
    assert data["message"]["message"] == "ValueError: bad input"
    assert list(data["message"]["extraInfo"]) == ["py_callstack", "timestamp"]
    assert data["message"]["extraInfo"]["timestamp"].isdigit()
    assert "raise ValueError" in data["message"]["extraInfo"]["py_callstack"]
    assert [p.name for p in tmp_path.iterdir()] == ["error.json"]  # no temp file left

    failure = ProcessFailure(0, 123, 1, str(error_file))
    assert failure.message["message"] == "ValueError: bad input"  # type: ignore[index]
    assert failure.timestamp == int(data["message"]["extraInfo"]["timestamp"])
    assert "raise ValueError" in failure.text


def test_record_exception_outside_except_block_keeps_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch writes "NoneType: None" here (it formats sys.exc_info(), not the exception)."""
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "e.json"))
    try:
        raise KeyError("k")
    except KeyError as e:
        caught = e
    ErrorHandler().record_exception(caught)
    data = json.loads((tmp_path / "e.json").read_text())
    assert "KeyError: 'k'" in data["message"]["extraInfo"]["py_callstack"]
    assert "NoneType: None" not in data["message"]["extraInfo"]["py_callstack"]


def test_record_system_exit_and_other_exceptions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "e.json"))
    assert record(lambda: sys.exit(0))() is None
    with pytest.raises(SystemExit):
        record(lambda: sys.exit(2))()
    assert not (tmp_path / "e.json").exists()  # exits are not errors
    assert record(lambda x: x + 1)(1) == 2

    def fail() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        record(fail)()
    assert json.loads((tmp_path / "e.json").read_text())["message"]["message"] == (
        "RuntimeError: boom"
    )


def test_record_copies_the_root_cause_file_with_its_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = tmp_path / "child.json"
    child.write_text(json.dumps(_torch_shape("ValueError: x", 100)))
    parent = tmp_path / "parent.json"
    parent.write_text("{not json")  # a stale file is replaced
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(parent))
    failures = {3: ProcessFailure(3, 10, -9, str(child), exit_time_ns=200 * NS)}

    def launcher() -> None:
        raise ChildFailedError("trainer", failures)

    with pytest.raises(ChildFailedError):
        record(launcher)()
    data = json.loads(parent.read_text())
    assert data["message"]["message"] == "ValueError: x"
    assert data["message"]["errorCode"] == -9


def test_record_names_the_rank_when_the_root_cause_has_no_error_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # torch logs a tuple here, so its message is never formatted with the rank.
    parent = tmp_path / "parent.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(parent))
    failures = {5: ProcessFailure(5, 10, -9, str(tmp_path / "absent.json"))}

    def launcher() -> None:
        raise ChildFailedError("trainer", failures)

    with caplog.at_level(logging.INFO, logger="rankvisor.engine.errors"):
        with pytest.raises(ChildFailedError):
            record(launcher)()
    assert any(m.startswith("local_rank 5 FAILED with no error file.") for m in caplog.messages)
    assert not parent.exists()  # nothing to copy


def test_dump_error_file_survives_an_unreadable_child_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = tmp_path / "child.json"
    child.write_text('{"message": {"mess')
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "parent.json"))
    ErrorHandler().dump_error_file(str(child), 1)  # torch raises JSONDecodeError here
    data = json.loads((tmp_path / "parent.json").read_text())
    assert "is not valid JSON" in data["message"]["message"]
    assert data["message"]["errorCode"] == 1


def test_new_message_shape(tmp_path: Path) -> None:
    f = tmp_path / "e.json"
    f.write_text(json.dumps({"message": "plain text", "timestamp": 1234}))
    failure = ProcessFailure(0, 1, 1, str(f))
    assert (failure.message, failure.timestamp) == ("plain text", 1234)
    # torch uses 0 when the timestamp is missing (that failure then always wins the root
    # cause); we use the exit time.
    f.write_text(json.dumps({"message": "plain text"}))
    failure = ProcessFailure(0, 1, 1, str(f), exit_time_ns=5 * NS)
    assert failure.timestamp == 5


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "is empty"),
        (b'{"message": {"message": "Val', "is not valid JSON"),
        (b"\xff\xfe garbage", "is not valid JSON"),
        (b"[1, 2]", "holds a JSON list"),
        (b'"just a string"', "holds a JSON str"),
        (b'{"other": 1}', 'has no "message" field'),
        (b'{"message": [1]}', '"message" of type list'),
        (b"[" * 100_000, "is not valid JSON"),  # deep nesting: RecursionError inside json
    ],
)
def test_bad_error_files_give_a_clear_fallback_never_an_exception(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    """torch's ProcessFailure raises on all of these, inside the supervisor's poll."""
    f = tmp_path / "error.json"
    f.write_bytes(content)
    failure = ProcessFailure(2, 4242, -9, str(f), exit_time_ns=7 * NS)
    assert failure.message.startswith("Signal 9 (SIGKILL) received by PID 4242")
    assert problem in failure.message and str(f) in failure.message
    assert failure.error_file_problem and problem in failure.error_file_problem
    assert failure.timestamp == 7
    exit_failure = ProcessFailure(2, 4242, 1, str(f))
    assert exit_failure.message.startswith("To enable traceback see")


def test_huge_error_file_is_not_parsed(tmp_path: Path) -> None:
    f = tmp_path / "error.json"
    with open(f, "wb") as out:
        out.write(b'{"message": "')
        out.write(b"x" * MAX_ERROR_FILE_BYTES)
        out.write(b'"}')
    content = read_error_file(str(f))
    assert content.data is None and "larger than" in (content.problem or "")
    assert "larger than" in ProcessFailure(0, 1, 1, str(f)).message


def test_missing_timestamp_in_dict_shape_keeps_the_message(tmp_path: Path) -> None:
    f = tmp_path / "e.json"
    f.write_text(json.dumps({"message": {"message": "E: x", "extraInfo": {}}}))
    failure = ProcessFailure(0, 1, 1, str(f), exit_time_ns=9 * NS)  # torch: KeyError
    assert failure.message == {"message": "E: x", "extraInfo": {}}
    assert failure.timestamp == 9 and failure.text == "E: x"


def test_each_failure_has_its_own_error_data() -> None:
    """torch mutates one shared dict, so a later signal death carries errorTraits."""
    exited = ProcessFailure(0, 1, 1, "/nonexistent")
    killed = ProcessFailure(1, 2, -9, "/nonexistent")
    assert "errorTraits" in exited.error_file_data
    assert killed.error_file_data == {"message": "<NONE>"}
    assert exited.error_file == killed.error_file == "<N/A>"


def test_signal_messages() -> None:
    assert ProcessFailure(0, 77, -9, "/x").message == "Signal 9 (SIGKILL) received by PID 77"
    assert ProcessFailure(0, 77, -11, "/x").signal_name() == "SIGSEGV"
    assert ProcessFailure(0, 77, -77, "/x").message == "Signal 77 (<N/A>) received by PID 77"
    assert ProcessFailure(0, 77, 3, "/x").signal_name() == "<N/A>"


def test_root_cause_is_the_earliest_real_failure(tmp_path: Path) -> None:
    """ns exit times order failures in the same second; our kills never win."""
    early = ProcessFailure(1, 11, 3, "/x", exit_time_ns=100 * NS + 5)
    late = ProcessFailure(0, 10, 2, "/x", exit_time_ns=100 * NS + 9)
    ours = ProcessFailure(2, 12, -15, "/x", exit_time_ns=99 * NS, caused_by_us=True)
    assert early.timestamp == late.timestamp  # torch cannot tell them apart
    assert ChildFailedError("t", {0: late, 1: early, 2: ours}).get_first_failure()[0] == 1
    only_ours = {2: ours, 3: ProcessFailure(3, 13, -9, "/x", exit_time_ns=98 * NS,
                                              caused_by_us=True)}
    assert ChildFailedError("t", only_ours).get_first_failure()[0] == 3


def test_error_file_timestamp_can_prove_an_earlier_failure(tmp_path: Path) -> None:
    # Rank 0 recorded its exception at second 100 but took until 105 to exit; rank 1 was
    # killed at 102 with no file. Rank 0 failed first.
    f = tmp_path / "e.json"
    f.write_text(json.dumps(_torch_shape("E: x", 100)))
    slow = ProcessFailure(0, 10, 1, str(f), exit_time_ns=105 * NS)
    killed = ProcessFailure(1, 11, -9, "/x", exit_time_ns=102 * NS)
    assert ChildFailedError("t", {0: killed, 1: slow}).get_first_failure()[1] is slow


def test_a_tie_of_one_second_goes_to_the_earlier_exit(tmp_path: Path) -> None:
    # Rank 2 raised in second 100 and its peers, whose connection it closed, failed in the same
    # second; every exit came after second 100 ended (a loaded machine), so the files tie.
    def failed(rank: int, exit_s: float) -> ProcessFailure:
        f = tmp_path / f"e{rank}.json"
        f.write_text(json.dumps(_torch_shape(f"E: rank {rank}", 100)))
        return ProcessFailure(rank, 10 + rank, 1, str(f), exit_time_ns=int(exit_s * NS))

    peers = {0: failed(0, 101.4), 1: failed(1, 101.5), 2: failed(2, 101.1), 3: failed(3, 101.3)}
    assert len({f.failure_time_ns for f in peers.values()}) == 1
    assert ChildFailedError("t", peers).get_first_failure()[0] == 2


def test_format_msg_matches_torchs_layout() -> None:
    root = ProcessFailure(1, 12102, 1, "/x", exit_time_ns=10 * NS)
    other = ProcessFailure(0, 12101, -15, "/x", exit_time_ns=11 * NS, caused_by_us=True)
    msg = ChildFailedError("fail_script.py", {0: other, 1: root}).format_msg()
    lines = msg.split("\n")
    assert lines[0] == "" and lines[1] == "=" * 60 and lines[2] == "fail_script.py FAILED"
    assert lines[4] == "Failures:" and lines[5] == "[0]:"
    assert "  exitcode  : -15 (pid: 12101)  (SIGTERM)" in lines
    assert "  traceback : Signal 15 (SIGTERM) received by PID 12101" in lines
    assert "Root Cause (first observed failure):" in lines
    assert lines[lines.index("Root Cause (first observed failure):") + 1] == "[1]:"
    assert "  exitcode  : 1 (pid: 12102) " in lines
    single = ChildFailedError("x", {0: root}).format_msg()
    assert "  <NO_OTHER_FAILURES>" in single.split("\n")


def test_child_failed_error_needs_failures() -> None:
    with pytest.raises(AssertionError):
        ChildFailedError("x", {})


def test_writer_leaves_no_partial_file_when_the_dir_is_missing(tmp_path: Path) -> None:
    handler = ErrorHandler()
    target = tmp_path / "missing" / "e.json"
    with pytest.warns(UserWarning, match="Unable to write"):
        handler._write_error_file(str(target), json.dumps({"message": "x"}))
    assert not target.parent.exists()
