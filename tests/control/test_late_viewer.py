"""Issue 22: a viewer that attached late lost the live progress bar: rank 0's pane ended at
a line from before and its header said "step 20" where the first viewer showed "train 14%
... 29/200". The unfinished last line (a bar redrawn with \\r) is part of what it gets."""

from __future__ import annotations

from pathlib import Path

from rankvisor.engine.control.client import recent_output
from rankvisor.engine.forensics.progress import Progress
from rankvisor.engine.rundir.arrival import ArrivalWriter, arrival_path
from rankvisor.engine.states import RankState
from rankvisor.tui.model import RunView

from tests.scenarios import scripted_info


def test_a_late_viewer_gets_the_unfinished_bar_after_the_lines(tmp_path: Path) -> None:
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    out.write_bytes(b"rank 0/4: gloo process group up\n\rstep   20 | loss 0.28\n"
                    b"\rtrain  14%|##   | 28/200\rtrain  14%|##   | 29/200")
    err.write_bytes(b"UserWarning: rank 0: WARNING grad norm 12 (step 25)\n")
    index = ArrivalWriter(arrival_path(str(out), str(err)))
    index.note(0, 2)
    index.note(1, 1)
    index.close()
    batches, counts = recent_output(0, 0, str(out), str(err), 100)
    assert counts == {"stdout": 2, "stderr": 1}
    assert [(b.stream, b.lines, b.partial) for b in batches] == [
        ("stdout", ("rank 0/4: gloo process group up", "step   20 | loss 0.28"), ""),
        ("stderr", ("UserWarning: rank 0: WARNING grad norm 12 (step 25)",), ""),
        ("stdout", (), "train  14%|##   | 29/200"),
    ]
    run = RunView(scripted_info(1))
    run.ranks[0].state = RankState.RUNNING
    for batch in batches:
        run.apply(batch)
    run.update_progress(0.0)
    assert run.ranks[0].buffer.partial == "train  14%|##   | 29/200"
    assert run.ranks[0].shown_progress == Progress("tqdm", 29, 200)
