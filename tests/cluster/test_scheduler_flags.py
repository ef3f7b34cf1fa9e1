"""``rankvisor run`` under Slurm and SkyPilot: the scheduler fills the flags a person left
out, beneath the command line and torchrun's PET_* variables, and says so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from rankvisor.engine.supervisor.run_config import ConfigError
from rankvisor.tui.cli.run_args import parse_job

SLURM = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2",
         "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "node[01-02]",
         "SLURM_TASKS_PER_NODE": "1(x2)"}


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def _env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    import os
    for key in list(os.environ):
        if key.startswith(("SLURM_", "SKYPILOT_", "PET_")):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def test_slurm_fills_the_rendezvous_and_says_so_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str) -> None:
    _env(monkeypatch, SLURM)
    job = parse_job("run", [script])
    opts = job.config.cluster
    assert opts is not None
    assert (opts.min_nodes, opts.max_nodes) == (2, 2)
    assert (opts.rdzv_backend, opts.rdzv_endpoint) == ("c10d", "node01:29500")
    assert job.config.run_id == "1234.0"
    err = capsys.readouterr().err
    assert err.count("from Slurm:") == 1
    assert "from Slurm: --nnodes 2 --rdzv-id 1234.0 --rdzv-backend c10d " \
           "--rdzv-endpoint node01:29500" in err
    assert "--node-rank" not in err  # c10d assigns it: no warning either
    assert "warning" not in err


def test_flags_on_the_command_line_and_pet_variables_win(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str) -> None:
    _env(monkeypatch, {**SLURM, "SLURM_GPUS_ON_NODE": "4", "PET_NPROC_PER_NODE": "3"})
    job = parse_job("run", ["--rdzv-endpoint", "head:1234", "--rdzv-id", "mine", script])
    assert job.config.cluster is not None
    assert job.config.cluster.rdzv_endpoint == "head:1234"
    assert job.config.run_id == "mine"
    assert job.config.nprocs == 3  # PET_NPROC_PER_NODE, not SLURM_GPUS_ON_NODE
    err = capsys.readouterr().err
    assert "from Slurm: --nnodes 2 --rdzv-backend c10d (--no-scheduler-env" in err


def test_gpus_on_node_fill_nproc_per_node(
        monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    _env(monkeypatch, {**SLURM, "SLURM_GPUS_ON_NODE": "4"})
    assert parse_job("run", [script]).config.nprocs == 4


def test_no_scheduler_env_turns_it_off(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str) -> None:
    _env(monkeypatch, SLURM)
    job = parse_job("run", ["--no-scheduler-env", script])
    assert job.config.cluster is None
    assert "from Slurm" not in capsys.readouterr().err


def test_a_task_per_gpu_step_is_refused_in_one_line_with_the_fix(
        monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    _env(monkeypatch, {**SLURM, "SLURM_TASKS_PER_NODE": "4(x2)"})
    with pytest.raises(ConfigError) as caught:
        parse_job("run", [script])
    message = str(caught.value)
    assert "\n" not in message
    assert "--ntasks-per-node=1" in message
    # --no-scheduler-env is the way out when the person means it.
    assert parse_job("run", ["--no-scheduler-env", script]).config.cluster is None


def test_a_one_node_allocation_stays_a_plain_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str) -> None:
    _env(monkeypatch, {**SLURM, "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "node01",
                       "SLURM_TASKS_PER_NODE": "4"})
    assert parse_job("run", [script]).config.cluster is None
    assert "from Slurm" not in capsys.readouterr().err


def test_skypilot_fills_from_its_ips(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str) -> None:
    _env(monkeypatch, {"SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n", "SKYPILOT_NUM_NODES": "2",
                       "SKYPILOT_NODE_RANK": "1", "SKYPILOT_TASK_ID": "sky-1"})
    job = parse_job("run", [script])
    assert job.config.cluster is not None
    assert job.config.cluster.rdzv_endpoint == "10.0.0.5:29500"
    assert job.config.run_id == "sky-1"
    assert "from SkyPilot: --nnodes 2" in capsys.readouterr().err


def test_static_backend_takes_the_node_rank(
        monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    _env(monkeypatch, SLURM)
    job = parse_job("run", ["--rdzv-backend", "static", script])
    assert job.config.cluster is not None
    assert job.config.cluster.node_rank == 1
