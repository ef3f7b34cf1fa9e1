"""engine.logfile.store.LogStore: scrollback and search from disk with a compact index."""

from __future__ import annotations

import os
import random
import re
import threading
import tracemalloc
from pathlib import Path

import pytest
from rankvisor.engine.logfile.line_index import LineIndex
from rankvisor.engine.logfile.search import SearchJob
from rankvisor.engine.logfile.store import LogStore
from rankvisor.engine.output.lines import collapse_cr, cut_marker
from rankvisor.engine.output.sanitize import sanitize


def display(raw: bytes, cap: int) -> str:
    """The display text of one raw line, per the LogStore contract."""
    limit = 4 * cap
    head, cut = raw[:limit], max(0, len(raw) - limit)
    text = sanitize(collapse_cr(head.decode("utf-8", "replace")))
    if cut:
        return text[:cap] + f"…[+{len(text[cap:].encode('utf-8', 'surrogatepass')) + cut} bytes]"
    if len(text) > cap:
        return text[:cap] + cut_marker(len(text) - cap)
    return text


TOKENS = [
    b"a",
    b"word ",
    "é".encode(),
    "😀".encode(),
    b"\xff",
    b"\r",
    b"\n",
    b"\n",
    b"\n",
    b"\r\n",
    b"\t",
    b"\x1b[31m",
    b"\x1b]0;t\x07",
    b"x" * 90,
    b"y" * 300,
]


def random_bytes(rng: random.Random, tokens: int) -> bytes:
    return b"".join(rng.choice(TOKENS) for _ in range(tokens))


def test_get_lines_matches_a_naive_reading(tmp_path: Path) -> None:
    rng = random.Random(11)
    path = tmp_path / "r.log"
    for trial in range(60):
        data = random_bytes(rng, rng.randint(1, 400))
        path.write_bytes(data)
        store = LogStore(str(path), max_line_chars=16, block_size=rng.choice([8, 64, 1024]))
        raw_lines = data.split(b"\n")
        complete = raw_lines[:-1]
        assert store.refresh() == len(complete)
        expected = [display(x, 16) for x in complete]
        assert store.get_lines(0, len(complete)) == expected, trial
        for _ in range(20):
            a = rng.randint(0, len(complete))
            b = rng.randint(a, len(complete) + 3)
            assert store.get_lines(a, b) == expected[a:b]
        assert store.partial == (display(raw_lines[-1], 16) if raw_lines[-1] else "")
        store.close()


def test_incremental_growth_gives_the_same_index(tmp_path: Path) -> None:
    rng = random.Random(12)
    data = random_bytes(rng, 3000)
    path = tmp_path / "g.log"
    path.write_bytes(b"")
    store = LogStore(str(path), max_line_chars=16, block_size=64, tail_lines=7)
    pos = 0
    with open(path, "ab") as f:
        while pos < len(data):
            step = rng.randint(1, 200)
            f.write(data[pos : pos + step])
            f.flush()
            pos += step
            store.refresh()
    whole = LineIndex(64)
    whole.feed(data)
    assert store.line_count == whole.line_count == data.count(b"\n")
    assert store._index._lines == whole._lines and store._index._offsets == whole._offsets
    expected = [display(x, 16) for x in data.split(b"\n")[:-1]]
    assert store.get_lines(0, store.line_count) == expected
    assert list(store.tail) == expected[-7:]


def test_a_missing_then_truncated_then_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    store = LogStore(str(path))
    assert store.refresh() == 0 and store.get_lines(0, 10) == []
    path.write_text("a\nb\nc\n")
    assert store.refresh() == 3
    path.write_text("x\n")  # truncated in place
    assert store.refresh() == 1
    assert store.get_lines(0, 5) == ["x"] and list(store.tail) == ["x"]
    path.unlink()
    path.write_text("new 1\nnew 2\n")  # a new file at the same path
    assert store.refresh() == 2
    assert store.get_lines(0, 5) == ["new 1", "new 2"]
    store.close()


def test_search_plain_regex_case_start_and_backwards(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    lines = [
        f"line {i} " + ("\x1b[31mERROR\x1b[0m disk" if i % 97 == 5 else "ok") for i in range(50_000)
    ]
    lines[30_000] = "progress 10%\rprogress 100% Needle"
    path.write_text("\n".join(lines) + "\nunterminated error\n"[:-1])
    store = LogStore(str(path))
    store.refresh()
    hits = [i for i in range(50_000) if i % 97 == 5]
    assert list(store.search("error disk")) == hits  # colours do not split the words
    assert list(store.search("ERROR", case_sensitive=True)) == hits
    assert list(store.search("Error", case_sensitive=True)) == []
    assert list(store.search(r"^line \d*5 \S+ disk$", regex=True)) == [
        i for i in hits if str(i).endswith("5")
    ]
    assert list(store.search("error", start=1000))[:2] == [1072, 1169]
    assert list(store.search("error", start=1072))[0] == 1072
    assert list(store.search("error", backwards=True, start=1071))[:3] == [975, 878, 781]
    assert list(store.search("error", backwards=True, start=1072))[0] == 1072
    assert list(store.search("error", backwards=True, start=49_999)) == hits[::-1]
    assert list(store.search("needle")) == [30_000]  # in the last \r frame
    assert list(store.search("progress 10%")) == []  # a frame that was overwritten
    with pytest.raises(re.error):
        list(store.search("(", regex=True))
    store.close()


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """About 300 MB: a first line, numbered filler lines, a last line. Deleted afterwards."""
    path = tmp_path_factory.mktemp("big") / "big.log"
    per_block = 40_000
    block = "".join(f"filler {k:06d} {'.' * 60}\n" for k in range(per_block)).encode()
    repeats = 300 * 2**20 // len(block)
    with open(path, "wb") as f:
        f.write(b"FIRST line of the run\n")
        for _ in range(repeats):
            f.write(block)
        f.write(b"LAST line of the run\n")
    yield str(path), 2 + repeats * per_block
    os.unlink(path)


def test_scrollback_of_the_first_and_last_lines_of_a_big_file(big_log: tuple[str, int]) -> None:
    path, count = big_log
    store = LogStore(path, tail_lines=100)
    tracemalloc.start()
    try:
        assert store.refresh() == count
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert os.path.getsize(path) > 250 * 2**20
    assert peak < 16 * 2**20, peak  # reads are chunked; the index is small
    assert store.index_bytes < 2 * 2**20  # ~20 000 checkpoints, not 4 M offsets
    assert store.get_lines(0, 2) == ["FIRST line of the run", f"filler 000000 {'.' * 60}"]
    assert store.get_lines(count - 1, count + 5) == ["LAST line of the run"]
    middle = 1 + 3 * 40_000 + 12_345
    assert store.get_lines(middle, middle + 1) == [f"filler 012345 {'.' * 60}"]
    assert store.tail[-1] == "LAST line of the run" and len(store.tail) == 100
    store.close()


def test_search_a_big_file_and_cancel(big_log: tuple[str, int]) -> None:
    path, count = big_log
    store = LogStore(path)
    store.refresh()
    assert list(store.search("last LINE")) == [count - 1]  # the whole file, chunk by chunk
    found: list[int] = []
    done = threading.Event()
    job = SearchJob(
        store,
        "FIRST",
        backwards=True,
        start=count - 1,
        on_match=found.append,
        on_done=lambda j: done.set(),
    ).start()
    assert job.wait(timeout=60) and done.is_set()
    assert found == [0] and job.error is None
    job = SearchJob(store, "not in the file").start()
    job.cancel()
    assert job.wait(timeout=30) and job.cancelled
    assert job.count == 0
    job = SearchJob(store, "filler", max_results=3).start()
    assert job.wait(timeout=30)
    assert [job.matches.get() for _ in range(3)] == [1, 2, 3]
    bad = SearchJob(store, "(", regex=True).start()
    assert bad.wait(timeout=10) and isinstance(bad.error, re.error)
    store.close()
