"""``--debugpy`` opens its door to the job's user alone (issues 35.2, 36.1).

debugpy listened on 127.0.0.1 with no credential: another user's raw DAP client (a few lines
of JSON) paused the rank and evaluated code in it as the job's user, and between two
incarnations another user could take the port. Here ``nobody`` (a real other user, through
setpriv) connects and asks to evaluate: the connection closes before any answer, and the
rank still waits for its debugger; the job's user attaches and evaluates; between the two
incarnations of ``rankvisor restart`` the port cannot be taken, and the new incarnation
listens on it again.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rankvisor.engine.events import RunFinished
from rankvisor.engine.handle import RestartRank
from rankvisor.engine.process.py_bootstrap import debugger_wait_since, loopback_peer_uid
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.debug_options import DebugOptions
from rankvisor.engine.supervisor.debugpy_hold import DebugpyHold
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until
from tests.control.runs import state_dir
from tests.engine.dap_client import DapClient
from tests.reliability.cli_runs import cli, private_state_dir

pytestmark = pytest.mark.processes

pytest.importorskip("debugpy")

__all__ = ["private_state_dir", "state_dir"]  # fixtures, used by name

JOB = BIN / "debugpy_door_job.py"
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
RAW_DAP = r"""
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
def send(seq, command, **arguments):
    body = json.dumps({"seq": seq, "type": "request", "command": command,
                       "arguments": arguments}).encode()
    s.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
got = b""
try:
    send(1, "initialize", adapterID="debugpy", clientID="x")
    send(2, "attach", justMyCode=False)
    send(3, "configurationDone")
    send(4, "evaluate", expression="__import__('os').getuid()", context="repl")
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
except OSError as e:
    print("closed:", type(e).__name__)
print("received", len(got), "bytes")
"""
TAKE_PORT = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
    s.listen(1)
    print("taken")
except OSError as e:
    print("refused:", e.strerror)
"""


def _as_nobody(code: str, *args: str) -> str:
    return subprocess.run([*NOBODY, sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=60, check=True).stdout


@pytest.fixture
def another_user() -> Iterator[None]:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as another user")
    yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _attach(port: int, line: int | None) -> tuple[DapClient, int | None]:
    """The job's user attaches (a breakpoint at ``line``); the stopped thread, if any."""
    client = DapClient(port)
    seq = client.request("initialize", clientID="rankvisor-test", adapterID="debugpy",
                         linesStartAt1=True, columnsStartAt1=True, pathFormat="path")
    assert client.wait_for(response_to=seq)["success"]
    attach = client.request("attach", justMyCode=False)
    client.wait_for(event="initialized")
    if line is not None:
        seq = client.request("setBreakpoints", source={"path": str(JOB)},
                             breakpoints=[{"line": line}])
        assert client.wait_for(response_to=seq)["success"]
    seq = client.request("configurationDone")
    assert client.wait_for(response_to=seq)["success"]
    assert client.wait_for(response_to=attach)["success"]
    if line is None:
        return client, None
    return client, int(client.wait_for(event="stopped")["body"]["threadId"])


def test_only_the_jobs_user_attaches_and_the_port_stays_ours(tmp_path: Path,
                                                             another_user: None) -> None:
    port = _free_port()
    done = tmp_path / "done"
    line = 1 + next(i for i, text in enumerate(JOB.read_text().splitlines())
                    if "the breakpoint" in text)
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(JOB), str(done)), nprocs=2, log_dir=str(tmp_path),
        sample_interval=0,
        debug=DebugOptions(debugpy=frozenset({0}), debugpy_port=port, debugpy_wait=True),
    )
    config.validate()
    sup = Supervisor(config)
    with sup:
        first = sup.snapshot().ranks[0]
        wait_until(lambda: debugger_wait_since(first.error_file, first.pid) is not None,
                   timeout=30)
        # Another user: closed before a byte of an answer, and the rank still waits.
        said = _as_nobody(RAW_DAP, str(port))
        assert "received 0 bytes" in said, said
        assert debugger_wait_since(first.error_file, first.pid) is not None
        # The job's user: attached, stopped at the breakpoint, evaluates in its frame.
        client, thread = _attach(port, line)
        try:
            seq = client.request("stackTrace", threadId=thread, levels=1)
            frame = client.wait_for(response_to=seq)["body"]["stackFrames"][0]["id"]
            seq = client.request("evaluate", expression="total + 40", frameId=frame,
                                 context="repl")
            assert client.wait_for(response_to=seq)["body"]["result"] == "40"
            seq = client.request("setBreakpoints", source={"path": str(JOB)}, breakpoints=[])
            client.wait_for(response_to=seq)
            client.request("continue", threadId=thread)
            wait_until(lambda: sup.snapshot().ranks[0].state is RankState.SUCCEEDED, timeout=30)
        finally:
            client.close()
        # Between two incarnations (rank 0 ended, the run goes on): the port is not free.
        assert "refused: Address already in use" in _as_nobody(TAKE_PORT, str(port))
        assert sup.execute(RestartRank(0)).ok
        wait_until(lambda: sup.snapshot().ranks[0].pid not in (None, first.pid), timeout=30)
        second = sup.snapshot().ranks[0]
        wait_until(lambda: debugger_wait_since(second.error_file, second.pid) is not None,
                   timeout=30)
        client, _ = _attach(port, None)  # the same port, the new incarnation
        client.close()
        wait_until(lambda: sup.snapshot().ranks[0].state is RankState.SUCCEEDED, timeout=30)
        done.touch()
        finished = sup.wait(timeout=60)
    assert isinstance(finished, RunFinished) and not finished.result.is_failed()
    stderr = Path(first.stderr_path).read_text()
    assert "rankvisor: debugpy: refused a client" in stderr
    assert "(user 65534; only user 0 may attach)" in stderr


def test_a_port_held_by_another_user_fails_the_start_in_one_line(another_user: None) -> None:
    port = _free_port()
    holder = subprocess.Popen(
        [*NOBODY, sys.executable, "-c", TAKE_PORT + "\nsys.stdout.flush()\nsys.stdin.read()\n",
         str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "taken"
        with pytest.raises(ValueError, match=rf"rank 3's port {port} on 127.0.0.1 is taken"):
            DebugpyHold({3: port})
    finally:
        holder.kill()
        holder.wait()


def test_the_kernel_names_the_user_at_the_other_end(another_user: None) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(2)
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            mine, _ = listener.accept()
            with mine:
                assert loopback_peer_uid(mine) == os.getuid()
        theirs = subprocess.Popen(
            [*NOBODY, sys.executable, "-c",
             "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
             " sys.stdin.read()", str(port)], stdin=subprocess.PIPE)
        try:
            conn, _ = listener.accept()
            with conn:
                assert loopback_peer_uid(conn) == 65534
        finally:
            theirs.kill()
            theirs.wait()


def test_a_detached_run_prints_where_to_attach(tmp_path: Path) -> None:
    port = _free_port()
    done = cli("run", "-D", "--nproc-per-node", "1", "--debugpy", f"0:{port}", "--log-dir",
               str(tmp_path), str(BIN / "debugpy_job.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"debugpy: rank 0 on 127.0.0.1:{port}" in done.stderr
    assert f"ssh -L {port}:127.0.0.1:{port} " in done.stderr
    run_dir = next(p for p in tmp_path.iterdir() if (p / "launch.json").exists())
    assert cli("wait", str(run_dir)).returncode == 0
