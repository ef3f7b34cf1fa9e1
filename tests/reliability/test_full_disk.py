"""A rank whose log file system is full fails with "exit code 1" and nothing else to say: it
cannot write its traceback or its error.json there. The report must say the disk is full.

ENOSPC for real: a 256 KiB tmpfs mounted for the test (root only; skipped, with the reason,
where mounting is not permitted), unmounted at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.errors.full_disk import full_disk_note

from tests.conftest import BIN

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
        capture_output=True, text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip() or res.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(directory: Path) -> None:
    """Write until the file system says ENOSPC."""
    with open(directory / "filler", "wb") as f:
        with pytest.raises(OSError) as e:
            while True:
                f.write(b"x" * 65536)
                f.flush()
    assert e.value.errno == 28  # ENOSPC


def test_a_rank_that_fills_its_log_file_system_is_reported_as_such(small_fs: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
         "--term-timeout", "5", "--log-dir", str(small_fs / "logs"),
         str(BIN / "sv_rank.py"), "--print", "100000", "--exit", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert res.returncode == 1, res.stderr
    head = [x for x in res.stderr.splitlines() if x.startswith("rankvisor: root cause: rank")]
    assert len(head) == 1, res.stderr
    assert "(exit code 1): The file system of the rank's log directory " + str(small_fs) in head[0]
    assert "is full (no space left on device)" in head[0]
    assert "traceback : The file system of the rank's log directory" in res.stderr


def test_process_failure_says_the_log_file_system_is_full(small_fs: Path, tmp_path: Path) -> None:
    rank_dir = small_fs / "attempt_0" / "0"
    rank_dir.mkdir(parents=True)
    ok_dir = tmp_path / "ok"
    ok_dir.mkdir()
    assert full_disk_note(str(rank_dir)) is None
    _fill(small_fs)
    note = full_disk_note(str(rank_dir))
    assert note is not None and str(rank_dir) in note and "no space left" in note

    failure = ProcessFailure(0, 1234, 1, str(rank_dir / "error.json"))
    assert failure.message == note and failure.text == note
    # Elsewhere the message is torch's own; a signal is no disk matter.
    assert "To enable traceback" in ProcessFailure(0, 1234, 1, str(ok_dir / "error.json")).message
    killed = ProcessFailure(0, 1234, -9, str(rank_dir / "error.json"))
    assert killed.message.startswith("Signal 9 (SIGKILL)")
