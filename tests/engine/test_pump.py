"""engine.output.pump.OutputPump with real writer processes and real files."""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine import clock
from rankvisor.engine.events import RankOutput
from rankvisor.engine.output.console import ConsoleSink
from rankvisor.engine.output.lines import cut_marker
from rankvisor.engine.output.pump import OutputPump, TextBatch
from rankvisor.engine.output.text_batch import LineBlock

from tests.conftest import BIN, PYTHON, wait_until

pytestmark = pytest.mark.processes

WRITER = str(BIN / "numbered_writer.py")


class Collector:
    """A sink that keeps every batch and checks the batch contract as they arrive."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[list[Any]] = []
        self.lines: dict[tuple[int, str], list[str]] = defaultdict(list)
        self.partial: dict[tuple[int, str], str] = {}
        self.next_line: dict[tuple[int, str], int] = defaultdict(int)

    def __call__(self, batch: list[Any]) -> None:
        keys = [(b.rank, b.stream) for b in batch]
        assert len(keys) == len(set(keys)), "more than one batch per (rank, stream) in a call"
        with self.lock:
            self.calls.append(batch)
            for b in batch:
                key = (b.rank, b.stream)
                if b.first_line == 0:  # a new file (restart, replaced file) counts from 0
                    self.next_line[key] = 0
                if not b.stream.startswith("filtered_"):  # those count lines of the shared file
                    assert b.first_line == self.next_line[key], "line numbers are contiguous"
                self.lines[key].extend(b.lines)
                self.next_line[key] += len(b.lines)
                self.partial[key] = b.partial

    def get(self, rank: int, stream: str = "stdout") -> list[str]:
        with self.lock:
            return list(self.lines[(rank, stream)])


def writers(tmp: Path, n: int, m: int, *extra: str) -> tuple[dict[int, str], list[Any]]:
    files = {r: str(tmp / f"{r}" / "stdout.log") for r in range(n)}
    for path in files.values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
    procs = [
        subprocess.Popen([PYTHON, WRITER, files[r], "--rank", str(r), "--lines", str(m), *extra])
        for r in range(n)
    ]
    return files, procs


def assert_numbered(lines: list[str], rank: int, m: int) -> None:
    numbers = []
    for line in lines:
        r, i, _ = line.split(":", 2)
        assert int(r) == rank, line
        numbers.append(int(i))
    assert numbers == list(range(m))


@pytest.mark.parametrize(
    ("n", "m", "extra"),
    [
        (32, 1000, ("--jitter", "0.002")),
        (8, 20000, ("--jitter", "0.001", "--payload", "64")),
        (16, 300, ("--split",)),
    ],
    ids=["32x1000-jitter", "8x20000-jitter", "16x300-half-lines"],
)
def test_concurrent_writers_every_line_once_in_order(
    tmp_path: Path, n: int, m: int, extra: tuple[str, ...]
) -> None:
    sink = Collector()
    pump = OutputPump(sink)
    files, procs = writers(tmp_path, n, m, *extra)
    for rank, path in files.items():
        pump.add(rank, "stdout", path)
    pump.start()
    assert pump.mode == "inotify"
    for p in procs:
        assert p.wait(timeout=120) == 0
    # Live delivery: everything arrives without stop() or flush().
    wait_until(lambda: all(len(sink.get(r)) == m for r in range(n)), timeout=30)
    pump.stop()
    for rank in range(n):
        assert_numbered(sink.get(rank), rank, m)


def test_batches_are_per_wakeup_not_per_line(tmp_path: Path) -> None:
    sink = Collector()
    files, procs = writers(tmp_path, 4, 5000)
    for p in procs:
        p.wait(timeout=60)
    pump = OutputPump(sink)
    for rank, path in files.items():
        pump.add(rank, "stdout", path)
    pump.flush()
    pump.stop()
    assert len(sink.calls) <= 2  # 20 000 lines on disk: one sink call for all of them
    assert all(len(sink.get(r)) == 5000 for r in range(4))


def test_a_file_that_appears_late_is_picked_up(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "attempt_0" / "3" / "stdout.log"  # not even the directories exist
    pump = OutputPump(sink, sweep_interval=30.0).start()  # events only, no safety sweep
    pump.add(3, "stdout", str(path))
    time.sleep(0.05)
    path.parent.mkdir(parents=True)
    path.write_text("hello\nworld\n")
    wait_until(lambda: sink.get(3) == ["hello", "world"], timeout=5)
    with open(path, "a") as f:
        f.write("more\n")
    wait_until(lambda: sink.get(3) == ["hello", "world", "more"], timeout=5)
    pump.stop()


def test_a_file_that_never_appears_does_not_block_stop(tmp_path: Path) -> None:
    sink = Collector()
    pump = OutputPump(sink)
    pump.add(0, "stdout", str(tmp_path / "never" / "stdout.log"))
    pump.add(1, "stdout", str(tmp_path / "there.log"))
    (tmp_path / "there.log").write_text("x\n")
    pump.start()
    stopper = threading.Thread(target=pump.stop)
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive()
    assert sink.get(1) == ["x"]
    assert sink.get(0) == []


def test_final_line_without_newline_is_partial_then_a_line_at_stop(tmp_path: Path) -> None:
    sink = Collector()
    files, procs = writers(tmp_path, 2, 50, "--no-newline-at-end")
    for p in procs:
        p.wait(timeout=30)
    pump = OutputPump(sink)
    for rank, path in files.items():
        pump.add(rank, "stdout", path)
    pump.start()
    wait_until(lambda: len(sink.get(1)) == 49 and sink.partial.get((1, "stdout")), timeout=5)
    assert sink.partial[(1, "stdout")].startswith("1:49:")
    pump.stop()
    for rank in range(2):
        assert_numbered(sink.get(rank), rank, 50)


def test_progress_bars_are_collapsed(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "progress.log"
    code = (
        "import sys, time\n"
        "f = open(sys.argv[1], 'w')\n"
        "for i in range(201):\n"
        "    f.write(f'\\r{i/2:5.1f}%|' + '#' * (i // 10)); f.flush()\n"
        "    time.sleep(0.001)\n"
        "f.write('\\nepoch done\\n'); f.close()\n"
    )
    pump = OutputPump(sink).start()
    pump.add(0, "stdout", str(path))
    subprocess.run([PYTHON, "-c", code, str(path)], check=True, timeout=30)
    wait_until(lambda: len(sink.get(0)) == 2, timeout=5)
    pump.stop()
    assert sink.get(0) == ["100.0%|" + "#" * 20, "epoch done"]
    partials = [b.partial for call in sink.calls for b in call if b.partial]
    assert all("\r" not in p for p in partials)


def test_invalid_utf8_and_escapes_are_made_safe(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "hostile.log"
    path.write_bytes(b"bad \xff\xfe\n\x1b]52;c;c2VjcmV0\x07\x1b[32mgreen\x1b[0m\x1b[2J\n")
    pump = OutputPump(sink)
    pump.add(0, "stderr", str(path))
    pump.flush()
    assert sink.get(0, "stderr") == ["bad \ufffd\ufffd", "\x1b[32mgreen\x1b[0m"]
    pump.stop()
    assert path.read_bytes().startswith(b"bad \xff\xfe\n\x1b]52")  # the file is untouched


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_polling_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    sink = Collector()
    if how == "environment":
        monkeypatch.setenv("RANKVISOR_TAIL_POLL", "1")
        pump = OutputPump(sink, poll_interval=0.02)
    else:
        pump = OutputPump(sink, use_inotify=False, poll_interval=0.02)
    files, procs = writers(tmp_path, 4, 2000, "--jitter", "0.002", "--split")
    for rank, path in files.items():
        pump.add(rank, "stdout", path)
    pump.start()
    assert pump.mode == "poll"
    for p in procs:
        p.wait(timeout=60)
    wait_until(lambda: all(len(sink.get(r)) == 2000 for r in range(4)), timeout=20)
    pump.stop()
    for rank in range(4):
        assert_numbered(sink.get(rank), rank, 2000)


def test_watchfiles_backend(tmp_path: Path) -> None:
    sink = Collector()
    pump = OutputPump(sink, backend="watchfiles")
    files, procs = writers(tmp_path, 2, 500, "--jitter", "0.002")
    for rank, path in files.items():
        pump.add(rank, "stdout", path)
    pump.start()
    assert pump.mode == "watchfiles"
    for p in procs:
        p.wait(timeout=60)
    wait_until(lambda: all(len(sink.get(r)) == 500 for r in range(2)), timeout=20)
    pump.stop()


def test_idle_files_cost_no_wakeups(tmp_path: Path) -> None:
    pump = OutputPump(Collector(), sweep_interval=1.0)
    for rank in range(16):
        path = tmp_path / f"{rank}.log"
        path.write_text("boot\n")
        pump.add(rank, "stdout", str(path))
    pump.start()
    wait_until(lambda: pump.wakeups >= 1)
    before = pump.wakeups
    time.sleep(1.5)
    idle = pump.wakeups - before
    pump.stop()
    assert idle <= 2  # only the safety sweep (once a second), no polling of 16 files


def test_readd_after_restart_drains_the_old_file_and_follows_the_new(tmp_path: Path) -> None:
    sink = Collector()
    old, new = tmp_path / "a0.log", tmp_path / "a1.log"
    old.write_text("old 1\nold partial")
    pump = OutputPump(sink).start()
    pump.add(5, "stdout", str(old), attempt=0)
    wait_until(lambda: sink.get(5) == ["old 1"])
    pump.add(5, "stdout", str(new), attempt=1)
    new.write_text("new 1\n")
    wait_until(lambda: sink.get(5) == ["old 1", "old partial", "new 1"], timeout=5)
    pump.stop()
    attempts = [b.attempt for call in sink.calls for b in call if b.lines]
    assert attempts == sorted(attempts) and attempts[-1] == 1


def test_remove_drains_and_a_replaced_file_is_followed(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "r.log"
    path.write_text("a\nb")
    pump = OutputPump(sink).start()
    pump.add(0, "stdout", str(path))
    pump.add(1, "stdout", str(tmp_path / "other.log"))
    wait_until(lambda: sink.get(0) == ["a"])
    pump.remove(0, "stdout")
    assert sink.get(0) == ["a", "b"]
    other = tmp_path / "other.log"
    other.write_text("first life\n")
    wait_until(lambda: sink.get(1) == ["first life"])
    other.unlink()
    other.write_text("second life\n")  # same path, new file (a recreated log dir)
    wait_until(lambda: sink.get(1) == ["first life", "second life"], timeout=5)
    pump.stop()


def test_duplicate_filters_write_whole_prefixed_lines_live(tmp_path: Path) -> None:
    sink = Collector()
    filtered = tmp_path / "filtered_stdout.log"
    pump = OutputPump(sink)
    files, procs = writers(tmp_path, 3, 400, "--split", "--payload", "4")
    for rank, path in files.items():
        pump.add(rank, "stdout", path)
    # Lines i with i % 100 == 7 contain ":7:" / ":107:" ...; match on a needle that a half
    # line would also contain, to prove fragments are never matched.
    pump.add_filter("stdout", [":7:", "07:"], str(filtered), {0: "[t0]:"}, name="t")
    pump.start()
    for p in procs:
        p.wait(timeout=60)
    wait_until(lambda: all(len(sink.get(r)) == 400 for r in range(3)), timeout=20)
    pump.stop()
    text = filtered.read_text()
    assert text.endswith("\n")
    got = text.splitlines()
    for rank in range(3):
        prefix = "[t0]:" if rank == 0 else f"[t{rank}]:"
        mine = [x[len(prefix) :] for x in got if x.startswith(prefix)]
        expected = [f"{rank}:{i}:xxxx" for i in range(400) if i == 7 or i % 100 == 7]
        assert mine == expected
        streamed = sink.get(rank, "filtered_stdout")
        assert [x[len(prefix) :] for x in streamed] == expected


def test_a_100mb_line_in_a_file_keeps_memory_bounded(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    block = b"z" * (1 << 20)
    with open(path, "wb") as f:
        f.write(b"before\n")
        for _ in range(100):
            f.write(block)
        f.write(b"\nafter\n")
    counts: dict[str, int] = defaultdict(int)
    seen: list[str] = []

    def sink(batch: list[Any]) -> None:  # keeps only what the test needs
        for b in batch:
            for line in b.lines:
                counts["lines"] += 1
                seen.append(line[:10] + line[-40:])

    pump = OutputPump(sink)
    pump.add(0, "stdout", str(path))
    tracemalloc.start()
    try:
        pump.flush()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        pump.stop()
        path.unlink()
    assert peak < 8 * 2**20, peak  # a few read chunks, not 100 MB
    assert counts["lines"] == 3
    assert seen[1].endswith(cut_marker(100 * 2**20 - 65536))


def test_text_batches(tmp_path: Path) -> None:
    got: list[TextBatch] = []
    path = tmp_path / "t.log"
    path.write_text("a\nb\nc")
    pump = OutputPump(got.extend, text_batches=True)
    pump.add(0, "stdout", str(path))
    pump.flush()
    assert got == [TextBatch(0, "stdout", b"a\nb\n", 2, "c", 0, 0)]
    assert got[0].lines == ("a", "b") and got[0].text == "a\nb\n"
    pump.stop()
    assert got[-1].data == b"c\n"


def test_outputs_are_rankoutput_events(tmp_path: Path) -> None:
    got: list[RankOutput] = []
    path = tmp_path / "e.log"
    path.write_text("x\ny\n")
    pump = OutputPump(got.extend)
    pump.add(2, "stderr", str(path), attempt=3)
    pump.stop()
    # With the bytes of the file they took: from 0 to just past "y"'s newline.
    assert got == [RankOutput(2, "stderr", ("x", "y"), "", 3, 0, 0, 4)]


def test_a_batch_knows_the_bytes_its_lines_took(tmp_path: Path) -> None:
    got: list[RankOutput] = []
    path = tmp_path / "o.log"
    path.write_bytes("\u00e9\u00e9 \x1b]0;t\x07one\ntwo\nthr".encode())
    pump = OutputPump(got.extend)
    pump.add(0, "stdout", str(path))
    pump.flush()
    with path.open("ab") as f:
        f.write(b"ee\n" + b"x" * 70000 + b"\nlast")  # a line past the display cap
    pump.flush()
    pump.stop()  # the unfinished last line is closed: it ends where the file does
    lines = [(b.first_line, len(b.lines), b.start_byte, b.end_byte) for b in got if b.lines]
    first = len("\u00e9\u00e9 \x1b]0;t\x07one\ntwo\n".encode())
    assert lines == [(0, 2, 0, first), (2, 2, first, first + 6 + 70001),
                     (4, 1, first + 6 + 70001, path.stat().st_size)]


def test_a_batch_is_timed_by_when_its_file_was_written_within_when_it_could_be(
    tmp_path: Path,
) -> None:
    # The file's mtime, held between the previous read and now: a clock elsewhere (NFS)
    # cannot put a batch before the last read or after the read that found it.
    got: list[RankOutput] = []
    path = tmp_path / "o.log"
    path.write_bytes(b"")
    t0 = clock.wall_ns()
    pump = OutputPump(got.extend)
    pump.add(0, "stdout", str(path))

    def write(line: bytes, mtime_ns: int) -> tuple[int, int]:
        with path.open("ab") as f:
            f.write(line)
        os.utime(path, ns=(mtime_ns, mtime_ns))
        before = clock.wall_ns()
        pump.flush()
        return before, clock.wall_ns()

    _, t1 = write(b"a\n", t0 - 10**10)  # before the pump followed it: held at the add
    assert t0 <= got[-1].written_ns <= t1
    write(b"b\n", t1)  # after the last read, before this one: as the file says
    assert got[-1].written_ns == t1
    before, after = write(b"c\n", t1 + 60 * 10**9)  # a minute ahead: held at now
    assert before <= got[-1].written_ns <= after
    pump.stop()
    assert [b.lines for b in got] == [("a",), ("b",), ("c",)]


def test_a_log_dir_removed_and_recreated_is_followed(tmp_path: Path) -> None:
    import shutil

    sink = Collector()
    attempt = tmp_path / "attempt_0"
    (attempt / "0").mkdir(parents=True)
    path = attempt / "0" / "stdout.log"
    path.write_text("before\n")
    pump = OutputPump(sink, sweep_interval=30.0).start()  # no safety sweep: events only
    pump.add(0, "stdout", str(path))
    wait_until(lambda: sink.get(0) == ["before"])
    shutil.rmtree(attempt)  # as torch's reify does with an existing attempt dir
    (attempt / "0").mkdir(parents=True)
    path.write_text("after\n")
    wait_until(lambda: sink.get(0) == ["before", "after"], timeout=5)
    with open(path, "a") as f:
        f.write("more\n")
    wait_until(lambda: sink.get(0) == ["before", "after", "more"], timeout=5)
    pump.stop()


def test_a_log_dir_made_again_is_followed_by_events_every_time(tmp_path: Path) -> None:
    # The same steps as above, many times over: each round is a race between the pump's
    # wake-ups and the removal (a removed file the pump kept open hid its directory's
    # removal from inotify; a directory watched after its file was written sent no event).
    # No sweep: every round must be found by notifications alone.
    import shutil

    sink = Collector()
    attempt = tmp_path / "attempt_0"
    path = attempt / "0" / "stdout.log"
    (attempt / "0").mkdir(parents=True)
    path.write_text("round 0\n")
    pump = OutputPump(sink, sweep_interval=3600.0).start()
    pump.add(0, "stdout", str(path))
    expected = ["round 0"]
    wait_until(lambda: sink.get(0) == expected)
    for i in range(1, 40):
        shutil.rmtree(attempt)
        (attempt / "0").mkdir(parents=True)
        path.write_text(f"round {i}\n")
        expected.append(f"round {i}")
        wait_until(lambda: sink.get(0) == expected, timeout=20)
    pump.stop()


def test_a_removed_file_is_finished_and_let_go(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "gone.log"
    path.write_text("kept\nlast without newline")
    pump = OutputPump(sink, sweep_interval=3600.0).start()
    pump.add(0, "stdout", str(path))
    wait_until(lambda: sink.get(0) == ["kept"])
    path.unlink()
    # Its last line is finished, and the pump holds no descriptor of it (its disk space is
    # given back).
    wait_until(lambda: sink.get(0) == ["kept", "last without newline"])
    wait_until(lambda: pump._tails[(0, "stdout")].fd is None)
    fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [f for f in fds if f.startswith(str(path))]
    path.write_text("new\n")  # a new file under the name: followed, numbered from 0
    wait_until(lambda: sink.get(0) == ["kept", "last without newline", "new"])
    pump.stop()


def test_a_utf8_character_split_across_two_reads(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "u.log"
    path.write_bytes(b"")
    pump = OutputPump(sink).start()
    pump.add(0, "stdout", str(path))
    with open(path, "ab", buffering=0) as f:
        f.write(b"caf\xc3")  # the first byte of "é"
        wait_until(lambda: pump._tails[(0, "stdout")].offset == 4)  # the pump has read it
        f.write(b"\xa9 \xe2\x9c")
        wait_until(lambda: pump._tails[(0, "stdout")].offset == 8)
        f.write(b"\x93\n")
    wait_until(lambda: sink.get(0) == ["café ✓"], timeout=5)
    pump.stop()


def test_a_broken_notification_backend_falls_back_to_polling(tmp_path: Path) -> None:
    sink = Collector()
    path = tmp_path / "b.log"
    path.write_text("one\n")
    pump = OutputPump(sink, poll_interval=0.02)
    pump.add(0, "stdout", str(path))
    pump.start()
    wait_until(lambda: sink.get(0) == ["one"])
    waker = pump._waker
    assert waker is not None

    def broken(timeout: float, busy: bool = False) -> Any:
        raise OSError("inotify went away")

    waker.wait = broken  # type: ignore[method-assign]
    with open(path, "a") as f:
        f.write("two\n")  # wakes the current wait; the next one breaks
    wait_until(lambda: pump.mode == "poll", timeout=5)
    with open(path, "a") as f:
        f.write("three\n")
    wait_until(lambda: sink.get(0) == ["one", "two", "three"], timeout=5)
    pump.stop()


def test_backlog_is_read_round_robin_across_files(tmp_path: Path) -> None:
    # Two files with a big backlog: the first delivery already carries lines of both (no
    # file waits behind another's whole backlog), each file stays in order, none is lost.
    calls: list[list[RankOutput]] = []
    pump = OutputPump(calls.append, batch_chars=4096, chunk_size=1024)
    for rank in (0, 1):
        path = tmp_path / f"{rank}.log"
        path.write_bytes(b"".join(b"r%d line %06d\n" % (rank, i) for i in range(5000)))
        pump.add(rank, "stdout", str(path))
    pump.flush()
    first_two = {out.rank for call in calls[:2] for out in call}
    assert first_two == {0, 1}
    for call in calls:
        keys = [(out.rank, out.stream) for out in call]
        assert len(keys) == len(set(keys))  # at most one batch per (rank, stream) per call
    for rank in (0, 1):
        lines = [line for call in calls for out in call if out.rank == rank for line in out.lines]
        assert lines == ["r%d line %06d" % (rank, i) for i in range(5000)]
        # Each batch begins where the one before ended, and the last ends with the file.
        spans = [(out.start_byte, out.end_byte)
                 for call in calls for out in call if out.rank == rank and out.lines]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert spans[0][0] == 0 and spans[-1][1] == 5000 * 15
    pump.stop()


def test_lines_are_a_block_read_as_a_tuple(tmp_path: Path) -> None:
    """A batch's lines stay the bytes they were read as until read whole; its last lines
    (a rank's last line, its step) come without making the others."""
    got: list[RankOutput] = []
    path = tmp_path / "b.log"
    path.write_bytes("one\ntwo é\nthree\nfour".encode())
    pump = OutputPump(got.extend)
    pump.add(0, "stdout", str(path))
    pump.flush()
    (batch,) = got
    block = batch.lines
    assert isinstance(block, LineBlock) and block.data == "one\ntwo é\nthree\n".encode()
    assert len(block) == 3 and block[-1] == "three" and block[-2:] == ("two é", "three")
    assert pump._reads == [0], "the last lines are not a read of the whole block"
    assert block == ("one", "two é", "three") and batch.partial == "four"
    assert pump._reads == [1]
    assert batch == RankOutput(0, "stdout", ("one", "two é", "three"), "four", 0, 0, 0,
                               len("one\ntwo é\nthree\n".encode()))
    assert list(block) == ["one", "two é", "three"]
    assert block[0] == "one" and block[1:] == block[-2:]
    pump.stop()


def test_unread_lines_gather_into_fewer_batches(tmp_path: Path) -> None:
    """With ``unread_debounce``, a pump whose lines nobody reads reads less often (fewer,
    bigger batches); every line still comes once, in order. Two pumps on the same file in
    one run, one read whole and one not: a ratio, not a time."""
    path = tmp_path / "0" / "stdout.log"
    path.parent.mkdir()
    path.touch()
    read, unread = Collector(), Collector()
    counts = {"read": 0, "unread": 0}

    def reading(batch: list[Any]) -> None:
        for b in batch:
            tuple(b.lines)  # a console or a viewer: the whole block
        counts["read"] += sum(1 for b in batch if b.lines)
        read(batch)

    def not_reading(batch: list[Any]) -> None:
        counts["unread"] += sum(1 for b in batch if b.lines)
        with unread.lock:  # counts only: nothing here reads a block whole
            for b in batch:
                unread.next_line[(b.rank, b.stream)] += len(b.lines)

    pumps = [OutputPump(sink, debounce=0.002, unread_debounce=0.3).start()
             for sink in (reading, not_reading)]
    for pump in pumps:
        pump.add(0, "stdout", str(path))
    writer = subprocess.Popen([PYTHON, WRITER, str(path), "--lines", "3000", "--burst", "10",
                               "--interval", "0.01"])
    assert writer.wait(timeout=60) == 0
    for pump in pumps:
        pump.stop()
    assert read.get(0) == [f"0:{i}:" + "x" * 16 for i in range(3000)]
    assert unread.next_line[(0, "stdout")] == 3000
    assert counts["unread"] * 2 < counts["read"], counts


def test_a_console_writes_a_block_as_read_and_counts_it_read(tmp_path: Path) -> None:
    """A console that shows a rank writes the pump's block of lines with its prefixes
    (no split into lines), and that is a read: the pump stays quick for it."""
    out = io.StringIO()
    console = ConsoleSink(out, name="w", presanitized=True)
    path = tmp_path / "c.log"
    path.write_bytes("a\nb é\n".encode())
    pump = OutputPump(console)
    pump.add(3, "stdout", str(path))
    pump.flush()
    assert out.getvalue() == "[w3]:a\n[w3]:b é\n"
    assert pump._reads[0] == 1
    pump.stop()


def test_an_arrival_index_that_cannot_be_made_is_said_once_and_the_lines_still_come(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Its directory cannot be made (here a file stands where it would be; a full disk is
    # the real case): both streams of the rank share the index, and it is said once.
    (tmp_path / "blocked").write_text("")
    index = str(tmp_path / "blocked" / "arrival.idx")
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    out.write_text("o\n")
    err.write_text("e\n")
    sink = Collector()
    pump = OutputPump(sink, sweep_interval=3600.0).start()
    try:
        with caplog.at_level("WARNING", logger="rankvisor.engine.output.pump"):
            pump.add_many([(0, "stdout", str(out), 0, index), (0, "stderr", str(err), 0, index)])
            wait_until(lambda: sink.get(0, "stdout") == ["o"] and sink.get(0, "stderr") == ["e"])
    finally:
        pump.stop()
    said = [r.getMessage() for r in caplog.records if "arrival index" in r.getMessage()]
    assert len(said) == 1 and index in said[0], said
