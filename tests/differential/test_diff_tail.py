"""torch's TailLog and ours on the same files, side by side: torch's defects, our fixes.

Each test runs both tailers in one run over the same files and asserts what torch does
(the defect, described in engine/README.md under Tee) and what we do instead.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.tail_log import TailLog

from tests.conftest import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.torch]

ROOT = str(Path(__file__).parents[2])


def torch_tail_log() -> Any:
    from torch.distributed.elastic.multiprocessing.tail_log import TailLog as TorchTailLog

    return TorchTailLog


def both(files: dict[int, str]) -> tuple[Any, io.StringIO, TailLog, io.StringIO]:
    theirs_out, ours_out = io.StringIO(), io.StringIO()
    theirs = torch_tail_log()("w", files, theirs_out).start()
    ours = TailLog("w", files, ours_out).start()
    return theirs, theirs_out, ours, ours_out


def test_a_line_written_in_two_chunks_is_printed_whole(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text("")
    theirs, theirs_out, ours, ours_out = both({0: str(path)})
    with open(path, "a") as f:
        f.write("partial-0-")
        f.flush()
        wait_until(lambda: "partial-0-" in theirs_out.getvalue())  # torch has read half
        f.write("rest-0\n")
    theirs.stop()
    ours.stop()
    assert theirs_out.getvalue() == "[w0]:partial-0-[w0]:rest-0\n"  # two prefixed fragments
    assert ours_out.getvalue() == "[w0]:partial-0-rest-0\n"  # one line


def test_a_last_line_without_newline_is_not_glued_to_the_next(tmp_path: Path) -> None:
    files = {0: str(tmp_path / "0.log"), 1: str(tmp_path / "1.log")}
    for path in files.values():
        Path(path).write_text("")
    theirs, theirs_out, ours, ours_out = both(files)
    with open(files[0], "a") as f:
        f.write("no-newline-at-exit-0")
    wait_until(lambda: "no-newline-at-exit-0" in theirs_out.getvalue())
    with open(files[1], "a") as f:
        f.write("next-1\n")
    wait_until(lambda: "next-1" in theirs_out.getvalue())
    theirs.stop()
    ours.stop()
    assert theirs_out.getvalue() == "[w0]:no-newline-at-exit-0[w1]:next-1\n"  # glued
    assert sorted(ours_out.getvalue().splitlines(keepends=True)) == [
        "[w0]:no-newline-at-exit-0\n",
        "[w1]:next-1\n",
    ]


def test_progress_bar_redraws_collapse_to_the_last_frame(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_text("".join(f"\r{i:3d}%|{'#' * (i // 10)}" for i in range(0, 101, 10)) + "\ndone\n")
    theirs, theirs_out, ours, ours_out = both({0: str(path)})
    theirs.stop()
    ours.stop()
    assert len(theirs_out.getvalue().splitlines()) == 13  # one prefixed line per redraw
    assert ours_out.getvalue() == "[w0]:100%|##########\n[w0]:done\n"


def test_never_appearing_files_cost_torch_a_polling_thread_each(tmp_path: Path) -> None:
    files = {r: str(tmp_path / f"missing-{r}.log") for r in range(6)}
    before = set(threading.enumerate())
    theirs, _, ours, _ = both(files)
    try:
        new = [t.name for t in set(threading.enumerate()) - before]
        assert sum(name.startswith("TailLog_w_") for name in new) == 6  # torch: one per file
        assert sum(name == "TailLog_w" for name in new) == 1  # ours: one for all
    finally:
        stoppers = [threading.Thread(target=t.stop) for t in (theirs, ours)]
        for s in stoppers:
            s.start()
        for s in stoppers:
            s.join(timeout=10)
        assert not any(s.is_alive() for s in stoppers)


@pytest.mark.parametrize("impl", ["torch", "ours"])
def test_forgetting_stop_hangs_torch_at_exit_not_ours(tmp_path: Path, impl: str) -> None:
    torch_module = "torch.distributed.elastic.multiprocessing.tail_log"
    module = torch_module if impl == "torch" else "rankvisor.engine.tail_log"
    code = (
        "import sys\n"
        f"from {module} import TailLog\n"
        f"TailLog('w', {{0: {str(tmp_path / 'never.log')!r}}}, sys.stdout).start()\n"
        "print('started', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"  # main() is over from here on
        if impl == "torch":
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=3)  # the executor's exit hook waits for the tailer forever
        else:
            assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def _intact(text: str, n: int, m: int) -> int:
    pattern = re.compile(r"\[w(\d+)\]:(\d+):(\d+):x{16}$")
    seen = set()
    for line in text.splitlines():
        match = pattern.match(line)
        if match and match.group(1) == match.group(2):
            seen.add((int(match.group(1)), int(match.group(3))))
    return len(seen & {(r, i) for r in range(n) for i in range(m)})


def test_unlocked_tee_threads_lose_lines_ours_do_not(tmp_path: Path) -> None:
    n, m = 8, 20000
    files = {}
    for rank in range(n):
        path = tmp_path / f"{rank}.log"
        path.write_text("".join(f"{rank}:{i}:{'x' * 16}\n" for i in range(m)))
        files[rank] = str(path)
    torch_lost = []
    # torch's loss is a race between its threads: on a quiet machine it shows on the first
    # try; beside two busy loops the threads rarely overlap, and three tries once saw none
    # (each try is a fraction of a second; it stops at the first loss).
    for attempt in range(10):
        dst = open(tmp_path / f"torch-{attempt}.txt", "w")  # a TextIOWrapper, like stdout
        tailer = torch_tail_log()("w", files, dst).start()
        tailer.stop()
        dst.close()
        text = (tmp_path / f"torch-{attempt}.txt").read_text(errors="replace")
        torch_lost.append(n * m - _intact(text, n, m))
        if torch_lost[-1]:
            break
    dst = open(tmp_path / "ours.txt", "w")
    TailLog("w", files, dst).start().stop()
    dst.close()
    ours = (tmp_path / "ours.txt").read_text()
    assert _intact(ours, n, m) == n * m
    assert len(ours.splitlines()) == n * m  # nothing extra either
    assert max(torch_lost) > 0, torch_lost
