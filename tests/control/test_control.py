"""A real Supervisor served on a Unix socket, and viewers (RemoteHandle) that talk to it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from rankvisor.engine.control import wire
from rankvisor.engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle
from rankvisor.engine.control.server import READ_ONLY_REFUSAL, ControlServer
from rankvisor.engine.events import Event, RankOutput, RankStateChanged, SupervisorNotice
from rankvisor.engine.handle import (
    CommandResult,
    KillRanks,
    ReadCollectives,
    RestartRank,
    SignalRanks,
    TerminateRanks,
)
from rankvisor.engine.names import refusals
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until
from tests.engine.supervisor_helpers import Recorder

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]

# Lines to stdout and stderr in turn, in small bursts, then exit 0.
TWO_STREAMS = (
    "import os, sys, time\n"
    "n = int(sys.argv[1]); r = os.environ['RANK']\n"
    "for i in range(n):\n"
    "    s = sys.stdout if i % 3 else sys.stderr\n"
    "    s.write(f'{r}:{i}\\n'); s.flush()\n"
    "    if i % 50 == 0: time.sleep(0.01)\n"
    "while not os.path.exists(sys.argv[2]): time.sleep(0.02)\n"
)


class Served:
    def __init__(self, sup: Supervisor, server: ControlServer, rec: Recorder, sock: str):
        self.sup, self.server, self.rec, self.sock = sup, server, rec, sock
        self.handles: list[RemoteHandle] = []

    def connect(self, **kw: Any) -> RemoteHandle:
        handle = RemoteHandle.connect(self.sock, **kw)
        self.handles.append(handle)
        return handle


@pytest.fixture(name="serve")
def serve_fixture(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    made: list[Served] = []
    sock_dir = tempfile.mkdtemp(dir="/tmp", prefix="rvc")  # sun_path is 108 bytes

    def make(args: tuple[str, ...], nprocs: int = 2, **kw: Any) -> Served:
        config = SupervisorConfig(
            entrypoint=PYTHON, args=args, nprocs=nprocs, log_dir=str(tmp_path / "logs"),
            term_timeout=5.0, sample_interval=0,
        )
        sup = Supervisor(config)
        rec = Recorder()
        sup.subscribe(rec)
        server = ControlServer(sup, os.path.join(sock_dir, f"{len(made)}.sock"), **kw)
        server.start()
        sup.start()
        served = Served(sup, server, rec, server.socket_path)
        made.append(served)
        return served

    yield make
    for s in made:
        for h in s.handles:
            h.detach()
        s.server.close()
        s.sup.shutdown(timeout_s=1.0)
    shutil.rmtree(sock_dir, ignore_errors=True)


def sleeper() -> tuple[str, ...]:
    return ("-c", "import time\nwhile True: time.sleep(1)")


def lifecycle(events: list[Event]) -> list[Event]:
    return [e for e in events if wire.is_lifecycle(e)]


def test_the_socket_and_its_directory_are_private(serve: Any) -> None:
    s = serve(sleeper(), nprocs=1)
    assert os.stat(s.sock).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(s.sock)).st_mode & 0o777 == 0o700


def test_every_command_answers_as_in_process(serve: Any) -> None:
    s = serve(sleeper())
    s.rec.wait_state(1, RankState.RUNNING)
    remote = s.connect(name="test")
    assert remote.supervisor_pid == os.getpid() and remote.run_dir == s.sup.snapshot().log_dir
    commands = [
        SignalRanks((0,), 0), SignalRanks((0,), 999), SignalRanks((9,), signal.SIGCONT),
        SignalRanks((0, 1), signal.SIGCONT), TerminateRanks((0,), timeout_s=-1.0),
        TerminateRanks((0,), timeout_s=float("inf")), TerminateRanks((7,)), KillRanks((42,)),
        RestartRank(5), SignalRanks((0,), "TERM"),  # type: ignore[arg-type]
    ]
    for command in commands:
        assert remote.execute(command) == s.sup.execute(command), command
    # One that changes the run: restart rank 0 through the socket, then rank 1 here.
    assert remote.execute(RestartRank(0)) == CommandResult(True, "")
    s.rec.wait_state(0, RankState.RUNNING, count=2)
    assert s.sup.execute(RestartRank(1)).ok
    s.rec.wait_state(1, RankState.RUNNING, count=2)
    snap = remote.snapshot()
    assert snap == s.sup.snapshot()


def test_a_late_watcher_gets_the_state_and_every_line_once(serve: Any, tmp_path: Path) -> None:
    n = 3000
    release = tmp_path / "release"
    s = serve(("-u", "-c", TWO_STREAMS, str(n), str(release)), nprocs=3)
    # Let part of the output reach the files, then watch from another viewer.
    wait_until(lambda: sum(len(e.lines) for e in s.rec.of(RankOutput)) > n // 2, timeout=30)
    viewer = s.connect(recent_lines=10**6)
    got: list[Event] = []
    lock = threading.Lock()

    def sink(event: Event) -> None:
        with lock:
            got.append(event)

    initial, _ = viewer.watch(sink)
    wait_until(lambda: sum(len(e.lines) for e in s.rec.of(RankOutput)) >= 3 * n, timeout=60)
    release.touch()
    s.sup.wait(timeout=60)
    wait_until(lambda: viewer.finished is not None, timeout=10)
    # The lifecycle events as the in-process recorder saw them, in the same order.
    with lock:
        events = list(got)
    assert lifecycle(events) == lifecycle(s.rec.events)
    # Every line of each file exactly once, with its right number.
    final = s.sup.snapshot()
    for info in final.ranks:
        for stream, path in (("stdout", info.stdout_path), ("stderr", info.stderr_path)):
            on_disk = Path(path).read_text().splitlines()
            lines: dict[int, str] = {}
            count: Counter[int] = Counter()
            for e in events:
                if isinstance(e, RankOutput) and e.rank == info.rank and e.stream == stream:
                    for i, text in enumerate(e.lines):
                        lines[e.first_line + i] = text
                        count[e.first_line + i] += 1
            assert [lines.get(i) for i in range(len(on_disk))] == on_disk
            assert set(count.values()) == {1}, (info.rank, stream)
    # Folding the events into the returned run gives the run as it is now.
    state = {r.rank: (r.state, r.pid, r.exitcode, r.restart_count, r.attempt)
             for r in initial.ranks}
    for e in events:
        if isinstance(e, RankStateChanged):
            state[e.rank] = (e.new, e.pid, e.exitcode, e.restart_count, e.attempt)
    assert state == {r.rank: (r.state, r.pid, r.exitcode, r.restart_count, r.attempt)
                     for r in final.ranks}
    # The run's end: the viewer got the same RunFinished, failures rebuilt, not re-read.
    assert viewer.wait(0) == s.sup.wait(0)


def test_a_protocol_mismatch_gets_one_line_and_the_close(serve: Any) -> None:
    s = serve(sleeper(), nprocs=1)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(s.sock)
        sock.sendall(b'{"t":"hello","protocol":999,"version":"9.9","name":"future"}\n')
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert data.count(b"\n") == 1
    message = json.loads(data)
    assert message["t"] == "error" and message["protocol"] == 1
    assert "protocol 1" in message["message"] and "999" in message["message"]


def test_a_client_of_another_version_raises_one_line(tmp_path: Path) -> None:
    # A supervisor of a later protocol: it answers the hello with its error line.
    path = tempfile.mkdtemp(dir="/tmp") + "/v2.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b'{"t":"error","protocol":2,"version":"2.0","message":"speaks 2"}\n')
        conn.close()

    t = threading.Thread(target=answer)
    t.start()
    with pytest.raises(ProtocolMismatch) as info:
        RemoteHandle.connect(path, timeout_s=10)
    t.join()
    listener.close()
    text = str(info.value)
    assert "\n" not in text and "protocol 1" in text and "supervisor 2" in text
    with pytest.raises(FileNotFoundError):
        RemoteHandle.connect(path + ".missing")


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to be another user")
def test_a_peer_of_another_uid_gets_not_a_byte(serve: Any) -> None:
    s = serve(sleeper(), nprocs=1)
    # Open the modes to everyone: only the peer check may refuse the connection now.
    os.chmod(os.path.dirname(s.sock), 0o777)
    os.chmod(s.sock, 0o666)
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(20); s.connect(sys.argv[1])\n"
        "try:\n"
        "    s.sendall(b'{\"t\":\"hello\",\"protocol\":1,\"name\":\"intruder\"}\\n')\n"
        "except BrokenPipeError:\n"  # closed already, without a word: as it should be
        "    pass\n"
        "data = b''\n"
        "while True:\n"
        "    try:\n"
        "        chunk = s.recv(4096)\n"
        "    except ConnectionResetError:\n"
        "        break\n"
        "    if not chunk: break\n"
        "    data += chunk\n"
        "print('got', len(data))\n"
    )
    out = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
         sys.executable, "-c", code, s.sock],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["got", "0"]
    assert s.server.clients == 0


def test_a_read_only_viewer_is_refused_every_command(serve: Any) -> None:
    s = serve(sleeper())
    s.rec.wait_state(1, RankState.RUNNING)
    viewer = s.connect(read_only=True)
    assert viewer.read_only
    for command in (TerminateRanks(None), KillRanks((0,)), RestartRank(0),
                    SignalRanks((1,), signal.SIGCONT)):
        assert viewer.execute(command) == CommandResult(False, READ_ONLY_REFUSAL)
    assert all(r.state is RankState.RUNNING for r in s.sup.snapshot().ranks)
    assert viewer.snapshot() == s.sup.snapshot()  # looking is allowed
    # Asking for the collectives pauses nobody: allowed, and answered by the supervisor
    # (these ranks run `-c` code, which the bootstrap does not wrap: nothing serves them).
    assert viewer.execute(ReadCollectives()) == CommandResult(False, refusals.NO_COLLECTIVES)


def _rate_lines(rec_counts: list[tuple[float, int]], start: float, end: float) -> float:
    inside = [(t, n) for t, n in rec_counts if start <= t <= end]
    return sum(n for _, n in inside) / max(end - start, 1e-9)


def test_a_stopped_viewer_slows_nobody_and_recovers_from_the_files(
    serve: Any, tmp_path: Path
) -> None:
    ranks, rate, seconds = 4, 3000, 6.0
    s = serve(("-u", str(BIN / "sv_spew.py"), "--rate", str(rate), "--seconds", str(seconds)),
              nprocs=ranks, queue_bytes=64 << 10)
    arrivals: list[tuple[float, int]] = []

    def timing_sink(event: Event) -> None:
        if isinstance(event, RankOutput):
            arrivals.append((time.monotonic(), len(event.lines)))

    s.sup.subscribe(timing_sink)
    report = tmp_path / "viewer.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    viewer = subprocess.Popen(
        [PYTHON, str(Path(__file__).with_name("remote_viewer.py")), s.sock, str(report)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    other = s.connect(name="bystander")
    try:
        assert viewer.stdout is not None and viewer.stdout.readline().strip() == "ready"
        wait_until(lambda: len(arrivals) > 20, timeout=30)
        t0 = time.monotonic()
        time.sleep(1.0)  # a second of output with the viewer reading (a measuring window)
        t1 = time.monotonic()
        os.kill(viewer.pid, signal.SIGSTOP)
        peak = 0
        # While it is stopped: the queue stays bounded, the sink's rate stays.
        stop_end = t1 + 2.5
        while time.monotonic() < stop_end:
            peak = max([peak, *s.server.queued_bytes])
            time.sleep(0.05)
        t2 = time.monotonic()
        assert s.server.dropped_lines > 0
        reading = _rate_lines(arrivals, t0, t1)
        stopped = _rate_lines(arrivals, t1, t2)
        assert stopped > 0.5 * reading, (reading, stopped)
        assert peak <= (64 << 10) + 4096, peak
        os.kill(viewer.pid, signal.SIGCONT)
        finished = s.sup.wait(timeout=120)
        assert finished is not None and not finished.result.failures
        assert viewer.wait(timeout=120) == 0
    finally:
        if viewer.poll() is None:
            os.kill(viewer.pid, signal.SIGCONT)
            viewer.kill()
            viewer.wait()
    seen = json.loads(report.read_text())
    assert seen["finished"] and seen["skipped"] >= 1
    for rank in range(ranks):
        on_disk = len(Path(finished.result.stdouts[rank]).read_text().splitlines())
        assert on_disk >= rate * seconds * 0.5
        # Every line of the file since it subscribed reached the viewer: live, or read
        # back from the file after a skipped marker.
        lines = seen["seen"][f"{rank}/stdout"]
        assert set(lines) == set(range(min(lines), on_disk)), rank
    # The bystander, who kept reading, is still there.
    assert other.connected


def test_a_killed_viewer_leaves_the_server_serving_others(serve: Any, tmp_path: Path) -> None:
    s = serve(sleeper())
    s.rec.wait_state(1, RankState.RUNNING)
    s2 = s.server
    viewer = subprocess.Popen(
        [PYTHON, str(Path(__file__).with_name("remote_viewer.py")), s.sock,
         str(tmp_path / "v.json")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert viewer.stdout is not None and viewer.stdout.readline().strip() == "ready"
    other = s.connect()
    got: list[Event] = []
    other.subscribe(got.append)
    wait_until(lambda: s2.clients == 2)
    viewer.kill()
    viewer.wait()
    wait_until(lambda: s2.clients == 1)
    assert other.execute(RestartRank(0)).ok
    wait_until(lambda: any(isinstance(e, RankStateChanged) and e.rank == 0
                           and e.new is RankState.RUNNING for e in got))


def test_the_end_of_the_supervisor_reaches_the_sinks(serve: Any) -> None:
    s = serve(sleeper(), nprocs=1)
    viewer = s.connect()
    got: list[Event] = []
    viewer.subscribe(got.append)
    s.server.close()
    wait_until(lambda: not viewer.connected)
    notices = [e for e in got if isinstance(e, SupervisorNotice)]
    assert len(notices) == 1 and "went away" in notices[0].message
    assert viewer.execute(KillRanks(None)).ok is False
    with pytest.raises(NoAnswer):
        viewer.snapshot()


def test_a_viewer_that_never_reads_is_cut_off_with_a_reason(serve: Any) -> None:
    s = serve(sleeper(), nprocs=1, queue_bytes=4096, lifecycle_bytes=64 << 10)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(s.sock)
        sock.sendall(wire.encode_message({"t": "hello", "protocol": 1, "name": "asleep"}))
        wait_until(lambda: s.server.clients == 1)
        # Lifecycle events nobody reads: kept (never dropped) until far past the bound.
        for i in range(5000):
            s.server._sink(SupervisorNotice(f"notice {i} " + "x" * 100))
            if s.server.clients == 0 or not s.server.queued_bytes:
                break
        sock.settimeout(10)
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    last = json.loads(data.splitlines()[-1])
    assert last["t"] == "bye" and "too far behind" in last["reason"]
    wait_until(lambda: s.server.clients == 0)
    # Everything before the cut arrived whole and in order.
    numbers = [int(json.loads(x)["e"]["message"].split()[1]) for x in data.splitlines()[1:-1]]
    assert numbers == list(range(len(numbers)))


def test_a_skipped_stretch_is_read_back_only_for_its_last_lines_unless_passed(
    serve: Any, tmp_path: Path
) -> None:
    n = 2000
    release = tmp_path / "release"
    s = serve(("-u", "-c", TWO_STREAMS, str(n), str(release)), nprocs=1)
    wait_until(lambda: sum(len(e.lines) for e in s.rec.of(RankOutput)) >= n, timeout=30)
    viewer = s.connect(reread_lines=25, pass_over_skipped=True)
    got: list[RankOutput] = []
    viewer.subscribe(lambda e: got.append(e) if isinstance(e, RankOutput) else None)
    on_disk = Path(s.sup.snapshot().ranks[0].stdout_path).read_text().splitlines()
    # As the reader would on a marker from the server (the stretch is the whole file), then
    # on lines of the same stream after it: passed over, nothing read back.
    marker = {"t": "skipped", "rank": 0, "stream": "stdout", "attempt": 0, "first_line": 0,
              "count": len(on_disk) - 10}
    viewer._skipped(marker)
    viewer._passed(RankOutput(0, "stdout", ("newer",), first_line=len(on_disk) - 10))
    viewer._read_back(None)
    assert got == []
    # A stretch nothing followed is read back once the reader caught up with the socket.
    viewer._skipped({**marker, "count": len(on_disk)})
    assert got == []
    viewer._read_back(None)
    assert len(got) == 1
    assert got[0].first_line == len(on_disk) - 25
    assert list(got[0].lines) == on_disk[-25:]
    release.touch()


# Numbered lines on stdout every 5 ms, for ever (each incarnation from 0 again).
TICKER = (
    "import os, sys, time\n"
    "r = os.environ['RANK']; i = 0\n"
    "while True:\n"
    "    print(f'{r}:{i}', flush=True); i += 1; time.sleep(0.005)\n"
)


def test_a_viewer_that_follows_a_ranks_files_is_sent_cues_instead_of_its_lines(
    serve: Any,
) -> None:
    """A viewer whose pane shows a rank from its files (under a flood) gets none of that
    incarnation's lines any more, only a cue now and then that its files grew; the other
    rank's lines keep coming, and a restart gives the rank's new lines back."""
    s = serve(("-u", "-c", TICKER), nprocs=2)
    viewer = s.connect(pass_over_skipped=True)
    got: list[RankOutput] = []
    lock = threading.Lock()

    def sink(event: Event) -> None:
        if isinstance(event, RankOutput):
            with lock:
                got.append(event)

    viewer.subscribe(sink)

    def of(rank: int, since: int = 0) -> list[RankOutput]:
        with lock:
            return [e for e in got[since:] if e.rank == rank and e.stream == "stdout"]

    wait_until(lambda: of(0) and of(1), timeout=30)
    # An incarnation the rank is not in (a follow that crossed a restart) is not taken.
    assert not viewer.follow_files(0, 0, 1)
    assert viewer.follow_files(0, 0, 0)
    # A cue has neither lines nor an unfinished line (an unfinished line alone, "0:12" before
    # its newline, came before the follow too).
    wait_until(lambda: any(not e.lines and not e.partial for e in of(0)), timeout=30)
    with lock:
        cue = next(
            i for i, e in enumerate(got) if e.rank == 0 and not e.lines and not e.partial
        )
    before = len(Path(s.sup.snapshot().ranks[0].stdout_path).read_text().splitlines())
    wait_until(lambda: len(of(1, cue)) >= 10 and len(of(0, cue + 1)) >= 3, timeout=30)
    # After the first cue: more cues for rank 0, never one of its lines; rank 1's lines go on.
    assert all(not e.lines and not e.partial for e in of(0, cue))
    assert sum(len(e.lines) for e in of(1, cue)) >= 10
    # Nothing is lost: the rank wrote on, into its file.
    wait_until(lambda: len(Path(s.sup.snapshot().ranks[0].stdout_path).read_text()
                           .splitlines()) > before + 20, timeout=30)
    # A restart: new files, whose lines come to the viewer again; the old follow is stale.
    with lock:
        mark = len(got)
    assert viewer.execute(RestartRank(0)).ok
    wait_until(lambda: any(e.lines and e.lines[0].startswith("0:") for e in of(0, mark)),
               timeout=30)
    assert not viewer.follow_files(0, 0, 0)
    assert viewer.follow_files(0, 0, 1)


def test_a_pump_block_is_measured_for_a_queue_without_being_made_into_lines() -> None:
    """The server weighs each batch against a viewer's queue bound; a pump's ``LineBlock``
    is weighed by its bytes (as many as its lines with their separators), so a batch that
    no viewer takes (every viewer follows the rank's files) never becomes str lines."""
    from rankvisor.engine.control.server import _estimate
    from rankvisor.engine.output.text_batch import LineBlock

    lines = ("step 1 loss 0.5", "step 2 loss 0.4", "")
    block = LineBlock("\n".join(lines).encode() + b"\n", len(lines))
    as_tuple = RankOutput(0, "stdout", lines, partial="50%")
    as_block = RankOutput(0, "stdout", block, partial="50%")  # type: ignore[arg-type]
    assert _estimate(as_block) == _estimate(as_tuple)
    assert block._lines is None  # nothing made
