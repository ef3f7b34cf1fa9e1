"""Who connected and what they asked is on record (issue 36.10).

Nothing recorded who reached a run through its socket or typed a line: supervisor.log stayed
empty. Now each connection (the peer's pid and uid) and each command (what it asked, and its
answer) is one line of supervisor.log, a typed line by its length and ranks only, and the
file is its user's alone. A real supervisor process, two real ranks at prompts (one of them a
password prompt), the CLI as processes of their own.
"""

from __future__ import annotations

import logging
import os
import re
import stat

import pytest
from rankvisor.engine import handle as h
from rankvisor.engine.cluster.door import ClusterDoor, connect_door
from rankvisor.engine.control.audit import described

from tests.conftest import wait_until
from tests.debug.test_input_cli import START_S, Runs, cli, runs, waiting
from tests.reliability.test_door_bounds import door
from tests.reliability.test_input_secret import _input

pytestmark = pytest.mark.processes

__all__ = ["door", "runs"]  # the fixtures, used by name

TWO_PROMPTS = """\
import getpass, os, time
if os.environ["RANK"] == "0":
    print("rank 0 got", input("continue? "), flush=True)
else:
    getpass.getpass("Password: ")
time.sleep(60)
"""


def test_each_connection_and_command_is_one_line_and_no_typed_text(runs: Runs) -> None:
    job = runs.tmp_path / "two_prompts.py"
    job.write_text(TWO_PROMPTS)
    run_dir = runs.start(str(job), 2)
    waiting(run_dir, (0, 1))
    assert cli("input", run_dir, "0", "yes").returncode == 0
    assert _input(run_dir, "1", line=b"hunter2-audit\n").returncode == 0
    assert cli("stop", run_dir, "--timeout", "1").returncode == 0
    assert cli("wait", run_dir).returncode != 0  # stopped

    log_path = os.path.join(run_dir, "supervisor.log")
    assert stat.S_IMODE(os.stat(log_path).st_mode) == 0o600
    wait_until(lambda: "stop:" in open(log_path).read(), START_S)
    text = open(log_path).read()
    assert "hunter2" not in text  # the password line: its length only
    commands = [line for line in text.splitlines() if "command from" in line]
    me = f"uid {os.getuid()}"
    assert [re.sub(r".*: (\w+: .*)", r"\1", line) for line in commands] == [
        "input: a line of 4 bytes to rank 0 -> done",
        "input: a line of 14 bytes to rank 1 -> done",
        "stop: SIGTERM then SIGKILL to every rank -> done",
    ], text
    assert all("pid " in line and me in line for line in commands)
    connections = [line for line in text.splitlines() if "connected: pid" in line]
    assert len(connections) >= 3 and all(me in line for line in connections), text


def test_the_cluster_door_names_the_peer_address(door: tuple[ClusterDoor, str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    made, address = door
    assert made.secret is not None
    caplog.set_level(logging.INFO, logger="rankvisor.audit")
    handle = connect_door(address, made.secret)
    try:
        handle.execute(h.TerminateRanks(None))
    finally:
        handle.detach()
    lines = [r.getMessage() for r in caplog.records if r.name == "rankvisor.audit"]
    assert len(lines) == 2, lines
    assert re.fullmatch(r"connected: door 127\.0\.0\.1:\d+( as '.*')?", lines[0]), lines
    assert re.fullmatch(r"command from door 127\.0\.0\.1:\d+: stop: .* -> (done|refused)",
                        lines[1]), lines


def test_what_a_command_is_called_in_the_log() -> None:
    table = [
        (h.SendInput((1,), "hunter2"), "input: a line of 8 bytes to rank 1"),
        (h.SendInput(None, ""), "input: a line of 1 bytes to every rank"),
        (h.CloseInput((0, 2)), "input: EOF to ranks 0,2"),
        (h.SignalRanks((3,), 10), "signal: SIGUSR1 to rank 3"),
        (h.TerminateRanks(None), "stop: SIGTERM then SIGKILL to every rank"),
        (h.KillRanks((1,)), "stop: SIGKILL to rank 1"),
        (h.RestartRank(0), "restart: rank 0"),
        (h.RestartAll(), "restart: every rank"),
    ]
    assert [described(c) for c, _ in table] == [words for _, words in table]
