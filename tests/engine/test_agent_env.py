"""The per-rank environment matches what torch's LocalElasticAgent gives a worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.supervisor.agent_env import (
    RESTART_COUNT_ENV,
    EnvOptions,
    build_rank_env,
    build_rank_envs,
    free_port,
    log_line_prefixes,
    port_in_use,
    virtual_local_rank_env,
)

pytestmark = pytest.mark.processes

AGENT_KEYS = {
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}


def test_every_agent_variable_with_its_meaning() -> None:
    opts = EnvOptions(nprocs=3, role="trainer", run_id="r1", master_port=1234, max_restarts=2)
    envs = build_rank_envs(opts, restart_count=1, parent_env={})
    assert sorted(envs) == [0, 1, 2]
    e = envs[2]
    assert AGENT_KEYS <= set(e)
    assert (e["LOCAL_RANK"], e["RANK"], e["ROLE_RANK"], e["GROUP_RANK"]) == ("2", "2", "2", "0")
    assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["ROLE_WORLD_SIZE"]) == ("3", "3", "3")
    assert e["GROUP_WORLD_SIZE"] == "1"
    assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("127.0.0.1", "1234")
    assert e["ROLE_NAME"] == "trainer"
    assert e["TORCHELASTIC_RESTART_COUNT"] == "1"
    assert e["TORCHELASTIC_MAX_RESTARTS"] == "2"
    assert e["TORCHELASTIC_RUN_ID"] == "r1"
    assert e["TORCHELASTIC_USE_AGENT_STORE"] == "False"
    assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert e[RESTART_COUNT_ENV] == "1"


def test_copied_and_defaulted_from_the_parent() -> None:
    parent = {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
        "OMP_NUM_THREADS": "7",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "PYTHONUNBUFFERED": "",
    }
    e = build_rank_env(EnvOptions(nprocs=2), 0, parent_env=parent)
    assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
    assert e["OMP_NUM_THREADS"] == "7"
    assert e["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert "PYTHONUNBUFFERED" not in e  # the user's own setting (even empty) wins
    assert e["PYTHONFAULTHANDLER"] == "1"


def test_omp_threads_default_only_with_several_ranks() -> None:
    assert build_rank_env(EnvOptions(nprocs=2), 1, parent_env={})["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in build_rank_env(EnvOptions(nprocs=1), 0, parent_env={})
    assert "CUDA_VISIBLE_DEVICES" not in build_rank_env(EnvOptions(nprocs=1), 0, parent_env={})


def test_python_helpers_can_be_turned_off() -> None:
    opts = EnvOptions(nprocs=1, unbuffered=False, faulthandler=False)
    e = build_rank_env(opts, 0, parent_env={})
    assert "PYTHONUNBUFFERED" not in e and "PYTHONFAULTHANDLER" not in e
    e = build_rank_env(EnvOptions(nprocs=1), 0, parent_env={})
    assert e["PYTHONUNBUFFERED"] == "1" and e["PYTHONFAULTHANDLER"] == "1"


def test_log_line_prefix_template() -> None:
    assert log_line_prefixes(None, "default", 2) is None
    got = log_line_prefixes("[${role_name}-${local_rank}:${rank}] $other", "w", 2)
    assert got == {0: "[w-0:0] $other", 1: "[w-1:1] $other"}


def test_free_port_and_port_in_use() -> None:
    port = free_port()
    assert not port_in_use("127.0.0.1", port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert port_in_use("127.0.0.1", s.getsockname()[1])


DUMP_ENV = (
    "import json, os, sys; json.dump(dict(os.environ), "
    "open(sys.argv[1] + '/' + os.environ['LOCAL_RANK'] + '.json', 'w'))"
)


@pytest.mark.torch
def test_same_variables_as_torchrun(tmp_path: Path) -> None:
    """Differential: torchrun's workers get the same agent variables with the same values."""
    script = tmp_path / "dump.py"
    script.write_text(DUMP_ENV)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    port = free_port()
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-id", "same",
        "--max-restarts", "1", "--role", "trainer", str(script), str(tmp_path),
    ]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
    for rank in (0, 1):
        theirs = json.loads((tmp_path / f"{rank}.json").read_text())
        opts = EnvOptions(
            nprocs=2, role="trainer", run_id="same", master_port=port, max_restarts=1,
            use_agent_store=theirs["TORCHELASTIC_USE_AGENT_STORE"] == "True",
        )
        ours = build_rank_env(opts, rank, parent_env=env)
        for key in AGENT_KEYS | {"OMP_NUM_THREADS"}:
            if key == "MASTER_ADDR":
                continue  # torchrun's static rendezvous may resolve the host name
            assert ours[key] == theirs[key], key


VIRTUAL_LOCAL_RANK = [
    # (local rank, the launcher's CUDA_VISIBLE_DEVICES, what the rank sees or the error)
    (0, None, "0"),
    (3, None, "3"),
    (1, "4,5,6", "5"),
    (2, "4, 5, 6", "6"),
    (1, "GPU-aa,GPU-bb", "GPU-bb"),
    (0, "", ""),
    (2, "4,5", ValueError),
    (1, "", ValueError),
    (1, "7,", ""),
]


@pytest.mark.parametrize(("local_rank", "visible", "expected"), VIRTUAL_LOCAL_RANK)
def test_virtual_local_rank_narrows_as_torchs_agent(
        local_rank: int, visible: str | None, expected: object,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    theirs: dict[str, str | None] = {}
    spec = SimpleNamespace(virtual_local_rank=True)
    if expected is ValueError:
        with pytest.raises(ValueError) as torch_error:
            LocalElasticAgent._set_local_rank_env(None, theirs, local_rank, spec)  # type: ignore[arg-type]
        with pytest.raises(ValueError) as ours:
            virtual_local_rank_env(local_rank, visible)
        assert str(ours.value) == str(torch_error.value)
        return
    LocalElasticAgent._set_local_rank_env(None, theirs, local_rank, spec)  # type: ignore[arg-type]
    assert virtual_local_rank_env(local_rank, visible) == theirs
    assert theirs == {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": expected}
    opts = EnvOptions(nprocs=local_rank + 1, virtual_local_rank=True)
    parent = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    env = build_rank_env(opts, local_rank, parent_env=parent)
    assert (env["LOCAL_RANK"], env["RANK"], env["CUDA_VISIBLE_DEVICES"]) == (
        "0", str(local_rank), expected)
