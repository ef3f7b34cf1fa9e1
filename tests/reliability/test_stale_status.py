"""A status that is old says so, and nobody judges the ranks from it (issue 36.10).

While the supervisor was SIGSTOPped, viewers flagged every rank as a straggler (their lines
had stopped with it) and ``rankvisor status`` showed the last status as if it were now. The
rules, as tables, on a fake clock: ``status --json`` gives the status's age and whether the
supervisor answers, ``status`` says it in a line before the ranks; a viewer counts a rank's
silence (and a lone rank's quiet) only up to the last time the supervisor spoke and, past
``NOT_ANSWERING_S``, judges no rank at all. The real SIGSTOP is in test_supervisor_stops.py.
"""

from __future__ import annotations

import pytest
from rankvisor.engine import clock
from rankvisor.engine.control.registry import RunEntry
from rankvisor.engine.control.status import NOT_ANSWERING_S, status_age
from rankvisor.engine.events import RankOutput
from rankvisor.engine.states import RankState
from rankvisor.tui.cli.listing import status_json, status_text
from rankvisor.tui.model import RunView

from tests.scenarios import scripted_info

NOW = 1_700_000_000.0
ENTRY = RunEntry("r1", "/runs/r1", "/s.sock", 4242, 1, NOW - 100)


def _status(written_ago: float | None, **more: object) -> dict[str, object]:
    status: dict[str, object] = {"schema": 1, "run_id": "r1", "run_dir": "/runs/r1",
                                 "supervisor_pid": 4242, "state": "running", "ranks": []}
    if written_ago is not None:
        status["written_at"] = NOW - written_ago
    status.update(more)
    return status


@pytest.mark.parametrize(("state", "written_ago", "more", "age", "answering"), [
    ("running", 0.4, {}, 0.4, True),
    ("running", NOT_ANSWERING_S - 0.1, {}, NOT_ANSWERING_S - 0.1, True),
    ("running", 12.0, {}, 12.0, False),
    ("running", None, {}, None, None),  # an older status without the field: nothing said
    ("finished", 600.0, {"finished": True, "state": "finished"}, None, None),
    ("stale", 600.0, {}, None, None),  # its supervisor is gone: said otherwise already
])
def test_status_json_says_how_old_the_status_is(state: str, written_ago: float | None,
                                                more: dict[str, object], age: float | None,
                                                answering: bool | None) -> None:
    with clock.using(clock.FakeClock(wall=NOW)):
        out = status_json(ENTRY, state, _status(written_ago, **more))
    assert (out["status_age_s"], out["supervisor_answering"]) == (age, answering)


def test_status_says_it_before_the_ranks() -> None:
    with clock.using(clock.FakeClock(wall=NOW)):
        old = status_text(status_json(ENTRY, "running", _status(12.0)))
        fresh = status_text(status_json(ENTRY, "running", _status(0.5)))
    assert ("  status      12 s old: the supervisor (pid 4242) is not answering (stopped? "
            "kill -CONT 4242); the ranks below are as they were then, not judged") in old
    assert "not answering" not in fresh


def test_status_age_reads_written_at_then_updated() -> None:
    assert status_age({"written_at": NOW - 3}, NOW) == 3
    assert status_age({"updated": NOW - 2}, NOW) == 2
    assert status_age({"written_at": True}, NOW) is None
    assert status_age({"written_at": NOW + 5}, NOW) == 0.0  # a clock step back: not negative


def _talking(nprocs: int, until: int, quiet: tuple[int, ...] = ()) -> RunView:
    run = RunView(scripted_info(nprocs))
    for view in run.ranks:
        view.state = RankState.RUNNING
    for t in range(until):
        for r in range(nprocs):
            if r in quiet and t >= until // 2:
                continue  # this rank stopped writing half way
            run.add_output(RankOutput(r, "stdout", (f"step {t}",)))
            run.ranks[r].saw_output(float(t))
    return run


@pytest.mark.parametrize(("now", "silent_s", "quiet", "flagged"), [
    # Every rank wrote once a second up to 9 s; the supervisor went quiet at 10 s.
    (12.0, 2.0, (), set()),        # the ranks' lines stopped with the supervisor: no silence
    (30.0, 20.0, (), set()),       # not answering: nobody judged
    (30.0, 0.0, (), {0, 1, 2, 3}),  # the supervisor speaks, the ranks do not: all silent
    (12.0, 2.0, (3,), {3}),        # rank 3 went quiet at 5 s, while the supervisor spoke
    (30.0, 20.0, (3,), set()),     # ... but past NOT_ANSWERING_S no verdict stands
])
def test_a_viewer_judges_no_rank_from_a_supervisor_that_stopped_answering(
        now: float, silent_s: float, quiet: tuple[int, ...], flagged: set[int]) -> None:
    run = _talking(4, 10, quiet)
    run.supervisor_silent_s = silent_s
    run.update_progress(now)
    assert {v.rank for v in run.ranks if v.straggler} == flagged
    assert run.not_answering is (silent_s >= NOT_ANSWERING_S)


@pytest.mark.parametrize(("now", "silent_s", "quiet"), [
    (30.0, 0.0, 21),    # no peer has a cadence to compare with: quiet 21 s (from 9 s)
    (30.0, 3.0, 18),    # ... counted up to when the supervisor last spoke
    (30.0, 20.0, None),  # not answering: not said at all
])
def test_a_lone_rank_s_quiet_counts_until_the_supervisor_last_spoke(
        now: float, silent_s: float, quiet: int | None) -> None:
    run = _talking(1, 10)
    run.supervisor_silent_s = silent_s
    run.update_progress(now)
    assert run.ranks[0].quiet_for(now) == quiet


async def test_the_app_s_top_bar_says_the_supervisor_is_not_answering() -> None:
    from rankvisor.engine.testing import ScriptedSupervisor
    from rankvisor.tui.app import make_app
    from rankvisor.tui.widgets.run_summary import summary_text

    from tests.scenarios import running_script
    from tests.tui.test_app import SIZE, settle

    engine = ScriptedSupervisor(scripted_info(2), running_script(2))
    silent = [0.0]
    engine.silent_s = lambda: silent[0]  # type: ignore[attr-defined]  # as RemoteHandle's
    app = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        bar = summary_text(app.run_view, **app.summary_args()).plain
        assert "not answering" not in bar
        silent[0] = 12.0
        app._show(None)
        bar = summary_text(app.run_view, **app.summary_args()).plain
        assert "supervisor not answering (12 s): ranks as they were, not judged" in bar
        assert not any(v.straggler for v in app.run_view.ranks)
