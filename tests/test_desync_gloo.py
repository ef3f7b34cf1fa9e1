"""Collective desyncs on real gloo jobs, against torch's own analyser (``fr_trace``) on the
Flight Recorder dumps rankvisor saves (``collectives/fr`` and ``collectives/torchfrtrace``).

Five scenarios on 3 ranks (tests/bin/fr_gloo_job.py), rank 1 the odd one each time: it never
enters all_reduce #5 (missing); it enters a barrier as #5 (op mismatch, also named live,
before gloo's timeout); it stays a collective behind (behind); and, on the op run's saved
dumps with rank 1's #5 made an all_reduce of other sizes or of another dtype (gloo aborts a
real one before every rank's dump can be read), a size and a dtype mismatch. Our verdict
names the ranks torch's analyser does (the rule's table: tests/engine/test_collectives.py).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.events import RunFinished
from rankvisor.engine.forensics.collectives import parse_fr, verdicts
from rankvisor.engine.forensics.fr_dump import write_for_torchfrtrace
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, GLOO_JOBS, PYTHON, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch, GLOO_JOBS]

ARGS = {"missing": ("--skip", "1"), "op": ("--desync", "1", "--how", "op"),
        "behind": ("--behind", "1")}


def _torch_names(folder: Path) -> set[int]:
    """The ranks torch's analyser blames: its culprits and its missing ranks."""
    out = subprocess.run([PYTHON, "-m", "torch.distributed.flight_recorder.fr_trace",
                          str(folder), "--prefix", "rank_"],
                         capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    named = {int(r) for r in re.findall(r"Culprit rank (\d+)", text)}
    for group in re.findall(r"missing ranks: \{([\d, ]+)\}", text):
        named |= {int(r) for r in group.split(",")}
    return named


def _ours(dumps: dict[int, Any]) -> tuple[set[int], set[str]]:
    found = verdicts([parse_fr(r, d) for r, d in dumps.items()])
    return {r for v in found for r in v.missing}, {v.kind for v in found}


def _run(tmp_path: Path, case: str) -> tuple[Path, RunFinished, Any]:
    config = SupervisorConfig(
        entrypoint=PYTHON, args=("-u", str(BIN / "fr_gloo_job.py"), *ARGS[case],
                                 "--timeout", "10"),
        nprocs=3, log_dir=str(tmp_path), term_timeout=2.0, sample_interval=0,
    )
    live = None
    with Supervisor(config) as sup:
        if case == "op":
            live = wait_until(lambda: (r := sup.live_suspect) and r.suspect and r, timeout=60)
        finished = sup.wait(timeout=120)
        run_dir = Path(sup.snapshot().log_dir)
    assert isinstance(finished, RunFinished)
    return run_dir / "collectives", finished, live


@pytest.mark.parametrize("case", list(ARGS))
def test_our_verdict_names_the_ranks_torch_s_analyser_does(tmp_path: Path, case: str) -> None:
    saved, finished, live = _run(tmp_path, case)
    # What rankvisor said at the first failure, from the readings whose dumps it saved.
    (first,) = [c for p in saved.glob("2*.json")
                if (c := json.loads(p.read_text()))["reason"].endswith(" failed")]
    ours = {r for v in first["verdicts"] for r in v["missing"]}
    assert ours == _torch_names(saved / "torchfrtrace") == {1}
    assert {v["kind"] for v in first["verdicts"]} == ({"desync"} if case == "op"
                                                       else {"missing"})
    s = finished.suspect
    assert s is not None and s.rank == 1 and s.kind == "collective", s
    if case != "op":
        return
    assert s.reason.startswith("rank 1: entered barrier #5 on pg 0 where ranks 0 and 2 "
                               "entered all_reduce #5 (a desync"), s.reason
    assert live.suspect.rank == 1 and "desync" in live.suspect.reason  # before the timeout
    dumps = {r: json.loads((saved / "fr" / f"{r}.json").read_text()) for r in range(3)}
    for how in ("size", "dtype"):
        changed = copy.deepcopy(dumps)
        entry = next(e for e in changed[1]["entries"] if e["collective_seq_id"] == 5)
        like = next(e for e in changed[0]["entries"] if e["collective_seq_id"] == 5)
        for key in ("profiling_name", "input_sizes", "output_sizes", "input_dtypes",
                    "output_dtypes"):
            entry[key] = copy.deepcopy(like[key])
        if how == "size":
            entry["input_sizes"] = entry["output_sizes"] = [[8]]
        else:
            entry["input_dtypes"] = entry["output_dtypes"] = ["Double"]
        folder = tmp_path / how
        write_for_torchfrtrace(str(folder), changed)
        assert _ours(changed) == ({1}, {"desync"}), how
        assert _torch_names(folder) == {1}, how
