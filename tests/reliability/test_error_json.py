"""error.json is a rank's input, and a rank may write anything: nothing in it may stop us.

Numbers that are not times (Infinity, NaN, 1e20, negative, 23 digits), shapes torch never
writes (``"extraInfo": null`` or a list), links to places that block or that the rank may not
read, and whatever hypothesis makes of torch's schema and of arbitrary JSON: each becomes a
failure with a usable message and time, never an exception in the supervisor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rankvisor.engine.errors import ChildFailedError, ProcessFailure, root_cause_rank
from rankvisor.engine.errors.error_file import MAX_TIMESTAMP, read_error_file

from tests.conftest import BIN

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
EXIT_NS = 1_767_225_600 * 1_000_000_000  # 2026-01-01: the exit time the fallback must use

BAD_TIMESTAMPS = [
    "Infinity", "-Infinity", "NaN", "1e20", "-1e14", "12345678901234567890123",
    '"not a time"', '"1e400"', "true", "[1]", '{"a": 1}', "-1",
]


def _failure(path: Path, exitcode: int = 1) -> ProcessFailure:
    return ProcessFailure(0, 4242, exitcode, str(path), exit_time_ns=EXIT_NS)


def _usable(failure: ProcessFailure) -> None:
    """Everything a report does with a failure works, and the time is a real time."""
    assert 0 <= failure.timestamp <= MAX_TIMESTAMP
    assert failure.timestamp_isoformat() != ""
    assert isinstance(failure.text, str)
    assert failure.failure_time_ns <= EXIT_NS
    report = ChildFailedError("job", {0: failure}).format_msg()
    assert "Root Cause" in report
    assert root_cause_rank({0: failure}) == 0


@pytest.mark.parametrize("value", BAD_TIMESTAMPS)
@pytest.mark.parametrize("shape", ["flat", "torch"])
def test_a_timestamp_that_is_no_time_falls_back_to_the_exit_time(
    tmp_path: Path, value: str, shape: str
) -> None:
    path = tmp_path / "error.json"
    if shape == "flat":
        path.write_text('{"message": "boom", "timestamp": %s}' % value)
    else:
        path.write_text(
            '{"message": {"message": "RuntimeError: boom", '
            '"extraInfo": {"py_callstack": "Traceback: boom", "timestamp": %s}}}' % value
        )
    failure = _failure(path)
    assert failure.timestamp == EXIT_NS // 1_000_000_000
    assert "boom" in failure.text
    _usable(failure)


@pytest.mark.parametrize("extra", ["null", "[1, 2]", '"text"', "42", "{}"])
def test_extra_info_of_any_shape_is_reported(tmp_path: Path, extra: str) -> None:
    path = tmp_path / "error.json"
    path.write_text('{"message": {"message": "ValueError: odd", "extraInfo": %s}}' % extra)
    failure = _failure(path)
    assert failure.text == "ValueError: odd"
    _usable(failure)
    assert "ValueError: odd" in ChildFailedError("job", {0: failure}).format_msg()


def _in_thread(fn: Any, timeout: float = 10.0) -> Any:
    """Run ``fn`` on a thread; fail (instead of hanging the suite) if it blocks."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "reading the error file blocked"
    return box[0]


def test_a_link_to_a_fifo_is_not_followed_and_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    path = tmp_path / "error.json"
    path.symlink_to(fifo)
    failure = _in_thread(lambda: _failure(path))
    assert failure.error_file_problem == "is a symbolic link (not followed)"
    assert "symbolic link" in failure.message
    _usable(failure)


def test_a_link_to_a_file_the_rank_may_not_read_shows_nothing_of_it(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"message": "the supervisor\'s secret"}')
    secret.chmod(0o600)
    path = tmp_path / "error.json"
    path.symlink_to(secret)
    failure = _failure(path)
    assert "secret" not in failure.text
    assert failure.error_file_data == {
        "message": "<NONE>",
        "errorTraits": {"category": "system_terminated_error", "retryability": "False"},
    }


def test_a_fifo_or_a_directory_in_its_place_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    content = _in_thread(lambda: read_error_file(str(fifo)))
    assert content.problem == "is not a regular file (a FIFO)"
    (tmp_path / "dir.json").mkdir()
    assert read_error_file(str(tmp_path / "dir.json")).problem == (
        "is not a regular file (a directory)"
    )


def test_only_the_first_bytes_are_read(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_text('{"message": "' + "x" * 5000 + '"}')
    content = read_error_file(str(path), max_bytes=1000)
    assert content.problem == "is larger than 1000 bytes"


# -- fuzzing -------------------------------------------------------------------------------

_leaf = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=True, allow_infinity=True)
)
_json = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_torch_shaped = st.fixed_dictionaries({
    "message": st.one_of(
        _json,
        st.fixed_dictionaries(
            {"message": _json},
            optional={"extraInfo": st.one_of(_json, st.fixed_dictionaries(
                {}, optional={"py_callstack": _json, "timestamp": _json}
            )), "errorCode": _json},
        ),
    ),
}, optional={"timestamp": _json})

_FUZZ = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=st.one_of(_json, _torch_shaped), exitcode=st.sampled_from([1, -9, -11, 3]))
def test_fuzz_any_json_gives_a_usable_failure(tmp_path: Path, data: Any, exitcode: int) -> None:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(data))  # allow_nan: Infinity and NaN are written as torch's json
    _usable(_failure(path, exitcode))


@_FUZZ
@given(raw=st.binary(max_size=200))
def test_fuzz_any_bytes_give_a_usable_failure(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "error.json"
    path.write_bytes(raw)
    _usable(_failure(path))


# -- the supervisor, end to end --------------------------------------------------------------


@pytest.mark.parametrize("timestamp", ["Infinity", "1e20", "12345678901234567890123"])
def test_a_rank_writing_an_infinite_timestamp_fails_the_run_cleanly(
    tmp_path: Path, timestamp: str
) -> None:
    """The run ends with exit 1 naming rank 0, the other rank stopped; nothing spins."""
    text = '{"message": "x", "timestamp": %s}' % timestamp
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
        "--term-timeout", "5", "--log-dir", str(tmp_path), str(BIN / "write_error_json.py"), text,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "root cause: rank 0 failed first (exit code 1): x" in proc.stderr
    assert "monitor step failed" not in proc.stderr
