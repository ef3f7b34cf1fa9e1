"""torch's uninterruptible-sleep rule (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT): the
variable read as torch reads it, the dwell counted as torch counts it (a table), and one
real run through torchrun and rankvisor with a rank held in D-state (a vfork parent)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.supervisor.dstate_watch import (
    TIMEOUT_ENV,
    UninterruptibleWatch,
    proc_state,
    timeout_from_env,
)

pytestmark = pytest.mark.processes


@pytest.mark.parametrize(("raw", "expected"), [
    (None, 0.0), ("", 0.0), ("abc", 0.0), ("0", 0.0), ("-3", 0.0), ("2.5", 2.5), ("30", 30.0),
])
def test_the_timeout_is_read_as_torch_reads_it(raw: str | None, expected: float) -> None:
    from torch.distributed.elastic.agent.server import local_elastic_agent as torch_agent

    env = {} if raw is None else {TIMEOUT_ENV: raw}
    assert timeout_from_env(env) == expected
    saved = os.environ.pop(TIMEOUT_ENV, None)
    try:
        if raw is not None:
            os.environ[TIMEOUT_ENV] = raw
        assert torch_agent._resolve_uninterruptible_state_timeout(None) == expected
    finally:
        os.environ.pop(TIMEOUT_ENV, None)
        if saved is not None:
            os.environ[TIMEOUT_ENV] = saved


# Each look: (time, {pid: state}); the ranks past the timeout (2 s) after it.
DWELL = [
    (0.0, {10: "S", 11: "D"}, []),
    (1.0, {10: "D", 11: "D"}, []),
    (2.0, {10: "D", 11: "D"}, [(1, 11, 2.0)]),
    (2.5, {10: "R", 11: "D"}, [(1, 11, 2.5)]),   # leaving D starts the count again
    (3.5, {10: "D", 11: "D+"}, [(1, 11, 3.5)]),  # D+ (foreground) counts, as in torch
    (5.5, {10: "D", 11: None}, [(0, 10, 2.0)]),  # an unreadable state is no dwell
]


def test_the_dwell_is_continuous_time_in_d_state() -> None:
    now = [0.0]
    states: dict[int, str | None] = {}
    watch = UninterruptibleWatch(2.0, lambda: {0: 10, 1: 11}, lambda stuck: None,
                                 read_state=states.get, clock=lambda: now[0])
    for at, seen, expected in DWELL:
        now[0] = at
        states.clear()
        states.update(seen)
        assert watch.check() == expected, at


def test_proc_state_reads_this_process() -> None:
    assert proc_state(os.getpid()) in ("R", "S")
    assert proc_state(2**22 + 12345) is None


@pytest.fixture(scope="module")
def dsleep(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A program that holds itself in D-state: a vfork parent waits, uninterruptibly, for
    its child (which sleeps) to exit."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the D-state program")
    src = tmp_path_factory.mktemp("dsleep") / "dsleep.c"
    src.write_text("#include <unistd.h>\n#include <stdlib.h>\nint main(int c, char **v) {\n"
                   "  if (vfork() == 0) { sleep(atoi(v[1])); _exit(0); }\n  return 0;\n}\n")
    out = str(src.with_suffix(""))
    subprocess.run([cc, "-O1", "-o", out, str(src)], check=True, timeout=60)
    return out


@pytest.mark.torch
def test_a_rank_in_d_state_stops_the_group_without_restart_as_in_torchrun(
        dsleep: str, tmp_path: Path) -> None:
    env = {**os.environ, TIMEOUT_ENV: "1"}
    flags = ["--max-restarts", "2", "--no-python", "--nproc-per-node", "2"]
    theirs = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *flags, dsleep, "60"], env=env,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    ours = subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--log-dir",
         str(tmp_path), "--term-timeout", "5", *flags, dsleep, "60"], env=env,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    # torch: both ranks named once, the group stopped, no restart (one round of 2 ranks);
    # it exits 0 (its UNHEALTHY result is not a failure), where the run did not succeed:
    # ours exits 1 (engine/README.md).
    assert theirs.stderr.count("marking worker group UNHEALTHY and disabling restarts") == 2
    assert theirs.stderr.count("entered uninterruptible sleep") == 2
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    assert ours.returncode == 1, ours.stderr[-2000:]
    assert ours.stderr.count("the group is unhealthy; stopping every rank, no restart") == 1
    assert f"past {TIMEOUT_ENV}=1" in ours.stderr
    (run_dir,) = tmp_path.iterdir()
    assert [p.name for p in run_dir.glob("attempt_*")] == ["attempt_0"]
