"""An unsafe state directory refuses ``run`` in one line, exit 2 (issue 23, case 13).

A state dir open to others (0777), of another owner, or with ``s`` or ``runs`` a symbolic
link gave a 25-line StateDirUnsafe traceback under ``--headless``, and with ``-D`` one line
prefixed "engine.control.registry.StateDirUnsafe:" and exit 1. Now the command line looks
before anything starts, as for every other edge input: one line saying how to fix it,
exit status 2, no rank started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def make_unsafe(root: Path, how: str) -> None:
    root.mkdir(mode=0o700)
    if how == "open":
        os.chmod(root, 0o777)
    elif how == "foreign":
        os.chown(root, 65534, 65534)
    else:
        elsewhere = root.parent / "elsewhere"
        elsewhere.mkdir(mode=0o700, exist_ok=True)
        os.symlink(elsewhere, root / how)


@pytest.mark.parametrize("mode", ["--headless", "-D"])
@pytest.mark.parametrize("how", ["open", "foreign", "s", "runs"])
def test_run_is_refused_in_one_line(tmp_path: Path, mode: str, how: str) -> None:
    if how == "foreign" and os.getuid() != 0:
        pytest.skip("needs root to give the directory away")
    root = tmp_path / "state"
    make_unsafe(root, how)
    marker = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", mode, "--nproc-per-node", "1",
         "--log-dir", str(tmp_path / "logs"), "--no-python", "touch", str(marker)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "RANKVISOR_STATE_DIR": str(root)},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rankvisor: error: "), done.stderr
    assert "StateDirUnsafe" not in done.stderr and str(root) in lines[0]
    assert not marker.exists()
