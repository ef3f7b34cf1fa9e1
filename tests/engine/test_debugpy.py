"""``--debugpy``: a rank under debugpy, held by ``--debugpy-wait`` until a client attaches,
driven by a client of our own over the Debug Adapter Protocol (initialize, attach,
setBreakpoints, configurationDone, a ``stopped`` event at the breakpoint, continue); the
rank then ends 0, its peer (not under debugpy) ran as usual, and the run dir holds the VS
Code attach configuration that the notice names with the ``ssh -L`` line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from rankvisor.engine.events import RankDebuggerWait, RunFinished, SupervisorNotice
from rankvisor.engine.process.py_bootstrap import debugger_wait_since
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.debug_options import DebugOptions
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until
from tests.engine.dap_client import DapClient
from tests.engine.supervisor_helpers import Recorder

pytestmark = pytest.mark.processes

pytest.importorskip("debugpy")

JOB = BIN / "debugpy_job.py"


def _free_base_port() -> int:
    """A port whose next one is free too (rank 1's, were it under debugpy)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            return port
    raise AssertionError("no free port")


def test_a_client_attaches_breaks_and_continues(tmp_path: Path) -> None:
    port = _free_base_port()
    line = 1 + next(i for i, text in enumerate(JOB.read_text().splitlines())
                    if "the breakpoint" in text)
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(JOB)), nprocs=2, log_dir=str(tmp_path),
        sample_interval=0,
        debug=DebugOptions(debugpy=frozenset({0}), debugpy_port=port, debugpy_wait=True),
    )
    config.validate()
    rec = Recorder()
    sup = Supervisor(config)
    sup.subscribe(rec)  # before start: the banner is said as the ranks start
    with sup:
        run_dir = Path(sup.snapshot().log_dir)
        launch = json.loads((run_dir / "launch.json").read_text())
        assert launch["configurations"][0]["connect"] == {"host": "127.0.0.1", "port": port}
        # Rank 1 is not under debugpy: it ends while rank 0 waits for a client.
        wait_until(lambda: sup.snapshot().ranks[1].state is RankState.SUCCEEDED, timeout=60)
        assert sup.snapshot().ranks[0].state is RankState.RUNNING
        # While it waits for a client, the supervisor can tell (a person is attaching a
        # debugger: never a hang, engine.supervisor.live_suspect).
        first = sup.snapshot().ranks[0]
        wait_until(lambda: debugger_wait_since(first.error_file, first.pid) is not None,
                   timeout=30)
        # ... and says so to every viewer: a pause of a person's, never a straggler.
        wait_until(lambda: any(e.since is not None for e in rec.of(RankDebuggerWait)),
                   timeout=30)
        assert sup.held_now() == {0: "waiting for a debugger"}
        client = DapClient(port)
        try:
            seq = client.request("initialize", clientID="rankvisor-test", adapterID="debugpy",
                                 linesStartAt1=True, columnsStartAt1=True, pathFormat="path")
            assert client.wait_for(response_to=seq)["success"]
            attach = client.request("attach", justMyCode=False)
            client.wait_for(event="initialized")
            seq = client.request("setBreakpoints", source={"path": str(JOB)},
                                 breakpoints=[{"line": line}])
            verified = client.wait_for(response_to=seq)
            assert verified["success"] and verified["body"]["breakpoints"][0]["verified"]
            seq = client.request("configurationDone")
            assert client.wait_for(response_to=seq)["success"]
            assert client.wait_for(response_to=attach)["success"]
            stopped = client.wait_for(event="stopped")
            assert stopped["body"]["reason"] == "breakpoint"
            assert debugger_wait_since(first.error_file, first.pid) is None  # attached
            thread = stopped["body"]["threadId"]
            seq = client.request("stackTrace", threadId=thread, levels=1)
            frame = client.wait_for(response_to=seq)["body"]["stackFrames"][0]
            assert (Path(frame["source"]["path"]).name, frame["line"]) == (JOB.name, line)
            seq = client.request("continue", threadId=thread)
            assert client.wait_for(response_to=seq)["success"]
            # Two more passes of the loop stop there again; then it ends.
            for _ in range(2):
                thread = client.wait_for(event="stopped")["body"]["threadId"]
                client.request("continue", threadId=thread)
            finished = sup.wait(timeout=60)
        finally:
            client.close()
    assert isinstance(finished, RunFinished)
    assert not finished.result.is_failed()
    # Said once when it began (and once when it ended, if a check came before the run did).
    waits = [(e.rank, e.since is None) for e in rec.of(RankDebuggerWait)]
    assert waits in ([(0, False)], [(0, False), (0, True)])
    assert "rank 0: total 3" in Path(sup.snapshot().ranks[0].stdout_path).read_text()
    banner = next(n.message for n in rec.of(SupervisorNotice) if n.message.startswith("debugpy"))
    assert f"rank 0 on 127.0.0.1:{port} (each waits for a client" in banner
    assert str(run_dir / "launch.json") in banner
    assert f"ssh -L {port}:127.0.0.1:{port} " in banner
