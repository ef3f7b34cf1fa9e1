"""The ranks never inherit the supervisor's secrets (issue 36, the cluster key).

``RANKVISOR_CLUSTER_KEY`` is what a node's cluster door derives its secret from: a rank (the
job's code, or a person at its debugger) that read it could drive every rank of the job. A
real ``rankvisor run --headless`` with the key in its environment, a rank printing its whole
``os.environ``: the key is in no line the rank printed and in no file of the run, while a
variable beside it is inherited as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.cluster.door_key import ENV_KEY
from rankvisor.engine.names.private_env import NOT_FOR_RANKS, inherited

from tests.reliability.cli_runs import ROOT

pytestmark = pytest.mark.processes

KEY = "k36-cluster-key-" + "0123456789abcdef" * 2
PRINT_ENV = "import os; print(sorted(os.environ.items()), flush=True)"


def test_a_rank_printing_its_environment_shows_no_cluster_key(tmp_path: Path) -> None:
    env = dict(os.environ, RANKVISOR_CLUSTER_KEY=KEY, K36_BESIDE="inherited-as-before")
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--log-dir", str(logs),
         "--nproc-per-node", "1", "--no-python", sys.executable, "-c", PRINT_ENV],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "inherited-as-before" in done.stdout  # the rank did print its environment
    assert KEY not in done.stdout and ENV_KEY not in done.stdout
    for root, _dirs, files in os.walk(logs):
        for name in files:
            text = Path(root, name).read_bytes()
            assert ENV_KEY.encode() not in text and KEY.encode() not in text, name


def test_what_a_rank_inherits() -> None:
    given = {ENV_KEY: KEY, "PATH": "/bin", "RANKVISOR_STATE_DIR": "/s", "CLUSTER_KEY": "x"}
    assert inherited(given) == {"PATH": "/bin", "RANKVISOR_STATE_DIR": "/s", "CLUSTER_KEY": "x"}
    assert ENV_KEY in NOT_FOR_RANKS
