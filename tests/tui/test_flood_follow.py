"""A pane under a flood shows its rank from the rank's files, ahead of the events.

The model (``RunView.add_file_tail``, ``add_output``) with the lines a ``FileFollower`` hands
out; then the app on a real Supervisor whose ranks flood their logs, its follower made to
follow every file, the panes checked against the files: each rank's last line shown, no line
twice, none out of order, every file intact. Counts and orderings only, never a time.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.server import ControlServer
from rankvisor.engine.events import RankOutput
from rankvisor.engine.logfile.follow import FileFollower
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.tui import app as app_module
from rankvisor.tui.app import RankvisorApp
from rankvisor.tui.model import RunView

from tests.scenarios import scripted_info

from .conftest import wait_for

pytestmark = pytest.mark.processes

WRITER = Path(__file__).parents[1] / "bench" / "tui_writer.py"
_NUMBER = re.compile(r"^r(\d+) n=(\d+) ")


def _at(stream: str, line: int) -> int:
    """Where line ``line`` of a file of ``{stream} {i}`` lines begins."""
    return sum(len(f"{stream} {i}\n") for i in range(line))


def _out(rank: int, start: int, stop: int, stream: str = "stdout") -> RankOutput:
    lines = tuple(f"{stream} {i}" for i in range(start, stop))
    return RankOutput(rank, stream, lines, first_line=start,  # type: ignore[arg-type]
                      start_byte=_at(stream, start), end_byte=_at(stream, stop))


def _texts(run: RunView, rank: int) -> list[tuple[str, str]]:
    buffer = run.ranks[rank].buffer
    return [buffer[i] for i in range(len(buffer))]


def test_the_pane_goes_on_from_the_file_and_the_late_events_draw_nothing() -> None:
    run = RunView(scripted_info(2))
    view = run.ranks[0]
    out, err = view.stdout_path, view.stderr_path
    run.add_output(_out(0, 0, 5))
    run.add_output(_out(0, 0, 2, "stderr"))
    # The follower reads on from where the events' lines end: none of them comes again.
    assert run.shown_offset(0, "stdout") == _at("stdout", 5)
    lines = tuple(f"stdout {i}" for i in range(5, 9))
    assert run.add_file_tail(0, "stdout", out, lines, "stdout 9 unfinis", gap=True)
    assert run.shown_offset(0, "stdout") == -1  # followed: the events draw none of it
    assert run.following_file(0) and not run.following_file(1)
    assert view.last_line == "stdout 9 unfinis" and view.buffer.partial == "stdout 9 unfinis"
    # The events are behind the file: they draw nothing (they are counted).
    run.add_output(_out(0, 5, 7))
    run.add_output(_out(0, 2, 3, "stderr"))
    assert view.lines_seen == 10
    assert run.add_file_tail(0, "stdout", out, ("stdout 9 unfinished", "stdout 10"))
    assert run.shown_offset(0, "stderr") == _at("stderr", 2)
    assert run.add_file_tail(0, "stderr", err, ("stderr 2",), gap=True)
    assert run.add_file_tail(0, "stdout", out, ("stdout 900",), gap=True)
    kinds = [kind for kind, _ in _texts(run, 0)]
    texts = [text for _, text in _texts(run, 0)]
    assert texts[:7] == [*(f"stdout {i}" for i in range(5)), "stderr 0", "stderr 1"]
    assert kinds[7] == "marker" and "too fast" in texts[7]
    assert texts[8:] == [
        *(f"stdout {i}" for i in range(5, 9)), "stdout 9 unfinished", "stdout 10",
        "stderr 2",  # the first tail of stderr: "stderr 1" was shown
        texts[15], "stdout 900",
    ]
    assert kinds[15] == "marker" and "faster than drawn" in texts[15]
    assert view.buffer.partial == "" and view.last_line == "stdout 900"
    # The other rank is untouched; an earlier incarnation's file is not drawn.
    assert _texts(run, 1) == []
    assert not run.add_file_tail(1, "stdout", "/elsewhere/stdout.log", ("x",))
    # A batch that does not know its bytes (a line made up) leaves the offset as it was.
    run.add_output(_out(1, 0, 10))
    run.add_output(RankOutput(1, "stdout", ("made up",)))
    assert run.shown_offset(1, "stdout") == _at("stdout", 10)


def test_a_followed_file_goes_on_where_the_events_ended_whatever_its_lines_say(
    tmp_path: Path,
) -> None:
    # A rank that prints the same line again and again ("loss=nan"), in two-byte
    # characters, and an escape the pane neutralises: only the bytes say where the events
    # ended (text, or sizes counted from what the pane shows, took lines out or twice).
    run = RunView(scripted_info(1))
    view = run.ranks[0]
    view.stdout_path = str(tmp_path / "stdout.log")
    raw = [b"\xc3\xa9 loss=nan \x1b]0;title\x07"] * 6 + [b"\xc3\xa9 loss=nan"] * 4 + [b"end"]
    Path(view.stdout_path).write_bytes(b"".join(line + b"\n" for line in raw))
    drawn = 7  # the events drew the first seven lines
    end = sum(len(line) + 1 for line in raw[:drawn])
    run.add_output(RankOutput(0, "stdout", ("\u00e9 loss=nan",) * drawn, end_byte=end))
    follower = FileFollower(flood_rate=0)
    tail = follower.look((0, "stdout"), view.stdout_path, after=run.shown_offset(0, "stdout"))
    assert tail is not None and not tail.gap
    assert run.add_file_tail(0, "stdout", view.stdout_path, tail.lines, tail.partial,
                             gap=tail.gap)
    texts = [t for kind, t in _texts(run, 0) if kind == "stdout"]
    assert len(texts) == len(raw) and texts[-1] == "end"
    assert sum("loss=nan" in t for t in texts) == 10


@pytest.mark.parametrize("events_after", [False, True])
def test_lines_drawn_before_the_paths_were_known_count_for_the_first_files(
    events_after: bool,
) -> None:
    # A viewer can draw a rank's first lines before the snapshot that names its files: they
    # are the first files' lines, and the follower's first read must not draw them again (a
    # loaded CI run showed a 16 KB read twice in a pane, once from the events).
    info = scripted_info(1)
    run = RunView(info)
    view = run.ranks[0]
    out = view.stdout_path
    view.stdout_path = view.stderr_path = ""  # as before the run started
    run.add_output(_out(0, 0, 5))
    run.merge_paths(info)
    assert view.stdout_path == out
    if events_after:
        run.add_output(_out(0, 5, 7))
    # The first read goes on from where the events ended, in the file it now knows.
    upto = 7 if events_after else 5
    assert run.shown_offset(0, "stdout") == _at("stdout", upto)
    lines = tuple(f"stdout {i}" for i in range(upto, 9))
    assert run.add_file_tail(0, "stdout", out, lines, gap=True)
    shown = [t for k, t in _texts(run, 0) if k == "stdout"]
    assert shown == [f"stdout {i}" for i in range(9)]


def test_a_restart_gives_the_pane_back_to_the_events() -> None:
    run = RunView(scripted_info(1))
    view = run.ranks[0]
    assert run.add_file_tail(0, "stdout", view.stdout_path, ("a", "b"), gap=True)
    run.add_output(_out(0, 0, 1))
    assert [t for _, t in _texts(run, 0)][-1] == "b"
    view.stdout_path, view.stderr_path = "/new/stdout.log", "/new/stderr.log"
    assert not run.following_file(0)
    run.add_output(_out(0, 0, 2))
    assert [t for _, t in _texts(run, 0)][-2:] == ["stdout 0", "stdout 1"]


def _numbers(run: RunView, rank: int) -> list[int]:
    out = []
    for kind, text in _texts(run, rank):
        match = _NUMBER.match(text)
        if kind == "stdout" and match:
            assert int(match.group(1)) == rank
            out.append(int(match.group(2)))
    return out


def _flood_config(tmp_path: Path) -> tuple[SupervisorConfig, int, float]:
    nprocs, rate, seconds = 4, 20_000, 1.5
    config = SupervisorConfig(
        entrypoint=sys.executable,
        args=(str(WRITER), "--rate", str(rate), "--seconds", str(seconds), "--delay", "0.3"),
        nprocs=nprocs,
        log_dir=str(tmp_path / "logs"),
        term_timeout=3.0,
        sample_interval=0.5,
    )
    return config, rate, seconds


async def _panes_end_at_each_last_line(
    app: RankvisorApp,
    rate: int,
    seconds: float,
    *,
    quit: bool = True,
    follower: FileFollower | None = None,
) -> None:
    """Run the app until every rank succeeded; check its panes against the files."""
    # Every file with output is read from its end.
    app.follower = follower or FileFollower(flood_rate=0)
    ranks = app.run_view.ranks
    async with app.run_test(size=(120, 36)) as pilot:
        # The first attempt's paths come from a snapshot fetched off the UI thread; a busy
        # UI thread may fold it in after the ranks' events.
        await wait_for(
            pilot,
            lambda: all(v.state is RankState.SUCCEEDED and v.stdout_path for v in ranks),
            120,
            step=0.05,
        )
        files = [Path(v.stdout_path).read_bytes().splitlines() for v in ranks]
        last = [lines[-1].decode() for lines in files]
        shown = lambda: [(v.buffer.tail(1, "stdout") or [""])[0] for v in ranks]  # noqa: E731
        try:
            await wait_for(pilot, lambda: shown() == last, 60, step=0.05)
        except AssertionError:
            raise AssertionError((shown(), last, app.follower.reads)) from None
        for rank, lines in enumerate(files):
            # The file holds the rank's bytes: every number once, in order.
            numbers = [int(_NUMBER.match(x.decode()).group(2)) for x in lines]  # type: ignore[union-attr]
            assert numbers == list(range(len(numbers))) and len(numbers) > rate * seconds / 2
            # The pane: no line twice, none out of order, its last line the file's.
            shown_numbers = _numbers(app.run_view, rank)
            assert shown_numbers == sorted(set(shown_numbers))
            assert shown_numbers[-1] == numbers[-1]
        # Read from their ends (whether a pane followed its file or its events kept up
        # depends on the machine's load: either way the pane is as checked above). The
        # files are looked at on the app's drain tick: under load the events may have drawn
        # every line before a tick came, so wait for one.
        await wait_for(pilot, lambda: app.follower.reads > 0, 60, step=0.05)
        if quit:
            await pilot.press("q")
            await wait_for(pilot, lambda: app.shut_down, 30, step=0.05)


async def test_flooding_ranks_panes_follow_their_files_to_each_last_line(
    tmp_path: Path,
) -> None:
    config, rate, seconds = _flood_config(tmp_path)
    sup = Supervisor(config)
    try:
        await _panes_end_at_each_last_line(RankvisorApp(sup), rate, seconds)
    finally:
        sup.shutdown()


async def test_under_load_a_tick_reads_the_files_of_the_panes_it_draws_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy UI thread draws a third of the panes a tick (and the selected one): a tick
    reads those panes' files only, the others' wait for their turn, and every pane still
    ends at its rank's last line, no line twice, none out of order."""
    monkeypatch.setattr(app_module, "THROTTLE_LOAD", -1.0)  # always busy
    config, rate, seconds = _flood_config(tmp_path)
    sup = Supervisor(config)
    app = RankvisorApp(sup)
    looked: list[tuple[int, int]] = []

    async def run() -> None:
        follower = app.follower = FileFollower(flood_rate=0)
        look, follow_files = follower.look, app._follow_files
        throttled = [False]

        def counted(key: Any, *args: Any, **kwargs: Any) -> Any:
            if throttled[0]:  # a throttled drain tick's look
                looked.append((app._ticks, key[0]))
            return look(key, *args, **kwargs)

        def follow(due: Any = None) -> Any:
            throttled[0] = due is not None
            try:
                return follow_files(due)
            finally:
                throttled[0] = False

        follower.look = counted  # type: ignore[method-assign]
        app._follow_files = follow  # type: ignore[method-assign]
        await _panes_end_at_each_last_line(app, rate, seconds, follower=follower)

    try:
        await run()
    finally:
        sup.shutdown()
    assert looked
    assert all(rank == 0 or (rank + tick) % 3 == 0 for tick, rank in looked), looked
    # No rank was starved: every pane ended at its last line (checked above). Which ranks
    # a throttled tick happened to look at is the load's doing: a rank whose events carried
    # all its lines before its turn came has nothing to look at (a loaded run saw {0, 2, 3}).


async def test_an_attached_viewer_is_sent_no_line_of_a_rank_whose_files_it_follows(
    tmp_path: Path,
) -> None:
    """As ``rankvisor run`` views a run (a supervisor's socket, a RemoteHandle): once a pane
    shows its rank from the files, the supervisor sends cues instead of that rank's lines,
    and the panes still end at each rank's last line."""
    config, rate, seconds = _flood_config(tmp_path)
    sup = Supervisor(config)
    sock_dir = tempfile.mkdtemp(dir="/tmp", prefix="rvf")  # sun_path is 108 bytes
    server = ControlServer(sup, os.path.join(sock_dir, "run.sock"))
    server.start()
    handle = RemoteHandle.connect(server.socket_path, pass_over_skipped=True)
    after_cue: dict[int, int] = {}
    """rank -> stdout lines that came after its first cue (none may)."""

    def watch(event: object) -> None:
        if isinstance(event, RankOutput) and event.stream == "stdout":
            if event.rank in after_cue:
                after_cue[event.rank] += len(event.lines)
            elif not event.lines and not event.partial:
                after_cue[event.rank] = 0

    handle.subscribe(watch)
    try:
        sup.start()
        await _panes_end_at_each_last_line(RankvisorApp(handle), rate, seconds, quit=False)
    finally:
        handle.shutdown()
        server.close()
        sup.shutdown()
        shutil.rmtree(sock_dir, ignore_errors=True)
    # Under a flood of 20k lines a second the events fall behind the files at once, so the
    # panes follow them; from its first cue on, a rank's lines were never sent.
    assert after_cue and set(after_cue.values()) == {0}, after_cue


def test_lines_not_drawn_leave_the_offset_at_the_last_batch_drawn() -> None:
    # The UI fell behind and 10 lines never came as events: the file is read on from where
    # the last batch drawn ended, neither from the dropped lines nor before them.
    run = RunView(scripted_info(1))
    view = run.ranks[0]

    def batch(a: int, b: int) -> RankOutput:
        lines = tuple(f"stdout {i:03d}" for i in range(a, b))  # 11 bytes each, newline too
        return RankOutput(0, "stdout", lines, first_line=a, start_byte=a * 11, end_byte=b * 11)

    run.add_output(batch(0, 10))
    assert run.shown_offset(0, "stdout") == 10 * 11
    assert run.lines_not_drawn(0, "… 10 lines not drawn")
    assert run.shown_offset(0, "stdout") == 10 * 11  # the dropped lines come from the file
    run.add_output(batch(20, 25))
    assert run.shown_offset(0, "stdout") == 25 * 11
    assert run.add_file_tail(0, "stdout", view.stdout_path, batch(25, 31).lines, gap=False)
    shown = [int(text.split()[1]) for kind, text in _texts(run, 0) if kind == "stdout"]
    assert shown == [*range(10), *range(20, 31)]
