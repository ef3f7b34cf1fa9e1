"""``rankvisor stack`` against a real supervisor process (``rankvisor run -D``), and a
read-only viewer's dump: it may take a nonblocking one, and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.control import registry
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.server import READ_ONLY_DUMP_REFUSAL, READ_ONLY_REFUSAL
from rankvisor.engine.forensics.stacks import StackDump, find_py_spy, list_dumps
from rankvisor.engine.handle import CommandResult, DumpStacks, TerminateRanks

from tests.conftest import BIN, wait_until

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed"),
]


def rankvisor(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "rankvisor.tui", *argv], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_stack_json_and_text_from_a_supervisor_process(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    started = rankvisor("run", "-D", "--nproc-per-node", "3", "--term-timeout", "2",
                        "--log-dir", str(tmp_path / "logs"),
                        str(BIN / "stack_waiter.py"), str(ready), "1")
    assert started.returncode == 0, started.stderr
    run_dir = str(next((tmp_path / "logs").iterdir()))
    try:
        wait_until(lambda: len(list(ready.iterdir())) == 3, timeout=60)

        res = rankvisor("stack", run_dir, "--json")
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        assert [(g["ranks"], g["odd"]) for g in data["groups"]] == [([1], True), ([0, 2], False)]
        assert data["groups"][0]["summary"] == "rank 1: stuck_in_data_loader <- main"
        assert Path(data["path"]).is_file() and Path(data["path"]).parent.name == "stacks"

        res = rankvisor("stack", run_dir, "--rank", "0,2", "--native")
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("     ranks 0, 2: ")
        assert "wait_in_collective" in res.stdout and "saved to " in res.stdout
        assert len(list_dumps(run_dir)) == 2

        res = rankvisor("stack", run_dir, "--rank", "7")
        assert res.returncode == 2 and "rank 7 is not in this run" in res.stderr

        # A read-only viewer: a nonblocking dump only (it never pauses a rank).
        entry = registry.resolve(run_dir, running_only=True)
        viewer = RemoteHandle.connect(entry.socket, read_only=True)
        try:
            result = viewer.execute(DumpStacks(nonblocking=True))
            assert result.ok, result.message
            dump = StackDump.from_dict(result.data or {})
            assert dump.nonblocking and [g.ranks for g in dump.groups] == [(1,), (0, 2)]
            assert viewer.execute(DumpStacks()) == CommandResult(False, READ_ONLY_DUMP_REFUSAL)
            assert viewer.execute(DumpStacks(native=True)) == CommandResult(
                False, READ_ONLY_DUMP_REFUSAL)
            assert viewer.execute(TerminateRanks()) == CommandResult(False, READ_ONLY_REFUSAL)
        finally:
            viewer.detach()
        assert len(list_dumps(run_dir)) == 3
    finally:
        stopped = rankvisor("stop", run_dir)
    assert stopped.returncode == 0, stopped.stderr
    res = rankvisor("stack", run_dir)
    assert res.returncode == 1 and "finished" in res.stderr, (res.returncode, res.stderr)
