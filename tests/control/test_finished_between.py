"""A run that ends between a command's look at its status and its connect is said to have
finished: its supervisor writes the final status before its socket goes, so the command
reads it again when the socket is gone and the supervisor still lives (on its way out)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rankvisor.engine.control.registry import RunEntry
from rankvisor.engine.control.status import SCHEMA, process_start_time, write_status
from rankvisor.tui.cli.supervisor_call import connect_and_run


@pytest.mark.parametrize("command,code,words", [
    ("stack", 1, "has finished (exit code 0)"),
    ("stop", 0, "has already finished (exit code 0)"),
])
def test_a_socket_gone_with_the_run_finished_is_said_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, code: int, words: str
) -> None:
    pid = os.getpid()  # a supervisor that lives: this process
    start = process_start_time(pid)
    write_status(str(tmp_path), {
        "schema": SCHEMA, "run_id": "r1", "state": "finished", "finished": True, "exitcode": 0,
        "supervisor_pid": pid, "supervisor_start": start,
    })
    entry = RunEntry("r1", str(tmp_path), str(tmp_path / "gone.sock"), pid, start, time.time())

    def build(_handle: object) -> object:
        raise AssertionError("no command is built for a finished run")

    assert connect_and_run(command, entry, build) == code  # type: ignore[arg-type]
    said = capsys.readouterr()
    assert words in said.out + said.err and "does not answer" not in said.err


def test_a_socket_closed_during_the_handshake_with_the_run_finished_is_said_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket
    import threading

    pid = os.getpid()
    start = process_start_time(pid)
    write_status(str(tmp_path), {
        "schema": SCHEMA, "run_id": "r1", "state": "finished", "finished": True, "exitcode": 1,
        "supervisor_pid": pid, "supervisor_start": start,
    })
    path = str(tmp_path / "closing.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def close_the_first() -> None:  # a supervisor closing its connections on its way out
        conn, _ = server.accept()
        conn.close()

    closer = threading.Thread(target=close_the_first, daemon=True)
    closer.start()
    entry = RunEntry("r1", str(tmp_path), path, pid, start, time.time())
    try:
        assert connect_and_run("stack", entry, lambda _h: None) == 1  # type: ignore[arg-type]
    finally:
        closer.join(10)
        server.close()
    said = capsys.readouterr()
    assert "has finished (exit code 1)" in said.err, said.err
