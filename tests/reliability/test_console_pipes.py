"""The console is a view, the log files are the record: a console that goes away or is not
read never costs a traceback, a rank, or a hung shutdown.

``rankvisor ... | head -3`` once printed a BrokenPipeError traceback for every batch; a
stdout pipe that nobody reads once kept rankvisor from exiting after SIGTERM (the output pump
blocked in its write, the monitor behind it on the pump). Real processes, real pipes.
"""

from __future__ import annotations

import fcntl
import io
import os
import signal
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.output.console import ConsoleSink
from rankvisor.engine.output.text_batch import TextBatch

from tests.conftest import BIN, pid_alive, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
SV_RANK = str(BIN / "sv_rank.py")
LINES = 5000


def _rankvisor(tmp_path: Path, stdout: Any, *rank_args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
         "--term-timeout", "5", "--log-dir", str(tmp_path / "logs"),
         SV_RANK, "--pid-dir", str(tmp_path), *rank_args],
        cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def _pids(tmp_path: Path) -> list[int]:
    wait_until(lambda: len(list(tmp_path.glob("*.0.pids"))) == 2, timeout=60)
    return [int(x) for p in tmp_path.glob("*.0.pids") for x in p.read_text().split()]


def _unread(r: int) -> int:
    """Bytes waiting in the pipe whose read end is ``r``."""
    buf = bytearray(4)
    fcntl.ioctl(r, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_closed_stdout_pipe_is_quiet_and_the_run_goes_on(tmp_path: Path) -> None:
    go = tmp_path / "go"
    proc = _rankvisor(
        tmp_path, subprocess.PIPE, "--print", str(LINES), "--exit", "0", "--wait-file", str(go)
    )
    try:
        assert proc.stdout is not None
        # `| head -3`: three lines, then the reader is gone.
        head = [proc.stdout.readline() for _ in range(3)]
        assert all(line.startswith(b"[default") for line in head)
        proc.stdout.close()
        pids = _pids(tmp_path)
        # Every line is in the files before any rank may exit, the console having failed.
        logs = list((tmp_path / "logs").glob("*/attempt_0/*/stdout.log"))
        assert len(logs) == 2
        wait_until(lambda: all(p.read_text().count("\n") >= LINES for p in logs), timeout=30)
        assert all(pid_alive(p) for p in pids)  # the ranks went on without a console
        go.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        _kill_group(proc)
    text = err.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text and "BrokenPipeError" not in text, text
    assert text.count("stdout was closed") == 1, text
    wait_until(lambda: not any(pid_alive(p) for p in pids))
    for log in logs:
        lines = log.read_text().splitlines()
        assert lines[:LINES] == [f"line {i} from rank {log.parent.name}" for i in range(LINES)]


def test_sigterm_with_an_unread_stdout_pipe_exits_promptly(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        proc = _rankvisor(tmp_path, w, "--print", str(LINES * 4))
        os.close(w)
        try:
            pids = _pids(tmp_path)
            # The pipe is full: the output pump waits in its write, nobody will ever read.
            size = fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
            wait_until(lambda: _unread(r) >= size - 4096, timeout=30)
            proc.send_signal(signal.SIGTERM)
            # Bounded: it used to wait on the pipe for ever.
            _, err = proc.communicate(timeout=30)
        finally:
            _kill_group(proc)
    finally:
        os.close(r)
    text = err.decode()
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "Traceback" not in text, text
    assert text.count("stdout is not being read") == 1, text
    wait_until(lambda: not any(pid_alive(p) for p in pids))


def _batch(n: int, payload: int = 100) -> TextBatch:
    data = "".join(f"{i}:{'x' * payload}\n" for i in range(n)).encode()
    return TextBatch(0, "stdout", data, n)


def test_console_sink_on_a_pipe_whose_reader_is_gone(tmp_path: Path) -> None:
    r, w = os.pipe()
    os.close(r)
    dst = io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w")), encoding="utf-8")
    sink = ConsoleSink(dst, name="w")
    sink([_batch(10)])  # no exception: the console is given up
    assert sink.stopped == "closed" and sink.lines_written == 0
    sink([_batch(10)])
    assert not sink.write_text("more\n")
    # The dead descriptor now leads to /dev/null: closing (a final flush) is quiet too.
    assert os.path.samestat(os.fstat(w), os.stat(os.devnull))
    dst.write("a line a print() left behind\n")
    dst.close()


def test_a_full_pipe_is_waited_on_until_shutting_down_then_given_up() -> None:
    r, w = os.pipe()
    dst = io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w")), encoding="utf-8")
    sink = ConsoleSink(dst, name="w")
    size = fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
    done = threading.Event()

    def write() -> None:
        sink([_batch(size // 50)])  # twice the pipe: it cannot all go in
        done.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        # Back-pressure: while running, a console that reads slowly holds the writer.
        wait_until(lambda: _unread(r) >= size - 4096)
        assert not done.is_set()
        first = os.read(r, 4096)
        assert first.startswith(b"[w0]:0:")
        assert sink.stopped is None
        sink.shutting_down(grace_s=0.2)
        writer.join(timeout=30)
        assert done.is_set() and sink.stopped == "not read"
        assert sink.lines_written == 0
        assert not sink.write_text("late\n")  # given up: returns at once
    finally:
        os.close(r)
        dst.close()
