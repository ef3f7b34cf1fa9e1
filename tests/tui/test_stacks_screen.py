"""``S`` on the real Supervisor: py-spy reads real ranks, the screen shows the merged groups
with the odd rank first and open, ``S`` again makes a second dump, and the error view lists
both files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rankvisor.engine.forensics.stacks import find_py_spy, list_dumps
from rankvisor.engine.handle import TerminateRanks
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.tui.app import RankvisorApp
from rankvisor.tui.report import format_summary
from rankvisor.tui.screens.errors import ErrorsScreen
from rankvisor.tui.screens.stacks import StacksScreen
from textual.widgets import Collapsible, Static

from tests.conftest import BIN

from .conftest import wait_for

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed"),
]


async def test_s_shows_the_merged_stacks_of_real_ranks(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    sup = Supervisor(SupervisorConfig(
        entrypoint=sys.executable, args=("-u", str(BIN / "stack_waiter.py"), str(ready), "0"),
        nprocs=3, log_dir=str(tmp_path / "logs"), term_timeout=1.0, sample_interval=0,
    ))
    app = RankvisorApp(sup)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(pilot, lambda: len(list(ready.iterdir())) == 3, timeout=30)
            await pilot.press("S")
            screen = app.screen
            assert isinstance(screen, StacksScreen)
            await wait_for(pilot, lambda: screen.dump is not None, timeout=30)
            groups = list(screen.query(Collapsible))
            assert [g.title for g in groups] == [
                "odd · rank 0: stuck_in_data_loader <- main",
                "ranks 1, 2: wait_in_collective <- main",
            ]
            assert groups[0].has_class("-odd") and not groups[0].collapsed
            assert groups[1].collapsed and not groups[1].has_class("-odd")
            frames = str(groups[0].query_one(".stack-frames", Static).render())
            assert frames.startswith("stuck_in_data_loader (stack_waiter.py:")
            assert screen.dump is not None
            first = screen.dump.path
            assert first in str(screen.query_one("#stacks-path", Static).render())

            await pilot.press("S")  # again, from the stacks screen
            await wait_for(pilot, lambda: screen.dump is not None and screen.dump.path != first,
                           timeout=30)
            assert len(list_dumps(sup.snapshot().log_dir)) == 2

            await pilot.press("e")
            errors = app.screen
            assert isinstance(errors, ErrorsScreen)
            await wait_for(pilot, lambda: errors.query(".stack-dumps"), timeout=10)
            text = str(errors.query_one(".stack-dumps", Static).render())
            assert "Stack dumps (2)" in text and "odd  rank 0: stuck_in_data_loader" in text
            assert Path(first).name in text

            # Issue 22: once no rank runs, S showed "no running rank to dump" over a blank
            # view: it shows the newest saved dump, when and why it was taken.
            assert sup.execute(TerminateRanks()).ok
            await wait_for(pilot, lambda: not app.run_view.alive, timeout=30)
            await pilot.press("S")
            stacks = app.screen
            assert isinstance(stacks, StacksScreen)
            await wait_for(pilot, lambda: stacks.dump is not None, timeout=10)
            head = str(stacks.query_one("#stacks-head", Static).render())
            assert head.startswith("no rank runs: the last dump saved, at "), head
            assert ", asked: 3 rank(s)" in head, head
            titles = [g.title for g in stacks.query(Collapsible)]
            assert titles[0] == "odd · rank 0: stuck_in_data_loader <- main", titles
            assert stacks.dump is not None and stacks.dump.path != first  # the newest
            # The summary printed after quitting names the dumps taken during the run.
            summary = format_summary(app.run_view)
            assert f"  stacks saved: {first}\n" in summary
            assert f"  stacks saved: {stacks.dump.path}\n" in summary
    finally:
        sup.shutdown(timeout_s=1.0)
