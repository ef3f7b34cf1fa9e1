"""A rank that raises keeps its own exit status under rankvisor's bootstrap: the worker
server the bootstrap starts is stopped before the interpreter finalizes (a server left to
finalization ends the rank with SIGABRT), and the root cause quotes the rank's error, not
torch's "Server exited" line that follows it on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN

ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.processes, pytest.mark.torch]


def test_a_rank_that_raised_exits_1_and_is_quoted(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "1",
         "--log-dir", str(tmp_path), str(BIN / "raise_after_init.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert res.returncode == 1, res.stderr[-3000:]
    assert ("rankvisor: root cause: rank 0 failed first (exit code 1): "
            "[rank0]: RuntimeError: raised on purpose after init") in res.stderr, res.stderr
    assert "SIGABRT" not in res.stderr
