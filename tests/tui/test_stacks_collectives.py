"""``S`` on a real gloo hang (tests/bin/fr_gloo_job.py --skip 1 --heartbeat, 3 ranks): the
stacks view shows, above the merged stacks, the verdict of torch's Flight Recorder (rank 1
never entered all_reduce #5) and one row per rank, rank 1's marked odd; once no rank runs,
``S`` shows the collectives last saved, when and why. The table's layout is tested on a
recorded answer: 3, 8 and 64 ranks (folded) at 80 columns."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.server import ControlServer
from rankvisor.engine.handle import SupervisorHandle, TerminateRanks
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import RankvisorApp, make_app
from rankvisor.tui.screens.stacks import StacksScreen
from rankvisor.tui.widgets.collectives_table import collectives_view, table_rows
from rich.console import Console, RenderableType
from textual.widgets import Static

from tests.conftest import BIN, PYTHON
from tests.scenarios import recorded_collectives, recorded_stacks, running_script, scripted_info

from .conftest import open_stacks, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.gloo]

VERDICT = ("all_reduce #5 on pg 0 (default_pg): ranks 0 and 2 entered it; rank 1 did not "
           "(its last was #4)")


def plain(renderable: RenderableType, width: int = 80) -> list[str]:
    """``renderable`` as the lines a terminal ``width`` columns wide shows."""
    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def shown(screen: StacksScreen, width: int = 200) -> list[str]:
    return plain(screen.query_one("#stacks-collectives", Static).content, width)  # type: ignore[arg-type]


@pytest.mark.torch
@pytest.mark.parametrize("over", ["in-process", "socket"])
async def test_s_on_a_real_gloo_hang_names_the_rank_that_never_entered(
    tmp_path: Path, over: str
) -> None:
    """In the supervisor's own process, and as a read-only viewer over its control socket
    (the collectives pause nobody: such a viewer may ask)."""
    sup = Supervisor(SupervisorConfig(
        entrypoint=PYTHON,
        args=("-u", str(BIN / "fr_gloo_job.py"), "--skip", "1", "--heartbeat", "--timeout",
              "120"),
        nprocs=3, log_dir=str(tmp_path / "logs"), term_timeout=2.0, sample_interval=0,
    ))
    server: ControlServer | None = None
    handle: SupervisorHandle = sup
    if over == "socket":
        sock_dir = tempfile.mkdtemp(dir="/tmp", prefix="rvs")  # sun_path is 108 bytes
        server = ControlServer(sup, os.path.join(sock_dir, "c.sock"))
        server.start()
        sup.start()
        handle = RemoteHandle.connect(server.socket_path, read_only=True)
    app = RankvisorApp(handle)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            # The hang: ranks 0 and 2 wait in all_reduce #5 (the supervisor's own poll of
            # their Flight Recorders says so), rank 1 sleeps before it.
            watch = sup.collectives
            assert watch is not None
            await wait_for(pilot, lambda: [v.seq for v in watch.verdicts()] == [5],
                           timeout=120)
            await pilot.press("S")
            screen = app.screen
            assert isinstance(screen, StacksScreen)
            await wait_for(pilot, lambda: screen.collectives is not None, timeout=30)
            assert screen.collectives is not None and screen.collectives.ok, screen.collectives
            lines = shown(screen)
            assert lines[0] == "collectives · torch's Flight Recorder · asked now"
            assert lines[1] == VERDICT
            rows = [line.split() for line in lines[3:6]]
            assert rows == [
                ["0", "0", "(default_pg)", "all_reduce", "#5", "-", "all_reduce", "#4"],
                ["odd", "1", "0", "(default_pg)", "all_reduce", "#4", "-", "all_reduce", "#4"],
                ["2", "0", "(default_pg)", "all_reduce", "#5", "-", "all_reduce", "#4"],
            ], lines
            # Asked, it was saved with the run (as the dump is), where a dead run reads it.
            data = screen.collectives.data
            assert data is not None and Path(data["path"]).is_file()
            await wait_for(pilot, lambda: not screen.busy, timeout=60)  # the dump's turn

            assert sup.execute(TerminateRanks()).ok
            await wait_for(pilot, lambda: not app.run_view.alive, timeout=60)
            await pilot.press("escape")
            await pilot.press("S")
            dead = app.screen
            assert isinstance(dead, StacksScreen) and dead is not screen
            await wait_for(pilot, lambda: dead.collectives is not None, timeout=10)
            lines = shown(dead)
            assert lines[0].startswith("collectives · torch's Flight Recorder · saved at "), lines
            assert VERDICT in lines, lines
    finally:
        if server is not None:
            handle.detach()
            server.close()
            shutil.rmtree(os.path.dirname(server.socket_path), ignore_errors=True)
        sup.shutdown(timeout_s=2.0)


def test_the_table_fits_80_columns_and_folds_64_ranks() -> None:
    three = plain(collectives_view(recorded_collectives(3), "asked now"))
    assert three[1:3] == [
        "all_reduce #5 on pg 0 (default_pg): ranks 0 and 2 entered it; rank 1 did not",
        "(its last was #4)",
    ]
    assert three[3].split() == ["rank", "pg", "enqueued", "started", "completed"]
    assert [line[:3] for line in three[4:]] == ["   ", "odd", "   "]

    eight = plain(collectives_view(recorded_collectives(8), "asked now"))
    assert len(eight) == 4 + 8 and all(len(line) <= 80 for line in eight)
    assert [r.ranks for r in table_rows(recorded_collectives(8))] == [(r,) for r in range(8)]

    data = recorded_collectives(64, skipped=1)
    data["ranks"][5] = {"rank": 5, "groups": [], "error": "worker server: the rank is gone"}
    rows = table_rows(data)
    assert [(r.ranks[:2], len(r.ranks), r.odd) for r in rows] == [
        ((1,), 1, True), ((0, 2), 62, False)]
    lines = plain(collectives_view(data, "asked now"))
    assert all(len(line) <= 80 for line in lines), lines
    assert lines == [
        "collectives · torch's Flight Recorder · asked now",
        "all_reduce #5 on pg 0 (default_pg): 63 ranks (0, 2-63) entered it; rank 1 did",
        "not (its last was #4)",
        "     rank          pg              enqueued       started  completed",
        "odd  1             0 (default_pg)  all_reduce #4  -        all_reduce #4",
        "     62 ranks      0 (default_pg)  all_reduce #5  -        all_reduce #4",
        "     0, 2-4, 6-63",
        "rank 5: worker server: the rank is gone",
    ]


async def test_a_handle_that_cannot_ask_says_so(tmp_path: Path) -> None:
    """A run whose ranks serve no Flight Recorder (the scripted double without a recorded
    answer stands for one): one line says why, and the stacks show below as before."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), stacks=recorded_stacks())
    app = make_app(engine)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_stacks(app, pilot)
        assert shown(screen) == ["no collectives: no rank of this run serves torch's Flight "
                                 "Recorder (it was started with --no-collectives, or no rank "
                                 "is a Python script)"]
