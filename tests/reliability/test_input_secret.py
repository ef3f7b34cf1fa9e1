"""A line for a rank need not be in a command line (issue 36.2).

``rankvisor input RUN 1 SECRET`` put the secret in ``/proc/PID/cmdline``, which every user of
the machine reads. Without TEXT (or with ``-``) the line is read from stdin, and on a
terminal from a prompt that does not echo it. A real supervisor process, a real rank at an
``input()`` prompt, the CLI as a process of its own (on a pty for the prompt).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time

import pytest

from tests.conftest import PYTHON
from tests.debug.test_input_cli import START_S, Runs, cli, runs, stdout_of, waiting

pytestmark = pytest.mark.processes

__all__ = ["runs"]  # the fixture, used by name


def _input(*argv: str, line: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-m", "rankvisor.tui", "input", *argv], input=line,
                          capture_output=True, timeout=START_S, check=False)


def test_the_line_comes_from_stdin(runs: Runs) -> None:
    run_dir = runs.start("ask_job.py", 2)
    waiting(run_dir, (0, 1))
    sent = _input(run_dir, "0", line=b"yes\n")
    assert sent.returncode == 0, sent.stderr
    sent = _input(run_dir, "1", "-", line=b"yes\r\n")
    assert sent.returncode == 0, sent.stderr
    assert cli("wait", run_dir).returncode == 0
    assert "rank 0 got 'yes'" in stdout_of(run_dir, 0)
    assert "rank 1 got 'yes'" in stdout_of(run_dir, 1)


def test_nothing_on_stdin_is_one_line(runs: Runs) -> None:
    run_dir = runs.start("ask_job.py", 1)
    waiting(run_dir, (0,))
    empty = _input(run_dir, "0", line=b"")
    assert empty.returncode == 2
    assert empty.stderr.decode().strip().splitlines()[-1].endswith(
        "no line on stdin: give TEXT, or pipe the line in (--eof closes the ranks' stdin)")
    assert cli("input", run_dir, "0", "yes").returncode == 0  # TEXT given: as before
    assert cli("wait", run_dir).returncode == 0


def test_on_a_terminal_the_prompt_does_not_echo(runs: Runs) -> None:
    run_dir = runs.start("ask_job.py", 1)
    waiting(run_dir, (0,))
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on the pty
        os.execv(PYTHON, [PYTHON, "-m", "rankvisor.tui", "input", run_dir, "0"])
    seen = b""
    try:
        seen = _read_until(fd, b"(not shown): ")
        os.write(fd, b"yes\n")
        seen += _read_until(fd, None)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert b"yes" not in seen, seen  # the terminal showed the prompt, never the line
    assert cli("wait", run_dir).returncode == 0
    assert "rank 0 got 'yes'" in stdout_of(run_dir, 0)


def _read_until(fd: int, marker: bytes | None) -> bytes:
    """What the pty shows until ``marker`` (None: until the child closes it)."""
    out = b""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and (marker is None or marker not in out):
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child is gone
                break
            if not chunk:
                break
            out += chunk
    assert marker is None or marker in out, out
    return out


GETPASS_JOB = """\
import getpass, hashlib
secret = getpass.getpass("Password: ")  # no terminal: getpass reads the pipe
print("got", hashlib.sha256(secret.encode()).hexdigest()[:12], flush=True)
"""


def test_a_line_at_a_password_prompt_is_kept_and_shown_hidden(runs: Runs) -> None:
    """getpass without a terminal reads stdin: the line sent is in no file and no event."""
    import hashlib

    job = runs.tmp_path / "getpass_job.py"
    job.write_text(GETPASS_JOB)
    run_dir = runs.start(str(job), 1)
    status = waiting(run_dir, (0,))
    assert status["ranks"][0]["input_wait"]["prompt"] == "Password: "
    sent = _input(run_dir, "0", line=b"hunter2-leak\n")
    assert sent.returncode == 0, sent.stderr
    assert cli("wait", run_dir).returncode == 0
    digest = hashlib.sha256(b"hunter2-leak").hexdigest()[:12]
    assert f"got {digest}" in stdout_of(run_dir, 0)  # the rank got the line itself
    typed = cli("logs", run_dir, "--rank", "0", "--stderr", "--typed").stdout
    assert "\u2328 <hidden: typed at a password prompt>" in typed, typed
    leaks = []
    for root, _dirs, files in os.walk(run_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                if b"hunter2" in f.read():
                    leaks.append(os.path.relpath(os.path.join(root, name), run_dir))
    assert leaks == []


def test_which_prompts_ask_for_a_secret() -> None:
    from rankvisor.engine.forensics.redaction import asks_secret

    secret = ("Password: ", "Enter passphrase for key 'x': ", "Enter your API key: ", "PIN: ",
              "Warning: Password input may be echoed.\nPassword: ", "HF token:", "passwd:  ")
    plain = ("(Pdb) ", "continue rank 0? ", "Username: ", "", "password? ",
             "Password: ok\nName: ", "pinned: ")
    assert [p for p in secret if not asks_secret(p)] == []
    assert [p for p in plain if asks_secret(p)] == []
