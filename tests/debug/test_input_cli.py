"""``rankvisor input`` and ``rankvisor debug`` on runs of a real supervisor process
(``rankvisor run -D``), with real ranks, real pipes and real torch on gloo."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.status import read_status
from rankvisor.engine.events import RankInputWait
from rankvisor.engine.handle import SendInput

from tests.conftest import PYTHON, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo]

JOBS = Path(__file__).parent / "jobs"
START_S = 60.0
"""Bound on every wait: the machine is shared, and a gloo job imports torch."""


def cli(*argv: str, timeout: float = START_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "rankvisor.tui", *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)


class Runs:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.dirs: list[str] = []

    def start(self, job: str, nprocs: int) -> str:
        done = cli("run", "-D", "--nproc-per-node", str(nprocs), "--term-timeout", "2",
                   "--log-dir", str(self.tmp_path / "logs"), str(JOBS / job))
        assert done.returncode == 0, done.stderr
        match = re.search(r"goes on in (\S+)", done.stdout)
        assert match, done.stdout
        self.dirs.append(match[1])
        return match[1]

    def close(self) -> None:
        for run_dir in self.dirs:
            status = read_status(run_dir)
            if status is not None and not status.get("finished"):
                cli("stop", run_dir, "--timeout", "1")


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runs]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(state))
    r = Runs(tmp_path)
    yield r
    r.close()


def waiting(run_dir: str, ranks: tuple[int, ...]) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = read_status(run_dir)
        if status is None:
            return None
        by_rank = {r["rank"]: r for r in status["ranks"]}
        return status if all(by_rank[r]["input_wait"] for r in ranks) else None

    found = wait_until(check, START_S)
    assert isinstance(found, dict)
    return found


def stdout_of(run_dir: str, rank: int) -> str:
    return cli("logs", run_dir, "--rank", str(rank)).stdout


def test_breakpoint_answered_with_rankvisor_input(runs: Runs) -> None:
    run_dir = runs.start("bp_job.py", 2)
    status = waiting(run_dir, (0,))
    wait = status["ranks"][0]["input_wait"]
    assert wait["prompt"] == "(Pdb) " and wait["where"].startswith("bp_job.py:8")
    assert wait["since"] > 0
    # status --json says the same as the file.
    shown = cli("status", run_dir, "--json")
    assert '"prompt": "(Pdb) "' in shown.stdout, shown.stdout
    text = cli("status", run_dir).stdout
    assert "rank 0: waiting for input at bp_job.py:8 in <module>, prompt '(Pdb) '" in text, text

    assert cli("input", run_dir, "0", "p x").returncode == 0
    wait_until(lambda: "41" in stdout_of(run_dir, 0), START_S)
    assert cli("input", run_dir, "0", "c").returncode == 0
    assert cli("wait", run_dir).returncode == 0
    # The typed lines, marked, where they arrived among the rank's own lines.
    view = cli("logs", run_dir, "--rank", "0", "--typed").stdout.splitlines()
    assert view.index("\u2328 p x") < view.index("(Pdb) 41") < view.index("\u2328 c")
    assert view.index("\u2328 c") < view.index("(Pdb) done 0")
    assert "\u2328" not in stdout_of(run_dir, 0)  # the log itself: the rank's bytes only


def test_torch_distributed_breakpoint_on_gloo(runs: Runs) -> None:
    run_dir = runs.start("dist_bp_job.py", 2)
    status = waiting(run_dir, (0,))
    wait = status["ranks"][0]["input_wait"]
    assert wait["prompt"] == "(Pdb) "
    assert wait["where"].startswith("torch.distributed.breakpoint()")
    assert status["ranks"][1]["input_wait"] is None  # rank 1 waits in the barrier, not stdin
    # torch's pdb stops in its own frame: "up" reaches the script's, and the wait says so.
    assert cli("input", run_dir, "0", "up").returncode == 0
    wait_until(lambda: (read_status(run_dir)["ranks"][0]["input_wait"] or {}).get(
        "where", "").startswith("dist_bp_job.py:10"), START_S)
    assert cli("input", run_dir, "0", "p x").returncode == 0
    wait_until(lambda: "41" in stdout_of(run_dir, 0), START_S)
    assert cli("input", run_dir, "0", "c").returncode == 0
    assert cli("wait", run_dir, timeout=2 * START_S).returncode == 0
    for rank in (0, 1):
        assert f"done {rank} sum=2" in stdout_of(run_dir, rank)


def test_input_on_three_ranks_answered_with_all(runs: Runs) -> None:
    run_dir = runs.start("ask_job.py", 3)
    status = waiting(run_dir, (0, 1, 2))
    assert [r["input_wait"]["prompt"] for r in status["ranks"]] == [
        f"continue rank {r}? " for r in range(3)]
    assert cli("input", run_dir, "all", "yes").returncode == 0
    assert cli("wait", run_dir).returncode == 0


def test_a_rank_not_running_exits_1_with_the_supervisors_words(runs: Runs) -> None:
    run_dir = runs.start("bp_job.py", 2)
    waiting(run_dir, (0,))
    wait_until(lambda: read_status(run_dir)["ranks"][1]["state"] == "succeeded", START_S)
    refused = cli("input", run_dir, "1", "c")
    assert refused.returncode == 1
    assert "rank 1 is not running" in refused.stderr
    partly = cli("input", run_dir, "0,1", "p x")  # rank 0 gets it; rank 1 was named: exit 1
    assert partly.returncode == 1
    assert cli("input", run_dir, "0", "c").returncode == 0
    assert cli("wait", run_dir).returncode == 0


def test_detach_at_the_prompt_and_continue_from_a_new_viewer(runs: Runs) -> None:
    run_dir = runs.start("bp_job.py", 2)
    status = waiting(run_dir, (0,))
    socket = status["socket"]
    first = RemoteHandle.connect(socket)
    seen: list[Any] = []
    _info, _unsubscribe = first.watch(seen.append)
    # A late viewer learns of the wait from the replay, not only from the snapshot.
    wait_until(lambda: any(isinstance(e, RankInputWait) and e.wait for e in seen), START_S)
    first.detach()
    second = RemoteHandle.connect(socket)
    try:
        assert second.snapshot().ranks[0].input_wait is not None
        assert second.execute(SendInput((0,), "c")).ok
        finished = second.wait(START_S)
        assert finished is not None and not finished.result.failures
    finally:
        second.detach()


class Console:
    """``rankvisor debug`` in a real terminal (a pty), killed at the end if still there."""

    def __init__(self, *argv: str) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvp(PYTHON, [PYTHON, "-m", "rankvisor.tui", "debug", *argv])
        self.buf = bytearray()

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def until(self, needle: bytes, count: int = 1) -> bool:
        """Whether the screen shows ``needle`` ``count`` times within START_S."""
        deadline = time.monotonic() + START_S
        while self.buf.count(needle) < count and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 4096)
            except OSError:
                break
            if not data:
                break
            self.buf += data
        return self.buf.count(needle) >= count

    def tail(self) -> bytes:
        return bytes(self.buf[-600:])

    def exit_code(self) -> int:
        _, code = os.waitpid(self.pid, 0)
        self.pid = 0
        return os.waitstatus_to_exitcode(code)

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.pid:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


def test_rankvisor_debug_in_a_terminal(runs: Runs) -> None:
    run_dir = runs.start("bp_job.py", 2)
    waiting(run_dir, (0,))
    with Console(run_dir, "--rank", "0") as console:
        assert console.until(b"(Pdb) "), console.tail()
        console.type(b"p x\r")
        assert console.until(b"41"), console.tail()
        console.type(b"c\r")
        assert console.until(b"leaving the console"), console.tail()
        assert console.exit_code() == 0
    assert cli("wait", run_dir).returncode == 0
    assert "done 0" in stdout_of(run_dir, 0)


def test_every_ctrl_c_asks_even_one_typed_as_the_prompt_is_drawn(runs: Runs) -> None:
    # Each Ctrl-C is typed the moment the prompt comes back: it lands in readline's hooks
    # or just before its wait for a key, where one alone would be lost until the next key.
    run_dir = runs.start("bp_job.py", 1)
    waiting(run_dir, (0,))
    question = b"send SIGINT to rank 0? [y/N]"
    with Console(run_dir) as console:
        assert console.until(b"(Pdb) "), console.tail()
        for i in range(1, 13):
            console.type(b"\x03")
            assert console.until(question, i), (i, console.tail())
            console.type(b"\r")  # no, and the prompt is back
            assert console.until(question + b" \r\n(Pdb) ", i), (i, console.tail())
        console.type(b"\x04")
        assert console.until(b"left the console"), console.tail()
        assert console.buf.count(question) == 12  # one question per Ctrl-C, none twice
    assert cli("input", run_dir, "0", "c").returncode == 0
    assert cli("wait", run_dir).returncode == 0


def test_ctrl_c_asks_ctrl_d_leaves_and_the_rank_waits_on(runs: Runs) -> None:
    run_dir = runs.start("bp_job.py", 1)
    waiting(run_dir, (0,))
    with Console(run_dir) as console:
        assert console.until(b"(Pdb) "), console.tail()
        console.type(b"q\r")  # a pdb quit asks first; no is the default
        assert console.until(b"[y/N]"), console.tail()
        console.type(b"\r")
        assert console.until(b"[y/N] \r\n(Pdb) "), console.tail()  # not sent: asked again
        console.type(b"\x03")  # Ctrl-C asks before it sends SIGINT to the rank
        assert console.until(b"send SIGINT to rank 0? [y/N]"), console.tail()
        console.type(b"y\r")
        assert console.until(b"--KeyboardInterrupt--"), console.tail()  # pdb's own answer
        console.type(b"\x04")  # Ctrl-D
        assert console.until(b"left the console"), console.tail()
        assert console.exit_code() == 0
    # Untouched: still at its prompt. The SIGINT made pdb write a new prompt, so the watch
    # may be between "it wrote" and "it waits again" when the console leaves: wait for it.
    status = waiting(run_dir, (0,))
    assert status["ranks"][0]["state"] == "running"
    assert cli("input", run_dir, "0", "c").returncode == 0
    assert cli("wait", run_dir).returncode == 0


def test_a_read_only_viewer_may_not_type(runs: Runs) -> None:
    run_dir = runs.start("ask_job.py", 1)
    status = waiting(run_dir, (0,))
    viewer = RemoteHandle.connect(status["socket"], read_only=True)
    try:
        result = viewer.execute(SendInput((0,), "yes"))
        assert not result.ok and "read-only" in result.message
    finally:
        viewer.detach()
    assert cli("input", run_dir, "0", "yes").returncode == 0
    assert cli("wait", run_dir).returncode == 0


def test_headless_inherits_stdin_as_torchrun(tmp_path: Path) -> None:
    done = subprocess.run(
        [PYTHON, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "1",
         "--log-dir", str(tmp_path / "logs"), str(JOBS / "ask_job.py")],
        input="yes\n", capture_output=True, text=True, timeout=START_S, check=False)
    assert done.returncode == 0, done.stderr
    assert "rank 0 got 'yes'" in done.stdout


def test_headless_with_a_pipe_shows_the_prompt_and_takes_input_from_another_shell(
        runs: Runs, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [PYTHON, "-m", "rankvisor.tui", "run", "--headless", "--stdin", "pipe",
         "--nproc-per-node", "1", "--log-dir", str(tmp_path / "logs"), str(JOBS / "ask_job.py")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        # The prompt has no newline: the console shows the unfinished line all the same.
        line = proc.stdout.readline()
        while b"continue rank 0? " not in line and line:
            line = proc.stdout.readline()
        assert b"continue rank 0? " in line
        wait_until(lambda: cli("input", "0", "yes").returncode == 0, START_S, interval=0.5)
        out, _err = proc.communicate(timeout=START_S)
        assert proc.returncode == 0
        assert b"rank 0 got 'yes'" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
