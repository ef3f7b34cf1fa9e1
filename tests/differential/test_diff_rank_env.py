"""The rank environment under ``rankvisor run --headless`` is torchrun's for the same argv
and environment: one tiny job that dumps what it sees, through both launchers.

The variables kept different on purpose (engine/README.md) are listed with their reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, PYTHON

pytestmark = [pytest.mark.processes, pytest.mark.torch]

KEPT_DIFFERENT = {
    "TORCHELASTIC_RUN_ID": "one node: a fresh uuid per run, the run dir's name (torch: none)",
    "TORCHELASTIC_USE_AGENT_STORE": "one node: rank 0 hosts the store, there is no agent",
    "TORCHELASTIC_ERROR_FILE": "a path under each launcher's own log dir",
    "MASTER_PORT": "each launcher is given its own port (compared with the one given)",
}

_CLEARED = ("PET_", "SLURM_", "SKYPILOT_", "TORCHELASTIC_", "OMP_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES")


def _dump(tool: list[str], out: Path, port: int, flags: list[str], env: dict[str, str],
          ) -> dict[int, dict[str, str]]:
    out.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    pet_port = {"PET_MASTER_PORT": str(port)} if "PET_MASTER_PORT" in env else {}
    given = [] if pet_port else ["--master-port", str(port)]
    done = subprocess.run(
        [PYTHON, "-m", *tool, *given, *flags, str(BIN / "env_dump.py"), str(out)],
        env={**base, **env, **pet_port}, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = {int(p.name.split(".")[1]): json.loads(p.read_text()) for p in out.glob("env.*")}
    for seen in found.values():
        assert seen.pop("MASTER_PORT") == str(port)
    return found


SCENARIOS = {
    "flags and two PET_": (["--nproc-per-node", "2"],
                           {"PET_MAX_RESTARTS": "2", "PET_ROLE": "trainer"}),
    "PET_ only, OMP given": ([], {"PET_NPROC_PER_NODE": "3", "PET_MASTER_PORT": "",
                                  "PET_MAX_RESTARTS": "1", "PET_ROLE": "eval",
                                  "PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGUSR1",
                                  "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "1,0"}),
    "virtual local rank": (["--nproc-per-node", "3"],
                           {"PET_VIRTUAL_LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4, 5,6,7",
                            "PET_MAX_RESTARTS": "0", "PET_ROLE": "default"}),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_rank_environment_is_torchruns(name: str, tmp_path: Path) -> None:
    from rankvisor.engine.supervisor.agent_env import free_port

    flags, env = SCENARIOS[name]
    theirs = _dump(["torch.distributed.run"], tmp_path / "torch", free_port(), flags, env)
    ours = _dump(["rankvisor.tui", "run", "--headless"], tmp_path / "ours", free_port(),
                 flags, env)
    assert sorted(theirs) == sorted(ours) == list(range(len(theirs))) and theirs
    for rank in theirs:
        t = {k: v for k, v in theirs[rank].items() if k not in KEPT_DIFFERENT}
        o = {k: v for k, v in ours[rank].items() if k not in KEPT_DIFFERENT}
        assert o == t, rank
    assert theirs[0]["TORCHELASTIC_MAX_RESTARTS"] == env["PET_MAX_RESTARTS"]
    assert theirs[0]["ROLE_NAME"] == env["PET_ROLE"]
    if "PET_VIRTUAL_LOCAL_RANK" in env:
        assert [ours[r]["LOCAL_RANK"] for r in sorted(ours)] == ["0", "0", "0"]
        assert [ours[r]["CUDA_VISIBLE_DEVICES"] for r in sorted(ours)] == ["4", "5", "6"]


def test_virtual_local_rank_past_the_visible_devices_is_one_line(tmp_path: Path) -> None:
    """torch raises a ValueError out of its agent once the ranks start; ours refuses first."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    done = subprocess.run(
        [PYTHON, "-m", "rankvisor.tui", "run", "--headless", "--virtual-local-rank",
         "--nproc-per-node", "3", str(BIN / "env_dump.py"), str(tmp_path)],
        env={**base, "CUDA_VISIBLE_DEVICES": "0,1"}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "CUDA_VISIBLE_DEVICES=0,1 lists 2 devices" in done.stderr
    assert not list(tmp_path.glob("env.*"))
