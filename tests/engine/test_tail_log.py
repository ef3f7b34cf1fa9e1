"""engine.tail_log.TailLog: torch's contract, with whole lines and a safe console."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rankvisor.engine.events import RankOutput
from rankvisor.engine.output.console import ConsoleSink
from rankvisor.engine.output.text_batch import LineBlock
from rankvisor.engine.tail_log import TailLog

from tests.conftest import BIN, PYTHON, wait_until

pytestmark = pytest.mark.processes

WRITER = str(BIN / "numbered_writer.py")


def run_writers(files: dict[int, str], m: int, *extra: str) -> None:
    procs = [
        subprocess.Popen([PYTHON, WRITER, path, "--rank", str(r), "--lines", str(m), *extra])
        for r, path in files.items()
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0


def per_rank(text: str, header: str = r"\[w(\d+)\]:") -> dict[int, list[int]]:
    """Numbers seen per rank; every line must be a whole, prefixed numbered line."""
    seen: dict[int, list[int]] = {}
    pattern = re.compile(header + r"(\d+):(\d+):x*$")
    for line in text.splitlines():
        m = pattern.match(line)
        assert m, f"garbled line: {line!r}"
        assert m.group(1) == m.group(2)
        seen.setdefault(int(m.group(1)), []).append(int(m.group(3)))
    return seen


def test_prefixes_and_torch_contract(tmp_path: Path) -> None:
    files = {0: str(tmp_path / "0.log"), 1: str(tmp_path / "1.log")}
    Path(files[0]).write_text("a\n")
    Path(files[1]).write_text("b\n")
    out = io.StringIO()
    tail = TailLog("trainer", files, out, log_line_prefixes={1: "[custom]:"})
    assert tail.start() is tail
    assert not tail.stopped()
    tail.stop()
    assert tail.stopped()
    assert sorted(out.getvalue().splitlines()) == ["[custom]:b", "[trainer0]:a"]
    # No files or no dst: start() is a no-op, as in torch.
    assert TailLog("x", {}, out).start().stopped() is False
    TailLog("x", files, None).start().stop()  # type: ignore[arg-type]


def test_concurrent_ranks_every_line_whole_once_in_order(tmp_path: Path) -> None:
    files = {r: str(tmp_path / f"{r}.log") for r in range(32)}
    out = io.StringIO()
    tail = TailLog("w", files, out).start()
    run_writers(files, 1000, "--jitter", "0.002", "--split", "--payload", "8")
    tail.stop()
    seen = per_rank(out.getvalue())
    assert seen == {r: list(range(1000)) for r in range(32)}


def test_stdout_and_stderr_tailers_sharing_a_console_never_garble(tmp_path: Path) -> None:
    outs = {r: str(tmp_path / f"{r}.out") for r in range(8)}
    errs = {r: str(tmp_path / f"{r}.err") for r in range(8)}
    run_writers({**{r: p for r, p in outs.items()}}, 20000)
    run_writers({r: p for r, p in errs.items()}, 20000)
    console = open(tmp_path / "console.txt", "w")  # a real TextIOWrapper, like sys.stdout
    t1 = TailLog("w", outs, console).start()
    t2 = TailLog("w", errs, console).start()
    t1.stop()
    t2.stop()
    console.close()
    seen = per_rank((tmp_path / "console.txt").read_text())
    assert {r: len(v) for r, v in seen.items()} == {r: 40000 for r in range(8)}


def test_stop_delivers_everything_written_before_it(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    out = io.StringIO()
    tail = TailLog("w", {0: str(path)}, out).start()
    with open(path, "w") as f:
        f.write("one\ntwo\nno newline")
    tail.stop()
    assert out.getvalue() == "[w0]:one\n[w0]:two\n[w0]:no newline\n"


def test_files_appearing_late_and_never(tmp_path: Path) -> None:
    late = tmp_path / "attempt_0" / "0" / "stdout.log"
    out = io.StringIO()
    tail = TailLog("w", {0: str(late), 1: str(tmp_path / "never.log")}, out).start()
    late.parent.mkdir(parents=True)
    late.write_text("finally\n")
    wait_until(lambda: out.getvalue() == "[w0]:finally\n", timeout=5)
    stopper = threading.Thread(target=tail.stop)
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive()


def test_console_gets_no_terminal_control_sequences(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(
        b"\x1b]52;c;cm0gLXJm\x07clip \x1b]0;title\x1b\\ok\n"
        b"\x1b[2J\x1b[H\x1b[5Amoves \x1bP1$r\x1b\\dcs \x1b_apc\x1b\\\n"
        b"\x1b[1;32mgreen\x1b[0m \x07bell \x1b]8;;http://x\x07link\n"
        b"unterminated \x1b]0;eats everything"
    )
    out = io.StringIO()
    TailLog("w", {0: str(path)}, out).start().stop()
    text = out.getvalue()
    assert "\x1b]" not in text and "\x1bP" not in text and "\x1b_" not in text  # OSC DCS APC
    assert not re.search(r"\x1b\[[0-9;?]*[A-HJKSTfhl]", text)  # cursor moves, erase, modes
    assert "\x1b[1;32mgreen\x1b[0m" in text  # colours kept
    assert text.splitlines() == [
        "[w0]:clip ok",
        "[w0]:moves dcs ",
        "[w0]:\x1b[1;32mgreen\x1b[0m \u2407bell link",
        "[w0]:unterminated ",
    ]
    raw = io.StringIO()
    TailLog("w", {0: str(path)}, raw, raw=True).start().stop()
    assert "\x1b]52;c;" in raw.getvalue()


def test_filter_sees_whole_lines_with_newline(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    out = io.StringIO()
    seen: list[str] = []

    def keep(line: str) -> bool:
        seen.append(line)
        return "apple" in line

    tail = TailLog("w", {0: str(path)}, out, log_line_filter=keep).start()
    with open(path, "w") as f:
        f.write("an app")
        f.flush()
        pump = tail._pump
        assert pump is not None
        # The tailer has read the half line (and must not show or filter it yet).
        wait_until(lambda: pump._tails[(0, "stdout")].asm.partial == "an app", timeout=5)
        f.write("le pie\npear\n")
    tail.stop()
    assert seen == ["an apple pie\n", "pear\n"]
    assert out.getvalue() == "[w0]:an apple pie\n"


def test_console_sink_shares_one_lock_per_destination() -> None:
    out = io.StringIO()
    a = ConsoleSink(out, name="w")
    b = ConsoleSink(out, prefixes=lambda r: f"<{r}>")
    assert a.lock is b.lock
    a([RankOutput(0, "stdout", ("x", "y"), "partial not printed")])
    b([RankOutput(1, "stderr", ("\x1b]0;t\x07z",))])
    assert out.getvalue() == "[w0]:x\n[w0]:y\n<1>z\n"


def test_forgetting_stop_does_not_hang_interpreter_exit(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from rankvisor.engine.tail_log import TailLog\n"
        f"TailLog('w', {{0: {str(tmp_path / 'never.log')!r}}}, sys.stdout).start()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", code], timeout=30, env=env)
    assert done.returncode == 0


def test_console_sink_prints_unfinished_frames_as_lines_or_in_place() -> None:
    # As lines (a pipe, a file): each frame once, then the finished line as usual.
    out = io.StringIO()
    sink = ConsoleSink(out, name="w", frames_every=0.0, in_place=False)
    sink([RankOutput(0, "stdout", (), partial="10%")])
    sink([RankOutput(0, "stdout", (), partial="10%")])  # unchanged: not again
    sink([RankOutput(0, "stdout", (), partial="20%")])
    sink([RankOutput(0, "stdout", ("20% done",))])
    assert out.getvalue() == "[w0]:10%\n[w0]:20%\n[w0]:20% done\n"
    # In place (a terminal): one line redrawn, wiped before anything else is written.
    tty = io.StringIO()
    sink = ConsoleSink(tty, name="w", frames_every=0.0, in_place=True)
    sink([RankOutput(1, "stdout", (), partial="\x1b[32m10%\x1b[0m")])
    sink([RankOutput(1, "stdout", (), partial="20%")])
    assert sink.write_text("[rankvisor] a notice\n")
    sink([RankOutput(1, "stdout", ("all done",))])
    wipe = "\r\x1b[K"
    assert tty.getvalue() == (
        f"{wipe}[w1]:10%{wipe}[w1]:20%{wipe}[rankvisor] a notice\n[w1]:all done\n"
    )
    # At most once per ``frames_every``: a frame seen again within it waits for a flush.
    slow = io.StringIO()
    sink = ConsoleSink(slow, name="w", frames_every=3600.0, in_place=False)
    sink([RankOutput(0, "stdout", (), partial="1/9")])
    sink([RankOutput(0, "stdout", (), partial="2/9")])
    sink.flush_frames()
    assert slow.getvalue() == "[w0]:1/9\n"
    # An unbuffered Python rank writes a print's text and its newline apart: a read between
    # them sees the text unfinished, printed as its frame at once. The line it becomes is
    # that frame, printed already: not twice (a loaded two-host run showed a line twice).
    # Its other lines, and a line that only starts like the frame, are printed as usual.
    for make in (lambda lines: lines, lambda lines: LineBlock(
            "".join(x + "\n" for x in lines).encode(), len(lines))):
        split = io.StringIO()
        sink = ConsoleSink(split, name="w", frames_every=0.0, in_place=False)
        sink([RankOutput(0, "stdout", make(("ready",)))])
        sink([RankOutput(0, "stdout", (), partial="start rank 3")])
        sink([RankOutput(0, "stdout", make(("start rank 3", "next")))])
        sink([RankOutput(0, "stdout", (), partial="step")])
        sink([RankOutput(0, "stdout", make(("steps: 2",)))])
        assert split.getvalue() == (
            "[w0]:ready\n[w0]:start rank 3\n[w0]:next\n[w0]:step\n[w0]:steps: 2\n")
    # Without frames_every (torch's TailLog, the default) nothing unfinished is printed.
    plain = io.StringIO()
    ConsoleSink(plain, name="w")([RankOutput(0, "stdout", (), partial="50%")])
    assert plain.getvalue() == ""
