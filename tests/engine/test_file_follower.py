"""``FileFollower``: a file that floods is read from its end, a quiet one never is; a followed
file's lines come once each, in order, with a gap only where more came than one read holds.

Real files and a fake clock (the rate is bytes over the clock's seconds); no assertion on
time.
"""

from __future__ import annotations

from pathlib import Path

from rankvisor.engine.logfile.follow import FileFollower, FileTail


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _write(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _lines(path: Path, start: int, stop: int) -> None:
    _write(path, b"".join(b"line %d\n" % i for i in range(start, stop)))


def _read(tail: FileTail | None) -> FileTail:
    assert tail is not None
    return tail


def test_a_quiet_file_is_never_read_and_a_flooding_one_from_its_end(tmp_path: Path) -> None:
    clock = Clock()
    follower = FileFollower(flood_rate=10_000, max_bytes=100, clock=clock)
    quiet, busy = tmp_path / "quiet.log", tmp_path / "busy.log"
    _lines(quiet, 0, 3)
    _lines(busy, 0, 3)
    for path in (quiet, busy):
        assert follower.look(path.stem, str(path)) is None  # the first look only measures
    clock.now += 1.0
    _lines(quiet, 3, 10)  # about 50 bytes a second
    _lines(busy, 3, 5000)  # about 40 kB a second
    assert follower.look("quiet", str(quiet)) is None
    tail = _read(follower.look("busy", str(busy)))
    assert tail.key == "busy" and tail.path == str(busy) and tail.gap
    # The last 100 bytes: ten whole lines (a line they cut would be left out).
    assert tail.lines == tuple(f"line {i}" for i in range(4990, 5000))
    assert tail.start == busy.stat().st_size - 100 and tail.partial == ""
    assert follower.reads == 1


def test_a_followed_file_goes_on_where_it_stopped(tmp_path: Path) -> None:
    follower = FileFollower(flood_rate=1e12, max_bytes=1000, clock=Clock())
    path = tmp_path / "r0.log"
    _lines(path, 0, 5)
    tail = _read(follower.look("r0", str(path), follow=True))
    assert tail.lines == tuple(f"line {i}" for i in range(5)) and tail.gap and tail.start == 0
    assert follower.look("r0", str(path), follow=True) is None  # nothing new: no read
    _lines(path, 5, 7)
    _write(path, b"half a li")
    tail = _read(follower.look("r0", str(path), follow=True))
    assert (tail.lines, tail.partial, tail.gap) == (("line 5", "line 6"), "half a li", False)
    _write(path, b"ne\n")
    _lines(path, 7, 8)
    tail = _read(follower.look("r0", str(path), follow=True))
    assert (tail.lines, tail.partial, tail.gap) == (("half a line", "line 7"), "", False)
    # More than one read holds between two looks: the newest, and the gap said.
    _lines(path, 8, 1000)
    tail = _read(follower.look("r0", str(path), follow=True))
    assert tail.gap and tail.lines[-1] == "line 999" and len(tail.lines) < 200
    assert tail.lines == tuple(f"line {i}" for i in range(1000 - len(tail.lines), 1000))


def test_a_look_for_a_last_line_reads_less_and_the_next_full_one_goes_on_from_it(
    tmp_path: Path,
) -> None:
    """A rank shown by its tile (its last line) is read a little at a time; selected, its
    next read is a pane's, on from where the small one stopped."""
    follower = FileFollower(flood_rate=1e12, max_bytes=1000, clock=Clock())
    path = tmp_path / "r0.log"
    _lines(path, 0, 500)
    small = _read(follower.look("r0", str(path), follow=True, max_bytes=50))
    assert small.lines == tuple(f"line {i}" for i in range(495, 500)) and small.gap
    assert small.start == path.stat().st_size - 5 * len(b"line 495\n")  # a cut line: left out
    _lines(path, 500, 510)
    tail = _read(follower.look("r0", str(path), follow=True))
    assert tail.lines == tuple(f"line {i}" for i in range(500, 510)) and not tail.gap


def test_hostile_bytes_read_as_the_pump_shows_them_and_a_new_path_starts_over(
    tmp_path: Path,
) -> None:
    follower = FileFollower(flood_rate=1e12, clock=Clock())
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    _write(first, b"\x1b]52;c;aGk=\x07copied\n\x1b[31mred\x1b[0m\nbar 1\rbar 2\n\xff\n")
    _lines(second, 0, 2)
    tail = _read(follower.look("r0", str(first), follow=True))
    assert tail.lines == ("copied", "\x1b[31mred\x1b[0m", "bar 2", "\ufffd")
    tail = _read(follower.look("r0", str(second), follow=True))  # the rank restarted
    assert (tail.path, tail.lines, tail.gap) == (str(second), ("line 0", "line 1"), True)
