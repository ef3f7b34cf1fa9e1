"""Shared by the reliability tests that run the command line on runs made on disk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -m rankvisor.tui ARGV`` as a process of its own, under a timeout (a hang
    fails the test), stdin closed."""
    return subprocess.run([sys.executable, "-m", "rankvisor.tui", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture(autouse=True)
def private_state_dir(state_dir: Path) -> Path:  # noqa: F811 - the fixture of that name
    """Each test registers its runs in a state dir of its own."""
    return state_dir
