"""A viewer of every node's ranks: panes titled with the job's rank, its node and host."""

from __future__ import annotations

import dataclasses

from rankvisor.engine.testing import ScriptedSupervisor
from rankvisor.tui.app import make_app
from rankvisor.tui.model import RunView

from tests.scenarios import running_script, scripted_info

PLACES = {r: f"node {r // 2} (node0{r // 2 + 1})" for r in range(4)}


def _info():  # type: ignore[no-untyped-def]
    return dataclasses.replace(scripted_info(4), node="node 0 of 2 (node01), every node's ranks",
                               rank_places=PLACES)


def test_the_model_takes_each_ranks_place() -> None:
    view = RunView(_info())
    assert [r.place for r in view.ranks] == [PLACES[r] for r in range(4)]
    # The ranks are the job's already: no "(local N)" from a rank base.
    assert all(r.global_rank is None for r in view.ranks)


async def test_the_panes_name_the_node_and_host() -> None:
    from rankvisor.tui.widgets.rank_pane import RankPane

    app = make_app(ScriptedSupervisor(_info(), running_script(4)))
    async with app.run_test(size=(120, 36)) as pilot:
        for _ in range(3):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause(0.05)
        titles = sorted(str(p.border_title) for p in app.query(RankPane))
    assert any("rank 3 · node 1 (node02)" in t for t in titles), titles
    assert any("rank 0 · node 0 (node01)" in t for t in titles), titles
