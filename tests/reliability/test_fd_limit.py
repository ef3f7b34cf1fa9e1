"""File descriptors (issue 36.8): the soft limit raised at the supervisor's start, and a run
that cannot fit under the hard limit refused in one line.

The supervisor holds about six descriptors a rank (17 + 6 a rank, measured with ``ls
/proc/<pid>/fd`` for 1, 16 and 64 ranks). With the soft limit left as it was, 64 ranks at
256 were followed only in part and every socket command was dropped. Real runs of ``rankvisor
run --headless`` with real limits set for the process (``setrlimit`` before exec).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.process.fd_limit import FDS_BASE, FDS_PER_RANK, fds_needed

from tests.control.runs import state_dir
from tests.reliability.cli_runs import ROOT, private_state_dir

pytestmark = pytest.mark.processes

__all__ = ["private_state_dir", "state_dir"]  # fixtures, used by name


def _run(limit: tuple[int, int], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", *argv], cwd=ROOT, capture_output=True,
        text=True, timeout=120, stdin=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limit))


def test_ranks_that_cannot_fit_are_refused_in_one_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = _run((256, 256), "--headless", "--nproc-per-node", "64", "--log-dir", str(logs),
                "--no-python", "true")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == (
        f"rankvisor: error: --nproc-per-node 64: the supervisor needs about {fds_needed(64)} "
        f"open files ({FDS_PER_RANK} a rank), and the hard limit allows 256 (ranks that fit: "
        f"{(256 - FDS_BASE) // FDS_PER_RANK}); raise it (ulimit -Hn, limits.conf) or run "
        "fewer ranks")
    assert not logs.exists()  # nothing started


def test_a_low_soft_limit_is_raised_and_every_rank_is_followed(tmp_path: Path) -> None:
    """Soft 64, hard 1024: 64 ranks hold 401 descriptors; each is followed to its end
    (before: exit 1, "Too many open files" for the arrival index, no line of any rank)."""
    logs = tmp_path / "logs"
    nprocs = 64
    met = tmp_path / "met"
    met.mkdir()
    # Every rank lives until all have started: their descriptors are held at once.
    script = (f'touch {met}/$RANK; while [ "$(ls {met} | wc -l)" -lt {nprocs} ]; do '
              'sleep 0.05; done; echo "rank $RANK done"; ulimit -n')
    done = _run((64, 1024), "--headless", "--nproc-per-node", str(nprocs), "--log-dir",
                str(logs), "--no-python", "sh", "-c", script)
    assert done.returncode == 0, done.stderr[-2000:]
    for rank in range(nprocs):
        assert f"rank {rank} done" in done.stdout, (rank, done.stdout[-2000:])
    assert "1024" in done.stdout  # the ranks inherit the raised limit
    outs = sorted(logs.rglob("stdout.log"))
    assert len(outs) == nprocs
    assert all(p.read_text().startswith("rank ") for p in outs)


def test_the_soft_limit_is_raised_never_lowered() -> None:
    probe = ("import resource\nfrom rankvisor.engine.process.fd_limit import raise_soft_limit\n"
             "print(raise_soft_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    for limit, want in (((64, 1024), "1024 1024"), ((1024, 1024), "1024 1024")):
        got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60, cwd=ROOT, env=os.environ,
                             preexec_fn=lambda limit=limit: resource.setrlimit(
                                 resource.RLIMIT_NOFILE, limit))
        assert got.stdout.split() == want.split(), (limit, got.stderr)
