"""engine.output.lines.LineAssembler: whole lines from arbitrary chunks, bounded memory."""

from __future__ import annotations

import random
import tracemalloc

from rankvisor.engine.output.lines import LineAssembler, cut_marker
from rankvisor.engine.output.sanitize import sanitize


def assemble(chunks: list[bytes], **kwargs: object) -> tuple[list[str], list[str]]:
    """(lines in order, partial after each chunk)."""
    asm = LineAssembler(**kwargs)  # type: ignore[arg-type]
    lines: list[str] = []
    partials = []
    for chunk in chunks:
        lines += asm.feed(chunk)
        partials.append(asm.partial)
    lines += asm.close()
    return lines, partials


def reference(data: bytes, cap: int = 65536, clean: bool = True) -> list[str]:
    """What the assembler must produce, computed the slow and obvious way."""
    text = data.decode("utf-8", "replace")
    *lines, last = text.split("\n")
    out = []
    for i, line in enumerate([*lines, last]):
        line = line.rstrip("\r")
        line = line[line.rfind("\r") + 1 :]
        if i == len(lines) and not line:
            break  # no unterminated last line
        if clean:
            line = sanitize(line)
        if len(line) > cap:
            line = line[:cap] + cut_marker(len(line) - cap)
        out.append(line)
    return out


def split_randomly(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_a_line_split_across_reads_comes_out_once() -> None:
    lines, partials = assemble([b"hello wo", b"rld\nsecond", b" line\n"])
    assert lines == ["hello world", "second line"]
    assert partials == ["hello wo", "second", ""]


def test_a_utf8_character_split_across_reads_is_decoded_whole() -> None:
    data = "naïve café 😀 ✓\n".encode()
    for cut in range(1, len(data)):
        assert assemble([data[:cut], data[cut:]])[0] == ["naïve café 😀 ✓"]
    assert assemble([bytes([b]) for b in data])[0] == ["naïve café 😀 ✓"]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    lines, _ = assemble([b"bad \xff\xfe bytes and a cut \xe2\x82", b"\n"])
    assert lines == ["bad \ufffd\ufffd bytes and a cut \ufffd"]


def test_a_final_line_without_newline_is_flushed_by_close() -> None:
    lines, partials = assemble([b"one\ntwo"])
    assert partials == ["two"]
    assert lines == ["one", "two"]


def test_carriage_return_redraws_keep_the_last_frame() -> None:
    bar = b"".join(b"\r%3d%%|%s|" % (i, b"#" * (i // 10)) for i in range(0, 101, 5))
    lines, partials = assemble([bar[:40], bar[40:], b"\ndone\r\n"])
    assert lines == ["100%|##########|", "done"]
    assert partials[-1] == ""
    assert partials[1] == "100%|##########|"


def test_crlf_is_a_plain_line_end_even_when_split() -> None:
    assert assemble([b"a\r", b"\nb\r\n"])[0] == ["a", "b"]
    assert assemble([b"a\r", b"\r", b"\n"])[0] == ["a"]


def test_long_lines_are_cut_with_a_visible_marker() -> None:
    lines, _ = assemble(
        [b"x" * 25 + b"\nshort\n" + b"y" * 12, b"y" * 12 + b"\n"], max_line_chars=10
    )
    assert lines == ["x" * 10 + cut_marker(15), "short", "y" * 10 + cut_marker(14)]


def test_escape_sequences_are_neutralised_and_sgr_kept() -> None:
    lines, partials = assemble([b"\x1b[31mred\x1b[0m \x1b]52;c;QUJD\x07ok \x1b[2J\n\x1b]0;t"])
    assert lines[0] == "\x1b[31mred\x1b[0m ok "
    assert partials == [""]  # an unterminated OSC shows as nothing, not as raw bytes
    raw, _ = assemble([b"\x1b]0;t\x07x\n"], sanitize=False)
    assert raw == ["\x1b]0;t\x07x"]


def test_random_chunkings_match_the_reference() -> None:
    rng = random.Random(3)
    tokens = [
        b"a",
        b"xyz",
        "é".encode(),
        "😀".encode(),
        b"\xff",
        b"\r",
        b"\n",
        b"\r\n",
        b"\t",
        b"\x1b[31m",
        b"\x1b[0m",
        b"\x1b]0;t\x07",
        b"\x1b[2J",
        b"\x07",
        b" " * 30,
    ]
    for _ in range(1500):
        data = b"".join(rng.choice(tokens) for _ in range(rng.randint(1, 40)))
        chunks = split_randomly(data, rng) if len(data) > 1 else [data]
        assert assemble(chunks)[0] == reference(data), data


def test_random_long_lines_match_the_reference() -> None:
    rng = random.Random(4)
    tokens = [b"a" * 7, "é".encode(), b"\r", b"\n", b"\r\n", b"b" * 23]
    for _ in range(1000):
        data = b"".join(rng.choice(tokens) for _ in range(rng.randint(1, 40)))
        chunks = split_randomly(data, rng) if len(data) > 1 else [data]
        assert assemble(chunks, max_line_chars=16)[0] == reference(data, cap=16), data


def test_lines_done_counts_file_lines() -> None:
    asm = LineAssembler()
    asm.feed(b"a\nb\nc")
    assert asm.lines_done == 2
    asm.close()
    assert asm.lines_done == 3


def test_a_100mb_line_without_newline_keeps_memory_bounded() -> None:
    chunk = b"0123456789abcdef" * 16384  # 256 KiB
    asm = LineAssembler(max_line_chars=65536)
    tracemalloc.start()
    try:
        for _ in range(400):  # 100 MiB, no newline
            assert asm.feed(chunk) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak  # a few chunks' worth, not 100 MB
    assert len(asm.partial) == 65536 + len(cut_marker(100 * 2**20 - 65536))
    lines = asm.feed(b"\nnext\n")
    assert lines[0].endswith(cut_marker(100 * 2**20 - 65536))
    assert lines[1] == "next"


def test_an_endless_progress_bar_keeps_memory_bounded() -> None:
    asm = LineAssembler()
    frame = b"\r" + b"#" * 200
    tracemalloc.start()
    try:
        for _ in range(2000):  # 400 KB of redraws of one line
            asm.feed(frame * 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, peak
    assert asm.partial == "#" * 200


def test_feed_bytes_gives_the_same_lines_as_feed() -> None:
    rng = random.Random(5)
    tokens = [
        b"a",
        b"xyz\n",
        "é".encode(),
        "😀".encode(),
        b"\xff",
        b"\r",
        b"\n",
        b"\r\n",
        b"\x1b[31m",
        b"\x1b]0;t\x07",
        b"b" * 20,
        b"line\n" * 5,
    ]
    for _ in range(1500):
        data = b"".join(rng.choice(tokens) for _ in range(rng.randint(1, 40)))
        chunks = split_randomly(data, rng) if len(data) > 1 else [data]
        for clean in (True, False):
            as_lines, as_bytes = (
                LineAssembler(max_line_chars=16, sanitize=clean) for _ in range(2)
            )
            expected, got = [], b""
            for chunk in chunks:
                expected += as_lines.feed(chunk)
                got += as_bytes.feed_bytes(chunk)
                assert as_bytes.partial == as_lines.partial
                assert as_bytes.lines_done == as_lines.lines_done
            assert got.decode().split("\n")[:-1] == expected, data
            assert as_bytes.lines_done == as_lines.lines_done


def test_a_chunk_ending_mid_line_still_cuts_its_long_complete_lines() -> None:
    # The common read of a busy file ends inside a line: the lines before it are still
    # checked against the cap (and a chunk of short lines is passed through as it came).
    asm = LineAssembler(max_line_chars=100)
    out = asm.feed_bytes(b"x" * 150 + b"\nshort\n" + b"y" * 30)
    assert out == ("x" * 100 + cut_marker(50) + "\nshort\n").encode()
    assert (asm.lines_done, asm.partial) == (2, "y" * 30)
    short = b"".join(b"line %d\n" % i for i in range(40)) + b"half"
    assert asm.feed_bytes(b"\n" + short) == b"y" * 30 + b"\n" + short[: -len(b"half")]
    assert asm.lines_done == 43


def test_an_ascii_chunk_of_whole_lines_is_passed_on_as_it_came() -> None:
    # The flood's common read (a busy file read to its end, written a line at a time): no
    # decode, no copy; the lines and the count are those of the text path.
    asm = LineAssembler()
    chunk = b"".join(b"r0 n=%d loss=0.25\n" % i for i in range(500))
    assert asm.feed_bytes(chunk) is chunk
    assert asm.lines_done == 500
    asm.feed_bytes(b"r0 n=500 lo")
    assert asm.partial == "r0 n=500 lo"
    assert asm.feed_bytes(b"ss\nr0 n=501\n") == b"r0 n=500 loss\nr0 n=501\n"
    assert asm.lines_done == 502
