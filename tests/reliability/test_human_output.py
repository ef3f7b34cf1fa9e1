"""Escapes in every human output (issue 23, cases 5 and 6).

Each place printed hostile text raw: the strings of a tampered status.json (run id, host,
a root cause's message from an error.json) in ``rankvisor status``, a tampered registry
entry's run id in ``ls``, a supervisor's reply and a refusal quoting a run's files, a rank's
own function and file names in a stack dump (``rankvisor stack`` and the TUI's ``S`` read
the same frames), a notice (replayed from a tampered events.ndjson, or from a remote node)
in the notice bar. Every one of them now goes through the sanitiser; JSON output needs no
help (``json.dumps`` escapes control characters).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rankvisor.engine.control import registry
from rankvisor.engine.control.status import read_status, write_status
from rankvisor.engine.forensics.stacks import RankStack, StackDump, _threads, merge
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app

from tests.control.runs import Supervisors, make_run, state_dir, supervisors
from tests.reliability.cli_runs import cli, private_state_dir
from tests.scenarios import running_script, scripted_info

pytestmark = pytest.mark.processes

__all__ = ["private_state_dir", "state_dir", "supervisors"]  # fixtures, used by name

EVIL = "\x1b]52;c;cHduZWQ=\x07\x1b]0;PWNED\x07\x1b[2J\x1bcFAKE\x9b1;1H"


def no_escape(text: str) -> bool:
    return "\x1b" not in text and "\x07" not in text and "\x9b" not in text


def test_status_and_ls_of_a_tampered_run_print_no_escape(supervisors: Supervisors,
                                                         tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    entry = make_run(tmp_path, "job", pid=pid, start=start)
    status = read_status(entry.run_dir)
    assert status is not None
    status.update(run_id="job" + EVIL, host="h" + EVIL, node_rank=0, nnodes=2,
                  cluster={"round": 0, "nodes_seen": 2, "store": "ok"},
                  root_cause={"rank": 1, "exitcode": 1, "message": "boom" + EVIL,
                              "node_rank": 1, "host": "b" + EVIL})
    for r in status["ranks"]:
        r.update(host="h" + EVIL, state="running" + EVIL)
    write_status(entry.run_dir, status)
    done = cli("status", entry.run_dir)
    assert "boomFAKE" in done.stdout and "hFAKE" in done.stdout, done.stdout + done.stderr
    assert no_escape(done.stdout + done.stderr)
    # The registry entry's run id, tampered.
    path = os.path.join(registry.runs_dir(), f"{entry.key}.json")
    data = json.loads(Path(path).read_text())
    data["run_id"] = "job" + EVIL
    Path(path).write_text(json.dumps(data))
    done = cli("ls")
    assert done.returncode == 0 and "FAKE" in done.stdout and no_escape(done.stdout)
    done = cli("terminate", "job" + EVIL, "0")  # a refusal that quotes the name back
    assert no_escape(done.stderr), done.stderr


def test_a_ranks_frame_and_file_names_are_shown_without_escapes() -> None:
    # py-spy's JSON for a rank whose code names its function and file with escapes.
    spy = [{"os_thread_id": 7, "thread_name": "Main" + EVIL, "active": True, "frames": [
        {"name": "step" + EVIL, "filename": "/x/" + EVIL + "train.py", "line": 3},
        {"name": "<module>", "filename": "/x/" + EVIL + "train.py", "line": 9},
    ]}]
    ranks = tuple(RankStack(r, 100 + r, _threads(spy, 100 + r), dumped_pid=100 + r)
                  for r in range(2))
    dump = StackDump(time=1.0, ranks=ranks, groups=merge(ranks))
    texts = [dump.merged_text(), dump.full_text()]
    back = StackDump.from_dict(json.loads(json.dumps(
        {**dump.to_dict(), "ranks": [{"rank": 0, "threads": [{"name": EVIL, "frames": [
            {"name": EVIL, "filename": EVIL, "line": 1}]}]}]})))
    texts.append(back.full_text())
    assert all("FAKE" in t for t in texts)
    assert all(no_escape(t) for t in texts), texts


async def test_the_notice_bar_shows_no_escape() -> None:
    app = make_app(ScriptedSupervisor(scripted_info(2), running_script(2)))
    async with app.run_test(size=(100, 30)) as pilot:
        before = len(app.notices)
        app.notify("node 1 (" + EVIL + "): rank 3 failed\nsecond line")
        await pilot.pause()
        # A notice of several lines is one notice a line, each made safe.
        messages = [n.message for n in list(app.notices)[before:]]
    assert len(messages) == 2 and "rank 3 failed" in messages[0]
    assert messages[1] == "second line"
    assert all(no_escape(m) and "\n" not in m for m in messages)
