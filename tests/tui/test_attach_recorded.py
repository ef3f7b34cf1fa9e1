"""``attach`` on a run that is over: the same views, from its record and its files.

A real supervisor process runs a job whose rank 1 fails and then ends; the app opened on its
``RecordedRun`` shows every rank's last lines, the failure in the error view, and refuses
commands with the reason, as a person attaching the morning after would see it.
"""

from __future__ import annotations

import pytest
from rankvisor.engine.control.replay import RecordedRun
from rankvisor.engine.entry.daemon import Request
from rankvisor.engine.entry.spawn import start_supervisor
from rankvisor.engine.handle import TerminateRanks
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor.run_config import SupervisorConfig
from rankvisor.tui.app import make_app
from rankvisor.tui.screens.errors import ErrorsScreen

from tests.conftest import BIN, PYTHON, wait_until
from tests.tui.conftest import wait_for

pytestmark = pytest.mark.processes


@pytest.mark.asyncio
async def test_a_finished_run_opens_from_its_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = SupervisorConfig(
        entrypoint=PYTHON,
        args=("-u", str(BIN / "sv_rank.py"), "--print", "5", "--exit", "3", "--after", "0.3",
              "--only-rank", "1"),
        nprocs=2,
        log_dir=str(tmp_path / "logs"),
        term_timeout=2,
    )
    started = start_supervisor(Request(config, expect_viewer=False))
    wait_until(lambda: started.process.poll() is not None, timeout=60)

    handle = RecordedRun.open(started.run_dir)
    assert handle.finished_cleanly
    app = make_app(handle, sync_start=False)
    async with app.run_test(size=(120, 36)) as pilot:
        run = app.run_view
        await wait_for(pilot, lambda: run.finished, timeout=10)
        assert run.ranks[1].state is RankState.FAILED and run.ranks[1].exitcode == 3
        assert run.ranks[0].state.is_final and run.ranks[0].caused_by_us  # the teardown
        assert run.root_cause_rank == 1
        # The panes hold the lines from the files.
        await wait_for(pilot, lambda: run.ranks[1].lines_seen >= 5, timeout=10)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorsScreen), timeout=10)
        result = handle.execute(TerminateRanks(None))
        assert not result.ok and "finished" in result.message
