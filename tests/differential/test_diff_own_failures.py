"""A rank that failed on its own is a failure, whenever it exits: torchrun's report against
rankvisor's, on 3 ranks.

* ``input()`` on every rank with stdin at its end: each raises EOFError and exits 1. torchrun
  (looking every 0.1 s) lists all three. rankvisor notices the first exit within a
  millisecond and its teardown's SIGTERM may cut another rank's shutdown short after that
  rank printed its EOFError: that rank is still a failure, never "stopped by rankvisor";
  only a rank our signal ended before it failed (no traceback of its own) is stopped.
* a gloo job whose rank 1 never enters all_reduce #5: ranks 0 and 2 time out in it as the
  teardown starts; a rank that printed its own timeout is a failure, as torchrun lists it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, GLOO_JOBS, PYTHON

# its ranks race the teardown: never beside another job
pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]

_LISTED = re.compile(r"^  rank\s+: (\d+) \(local_rank", re.M)
_STOPPED = re.compile(r"^rankvisor: stopped by rankvisor, not failures: (.*)$", re.M)


def _listed(out: str) -> set[int]:
    """The ranks torch's report block lists (its failures and its root cause)."""
    block = out[out.rfind("Failures:"):]
    return {int(r) for r in _LISTED.findall(block)}


def _run(tool: list[str], log_dir: Path, *job: str) -> str:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [PYTHON, "-m", *tool, "--nproc-per-node", "3", "--log-dir", str(log_dir), *job],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, env=env,
    )
    assert done.returncode != 0
    return done.stdout + done.stderr


def _own_tracebacks(log_dir: Path) -> set[int]:
    """Ranks whose stderr ends with a traceback of their own."""
    out = set()
    for path in log_dir.glob("*/attempt_0/*/stderr.log"):
        text = path.read_text(errors="replace")
        if "Traceback (most recent call last)" in text:
            out.add(int(path.parent.name))
    return out


@pytest.mark.parametrize("job", [
    ["input_all.py"],
    ["fr_gloo_job.py", "--skip", "1", "--timeout", "3"],
], ids=["input-everywhere", "gloo-timeout"])
def test_a_rank_s_own_failure_is_listed_as_torchrun_lists_it(
    tmp_path: Path, job: list[str]
) -> None:
    args = [str(BIN / job[0]), *job[1:]]
    theirs = _listed(_run(["torch.distributed.run"], tmp_path / "torch", *args))
    ours_out = _run(["rankvisor.tui", "run", "--headless", "--term-timeout", "2"],
                    tmp_path / "ours", *args)
    listed = _listed(ours_out)
    stopped = _STOPPED.search(ours_out)
    named = {int(r) for r in re.findall(r"rank (\d+)", stopped.group(1))} if stopped else set()
    # torch's block lists every rank that ended badly (torchrun's lists the ranks its
    # teardown ended too); our line above it names the ones our signal ended.
    ours = listed - named
    own = _own_tracebacks(tmp_path / "ours")
    # Every rank that printed its own failure is a failure on our side; a rank listed as
    # stopped never printed one.
    assert own and own <= ours, (own, ours, ours_out[-3000:])
    assert not named & own, ours_out[-3000:]
    # What we call a failure, torchrun lists too (it may list more: it looks later).
    assert ours <= theirs, (ours, theirs)
    if job[0] == "fr_gloo_job.py":
        assert 1 in named and 1 not in ours  # it never failed: it slept, our SIGTERM ended it
