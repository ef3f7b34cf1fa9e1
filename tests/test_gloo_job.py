"""A real 4-rank gloo job through ``rankvisor run --headless``: success, and a root cause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, GLOO_JOBS

ROOT = Path(__file__).parents[1]
JOB = str(BIN / "sv_gloo_allreduce.py")

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "4",
           "--log-dir", str(tmp_path), "--term-timeout", "10", JOB, *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_four_rank_all_reduce_succeeds(tmp_path: Path) -> None:
    res = _run(tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    for r in range(4):
        assert f"[default{r}]:rank {r}/4: all_reduce ok = 10" in res.stdout


def test_rank_2_raising_is_named_the_root_cause(tmp_path: Path) -> None:
    res = _run(tmp_path, "--fail-rank", "2")
    assert res.returncode != 0
    assert "rankvisor: root cause: rank 2 failed first (exit code 1)" in res.stderr
    assert "RuntimeError: rank 2 raised on purpose" in res.stderr
    root = res.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 2 (local_rank: 2)" in root
    # torch's own @record wrote the error.json we read.
    (run_dir,) = tmp_path.iterdir()
    data = json.loads((run_dir / "attempt_0" / "2" / "error.json").read_text())
    assert data["message"]["message"] == "RuntimeError: rank 2 raised on purpose"
