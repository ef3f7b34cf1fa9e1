"""The worker sockets live in a directory only we can reach (issues 35.3, 36.4).

A log dir longer than about 32 characters moves each rank's worker socket (torch's worker
server: the Flight Recorder) to ``<tmp>/rankvisor-<uid>``, whose owner was never checked:
another user made it first, served a fake Flight Recorder at the socket's path, and the
supervisor believed it. Here ``nobody`` (a real other user, through setpriv) makes that
directory first and serves an answer there; then the table of what else may stand at the name.
A socket in a short log dir sits in the rank's own ``worker/`` directory, 0700 whatever the
umask: ``nobody`` cannot connect to it even where torch made the socket world-writable.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rankvisor.engine.forensics.worker_server import (
    SOCKET_DIR,
    SOCKET_NAME,
    ask,
    prepare,
    socket_path,
)
from rankvisor.engine.rundir.private_tmp import NoPrivateDir, private_tmp_dir

from tests.reliability.fake_worker import answer_once

pytestmark = pytest.mark.processes

NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
FAKE_SERVER = r"""
import os, socket, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path), mode=0o777, exist_ok=True)
os.chmod(os.path.dirname(path), 0o777)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    body = b'{"entries": [], "fake": "nobody"}'
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    c.close()
"""
DEEP = "/" + "/".join(["a-long-log-directory-name"] * 4) + "/run_0/attempt_0/0"


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh shared temporary directory (1777, like /tmp) for this test alone."""
    base = Path(tempfile.mkdtemp(prefix="rv-shared-"))
    base.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _needs_other_user() -> None:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as another user")


def test_another_users_directory_is_passed_over(shared_tmp: Path) -> None:
    _needs_other_user()
    squatted = shared_tmp / f"rankvisor-{os.getuid()}"
    # Where the socket went before the check: the same digest, in the squatted directory.
    full = os.path.join(DEEP, SOCKET_DIR, SOCKET_NAME)
    target = squatted / (hashlib.sha1(full.encode()).hexdigest()[:20] + ".sock")
    fake = subprocess.Popen([*NOBODY, sys.executable, "-c", FAKE_SERVER, str(target)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout is not None and fake.stdout.readline() == "ready\n"
        assert squatted.stat().st_uid == 65534

        # The supervisor's side, about to start a rank; then `rankvisor collectives`'s.
        path = socket_path(DEEP, create=True)
        prepare(path)
        assert not path.startswith(str(squatted) + "/"), path
        mine = os.path.dirname(path)
        st = os.lstat(mine)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert socket_path(DEEP) == path  # the reader finds the same one

        # Asked at its own path, the fake is not believed either: the socket is nobody's.
        answer = ask(str(target), "fr_trace_json", timeout_s=2)
        assert not answer.ok and "not a socket of ours" in answer.error
        assert b"fake" not in answer.body
        # The real path has no server yet: "no worker server", not nobody's answer.
        assert "no worker server" in ask(path, "fr_trace_json", timeout_s=2).error
    finally:
        fake.kill()
        fake.wait()


def test_every_name_taken_is_refused_in_words(shared_tmp: Path) -> None:
    _needs_other_user()
    base = f"rankvisor-{os.getuid()}"
    names = [base] + [f"{base}-{n}" for n in range(1, 8)]
    subprocess.run([*NOBODY, "mkdir", "-m", "0777", *[str(shared_tmp / n) for n in names]],
                   check=True)
    with pytest.raises(NoPrivateDir, match=r"uid 65534, mode 777"):
        socket_path(DEEP, create=True)
    with pytest.raises(OSError):
        socket_path(DEEP)


@pytest.mark.parametrize("case", ["absent", "ours 0755", "a link to ours", "a file",
                                  "ours 0700"])
def test_what_stands_at_the_name(shared_tmp: Path, case: str) -> None:
    name = shared_tmp / f"rankvisor-{os.getuid()}"
    elsewhere = shared_tmp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if case == "ours 0755":
        name.mkdir()
        name.chmod(0o755)
    elif case == "a link to ours":
        name.symlink_to(elsewhere)
    elif case == "a file":
        name.write_text("x")
    elif case == "ours 0700":
        name.mkdir(mode=0o700)
    got = Path(private_tmp_dir(create=True))
    st = os.lstat(got)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    assert stat.S_IMODE(st.st_mode) == 0o700
    if case in ("a link to ours", "a file"):
        assert got == shared_tmp / f"rankvisor-{os.getuid()}-1"
        assert not any(elsewhere.iterdir())
    else:
        assert got == name
    assert Path(private_tmp_dir(create=False)) == got


def test_a_socket_we_serve_is_asked(shared_tmp: Path) -> None:
    """The check passes our own server (what a rank of ours serves)."""
    path = socket_path(DEEP, create=True)
    prepare(path)
    server, thread = answer_once(
        path, lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    answer = ask(path, "fr_trace_json", timeout_s=5)
    thread.join(10)
    server.server_close()
    assert answer.ok and answer.body == b"{}"


def test_a_short_log_dirs_socket_is_out_of_another_users_reach() -> None:
    _needs_other_user()
    base = Path(tempfile.mkdtemp(prefix="rv-", dir="/tmp"))  # short: the socket stays in it
    try:
        _short_log_dirs_socket(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _short_log_dirs_socket(base: Path) -> None:
    base.chmod(0o755)
    rank_dir = base / "attempt_0" / "0"
    old = os.umask(0)  # the worst umask: what torch makes is world-writable
    try:
        rank_dir.mkdir(parents=True, mode=0o777)
        path = socket_path(str(rank_dir), create=True)
        prepare(path)
        assert path == str(rank_dir / SOCKET_DIR / SOCKET_NAME)
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        server, thread = answer_once(
            path, lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
        os.chmod(path, 0o777)
    finally:
        os.umask(old)
    try:
        probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
                 "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n"
                 "    print(type(e).__name__)\nelse:\n    print('connected')\n")
        got = subprocess.run([*NOBODY, sys.executable, "-c", probe, path],
                             capture_output=True, text=True, timeout=60)
        assert got.stdout.strip() == "PermissionError", got
        # Ours still reaches it (the supervisor's side).
        assert ask(path, "fr_trace_json", timeout_s=5).ok
    finally:
        thread.join(10)
        server.server_close()
