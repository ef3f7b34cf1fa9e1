"""A rank log truncated in place while the rank writes on (logrotate's copytruncate).

The writer's file offset stays where it was: a rank's stdout (opened without O_APPEND) writes
its next line there, after a hole of NUL bytes; an O_APPEND writer starts again at 0. Either
way the pump must deliver no NUL, one truncation notice, and every line written after the
truncation, once, in order. Real writer processes, real files, ``os.truncate`` as
copytruncate does it; the pump is driven by ``flush`` to pin down each ordering of the
truncation, the writer's next write and the pump's next read, then live (inotify and poll).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.output.pump import TRUNCATED_NOTICE, OutputPump
from rankvisor.engine.tail_log import TailLog

from tests.conftest import BIN, wait_until

pytestmark = pytest.mark.processes

NUL_GLYPH = "\u2400"  # what the sanitiser shows a NUL byte as


class Writer:
    """A paced_writer.py process: ``write(n)`` returns once n more lines are on disk."""

    def __init__(self, path: Path, mode: str, payload: int = 16) -> None:
        self.payload = payload
        self.log: Any = None
        args = ["--payload", str(payload)]
        if mode == "rank":
            self.log = open(path, "wb")  # noqa: SIM115 - as the spawner opens a rank's log
            out: Any = self.log
        else:
            args += ["--append", str(path)]
            out = subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, str(BIN / "paced_writer.py"), *args],
            stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE, text=True,
        )
        self.count = 0

    def write(self, n: int) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        assert self.proc.stderr.readline() == "ok\n"
        first, self.count = self.count, self.count + n
        return [self.line(i) for i in range(first, self.count)]

    def line(self, i: int) -> str:
        return f"{i}:{'x' * self.payload}"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.log is not None:
            self.log.close()


def check(lines: list[str], after: list[str], truncations: int = 1) -> list[str]:
    """No NUL, one notice per truncation, ``after`` delivered at the end; the lines before
    are numbered lines, each once, in order. Returns the lines before the last notice."""
    assert not [x for x in lines if "\0" in x or NUL_GLYPH in x]
    assert lines.count(TRUNCATED_NOTICE) == truncations
    k = len(lines) - 1 - lines[::-1].index(TRUNCATED_NOTICE)
    assert lines[k + 1 :] == after
    numbers = [int(x.split(":", 1)[0]) for x in lines[:k] if x != TRUNCATED_NOTICE]
    assert numbers == sorted(set(numbers))
    return lines[:k]


def _collect(lines: list[str]) -> Any:
    def sink(batch: list[Any]) -> None:
        for item in batch:
            lines.extend(item.lines)

    return sink


# (lines read before, lines written but unread at the truncation, lines after, payload)
SCENARIOS = {
    "nothing-read": (0, 30, 20, 16),
    "fewer-after": (50, 0, 20, 16),
    "more-after": (50, 0, 200, 16),
    "unread-lost": (50, 30, 20, 16),
    "big-hole": (20_000, 3_000, 100, 64),  # 1.5 MB: a hole of many pages and reads
}


@pytest.mark.parametrize("text", [False, True], ids=["events", "text"])
@pytest.mark.parametrize("seen_empty", [False, True], ids=["written-first", "seen-empty"])
@pytest.mark.parametrize("mode", ["rank", "append"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_truncation_under_a_writer(
    tmp_path: Path, scenario: str, mode: str, seen_empty: bool, text: bool
) -> None:
    read_before, unread, after_n, payload = SCENARIOS[scenario]
    path = tmp_path / "stdout.log"
    lines: list[str] = []
    pump = OutputPump(_collect(lines), text_batches=text)
    pump.add(0, "stdout", str(path))
    w = Writer(path, mode, payload)
    try:
        before = w.write(read_before)
        pump.flush()
        assert lines == before
        w.write(unread)  # never read: the truncation takes them away
        os.truncate(path, 0)
        if seen_empty:
            pump.flush()  # the pump sees the file empty before the writer goes on
        after = w.write(after_n)
        pump.flush()
        pump.stop()
    finally:
        w.close()
    if not before and mode == "append":
        # Cut before the pump read anything, then rewritten from the start: from the pump's
        # side, a file that holds these lines. Nothing it could know was lost.
        assert lines == after
        return
    assert check(lines, after) == before


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "poll"])
def test_truncations_of_a_live_log(tmp_path: Path, inotify: bool) -> None:
    path = tmp_path / "stdout.log"
    dst = io.StringIO()
    tailer = TailLog("w", {0: str(path)}, dst, use_inotify=inotify).start()
    w = Writer(path, "rank")
    try:
        for _round in range(3):
            w.write(2000)
            # The pump may be anywhere: reading, behind, caught up. The writer is paused.
            os.truncate(path, 0)
            after = w.write(2000)
            last = f"[w0]:{after[-1]}\n"
            wait_until(lambda end=last: dst.getvalue().endswith(end), timeout=30)
    finally:
        w.close()
        tailer.stop()
    shown = dst.getvalue().splitlines()
    assert all(x.startswith("[w0]:") for x in shown)
    check([x[len("[w0]:") :] for x in shown], after, truncations=3)
