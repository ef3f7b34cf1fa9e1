"""Slurm's variables left in an interactive shell (an ``salloc`` shell, a step's environment
copied into tmux) must not turn a plain ``rankvisor run`` into a silent wait for a second
node: one line says what came from Slurm and how to ignore it, the wait is bounded and its
end says why, and Ctrl+C there ends it in one line (no traceback, nothing left running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rankvisor.engine.supervisor.agent_env import free_port, port_in_use
from rankvisor.tui.cli.run_args import parse_job

from tests.conftest import wait_until
from tests.test_cli import ROOT, _end_terminal, _exit_of, _Screen, _tui_on_a_terminal

pytestmark = [pytest.mark.processes, pytest.mark.torch]

LEFTOVER = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "localhost,nowhere"}
"""An salloc shell's variables: a job of two nodes, and no job step."""


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_"))}
    return {**base, **extra}


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "hi.py"
    path.write_text("print('hi')\n")
    return str(path)


@pytest.mark.parametrize(("env", "flags", "join_timeout"), [
    (LEFTOVER, [], "60"),                                        # a shell: bounded
    ({**LEFTOVER, "SLURM_STEP_ID": "0"}, [], None),               # srun's step: torch's 600 s
    (LEFTOVER, ["--rdzv-conf", "join_timeout=5"], "5"),          # the person's value wins
    ({**LEFTOVER, "RANKVISOR_NO_SCHEDULER_ENV": "1"}, [], "one node"),
    (LEFTOVER, ["--no-scheduler-env"], "one node"),
])
def test_what_is_taken_from_the_shell_and_how_long_it_waits(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str,
        env: dict[str, str], flags: list[str], join_timeout: str | None) -> None:
    monkeypatch.setattr(os, "environ", _clean_env(env))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    job = parse_job("run", [*flags, script])
    err = capsys.readouterr().err
    if join_timeout == "one node":
        assert job.config.cluster is None and err == ""
        return
    assert job.config.cluster is not None
    assert job.config.cluster.rdzv_conf.get("join_timeout") == join_timeout
    assert "came from Slurm's variables" in job.config.cluster.wait_hint
    (line,) = err.splitlines()
    assert line.startswith("rankvisor: from Slurm: --nnodes 2 ")
    assert line.endswith("(--no-scheduler-env or RANKVISOR_NO_SCHEDULER_ENV=1 ignores Slurm)")


def _headless(script: str, port: int, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--rdzv-endpoint",
         f"localhost:{port}", *flags, script],
        env=_clean_env(LEFTOVER), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )


def test_the_wait_times_out_with_why_and_the_way_out(script: str) -> None:
    proc = _headless(script, free_port(), "--rdzv-conf", "join_timeout=3")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "waiting up to 3 s for 2 nodes" in err
    assert ("no rendezvous within 3 s: 2 nodes were expected at localhost:" in err
            and "--nnodes 2 came from Slurm's variables; for a run on this machine only: "
                "--no-scheduler-env" in err), err
    assert "Traceback" not in err and "hi" not in out


def test_ctrl_c_in_the_wait_headless_is_one_line(script: str) -> None:
    port = free_port()
    proc = _headless(script, port)
    wait_until(lambda: port_in_use("localhost", port), timeout=60)  # the store waits
    time.sleep(0.5)  # into the rendezvous proper (its SIGINT handler is the point)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "stopped while waiting for the other nodes" in err
    assert "Traceback" not in err


def test_ctrl_c_in_the_wait_of_the_tui_is_one_line_and_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    import rankvisor.tui.app  # noqa: F401 - our own module: a broken import fails, never skips

    port = free_port()
    for key, value in LEFTOVER.items():
        monkeypatch.setenv(key, value)
    pid, fd = _tui_on_a_terminal([sys.executable, "-m", "rankvisor.tui", "run",
                                  "--rdzv-endpoint", f"localhost:{port}", script])
    screen = _Screen(fd)
    try:
        wait_until(lambda: screen.read() or b"(Ctrl+C stops)" in screen.data, timeout=60)
        wait_until(lambda: screen.read() or port_in_use("localhost", port), timeout=60)
        os.write(fd, b"\x03")  # the terminal's Ctrl+C: SIGINT to its foreground group
        status = _exit_of(pid, screen)
        text = screen.data.decode(errors="replace")
        assert status == 130, text
        assert "stopped while waiting for the other nodes; nothing is left running" in text
        assert "Traceback" not in text
        assert not port_in_use("localhost", port)  # the supervisor hosting the store is gone
    finally:
        _end_terminal(pid, fd)
