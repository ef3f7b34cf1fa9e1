"""``--stdin``: its defaults for each way of running, and the combinations refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rankvisor.engine.supervisor.run_config import ConfigError, SupervisorConfig
from rankvisor.tui.cli.run_args import parse_job

JOB = str(Path(__file__).parent / "jobs" / "bp_job.py")


@pytest.mark.parametrize(("argv", "tty", "mode"), [
    (["-D"], False, "pipe"),  # the supervisor process holds the ranks' stdin
    ([], True, "pipe"),  # the TUI on a supervisor process
    (["--foreground"], True, "pipe"),  # the TUI owns the terminal
    (["--headless"], True, "inherit"),  # torchrun's way
    (["--headless"], False, "inherit"),  # a pipeline feeds the ranks, as torchrun
    ([], False, "inherit"),  # no terminal: headless
    (["--headless", "--stdin", "pipe"], True, "pipe"),
    (["-D", "--stdin", "null"], False, "null"),
])
def test_the_default_follows_how_the_run_runs(
        monkeypatch: pytest.MonkeyPatch, argv: list[str], tty: bool, mode: str) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    assert parse_job("run", [*argv, "--nproc-per-node", "2", JOB]).config.stdin == mode


@pytest.mark.parametrize("argv", [["-D"], ["--foreground"]])
def test_inherit_needs_a_terminal_to_hand_on(
        monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with pytest.raises(ConfigError, match="--stdin inherit: .*--headless"):
        parse_job("run", [*argv, "--stdin", "inherit", JOB])


def test_a_bad_mode_is_refused_by_the_config() -> None:
    config = SupervisorConfig(entrypoint=sys.executable, args=(JOB,), stdin="tty")
    with pytest.raises(ConfigError, match="--stdin tty: give one of pipe, inherit, null"):
        config.validate()
