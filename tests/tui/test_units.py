"""Pieces of the UI without a screen: the bridge, the model, the ANSI guard, the traceback
parser, the grid chooser, the printed summary; and RankLog in a tiny app."""

from __future__ import annotations

import threading

from rankvisor.engine.events import (
    EscalationScheduled,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RankStats,
    RunFinished,
)
from rankvisor.engine.handle import CommandResult, KillRanks, RestartRank
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import ScriptedFailure, ScriptedResult, ScriptedSupervisor
from rankvisor.tui.bridge import EngineBridge
from rankvisor.tui.messages import EngineEvent
from rankvisor.tui.model import LineBuffer, RunView, format_bytes
from rankvisor.tui.report import format_summary
from rankvisor.tui.screens.log_files import parse_pattern
from rankvisor.tui.screens.main import choose_grid
from rankvisor.tui.widgets.ansi import display_text, plain_text, safe_line
from rankvisor.tui.widgets.failure_report import parse_callstack
from rankvisor.tui.widgets.rank_log import RankLog
from rankvisor.tui.widgets.rank_pane import sparkline
from textual.app import App, ComposeResult

from tests.scenarios import TRACEBACK, failure_script, running_script, scripted_info


class _Collector:
    def __init__(self) -> None:
        self.messages: list[EngineEvent] = []

    def post_message(self, message: EngineEvent) -> bool:
        self.messages.append(message)
        return True


def test_bridge_batches_lines_and_orders_lifecycle_after_earlier_lines() -> None:
    bridge = EngineBridge()
    target = _Collector()
    bridge.attach(target)
    bridge(RankOutput(0, "stdout", ("a", "b")))
    bridge(RankOutput(1, "stdout", ("x",)))
    bridge(RankStateChanged(0, RankState.RUNNING, RankState.FAILED, 1, exitcode=1))
    bridge(RankOutput(0, "stdout", ("after",)))
    assert len(target.messages) == 1
    event = target.messages[0]
    before = bridge.drain(upto=event.seq)
    assert [o.lines for o in before.outputs] == [("a", "b"), ("x",)]
    rest = bridge.drain()
    assert [o.lines for o in rest.outputs] == [("after",)]
    assert not bridge.drain()


def test_bridge_drops_oldest_batches_when_the_ui_falls_behind() -> None:
    bridge = EngineBridge(max_pending_lines=100)
    for i in range(50):
        bridge(RankOutput(3, "stdout", tuple(f"{i}-{j}" for j in range(10))))
    drained = bridge.drain()
    kept = [line for o in drained.outputs for line in o.lines]
    assert len(kept) <= 100
    assert kept[-1] == "49-9"
    assert drained.skipped == {3: 500 - len(kept)}


def test_bridge_coalesces_progress_bar_redraws() -> None:
    bridge = EngineBridge()
    for i in range(1000):
        bridge(RankOutput(0, "stdout", (), partial=f"{i}%"))
    drained = bridge.drain()
    assert len(drained.outputs) == 1 and drained.outputs[0].partial == "999%"


def test_bridge_is_safe_from_many_threads() -> None:
    bridge = EngineBridge()

    def spew(rank: int) -> None:
        for i in range(200):
            bridge(RankOutput(rank, "stdout", (f"{rank}:{i}",)))

    threads = [threading.Thread(target=spew, args=(r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    drained = bridge.drain()
    for rank in range(8):
        lines = [line for o in drained.outputs if o.rank == rank for line in o.lines]
        assert lines == [f"{rank}:{i}" for i in range(200)]


def test_line_buffer_evicts_and_keeps_stable_ids() -> None:
    buffer = LineBuffer(100)
    buffer.extend("stdout", [str(i) for i in range(250)])
    assert len(buffer) == 100 and buffer.evicted == 150 and buffer[0] == ("stdout", "150")
    buffer.extend("stderr", ["err"])
    assert buffer.tail(1, "stderr") == ["err"] and buffer.tail(2) == ["249", "err"]


def _failure(rank: int, t: float, *, by_us: bool = False) -> RankStateChanged:
    new = RankState.SIGNALLED if by_us else RankState.FAILED
    failure = ScriptedFailure(rank, 100 + rank, 1, "", timestamp=int(t))
    return RankStateChanged(
        rank,
        RankState.RUNNING,
        new,
        100 + rank,
        exitcode=-15 if by_us else 1,
        signal_name="SIGTERM" if by_us else None,
        failure=failure,
        caused_by_us=by_us,
        t=t,
    )


def test_root_cause_is_the_earliest_failure_we_did_not_cause() -> None:
    run = RunView(scripted_info(4))
    run.apply(_failure(3, 50.0))
    run.apply(_failure(1, 40.0))
    run.apply(_failure(0, 10.0, by_us=True))
    assert run.root_cause() == 1
    # The rank we stopped is not a failure: it is listed apart.
    assert [v.rank for v in run.failures()] == [1, 3]
    assert [v.rank for v in run.stopped()] == [0]
    # The engine's verdict wins, unless it names a rank we stopped ourselves.
    run.apply(RunFinished(ScriptedResult(), 0, 3))
    assert run.root_cause() == 3
    run.root_cause_rank = 0
    assert run.root_cause() == 1
    assert run.exit_code() == 1


def test_model_follows_a_rank_through_escalation_and_restart() -> None:
    run = RunView(scripted_info(2))
    run.apply(RankStateChanged(0, RankState.STARTING, RankState.RUNNING, 7))
    run.apply(RankStats(0, 7, "running", 55.0, 2 << 30, 3, 0, (0,), 0, 1, 1.0, 1.0))
    assert run.ranks[0].cpu_history[-1] == 55.0 and run.ranks[0].numa_node == 1
    run.apply(EscalationScheduled((0,), "SIGTERM", 30.0, 130.0))
    assert run.ranks[0].countdown(100.5) == 30
    run.apply(_failure(0, 5.0, by_us=True))
    assert run.ranks[0].countdown(100.5) is None and run.ranks[0].exit_label == "SIGTERM"
    run.apply(RankRestarted(0, 8, 1, 0, False, "/o1", "/e1", "/j1"))
    run.apply(RankStateChanged(0, RankState.SIGNALLED, RankState.STARTING, 8, restart_count=1))
    view = run.ranks[0]
    assert view.pid == 8 and view.exitcode is None and view.failure is None
    assert [inc.stdout_path for inc in view.earlier] == [
        "/nonexistent/rankvisor/run_0/attempt_0/0/stdout.log"
    ]
    assert view.stdout_path == "/o1"


def test_escapes_are_neutralised_and_markup_is_text() -> None:
    hostile = "a\x1b]52;c;aGk=\x07b\x1b[31mred\x1b[0m\x1b[2J\x1b[H\x1bPq#0\x1b\\ \x07\x00z"
    assert safe_line(hostile) == "ab\x1b[31mred\x1b[0m z"
    assert safe_line("10%\r50%\r100%") == "100%"
    text = display_text("[bold]x[/bold] \x1b[1mB\x1b[0m")
    assert text.plain == "[bold]x[/bold] B"
    assert plain_text("\x1b[32mok\x1b[0m") == "ok"
    assert "\x1b" not in display_text("\x1b]0;title").plain


def test_traceback_text_is_parsed_into_frames() -> None:
    (stack,) = parse_callstack(TRACEBACK)
    assert [f.name for f in stack.frames] == ["<module>", "wrapper", "main", "train_step"]
    assert stack.frames[-1].code.startswith("raise FloatingPointError")
    assert stack.exception == "FloatingPointError: loss is nan at step 23 [rank2]"
    chained = TRACEBACK + (
        "\n\nThe above exception was the direct cause of the following exception:\n\n"
        'Traceback (most recent call last):\n  File "/x.py", line 1, in f\n    g()\n'
        "RuntimeError: wrapped"
    )
    first, second = parse_callstack(chained)
    assert (
        second.chained_by.startswith("The above exception")
        and second.exception == "RuntimeError: wrapped"
    )


def test_grid_shapes() -> None:
    assert choose_grid(4, 80, 21) == (2, 2)
    assert choose_grid(8, 160, 45) == (4, 2)
    assert choose_grid(16, 160, 45) == (4, 4)
    assert choose_grid(8, 80, 21) is None
    assert choose_grid(32, 300, 100) is None


def test_small_formatters() -> None:
    assert format_bytes(1536 * 1024 * 1024) == "1.5G" and format_bytes(512) == "512B"
    assert sparkline([0, 50, 100], 3) == " ▄█"
    assert parse_pattern("/lo+ss/")[1:3] == (True, False)  # type: ignore[index]
    assert parse_pattern("Loss")[2] is True  # type: ignore[index]
    assert parse_pattern("/(/") is None


def test_printed_summary_names_the_root_cause_with_its_traceback() -> None:
    run = RunView(scripted_info(4))
    for item in failure_script():
        run.apply(item)  # type: ignore[arg-type]
    text = format_summary(run)
    assert text.splitlines()[0].startswith(
        "rankvisor: trainer (4 ranks, attempt 0) did not succeed"
    )
    assert "root cause: rank 2 (pid 41002) exit 1" in text
    assert "FloatingPointError: loss is nan at step 23 [rank2]" in text
    assert "also failed: rank 0" in text
    assert "\x1b" not in text
    # A cause that says more than the exit code gets a line under its rank; plain ones not.
    from rankvisor.engine.forensics.exit_cause import ExitCause

    run.ranks[0].exit_cause = ExitCause("sigbus", "bus error (SIGBUS): often a too-small /dev/shm")
    run.ranks[2].exit_cause = ExitCause("exception", "raised FloatingPointError (exit code 1)")
    lines = format_summary(run).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  also failed: rank 0"))
    assert lines[at + 1] == "    bus error (SIGBUS): often a too-small /dev/shm"
    assert not [ln for ln in lines if "raised FloatingPointError (exit" in ln]


def test_printed_summary_blames_nobody_when_rankvisor_stopped_every_rank() -> None:
    run = RunView(scripted_info(2))
    run.apply(_failure(0, 10.0, by_us=True))
    run.apply(_failure(1, 11.0, by_us=True))
    run.apply(RunFinished(ScriptedResult(), 0, None))
    text = format_summary(run)
    assert run.root_cause() is None
    assert "no root cause: the run was stopped by rankvisor" in text
    assert "root cause: rank" not in text
    assert "stopped by rankvisor: rank 0" in text and "stopped by rankvisor: rank 1" in text


def test_scripted_restart_of_an_exited_rank_answers_like_the_supervisor() -> None:
    sup = ScriptedSupervisor(scripted_info(2), running_script(2, steps=3, with_stats=False))
    seen: list[object] = []
    sup.subscribe(seen.append)
    sup.start()
    assert sup.execute(KillRanks((0, 1))).ok
    assert sup.snapshot().finished
    seen.clear()
    result = sup.execute(RestartRank(0))
    assert result.ok
    assert result.message == "rank 0 had exited (signalled): starting it again"
    states = [(e.old, e.new) for e in seen if isinstance(e, RankStateChanged)]
    assert states == [
        (RankState.SIGNALLED, RankState.STARTING),
        (RankState.STARTING, RankState.RUNNING),
    ]
    kinds = [type(e).__name__ for e in seen if not isinstance(e, RankOutput)]
    assert kinds == ["RankStateChanged", "RankRestarted", "RankStateChanged"]
    snap = sup.snapshot()
    assert snap.ranks[0].state is RankState.RUNNING and snap.ranks[0].restart_count == 1
    assert not snap.finished
    # A running rank is restarted without a message, as by the Supervisor.
    assert sup.execute(RestartRank(0)) == CommandResult(True, "")


class _LogApp(App[None]):
    def __init__(self, buffer: LineBuffer) -> None:
        super().__init__()
        self.buffer = buffer

    def compose(self) -> ComposeResult:
        yield RankLog(self.buffer)


async def test_rank_log_renders_a_ring_of_100k_lines() -> None:
    buffer = LineBuffer(1000)
    app = _LogApp(buffer)
    async with app.run_test(size=(60, 10)) as pilot:
        log = app.query_one(RankLog)
        for start in range(0, 100_000, 5_000):
            buffer.extend("stdout", [f"line {i}" for i in range(start, start + 5_000)])
            log.sync()
        buffer.set_partial("stdout", "\x1b[32m 50%|#####\x1b[0m")
        log.sync()
        await pilot.pause()
        assert buffer.evicted == 99_000
        assert log.follow and log.scroll_y == log.max_scroll_y
        bottom = [log.render_line(y).text.rstrip() for y in range(log.size.height)]
        assert bottom[-2:] == ["line 99999", " 50%|#####"]
        # Scrolled up, the view holds still while the ring keeps evicting.
        log.scroll_to(y=log.max_scroll_y - 20, animate=False)
        await pilot.pause()
        assert not log.follow
        top = log.render_line(0).text.rstrip()
        buffer.extend("stdout", [f"more {i}" for i in range(10)])
        log.sync()
        await pilot.pause()
        assert log.render_line(0).text.rstrip() == top
        log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert log.follow
