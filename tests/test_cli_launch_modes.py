"""``-m``, ``--no-python`` and their ``PET_`` variables start the ranks as torchrun does;
``xpu`` is a value of ``--nproc-per-node``; torchrun flags rankvisor cannot honour are one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import assert_refused

pytestmark = pytest.mark.processes

_CLEARED = ("PET_", "SLURM_", "SKYPILOT_")


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    return subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", *args], cwd=cwd, capture_output=True,
        text=True, timeout=60, env={**base, **env}, stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("how", ["flag", "PET_MODULE"])
def test_a_module_runs_with_dash_m_or_pet_module(tmp_path: Path, how: str) -> None:
    (tmp_path / "mymod.py").write_text(
        "import os, sys\n"
        "open(f\"seen.{os.environ['RANK']}\", 'w').write(repr((__name__, sys.argv[1:])))\n")
    flags, env = (["-m"], {}) if how == "flag" else ([], {"PET_MODULE": "1"})
    done = _run(tmp_path, "--headless", "--nproc-per-node", "2", *flags, "mymod", "--x", "1",
                **env)
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        assert (tmp_path / f"seen.{rank}").read_text() == "('__main__', ['--x', '1'])"


@pytest.mark.parametrize("how", ["flag", "PET_NO_PYTHON"])
def test_a_program_runs_with_no_python_or_its_pet(tmp_path: Path, how: str) -> None:
    prog = tmp_path / "prog.sh"
    prog.write_text("#!/bin/sh\necho \"$0 $*\" > seen.$RANK\n")
    prog.chmod(0o755)
    flags, env = (["--no-python"], {}) if how == "flag" else ([], {"PET_NO_PYTHON": "1"})
    done = _run(tmp_path, "--headless", *flags, str(prog), "a", "b", **env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "seen.0").read_text() == f"{prog} a b\n"


@pytest.mark.parametrize(("args", "env", "words"), [
    (["-m", "--no-python"], {}, ["--no-python and -m"]),
    (["--no-python"], {"PET_MODULE": "1"}, ["--no-python and -m"]),
    (["--nproc-per-node", "xpu"], {}, ["--nproc-per-node xpu: no XPU is available"]),
    (["--event-log-handler", "console"], {}, ["--event-log-handler 'console'", "null"]),
    ([], {"PET_EVENT_LOG_HANDLER": "console"}, ["PET_EVENT_LOG_HANDLER"]),
    (["--run-path"], {}, ["--run-path"]),
    (["--start-method", "bogus"], {}, ["invalid choice: 'bogus'"]),
])
def test_refused_in_one_line(tmp_path: Path, args: list[str], env: dict[str, str],
                             words: list[str]) -> None:
    (tmp_path / "mymod.py").write_text("")
    assert_refused(_run(tmp_path, *args, "mymod", **env), *words)
