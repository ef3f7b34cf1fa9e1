"""What held in the adversarial pass, kept as tests: load, hostile output, signals to us.

- Load, scaled to the suite's budget: 8 ranks write numbered lines for 3 s; every line is
  delivered once, whole, in order, and the files hold exactly what was written (the longer
  soak is ``tests/bench/bench_reliability.py``).
- The escape corpus (``tests/bin/escape_corpus.py``): nothing that could act on a terminal
  reaches rankvisor's console; the log file keeps the rank's bytes as written.
- The signal matrix: each signal rankvisor handles ends the run with 128 + N and leaves no
  process; a second signal SIGKILLs ranks that ignore the first at once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, pid_alive, wait_until
from tests.reliability.load import run_load

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
def test_load_every_line_once_whole_in_order(tmp_path: Path) -> None:
    figures = run_load(tmp_path, ranks=8, rate=5_000, seconds=3.0)
    assert figures["written"] >= 8 * 5_000 * 3.0 * 0.5  # the writers really wrote (loose)
    assert figures["delivered"] == figures["written"]
    for what in ("lost", "duplicated", "out_of_order", "garbled", "mismatch_with_file"):
        assert figures[what] == 0, figures


_DANGEROUS = re.compile(rb"\x1b(?!\[[0-9;:]*m)|[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]|\xc2[\x80-\x9f]")
"""Any ESC that is not a plain SGR colour, C0 controls but tab/newline, DEL, C1 (as UTF-8)."""


def test_escape_corpus_never_reaches_the_console(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "1",
        "--log-dir", str(tmp_path), "--tee", "3", str(BIN / "escape_corpus.py"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = proc.stdout.splitlines()
    # Every case shown, none dropped (case 19's progress frames collapse to its last frame).
    assert len(shown) == 21 and sum(b"case " in line for line in shown) == 20
    for line in shown:
        assert _DANGEROUS.search(line) is None, line
    assert b"\x1b[31mred stays\x1b[0m" in proc.stdout  # colours are kept
    assert b"frame 3" in proc.stdout and b"frame 1" not in proc.stdout  # last frame only
    assert "\ufffd invalid utf-8".encode() in proc.stdout  # shown, as replacement characters
    # The file is the record: the rank's bytes, untouched.
    (log,) = tmp_path.glob("*/attempt_0/0/stdout.log")
    assert b"\x1b]52;c;cm0gLXJmIH4=\x07" in log.read_bytes()


def _start(tmp_path: Path, *rank_args: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
        "--term-timeout", "60", "--log-dir", str(tmp_path / "logs"),
        str(BIN / "sv_rank.py"), "--pid-dir", str(pid_dir), *rank_args,
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    for rank in (0, 1):
        wait_until((pid_dir / f"{rank}.0.pids").exists, timeout=30)
    pids = [int(x) for r in (0, 1) for x in (pid_dir / f"{r}.0.pids").read_text().split()]
    return proc, pids


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_a_second_signal_kills_ranks_that_ignore_the_first_at_once(
    tmp_path: Path, sig: int
) -> None:
    """The term timeout is 60 s: only the second signal can end this run within the
    subprocess timeout below, and it must leave nothing behind."""
    proc, pids = _start(tmp_path, "--ignore-term", "--ignore", str(int(sig)))
    proc.send_signal(sig)
    assert proc.stderr is not None
    wait_until(lambda: b"stopping all ranks" in _peek(proc), timeout=15)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 128 + sig
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=15)


_buffers: dict[int, bytearray] = {}


def _peek(proc: subprocess.Popen[bytes]) -> bytes:
    """What ``proc`` wrote to stderr so far (non-blocking reads of its pipe)."""
    assert proc.stderr is not None
    buf = _buffers.setdefault(proc.pid, bytearray())
    os.set_blocking(proc.stderr.fileno(), False)
    try:
        chunk = proc.stderr.read()
    except BlockingIOError:
        chunk = None
    if chunk:
        buf += chunk
    return bytes(buf)
