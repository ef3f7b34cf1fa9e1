"""A long line for a rank at ``input()`` goes whole (issue 36.10).

A 60 KiB line (a pasted JSON answer) was refused as "not reading its stdin": it did not fit
in what a 64 KiB pipe keeps free. The pipe now grows to hold a line once the rank has read
what came before, up to a limit the refusal names. A real supervisor process, a real rank
at ``input()``, the line through ``rankvisor input`` on stdin; then the pipe's rules on a
real pipe: a line over the limit, and earlier lines left unread, are refused in words.
"""

from __future__ import annotations

import hashlib

import pytest
from rankvisor.engine.process.stdin_pipe import RankStdin, StdinRefused, longest_line

from tests.debug.test_input_cli import Runs, cli, runs, stdout_of, waiting
from tests.debug.test_stdin_pipe import _reader
from tests.reliability.test_input_secret import _input

pytestmark = pytest.mark.processes

__all__ = ["runs"]  # the fixture, used by name

LINE = b"0123456789abcdef" * 3840  # 61440 bytes
BIG_JOB = """\
import hashlib
line = input("paste: ")
print("got", len(line), hashlib.sha256(line.encode()).hexdigest()[:16], flush=True)
"""


def test_a_60_kib_line_reaches_a_rank_at_input(runs: Runs) -> None:
    job = runs.tmp_path / "big_job.py"
    job.write_text(BIG_JOB)
    run_dir = runs.start(str(job), 1)
    waiting(run_dir, (0,))
    sent = _input(run_dir, "0", line=LINE + b"\n")
    assert sent.returncode == 0, sent.stderr
    assert cli("wait", run_dir).returncode == 0
    digest = hashlib.sha256(LINE).hexdigest()[:16]
    assert f"got {len(LINE)} {digest}" in stdout_of(run_dir, 0)


def test_what_the_pipe_takes_and_what_it_refuses_in_words() -> None:
    pipe = RankStdin()
    proc = _reader(pipe, "import time; time.sleep(60)")  # reads nothing
    try:
        limit = longest_line()
        with pytest.raises(StdinRefused, match=f"at most {limit} bytes"):
            pipe.send(b"z" * limit + b"\n")  # over the limit, alone: the limit is named
        assert pipe.unread() == 0
        pipe.send(b"a" * (limit - 1) + b"\n")  # at the limit: grown, whole
        assert pipe.unread() == limit
        with pytest.raises(StdinRefused, match="still unread: it is not reading"):
            pipe.send(b"b" * 70_000 + b"\n")  # behind unread lines: refused, none of it sent
        assert pipe.unread() == limit
    finally:
        proc.kill()
        proc.wait()
        pipe.close()
