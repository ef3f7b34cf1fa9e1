"""error.json and failure reports: torch's errors module and ours, read and written both ways.

One child imports torch (a binary rank whose main is decorated with torch's ``record``,
run next to one decorated with ours); the rest runs in this process. Where we fix a torch
defect (shared error data, bad files, missing timestamps, a traceback outside ``except``)
the test shows torch's behaviour and ours side by side.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import rankvisor.engine.errors as ours
from rankvisor import engine

from tests.conftest import BIN, PYTHON, pid_alive, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.torch]

NS = 1_000_000_000


@pytest.fixture(scope="module")
def te() -> Any:
    """torch.distributed.elastic.multiprocessing.errors, imported once (~2.5 s)."""
    import torch.distributed.elastic.multiprocessing.errors as torch_errors

    return torch_errors


@pytest.fixture(autouse=True)
def _no_error_file_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    yield


def _run_recorded(tmp_path: Path) -> dict[str, Any]:
    """Both recorded binaries as ranks of one engine run; their failures by writer."""
    ctx = engine.start_processes(
        name="w",
        entrypoint=PYTHON,
        args={
            0: (str(BIN / "raise_torch_recorded.py"), "from torch"),
            1: (str(BIN / "raise_recorded.py"), "from us"),
        },
        envs={0: {}, 1: {}},
        logs_specs=engine.DefaultLogsSpecs(log_dir=str(tmp_path), redirects=engine.Std.ALL),
    )
    # Wait for both to fail by themselves (the torch one imports torch first), so that
    # neither is torn down by the other's failure.
    pids = ctx.pids()
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), timeout=90)
    result = ctx.wait()
    assert result is not None
    return {"torch": result.failures[0], "ours": result.failures[1]}


def _same_failure(t: Any, e: Any) -> None:
    assert (t.local_rank, t.pid, t.exitcode, t.error_file) == (
        e.local_rank,
        e.pid,
        e.exitcode,
        e.error_file,
    )
    assert t.message == e.message
    assert t.timestamp == e.timestamp
    assert t.error_file_data == e.error_file_data
    assert t.signal_name() == e.signal_name()
    assert t.timestamp_isoformat() == e.timestamp_isoformat()


def test_files_written_by_either_record_read_the_same_by_either_reader(
    te: Any, tmp_path: Path
) -> None:
    failures = _run_recorded(tmp_path)
    for writer, text in (("torch", "ValueError: from torch"), ("ours", "ValueError: from us")):
        failure = failures[writer]
        assert failure.exitcode == 1 and not failure.caused_by_us
        path = failure.error_file
        assert path.endswith("error.json")
        t = te.ProcessFailure(failure.local_rank, failure.pid, 1, path)
        e = ours.ProcessFailure(failure.local_rank, failure.pid, 1, path)
        _same_failure(t, e)
        assert e.message["message"] == failure.message["message"] == text
        assert "Traceback (most recent call last)" in e.text

    # Same schema: same keys at every level, one line of JSON.
    raw = {w: Path(f.error_file).read_text() for w, f in failures.items()}
    t_data, e_data = json.loads(raw["torch"]), json.loads(raw["ours"])
    assert t_data.keys() == e_data.keys()
    assert t_data["message"].keys() == e_data["message"].keys()
    assert t_data["message"]["extraInfo"].keys() == e_data["message"]["extraInfo"].keys()
    assert "\n" not in raw["torch"] and "\n" not in raw["ours"]


def test_dump_error_file_gives_the_same_parent_file(
    te: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = tmp_path / "child.json"
    child.write_text(
        json.dumps(
            {
                "message": {
                    "message": "E: x",
                    "extraInfo": {"py_callstack": "tb", "timestamp": "100"},
                }
            }
        )
    )
    outputs = {}
    for name, handler in (("torch", te.ErrorHandler()), ("ours", ours.ErrorHandler())):
        parent = tmp_path / f"{name}-parent.json"
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(parent))
        handler.dump_error_file(str(child), -9)
        outputs[name] = parent.read_bytes()
    assert outputs["torch"] == outputs["ours"]
    assert json.loads(outputs["ours"])["message"]["errorCode"] == -9


def test_format_msg_is_the_same(te: Any, tmp_path: Path) -> None:
    files = {}
    for rank, ts in ((0, 200), (1, 100)):
        files[rank] = tmp_path / f"{rank}.json"
        files[rank].write_text(
            json.dumps(
                {
                    "message": {
                        "message": f"E: r{rank}",
                        "extraInfo": {
                            "py_callstack": f"Traceback\n  line of rank {rank}\n",
                            "timestamp": str(ts),
                        },
                    }
                }
            )
        )
    msgs = {}
    for name, mod in (("torch", te), ("ours", ours)):
        failures = {
            0: mod.ProcessFailure(0, 10, 1, str(files[0])),
            1: mod.ProcessFailure(1, 11, 1, str(files[1])),
            2: mod.ProcessFailure(2, 12, -15, str(tmp_path / "absent.json")),
        }
        failures[2].timestamp = 300
        msgs[name] = (
            mod.ChildFailedError("trainer", failures).format_msg(),
            mod.ChildFailedError("trainer", failures).get_first_failure()[0],
        )
    assert msgs["torch"] == msgs["ours"]
    assert msgs["ours"][1] == 1


def test_signal_and_exit_messages_are_the_same(te: Any) -> None:
    for exitcode in (-9, -11, -15, -77, 1, 3):
        t = te.ProcessFailure(0, 99, exitcode, "/nonexistent")
        e = ours.ProcessFailure(0, 99, exitcode, "/nonexistent")
        assert t.message == e.message
        assert t.error_file == e.error_file == "<N/A>"


def test_shared_empty_error_data_is_mutated_in_torch_not_here(te: Any) -> None:
    """torch mutates its module-level empty-error dict: later signal deaths carry errorTraits."""
    te.ProcessFailure(0, 1, 1, "/nonexistent")  # exit code > 0, no file: adds errorTraits
    assert "errorTraits" in te.ProcessFailure(0, 2, -9, "/nonexistent").error_file_data
    ours.ProcessFailure(0, 1, 1, "/nonexistent")
    assert ours.ProcessFailure(0, 2, -9, "/nonexistent").error_file_data == {"message": "<NONE>"}


@pytest.mark.parametrize("content", [b"", b'{"message": {"mess', b"[1]", b'{"message": {}}'])
def test_bad_error_file_raises_in_torch_and_not_here(
    te: Any, tmp_path: Path, content: bytes
) -> None:
    f = tmp_path / "error.json"
    f.write_bytes(content)
    # torch raises whatever its reader hits (JSONDecodeError, KeyError, TypeError...).
    with pytest.raises((ValueError, KeyError, TypeError, AttributeError)):
        te.ProcessFailure(0, 5, -9, str(f))
    failure = ours.ProcessFailure(0, 5, -9, str(f))
    assert failure.message.startswith("Signal 9 (SIGKILL) received by PID 5")


def test_missing_timestamp_makes_torch_pick_the_wrong_root_cause(
    te: Any, tmp_path: Path
) -> None:
    """A new-shape file without a timestamp gets 0 in torch, so it always looks first."""
    late = tmp_path / "late.json"
    late.write_text(json.dumps({"message": "failed late"}))
    now = time.time_ns()
    t = {0: te.ProcessFailure(0, 1, 1, "/nonexistent"), 1: te.ProcessFailure(1, 2, 1, str(late))}
    assert te.ChildFailedError("x", t).get_first_failure()[0] == 1
    e = {
        0: ours.ProcessFailure(0, 1, 1, "/nonexistent", exit_time_ns=now),
        1: ours.ProcessFailure(1, 2, 1, str(late), exit_time_ns=now + NS),
    }
    assert ours.ChildFailedError("x", e).get_first_failure()[0] == 0


def test_record_exception_outside_except_loses_the_traceback_in_torch(
    te: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        raise KeyError("k")
    except KeyError as err:
        caught = err
    stacks = {}
    for name, handler in (("torch", te.ErrorHandler()), ("ours", ours.ErrorHandler())):
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / f"{name}.json"))
        handler.record_exception(caught)
        data = json.loads((tmp_path / f"{name}.json").read_text())
        stacks[name] = data["message"]["extraInfo"]["py_callstack"]
    assert stacks["torch"] == "NoneType: None\n"
    assert "KeyError: 'k'" in stacks["ours"]


def test_record_returns_none_on_exit_zero_in_both(te: Any) -> None:
    import sys

    assert te.record(lambda: sys.exit(0))() is None
    assert ours.record(lambda: sys.exit(0))() is None
    for mod in (te, ours):
        with pytest.raises(SystemExit):
            mod.record(lambda: sys.exit(signal.SIGTERM))()
