"""A rank under rankvisor's bootstrap (its worker server on) sees what it sees under
torchrun: ``sys.argv``, ``__file__``, ``sys.path[0]``, ``__main__``'s spec, its signal
handlers, and a DataLoader's 2 workers started by spawn, on 2 gloo ranks; its exit code is
torchrun's. Run from another directory with a relative script path, as a person would."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, PYTHON

pytestmark = [pytest.mark.processes, pytest.mark.gloo, pytest.mark.torch]


def _seen(tool: list[str], cwd: Path, log_dir: Path) -> list[dict]:
    script = os.path.relpath(BIN / "observe_job.py", cwd)
    done = subprocess.run(
        [PYTHON, "-m", *tool, "--nproc-per-node", "2", "--log-dir", str(log_dir), "--tee", "3",
         script, "--flag", "x"],
        cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = []
    for line in done.stdout.splitlines():
        at = line.find("{")
        if at >= 0 and '"argv"' in line:
            found.append(json.loads(line[at:]))
    return sorted(found, key=lambda d: d["rank"])


def test_the_script_sees_under_rankvisor_what_it_sees_under_torchrun(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    theirs = _seen(["torch.distributed.run"], cwd, tmp_path / "torch")
    # --no-faulthandler: rankvisor's PYTHONFAULTHANDLER=1 (a documented default of its own,
    # not the bootstrap's) puts C handlers on SIGSEGV and its kin.
    ours = _seen(["rankvisor.tui", "run", "--headless", "--no-faulthandler"], cwd,
                 tmp_path / "ours")
    assert len(theirs) == len(ours) == 2
    diffs = [{k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)}
             for a, b in zip(ours, theirs, strict=True)]
    assert diffs == [{}, {}]
    # Both DataLoader workers ran, each seeing the script as its __mp_main__.
    assert [w[:2] for w in ours[0]["workers"]] == [[0, "__mp_main__"], [1, "__mp_main__"],
                                                    [0, "__mp_main__"], [1, "__mp_main__"]]
    # Under rankvisor each rank ran under the bootstrap with its worker server.
    (env_json,) = (tmp_path / "ours").glob("*/attempt_0/0/env.json")
    assert "RANKVISOR_WORKER_SOCKET" in env_json.read_text()
