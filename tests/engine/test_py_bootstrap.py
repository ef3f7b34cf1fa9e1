"""rankvisor's bootstrap of a Python rank changes nothing a script can observe: the same
probe run plainly and under the bootstrap (as a script and as ``-m``) sees the same argv,
``__main__``, ``sys.path[0]``, signal handlers, environment and spawn-started child, prints
the same traceback and ends with the same exit code; its own flags are parsed as Python
parses them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from rankvisor.engine.process.py_bootstrap import (
    ENV_DEBUGPY,
    ENV_POST_MORTEM,
    split_python_args,
    wrap_python_args,
)

from tests.conftest import BIN, PYTHON

pytestmark = pytest.mark.processes

PROBE = BIN / "bootstrap_probe.py"


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    full = {k: v for k, v in os.environ.items() if k != ENV_POST_MORTEM}
    done = subprocess.run([PYTHON, *args], cwd=cwd, env={**full, **(env or {})},
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("how", ["ok", "exit3", "raise", "interrupt"])
@pytest.mark.parametrize("as_module", [False, True], ids=["script", "module"])
def test_the_script_sees_what_it_would_see_and_ends_the_same(
    tmp_path: Path, how: str, as_module: bool
) -> None:
    if as_module:
        cwd, target = BIN, ["-m", "bootstrap_probe", how]
    else:
        # A relative path from another directory: argv[0] keeps it as given.
        cwd, target = tmp_path, [os.path.relpath(PROBE, tmp_path), how]
    plain = _run(["-u", *target], cwd)
    # The options travel in the environment; the bootstrap removes them.
    boot = _run(list(wrap_python_args(["-u", *target])), cwd, {ENV_DEBUGPY: ""})
    assert boot[0] == plain[0], (boot, plain)
    seen_plain, seen_boot = json.loads(plain[1]), json.loads(boot[1])
    assert seen_boot == seen_plain
    assert seen_boot["env"] == [] and seen_boot["modules"] == []
    # The same traceback, without a frame of ours.
    assert boot[2] == plain[2]
    assert {"ok": 0, "exit3": 3, "raise": 1, "interrupt": -2}[how] == plain[0]


def test_python_s_own_flags_stay_with_the_interpreter() -> None:
    assert split_python_args(["-u", "-X", "dev", "-Wignore", "job.py", "-x"]) == (
        ["-u", "-X", "dev", "-Wignore"], ["job.py", "-x"],
    )
    assert split_python_args(["-u", "-m", "pkg.train", "--lr", "1"]) == (
        ["-u"], ["-m", "pkg.train", "--lr", "1"],
    )
    assert split_python_args(["-mpkg", "a"]) == ([], ["-m", "pkg", "a"])
    wrapped = wrap_python_args(["-u", "job.py", "a"])
    assert wrapped[0] == "-u" and wrapped[1] == "-c" and wrapped[3:] == ("job.py", "a")
    for bad in (["-c", "print(1)"], ["-u"], ["-"], ["-X"]):
        with pytest.raises(ValueError):
            split_python_args(bad)
