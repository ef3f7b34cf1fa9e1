"""Every command the documentation marks runnable runs as written: each ```sh block after a
``<!-- runnable -->`` line, in page order, in a fresh directory of its own per page (so a
block may use what an earlier block of its page made), with a private state directory (the
runs it starts are not yours). A block that fails shows itself and its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .docs_pages import ROOT, pages, runnable_blocks

pytestmark = pytest.mark.processes

BLOCK_TIMEOUT_S = 60
"""A bound, not a figure: the blocks are --help, --version, two-rank runs of `sh`."""

PAGES = [p for p in pages() if runnable_blocks(p)]


def test_the_documentation_has_runnable_blocks() -> None:
    assert {p.name for p in PAGES} >= {"quick-start.md", "engine.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_runnable_blocks_run_as_written(page: Path, tmp_path: Path) -> None:
    env = dict(os.environ, RANKVISOR_STATE_DIR=str(tmp_path / "state"))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    work = tmp_path / "work"
    work.mkdir()
    for block in runnable_blocks(page):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        try:
            res = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.source], cwd=work,
                                 env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True, timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{where}: the block ran past {BLOCK_TIMEOUT_S} s\n{block.source}"
                        f"--- its output ---\n{e.stdout or ''}{e.stderr or ''}")
        assert res.returncode == 0, (
            f"{where}: the block exited {res.returncode}\n"
            f"{block.source}--- its output ---\n{res.stdout}{res.stderr}")
