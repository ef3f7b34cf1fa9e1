"""``rankvisor serve``'s door, against a real server on 127.0.0.1 and a free port.

Each test starts ``rankvisor serve`` as the console script would (no working directory on
``sys.path``) in a directory holding a hostile ``engine.py`` and ``tui.py`` that raise at
import, and talks to it with aiohttp as a browser would: the page, then the websocket URL
the page names, with an Origin header. The job is one tiny Python rank that records its pid
and, on SIGTERM, that it got one; or, for ``serve RUN``, a run that is already running (its
control socket served from the test's process, or a real supervisor process), of which each
session is a viewer. Every process a test starts is killed at the end, even on failure:
serve and each process seen in its tree.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest
from rankvisor.tui.cli.serve import python_module_argv

from tests.conftest import wait_until
from tests.tui.hosted_run import HostedRun, hosted_run

pytestmark = pytest.mark.processes

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("textual_serve")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[2]

HOSTILE = """\
with open({marker!r}, "a") as f:
    f.write(__name__ + "\\n")
raise RuntimeError("the user's own module was imported instead of rankvisor's")
"""

RANK = """\
import os, signal, sys

out = sys.argv[1]


def on_term(signum, frame):
    with open(out + ".term", "w") as f:
        f.write("SIGTERM")
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
with open(out + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(out + ".tmp", out)
while True:
    signal.pause()
"""

BOUND = 30.0
"""Upper bound of any one wait (a session app imports textual; the machine may be loaded)."""


@dataclass
class Served:
    proc: subprocess.Popen[str]
    port: int
    workdir: Path
    lines: list[str] = field(default_factory=list)
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    """Every process seen in serve's tree: killed at the end whatever happened."""

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The URL serve printed at start (with its token)."""
        found = wait_until(lambda: self._printed_url(), timeout=BOUND)
        assert isinstance(found, str)
        return found

    @property
    def token(self) -> str:
        return self.url.split("?token=", 1)[1]

    @property
    def rank_pid_file(self) -> Path:
        return self.workdir / "rank.pid"

    def _printed_url(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"serve exited early: {self.lines}")
        for line in list(self.lines):
            match = re.search(r"(http://\S+\?token=\S+)", line)
            if match:
                return match.group(1)
        return None

    def tree(self) -> list[psutil.Process]:
        """serve's descendants now (the session apps, their guards and ranks), remembered."""
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        alive = []
        for p in found:
            self.seen.setdefault(p.pid, p)
            if _alive(p):
                alive.append(p)
        return alive

    def session_apps(self) -> list[psutil.Process]:
        return [p for p in self.tree() if "--session" in _cmdline(p)]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _alive(p: psutil.Process) -> bool:
    """Still that very process (pid and start time) and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(*flags)`` starts ``rankvisor serve FLAGS run --nproc-per-node 1 RANK``;
    ``serve(*flags, job=[...])`` serves that instead (a RUN, or nothing)."""
    started: list[Served] = []
    workdir = tmp_path / "user-repo"
    workdir.mkdir()
    marker = tmp_path / "hostile-imported"
    for name in ("engine.py", "tui.py"):
        (workdir / name).write_text(HOSTILE.format(marker=str(marker)))
    rank = tmp_path / "rank" / "rank.py"
    rank.parent.mkdir()
    rank.write_text(RANK)

    def start(*flags: str, job: list[str] | None = None) -> Served:
        port = _free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
        )
        if job is None:
            job = ["run", "--nproc-per-node", "1", str(rank), str(workdir / "rank.pid")]
        argv = [*python_module_argv("rankvisor.tui.cli"), "serve", "--port", str(port),
                *flags, *job]
        proc = subprocess.Popen(
            argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        served = Served(proc, port, workdir)
        started.append(served)

        def drain() -> None:  # keep the pipe flowing; the test reads the lines
            assert proc.stdout is not None
            for line in proc.stdout:
                served.lines.append(line)

        threading.Thread(target=drain, daemon=True).start()
        return served

    try:
        yield start
    finally:
        for served in started:
            served.tree()
            served.proc.kill()
            served.proc.wait(timeout=BOUND)
            for p in served.seen.values():
                try:
                    if p.is_running():
                        p.kill()
                except psutil.Error:
                    pass
        assert not marker.exists(), marker.read_text()


async def _handshake(
    url: str, origin: str | None, session: aiohttp.ClientSession
) -> aiohttp.ClientWebSocketResponse:
    headers = {"Origin": origin} if origin is not None else {}
    return await session.ws_connect(url, headers=headers, timeout=aiohttp.ClientWSTimeout(BOUND))


async def _refused(url: str, origin: str | None) -> int:
    """The HTTP status a websocket handshake is refused with (fails if it is accepted)."""
    async with aiohttp.ClientSession() as session:
        try:
            ws = await _handshake(url, origin, session)
        except aiohttp.WSServerHandshakeError as error:
            return error.status
        await ws.close()
        raise AssertionError(f"handshake accepted: {url} from {origin}")


async def _get(url: str, origin: str | None = None) -> tuple[int, str, dict[str, str]]:
    headers = {"Origin": origin} if origin is not None else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
        return r.status, await r.text(), dict(r.headers)


def _page_websocket_url(html: str) -> str:
    match = re.search(r'data-session-websocket-url="([^"]+)"', html)
    assert match, html
    return match.group(1)


async def _first_frame(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    # What the page's script does on open: tell the app its size, then draw what comes.
    await ws.send_json(["resize", {"width": 100, "height": 30}])
    while True:
        message = await asyncio.wait_for(ws.receive(), BOUND)
        if message.type == aiohttp.WSMsgType.BINARY:
            return bytes(message.data)
        assert message.type == aiohttp.WSMsgType.TEXT, message


def _keep_reading(ws: aiohttp.ClientWebSocketResponse) -> asyncio.Task[None]:
    """Read (and drop) the app's frames while the test waits, as a page would: the app never
    blocks on a full pipe and serve's heartbeat pings get their pongs."""

    async def read() -> None:
        while not ws.closed:
            message = await ws.receive()
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                return

    return asyncio.ensure_future(read())


async def _until(predicate: Callable[[], object]) -> None:
    """``wait_until`` off the event loop, so the websocket keeps being read meanwhile."""
    await asyncio.to_thread(wait_until, predicate, BOUND)


def test_wrong_origin_or_token_is_refused_and_starts_no_app(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    base, token = served.origin, served.token
    ws = f"ws://127.0.0.1:{served.port}/ws"

    async def probe() -> None:
        assert (await _get(f"{base}/"))[0] == 403
        assert (await _get(f"{base}/?token=nope"))[0] == 403
        assert (await _get(f"{base}/?token={token[:-1]}"))[0] == 403
        assert (await _get(served.url, origin="http://evil.example.com"))[0] == 403
        right = f"{ws}/{token}?width=80&height=24"
        for origin in (
            "http://evil.example.com", f"http://127.0.0.1:{served.port + 1}",
            f"https://127.0.0.1:{served.port}", f"http://localhost.evil:{served.port}",
            "null", None,
        ):
            assert await _refused(right, origin) == 403, origin
        for url in (ws, f"{ws}/nope", f"{ws}/{token}x", f"{ws}/{token[:-1]}"):
            assert await _refused(url + "?width=80&height=24", base) == 403, url

    asyncio.run(probe())
    # Every refusal is answered before anything is spawned: nothing can be on its way.
    assert served.tree() == []
    assert served.proc.poll() is None


def test_page_websocket_runs_the_job_and_caps_viewers(serve: Callable[..., Served]) -> None:
    served = serve("--max-viewers", "1")

    async def session() -> None:
        status, html, headers = await _get(served.url)
        assert status == 200 and headers["Referrer-Policy"] == "no-referrer"
        ws_url = _page_websocket_url(html)
        assert ws_url == f"ws://127.0.0.1:{served.port}/ws/{served.token}"
        async with aiohttp.ClientSession() as client:
            # The page's script appends the terminal size to the URL it was given.
            ws = await _handshake(f"{ws_url}?width=100&height=30", served.origin, client)
            assert await _first_frame(ws)
            reader = _keep_reading(ws)
            await _until(served.rank_pid_file.exists)
            assert await _refused(f"{ws_url}?width=80&height=24", served.origin) == 503
            status, text, _ = await _get(served.url)
            assert status == 503 and "--max-viewers 1" in text
            (app,) = served.session_apps()
            assert app.ppid() == served.proc.pid  # exec'd: serve's own child, no shell between
            assert _cmdline(app)[1:3] == ["-P", "-m"] or sys.version_info < (3, 11)
            rank_pid = int(served.rank_pid_file.read_text())
            assert rank_pid in {p.pid for p in served.tree()}
            await ws.close()
            await reader
        # Closing the tab quits the app as its own quit would: the rank gets SIGTERM.
        await _until(lambda: not served.tree())
        assert (served.workdir / "rank.pid.term").read_text() == "SIGTERM"

    asyncio.run(session())


async def _live_session(served: Served) -> tuple[aiohttp.ClientSession, asyncio.Task[None]]:
    client = aiohttp.ClientSession()
    ws_url = _page_websocket_url((await _get(served.url))[1])
    ws = await _handshake(f"{ws_url}?width=80&height=24", served.origin, client)
    await _first_frame(ws)
    return client, _keep_reading(ws)


def _run_until_rank(served: Served, then: Callable[[], None]) -> list[psutil.Process]:
    """Open a session, wait for its rank, snapshot the tree, call ``then`` (client still open)."""
    snapshot: list[psutil.Process] = []

    async def go() -> None:
        client, reader = await _live_session(served)
        try:
            await _until(served.rank_pid_file.exists)
            rank_pid = int(served.rank_pid_file.read_text())
            # The app, its guard and the rank are all there before serve goes.
            await _until(lambda: len(served.tree()) >= 3)
            snapshot.extend(served.tree())
            assert rank_pid in {p.pid for p in snapshot}
            assert any("--session" in _cmdline(p) for p in snapshot)
            then()
            await asyncio.to_thread(served.proc.wait, BOUND)
        finally:
            reader.cancel()
            await client.close()

    asyncio.run(go())
    return snapshot


def test_sigkill_of_serve_leaves_no_session_process(serve: Callable[..., Served]) -> None:
    served = serve()
    snapshot = _run_until_rank(served, served.proc.kill)
    assert served.proc.returncode == -signal.SIGKILL
    wait_until(lambda: not any(_alive(p) for p in snapshot), timeout=BOUND)


def test_sigterm_of_serve_quits_each_session_as_its_quit_would(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    snapshot = _run_until_rank(served, served.proc.terminate)
    assert served.proc.returncode == 0, served.lines
    # The rank was terminated (SIGTERM first), not killed with serve.
    assert (served.workdir / "rank.pid.term").read_text() == "SIGTERM"
    wait_until(lambda: not any(_alive(p) for p in snapshot), timeout=BOUND)


# -- serve RUN: every session a viewer of a run that goes on without it ---------------------


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[HostedRun]:
    """A running run of two ranks whose control socket is served from this process."""
    yield from hosted_run(tmp_path / "logs")


async def _open_viewer(
    served: Served,
) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse, asyncio.Task[None]]:
    client = aiohttp.ClientSession()
    ws_url = _page_websocket_url((await _get(served.url))[1])
    ws = await _handshake(f"{ws_url}?width=100&height=30", served.origin, client)
    assert await _first_frame(ws)
    return client, ws, _keep_reading(ws)


def test_serve_run_sessions_are_viewers_and_a_closed_tab_leaves_the_run(
    serve: Callable[..., Served], hosted: HostedRun
) -> None:
    served = serve(job=[hosted.run_dir])
    assert served.token
    assert any(
        f"each browser session shows a viewer of run {hosted.run_id} ({hosted.run_dir}), "
        "read-only" in line for line in served.lines
    ), served.lines
    pids = hosted.rank_pids()
    assert hosted.clients == 0

    async def sessions() -> None:
        first, first_ws, first_reader = await _open_viewer(served)
        await _until(lambda: hosted.clients == 1)
        (app,) = served.session_apps()
        assert _cmdline(app)[-3:] == ["attach", hosted.run_dir, "--read-only"]
        second, _, second_reader = await _open_viewer(served)
        # Two sessions are two viewers of this one run, not two runs.
        await _until(lambda: hosted.clients == 2)
        assert len(served.session_apps()) == 2
        assert hosted.rank_pids() == pids and hosted.all_running()
        # Closing a tab ends that viewer only.
        await first_ws.close()
        await first_reader
        await first.close()
        await _until(lambda: hosted.clients == 1 and len(served.session_apps()) == 1)
        assert hosted.rank_pids() == pids and hosted.all_running()
        # SIGTERM of serve quits the other session as its quit would: it lets go.
        served.proc.terminate()
        await asyncio.to_thread(served.proc.wait, BOUND)
        second_reader.cancel()
        await second.close()

    asyncio.run(sessions())
    assert served.proc.returncode == 0, served.lines
    wait_until(lambda: hosted.clients == 0 and not served.tree(), timeout=BOUND)
    assert hosted.rank_pids() == pids and hosted.all_running()


RUN_WAIT = "import signal\nsignal.pause()\n"


def test_serve_with_no_run_views_the_running_one_else_the_demo(
    serve: Callable[..., Served], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real supervisor process (``run -D``) in a state dir of this test's own."""
    from rankvisor.engine.control.client import RemoteHandle
    from rankvisor.engine.control.status import read_status

    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(tmp_path / "state"))
    demo = serve(job=[])
    assert demo.token and any(
        "each browser session shows a run of its own: demo" in line for line in demo.lines
    ), demo.lines
    demo.proc.terminate()
    demo.proc.wait(BOUND)

    script = tmp_path / "wait.py"
    script.write_text(RUN_WAIT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = tmp_path / "logs"
    started = subprocess.run(
        [*python_module_argv("rankvisor.tui.cli"), "run", "-D", "--nproc-per-node", "2",
         "--term-timeout", "5", "--log-dir", str(logs), str(script)],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )
    assert started.returncode == 0, started.stderr
    (run_dir,) = [str(p) for p in logs.iterdir()]
    status = read_status(run_dir)
    assert status is not None
    supervisor = psutil.Process(int(status["supervisor_pid"]))
    try:
        pids = sorted(r["pid"] for r in status["ranks"])
        served = serve(job=[])
        assert served.token and any(
            f"a viewer of run {status['run_id']} ({run_dir}), read-only" in line
            for line in served.lines
        ), served.lines

        async def session() -> None:
            client, ws, reader = await _open_viewer(served)
            (app,) = served.session_apps()
            assert _cmdline(app)[-3:] == ["attach", run_dir, "--read-only"]
            await ws.close()
            await reader
            await client.close()
            await _until(lambda: not served.tree())

        asyncio.run(session())
        # The viewer is gone; the run is not.
        handle = RemoteHandle.connect(str(status["socket"]), read_only=True)
        try:
            ranks = handle.snapshot().ranks
            assert sorted(r.pid or 0 for r in ranks) == pids
            assert all(r.state.is_alive for r in ranks)
        finally:
            handle.detach()
    finally:
        subprocess.run([*python_module_argv("rankvisor.tui.cli"), "stop", run_dir], env=env,
                       capture_output=True, timeout=60)
        try:
            supervisor.wait(BOUND)
        except psutil.Error:
            supervisor.kill()


def test_a_killed_session_app_gives_its_viewer_place_back(serve: Callable[..., Served]) -> None:
    """SIGKILL of a session's app (an OOM kill, a person's kill -9): the tab is told (its
    websocket closed) and its place is free for the next one (was: 503 until serve ended)."""
    served = serve("--max-viewers", "1")

    async def session() -> None:
        client, reader = await _live_session(served)
        try:
            await _until(served.rank_pid_file.exists)
            (app,) = served.session_apps()
            app.kill()
            await asyncio.wait_for(reader, BOUND)  # serve closed the tab's websocket
            again, second = await _live_session(served)  # not 503
            second.cancel()
            await again.close()
        finally:
            reader.cancel()
            await client.close()

    asyncio.run(session())
