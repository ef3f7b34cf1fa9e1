"""``--post-mortem`` on real ranks: rank 1 raises ZeroDivisionError with a local ``y = 7``;
it writes its error.json, waits at a pdb prompt in ``divide``, ``p y`` prints 7, ``c`` ends
it, and the run ends exactly as the same run without the flag (exit codes, failures, root
cause). While it is at the prompt, a teardown after another rank's failure waits (the debug
hold). The ranks' stdin is the pipe the supervisor holds for each (``--stdin pipe``): the
test answers through ``SendInput``, as a person does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rankvisor.engine.events import RunFinished, SupervisorNotice
from rankvisor.engine.handle import SendInput, TerminateRanks
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.debug_options import DebugOptions
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until
from tests.engine.supervisor_helpers import Recorder

pytestmark = pytest.mark.processes

JOB = str(BIN / "post_mortem_job.py")


def _config(tmp_path: Path, *args: str, post_mortem: bool) -> SupervisorConfig:
    return SupervisorConfig(
        entrypoint=PYTHON, args=("-u", JOB, *args), nprocs=2, log_dir=str(tmp_path),
        term_timeout=5.0, sample_interval=0, stdin="pipe",
        debug=DebugOptions(post_mortem=frozenset({1})) if post_mortem else None,
    )


def _text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _outcome(finished: RunFinished) -> tuple[object, ...]:
    result = finished.result
    return (
        finished.root_cause_rank,
        {r: f.exitcode for r, f in result.failures.items()},
        sorted(result.stopped),
        result.is_failed(),
    )


def test_a_raise_stops_at_a_prompt_and_the_run_ends_as_without_the_flag(tmp_path: Path) -> None:
    with Supervisor(_config(tmp_path / "plain", post_mortem=False)) as sup:
        plain = sup.wait(timeout=60)
    assert isinstance(plain, RunFinished)

    config = _config(tmp_path / "pm", post_mortem=True)
    with Supervisor(config) as sup:
        rank1 = sup.snapshot().ranks[1]
        wait_until(lambda: "(Pdb) " in _text(rank1.stdout_path), timeout=60)
        # error.json is written first, as torch's @record writes it.
        error = json.loads(Path(rank1.error_file).read_text())
        assert error["message"]["message"] == "ZeroDivisionError: division by zero"
        assert "in divide" in error["message"]["extraInfo"]["py_callstack"]
        assert "> " in _text(rank1.stdout_path) and "divide()" in _text(rank1.stdout_path)
        info = sup.snapshot()
        assert info.debug_hold == (1,)
        assert info.ranks[1].state is RankState.RUNNING
        assert sup.execute(SendInput((1,), "p y")).ok
        wait_until(lambda: "(Pdb) 7\n" in _text(rank1.stdout_path), timeout=30)
        assert sup.execute(SendInput((1,), "c")).ok
        held = sup.wait(timeout=60)
    assert isinstance(held, RunFinished)
    assert _outcome(held) == _outcome(plain)
    assert held.root_cause_rank == 1 and held.result.failures[1].exitcode == 1
    stderr = _text(sup.snapshot().ranks[1].stderr_path)
    assert stderr.startswith("Traceback (most recent call last):\n")
    assert "py_bootstrap" not in stderr  # no frame of ours
    assert "ZeroDivisionError: division by zero" in stderr


def test_the_teardown_waits_while_a_person_is_at_the_prompt(tmp_path: Path) -> None:
    rec = Recorder()
    config = _config(tmp_path, "fail-after-hold", post_mortem=True)
    with Supervisor(config) as sup:
        sup.subscribe(rec)
        wait_until(lambda: sup.snapshot().ranks[0].state is RankState.FAILED, timeout=60)
        # Rank 0 failed while rank 1 sits at its prompt: the teardown waits, and says so.
        wait_until(lambda: any("debug hold" in n.message for n in rec.of(SupervisorNotice)))
        hold = next(n.message for n in rec.of(SupervisorNotice) if "debug hold" in n.message)
        assert "rank(s) 1 at a post-mortem prompt" in hold and "terminated" in hold
        info = sup.snapshot()
        assert info.ranks[1].state is RankState.RUNNING and info.debug_hold == (1,)
        # A terminate of the held rank releases the hold as well as its prompt's end.
        assert sup.execute(TerminateRanks((1,), timeout_s=5)).ok
        finished = sup.wait(timeout=60)
    assert isinstance(finished, RunFinished)
    assert finished.root_cause_rank == 0 and 0 in finished.result.failures
    assert 1 in finished.result.stopped


def test_a_function_rank_stops_at_a_prompt_on_its_parent_s_stdin(tmp_path: Path) -> None:
    """A function rank (multiprocessing gives it /dev/null for stdin) reads the person's
    lines from its parent's stdin; its error.json is ``@record``'s, its exit code 1."""
    import subprocess

    root = Path(__file__).parents[2]
    driver = subprocess.Popen(
        [PYTHON, str(BIN / "function_post_mortem.py"), str(tmp_path)], cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        def stdout_log() -> str:
            assert driver.poll() is None, "the driver ended before its rank's prompt"
            found = sorted(tmp_path.rglob("stdout.log"))
            return found[0].read_text() if found else ""

        wait_until(lambda: "(Pdb) " in stdout_log(), timeout=60)
        assert driver.stdin is not None
        driver.stdin.write("p y\n")
        driver.stdin.flush()
        wait_until(lambda: "(Pdb) 7\n" in stdout_log(), timeout=30)
        out, _ = driver.communicate("c\n", timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    seen = json.loads(out.splitlines()[-1])
    assert seen["exitcode"] == 1
    message = seen["message"]["message"] if isinstance(seen["message"], dict) else seen["message"]
    assert message == "ZeroDivisionError: division by zero"
