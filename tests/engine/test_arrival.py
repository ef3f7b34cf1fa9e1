"""The arrival index the pump writes beside a rank's logs, and the merged view read from it.

Real files and the real pump (flushed by hand, so each read pass is a known step).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from rankvisor.engine.events import RankOutput
from rankvisor.engine.logfile.merged import MergedSource
from rankvisor.engine.output.pump import OutputPump
from rankvisor.engine.rundir.arrival import MAGIC, MergedOrder, arrival_path, read_records


def _paths(tmp_path: Path, rank: int = 0) -> tuple[str, str, str]:
    base = tmp_path / "attempt_0" / str(rank)
    base.mkdir(parents=True, exist_ok=True)
    out, err = str(base / "stdout.log"), str(base / "stderr.log")
    return out, err, arrival_path(out, err)


def _append(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_pump_notes_each_pass_and_the_merged_view_follows_it(tmp_path: Path) -> None:
    out, err, index = _paths(tmp_path)
    batches: list[RankOutput] = []
    pump = OutputPump(lambda b: batches.extend(x for x in b if isinstance(x, RankOutput)))
    pump.add(0, "stdout", out, index=index)
    pump.add(0, "stderr", err, index=index)
    _append(out, "step 1\nstep 2\n")
    pump.flush()
    _append(err, "Traceback (most recent call last):\n  File x\n")
    pump.flush()
    _append(out, "step 3\n")
    pump.flush()
    _append(err, "RuntimeError: boom\n")
    _append(out, "50%|#####")  # unfinished: a progress bar
    pump.flush()

    records, _ = read_records(index)
    assert [(s, n) for s, n, _ in records] == [(0, 2), (1, 2), (0, 3), (1, 3)]
    assert [t for *_, t in records] == sorted(t for *_, t in records)
    # 16 bytes a pass with new lines, after an 8-byte header: never per line.
    assert os.path.getsize(index) == len(MAGIC) + 16 * 4

    merged = MergedSource(out, err, index)
    assert merged.refresh() == 6
    assert merged.get_lines(0, 6) == [
        "step 1",
        "step 2",
        "Traceback (most recent call last):",
        "  File x",
        "step 3",
        "RuntimeError: boom",
    ]
    assert merged.streams(0, 6) == ["stdout"] * 2 + ["stderr"] * 2 + ["stdout", "stderr"]
    assert merged.partials() == [("stdout", "50%|#####")]
    # Search covers both streams, in view order, forwards and backwards.
    assert list(merged.search("step")) == [0, 1, 4]
    assert list(merged.search("RuntimeError")) == [5]
    assert list(merged.search("e", start=3)) == [3, 4, 5]
    assert list(merged.search("step", start=3, backwards=True)) == [1, 0]
    assert list(merged.search("T", start=5, backwards=True, case_sensitive=True)) == [2]

    # Lines no record covers yet (written, not read by the pump) come after, stdout first.
    _append(err, "late err\n")
    _append(out, " done\nlate out\n")
    assert merged.refresh() == 9
    assert merged.get_lines(6, 9) == ["50%|##### done", "late out", "late err"]
    pump.flush()  # the pump reads them in one pass: stdout's first
    assert merged.refresh() == 9
    assert merged.order.indexed_rows == 9
    assert merged.streams(6, 9) == ["stdout", "stdout", "stderr"]
    pump.stop()
    merged.close()


def test_a_pass_delivers_a_ranks_stdout_before_its_stderr(tmp_path: Path) -> None:
    """Lines that arrive in the same read pass: the line printed before a crash comes before
    the traceback, in every pass (the pump turns which file it reads first, for fairness)."""
    order: list[list[tuple[int, str]]] = []

    def sink(batch: list[object]) -> None:
        order.append([(x.rank, x.stream) for x in batch if isinstance(x, RankOutput) and x.lines])

    pump = OutputPump(sink)
    files = {}
    for rank in range(2):
        out, err, index = _paths(tmp_path, rank)
        files[rank] = (out, err)
        pump.add(rank, "stdout", out, index=index)
        pump.add(rank, "stderr", err, index=index)
    for step in range(6):
        for rank in range(2):
            out, err = files[rank]
            _append(out, f"step {step}\n")
            _append(err, f"Traceback {step}\n")
        pump.flush()
    pump.stop()
    passes = [p for p in order if p]
    assert len(passes) == 6
    for delivered in passes:
        for rank in range(2):
            assert delivered.index((rank, "stdout")) < delivered.index((rank, "stderr"))
    # And the index says the same.
    records, _ = read_records(_paths(tmp_path, 1)[2])
    assert [s for s, _, _ in records] == [0, 1] * 6


def test_merged_order_memory_grows_with_alternations_not_lines(tmp_path: Path) -> None:
    index = str(tmp_path / "arrival.idx")
    record = struct.Struct("<Qq")
    with open(index, "wb") as f:
        f.write(MAGIC)
        end = 0
        for _ in range(10_000):  # a long stdout stretch in many passes
            end += 100
            f.write(record.pack(end << 1, 1))
        f.write(record.pack(5 << 1 | 1, 2))  # then a traceback
        f.write(record.pack((end + 1) << 1, 3))
        f.write(record.pack(2 << 1 | 1, 4))  # a stale record (a truncated file): ignored
        f.write(b"\x01\x02\x03")  # a torn record: left for the next read
    order = MergedOrder(index)
    order.refresh()
    order.set_counts(end + 1, 5)
    assert order.runs == 3
    assert order.nbytes() < 200
    assert order.rows == end + 6
    assert order.locate(end - 1) == (0, end - 1)
    assert order.locate(end) == (1, 0)
    assert order.locate(end + 5) == (0, end)
    for stream, line in ((0, 0), (0, 999_999), (1, 4), (0, end)):
        assert order.locate(order.row_of(stream, line)) == (stream, line)
    assert order.first_line_from(1, 0) == 0
    assert order.first_line_from(0, end + 2) == end
    assert order.last_line_upto(1, end - 1) == -1
    assert order.last_line_upto(0, end + 3) == end - 1


def test_without_an_index_stdout_comes_first(tmp_path: Path) -> None:
    out, err, _ = _paths(tmp_path)
    _append(out, "a\nb\n")
    _append(err, "E\n")
    merged = MergedSource(out, err, "")
    assert merged.refresh() == 3
    assert merged.get_lines(0, 3) == ["a", "b", "E"]
    assert list(merged.search("e", backwards=True, start=2)) == [2]
    merged.close()
