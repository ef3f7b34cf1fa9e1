"""The torch-style block at the end of a failed headless run is torchrun's for the same run.

Scripts grep it: ``rankvisor run --headless`` ends with the block torchrun prints (its
failures, the ranks its teardown ended listed after them with their signal, the root cause),
and rankvisor's own lines (the suspect, the root cause in words, the ranks it stopped, the
last stderr lines) come above it. Compared line by line, with what differs between two runs
of one job (the time, pids, the log directory) masked.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, PYTHON

pytestmark = pytest.mark.processes

_MASKS = (
    (re.compile(r"^  time      : .*$", re.M), "  time      : T"),
    (re.compile(r"\(pid: \d+\)"), "(pid: P)"),
    (re.compile(r"received by PID \d+"), "received by PID P"),
    (re.compile(r'"timestamp": "\d+"'), '"timestamp": "S"'),
)


def _block(tool: list[str], log_dir: Path, ranks: int, *job: str) -> tuple[str, str]:
    done = subprocess.run(
        [PYTHON, "-m", *tool, "--nproc-per-node", str(ranks), "--log-dir", str(log_dir), *job],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 1, done.stderr[-3000:]
    err = done.stderr
    start = err.rfind("=" * 20, 0, err.rfind("FAILED\n"))
    assert start >= 0, err[-3000:]
    block = err[start:].replace(str(log_dir), "LOGDIR")
    for pattern, mask in _MASKS:
        block = pattern.sub(mask, block)
    # The run directory's name under the log dir is a fresh id per run.
    block = re.sub(r"LOGDIR/[^/\s]+/", "LOGDIR/RUN/", block)
    return block, err[:start]


@pytest.mark.parametrize("ranks,job", [
    (2, ["sv_rank.py", "--exit", "3", "--only-rank", "1"]),
    (3, ["sv_rank.py", "--raise", "rank one broke", "--only-rank", "1"]),
], ids=["exit-3-one-stopped", "recorded-raise-two-stopped"])
def test_the_block_is_torchrun_s_and_rankvisor_s_lines_come_above_it(
    tmp_path: Path, ranks: int, job: list[str]
) -> None:
    args = [str(BIN / job[0]), *job[1:]]
    theirs, _ = _block(["torch.distributed.run"], tmp_path / "torch", ranks, *args)
    ours, above = _block(["rankvisor.tui", "run", "--headless", "--term-timeout", "5"],
                         tmp_path / "ours", ranks, *args)
    assert ours == theirs
    # The ranks the teardown ended are listed in it with their signal, never as the root cause.
    assert ours.count("exitcode  : -15 (pid: P)  (SIGTERM)") == ranks - 1
    root = ours.split("Root Cause (first observed failure):")[1]
    assert "rank      : 1 (local_rank: 1)" in root
    # rankvisor's additions are all above the block, none inside it.
    assert "rankvisor:" not in ours
    assert "rankvisor: root cause: rank 1 failed first" in above
    assert "rankvisor: stopped by rankvisor, not failures: rank 0 (signal SIGTERM)" in above
