"""The headless console's main thread sleeps until the run has news for it: the run's end or
a rank's unfinished line (a progress frame it may owe the console); output, stats, notices
and state changes are printed on the thread that publishes them and never wake it (a signal
reaches it through its handler: tests/reliability/test_console_pipes.py)."""

from __future__ import annotations

import io

from rankvisor.engine.entry.headless import _HeadlessPrinter
from rankvisor.engine.events import (
    RankOutput,
    RankStateChanged,
    RankStats,
    RunFinished,
    SupervisorNotice,
)
from rankvisor.engine.result import RunProcsResult
from rankvisor.engine.states import RankState
from rankvisor.engine.std import Std
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import PYTHON


def _printer() -> tuple[_HeadlessPrinter, io.StringIO]:
    config = SupervisorConfig(entrypoint=PYTHON, args=("-c", "pass"), nprocs=2, tee=Std.ALL)
    out = io.StringIO()
    return _HeadlessPrinter(config, {}, out, io.StringIO()), out


def test_what_wakes_the_main_thread() -> None:
    printer, _ = _printer()
    rows = [  # (event, news)
        (RankOutput(0, "stdout", ("a line",)), False),
        (RankStats(rank=0, pid=1, status="sleeping", cpu_percent=0.0, rss_bytes=0,
                   num_threads=1, num_descendants=0, cpu_affinity=(), cpu_num=None,
                   numa_node=None, uptime_s=1.0, t=0.0), False),
        (RankOutput(1, "stdout", (), partial="epoch 1:  10%"), True),
        (SupervisorNotice("got SIGTERM: stopping all ranks", "warning"), False),
        (RankStateChanged(0, RankState.STARTING, RankState.RUNNING, pid=1), False),
        (RunFinished(RunProcsResult(return_values={0: None, 1: None}), 0, None), True),
    ]
    for event, news in rows:
        printer.news.clear()
        printer(event)
        assert printer.news.is_set() is news, event


def test_a_frame_is_owed_until_the_console_shows_it() -> None:
    printer, out = _printer()
    assert not printer.frames_owed()
    printer(RankOutput(0, "stdout", (), partial="epoch 1:  10%"))
    printer.tick()
    printer(RankOutput(0, "stdout", (), partial="epoch 1:  20%"))  # within the second
    assert printer.frames_owed()
    printer(RankOutput(0, "stdout", ("epoch 1: done",)))
    assert not printer.frames_owed()
    assert "done" in out.getvalue()
