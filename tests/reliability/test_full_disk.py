"""A rank whose log file system is full fails with "exit code 1" and nothing else to say: it
cannot write its traceback or its error.json there. The report must say the disk is full.
A run that goes on while the disk is full keeps a valid status.json, says so once, and its
end is written all the same: the final status, a record of whole lines, `wait` with the
run's code (was: status.json left `running`, a cut last line, `wait` exit 4, stale).

ENOSPC for real: a 256 KiB tmpfs mounted for the test (root only; skipped, with the reason,
where mounting is not permitted), unmounted at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.errors.full_disk import full_disk_note

from tests.conftest import BIN, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def _tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
        capture_output=True, text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip() or res.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with _tmpfs(tmp_path / "small", "256k") as mnt:
        yield mnt


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


@pytest.fixture
def fs_2m(tmp_path: Path) -> Iterator[Path]:
    with _tmpfs(tmp_path / "two", "2m") as mnt:
        yield mnt


def test_a_run_on_a_full_disk_keeps_its_status_and_records_its_end(
    fs_2m: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "1",
         "--log-dir", str(fs_2m / "logs"), "--run-id", "full",
         str(BIN / "disk_filler.py"), str(go), "1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: os.statvfs(fs_2m).f_bavail == 0, timeout=30)
        run_dir = next((fs_2m / "logs").glob("full_*"))
        # A reader holds status.json open (as `tail -f` would). The refresh writes in place
        # into pages the file already has, which a full disk still allows; once the held
        # inode is the one to write into next, it must take a new one, and cannot. (With no
        # reader, a loaded machine can give both of the refresh's inodes their pages before
        # the disk fills: every refresh then fits and nothing is said, rightly.)
        with open(run_dir / "status.json") as held:
            # The run goes on, on a full disk, until the notice is said (main never said it).
            wait_until(lambda: "cannot write" in "".join(said), timeout=30)
            status = json.loads(held.read())  # whole while full
        assert status["state"] == "running" and os.statvfs(fs_2m).f_bavail == 0
        go.touch()
        assert proc.wait(60) == 1, "".join(said)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(said)
    # The notice, once (the pump may also say once per rank that it cannot make the rank's
    # arrival index, when the rank filled the disk before its files were followed).
    assert err.count("the run goes on; status.json keeps its last state") == 1, err
    assert f"in {run_dir} (No space left on device): the run goes on" in err
    final = json.loads((run_dir / "status.json").read_text())
    assert (final["state"], final["finished"], final["exitcode"]) == ("finished", True, 1)
    raw = (run_dir / "events.ndjson").read_bytes()
    assert raw.endswith(b"\n")
    lines = [json.loads(x) for x in raw.splitlines()]  # every line whole
    assert sum("cannot write" in json.dumps(x) for x in lines) == 1
    assert lines[-1]["t"] == "run", lines[-3:]
    assert any(x.get("type") == "RunFinished" for x in lines)
    assert (run_dir / "attempt_0" / "0" / "stdout.log").stat().st_size > 1_000_000  # kept
    assert not (run_dir / ".rankvisor-reserve").exists()
    res = subprocess.run([sys.executable, "-m", "rankvisor.tui", "wait", str(run_dir)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
