"""The stdin pipe, the /proc probe and the prompt reader, on real processes and pipes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.output.prompt import pdb_where, read_prompt
from rankvisor.engine.process.input_probe import StdinProbe
from rankvisor.engine.process.stdin_pipe import RankStdin, StdinRefused

from tests.conftest import wait_until

pytestmark = pytest.mark.processes

JOBS = Path(__file__).parent / "jobs"


def _reader(pipe: RankStdin, code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=pipe.read_fd,
                            stdout=subprocess.PIPE)
    pipe.spawned()
    return proc


def test_a_line_reaches_the_rank_and_eof_only_when_asked() -> None:
    pipe = RankStdin()
    proc = _reader(pipe, "import sys\nfor line in sys.stdin: print(line.strip(), flush=True)")
    pipe.send(b"hello\n")
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"hello\n"
    assert proc.poll() is None  # our write end is open: no EOF
    pipe.close()
    assert proc.wait(10) == 0
    with pytest.raises(StdinRefused, match="closed"):
        pipe.send(b"late\n")


def test_a_full_pipe_refuses_the_line_in_words_and_never_blocks() -> None:
    pipe = RankStdin()
    proc = _reader(pipe, "import time; time.sleep(60)")  # never reads
    try:
        sent = 0
        with pytest.raises(StdinRefused, match="full .* not reading"):
            for _ in range(100_000):
                pipe.send(b"x" * 1000 + b"\n")
                sent += 1
        assert sent > 0
        assert pipe.unread() == sent * 1001  # every line that went went whole
        with pytest.raises(StdinRefused, match="full"):
            pipe.send(b"y" * 10_000 + b"\n")  # a long line too: refused, not half-written
        assert pipe.unread() == sent * 1001
    finally:
        proc.kill()
        proc.wait()
        pipe.close()


def test_a_rank_that_exited_refuses_the_line() -> None:
    pipe = RankStdin()
    proc = _reader(pipe, "pass")
    proc.wait(10)
    with pytest.raises(StdinRefused, match="closed its stdin|exited"):
        pipe.send(b"x\n")
    pipe.close()


@pytest.mark.parametrize("code", [
    "import sys; sys.stdin.readline()",
    "open('/dev/stdin').readline()",  # another fd on the same pipe, as torch's pdb
])
def test_the_probe_sees_a_read_of_the_pipe_on_any_fd(code: str) -> None:
    pipe = RankStdin()
    proc = _reader(pipe, code)
    probe = StdinProbe()
    try:
        wait_until(lambda: probe.waiting(proc.pid, pipe.inode), 10)
        pipe.send(b"go\n")
        assert proc.wait(10) == 0
        assert not probe.waiting(proc.pid, pipe.inode)
    finally:
        probe.close()
        pipe.close()


def test_the_probe_ignores_other_blocking_reads() -> None:
    pipe = RankStdin()
    other = RankStdin()
    proc = subprocess.Popen([sys.executable, "-c", f"import os; os.read({other.read_fd}, 1)"],
                            stdin=pipe.read_fd, pass_fds=(other.read_fd,))
    pipe.spawned()
    probe = StdinProbe()
    try:
        # Blocked in its read of the other pipe first (seen, not slept for: the start of a
        # Python on a loaded machine took longer than a fixed pause); then, in that same
        # read, it is not taken for a reader of its stdin.
        wait_until(lambda: probe.waiting(proc.pid, other.inode, deep=True))
        assert not probe.waiting(proc.pid, pipe.inode, deep=True)
    finally:
        proc.kill()
        proc.wait()
        probe.close()
        pipe.close()
        other.close()


def test_a_reader_thread_is_seen_by_a_deep_look_only() -> None:
    pipe = RankStdin()
    proc = subprocess.Popen([sys.executable, str(JOBS / "reader_thread.py")],
                            stdin=pipe.read_fd, stdout=subprocess.PIPE)
    pipe.spawned()
    probe = StdinProbe()
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        wait_until(lambda: probe.waiting(proc.pid, pipe.inode, deep=True), 10)
        assert not probe.waiting(proc.pid, pipe.inode)  # the main thread is in join()
        pipe.send(b"hi\n")
        assert proc.stdout.readline() == b"thread got hi\n"
        assert proc.wait(10) == 0
    finally:
        probe.close()
        pipe.close()


def test_the_prompt_is_the_unfinished_line_and_where_comes_from_pdb(tmp_path: Path) -> None:
    out = tmp_path / "stdout.log"
    err = tmp_path / "stderr.log"
    out.write_bytes(b"step 1\n> /home/me/job.py(7)<module>()\n-> y = f(x)\n(Pdb) ")
    err.write_bytes(b"")
    assert read_prompt(str(out), str(err)) == ("(Pdb) ", "job.py:7 in <module>")
    out.write_bytes(b"hello\ncontinue? \x1b[31m")
    assert read_prompt(str(out), str(err)) == ("continue? ", "")
    out.write_bytes(b"all lines end\n")
    err.write_bytes(b"Password: ")
    assert read_prompt(str(out), str(err)) == ("Password: ", "")
    assert pdb_where("> /a/b/train.py(12)step()\n") == "train.py:12 in step"
    assert pdb_where("no pdb here") == ""
    # After an answer the location follows the prompt on its line (a pipe does not echo).
    assert pdb_where("(Pdb) > /a/job.py(10)<module>()\n-> f()\n(Pdb) ") == "job.py:10 in <module>"
    torch_frame = "> /site-packages/torch/distributed/__init__.py(134)breakpoint()\n"
    assert pdb_where(torch_frame).startswith("torch.distributed.breakpoint()")
