"""SendInput / CloseInput and "waiting for input" in a Supervisor, with real ranks and pipes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rankvisor.engine.events import RankInput, RankInputWait
from rankvisor.engine.handle import CloseInput, RestartRank, SendInput
from rankvisor.engine.logfile.stdin_log import read_entries, stdin_log_path
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import wait_until
from tests.engine.supervisor_helpers import Recorder

pytestmark = pytest.mark.processes

JOBS = Path(__file__).parent / "jobs"


@pytest.fixture
def start(tmp_path: Path) -> Iterator:
    sups: list[Supervisor] = []

    def go(job: str, nprocs: int = 2, **kw: object) -> tuple[Supervisor, Recorder]:
        kw.setdefault("term_timeout", 2.0)
        kw.setdefault("sample_interval", 0)
        config = SupervisorConfig(entrypoint=sys.executable, args=(str(JOBS / job),),
                                  nprocs=nprocs, log_dir=str(tmp_path / "logs"), **kw)
        sup = Supervisor(config)
        rec = Recorder()
        sup.subscribe(rec)
        sups.append(sup)
        sup.start()
        return sup, rec

    yield go
    for sup in sups:
        sup.shutdown()


def _wait_of(sup: Supervisor, rank: int):
    return wait_until(lambda: sup.snapshot().ranks[rank].input_wait, 15)


def _stdout(sup: Supervisor, rank: int) -> str:
    return Path(sup.snapshot().ranks[rank].stdout_path).read_text()


def test_breakpoint_is_waiting_answered_and_kept_in_stdin_log(start) -> None:
    sup, rec = start("bp_job.py")
    wait = _wait_of(sup, 0)
    assert wait.prompt == "(Pdb) "
    assert wait.where == "bp_job.py:8 in <module>"
    assert sup.snapshot().ranks[1].input_wait is None
    assert rec.of(RankInputWait, rank=0)[0].wait == wait

    assert sup.execute(SendInput((0,), "p x")).ok
    wait_until(lambda: "41" in _stdout(sup, 0), 15)
    assert sup.execute(SendInput((0,), "c")).ok
    finished = sup.wait(30)
    assert finished is not None and not finished.result.failures
    assert "done 0" in _stdout(sup, 0)

    typed = [e.text for e in rec.of(RankInput, rank=0)]
    assert typed == ["p x", "c"]
    info = sup.snapshot().ranks[0]
    entries = read_entries(stdin_log_path(info.stdout_path))
    assert [e.text for e in entries] == ["p x", "c"]
    assert entries[0].t <= entries[1].t
    # The rank's own files hold its own bytes only: a pipe echoes nothing.
    assert "p x" not in _stdout(sup, 0)
    assert info.input_wait is None  # its last wait ended with it


def test_a_bundle_packs_stdin_log_when_asked(start, tmp_path: Path) -> None:
    import tarfile

    from rankvisor.engine.entry.bundle import make_bundle

    sup, _rec = start("ask_job.py", nprocs=1)
    _wait_of(sup, 0)
    assert sup.execute(SendInput((0,), "yes")).ok
    assert sup.wait(30) is not None
    log_dir = sup.snapshot().log_dir
    with tarfile.open(make_bundle(log_dir, str(tmp_path / "a.tar.gz")).path) as tar:
        assert not [n for n in tar.getnames() if n.endswith("stdin.log")]  # unless asked
    bundle = make_bundle(log_dir, str(tmp_path / "b.tar.gz"), include_stdin=True)
    with tarfile.open(bundle.path) as tar:
        (name,) = [n for n in tar.getnames() if n.endswith("attempt_0/0/stdin.log")]
        data = tar.extractfile(name).read()
    assert b'"text": "yes"' in data


def test_input_on_every_rank_is_answered_with_one_command(start) -> None:
    sup, rec = start("ask_job.py", nprocs=3)
    for rank in range(3):
        assert _wait_of(sup, rank).prompt == f"continue rank {rank}? "
    result = sup.execute(SendInput(None, "yes"))
    assert result.ok and result.data == {"sent": [0, 1, 2], "refused": {}}
    finished = sup.wait(30)
    assert finished is not None and not finished.result.failures
    for rank in range(3):
        assert f"rank {rank} got 'yes'" in _stdout(sup, rank)
    # Every wait that began also ended.
    for rank in range(3):
        waits = [e.wait for e in rec.of(RankInputWait, rank=rank)]
        assert waits[0] is not None and waits[-1] is None


def test_close_input_gives_eof_and_is_logged(start) -> None:
    sup, rec = start("ask_job.py", nprocs=1)
    _wait_of(sup, 0)
    assert sup.execute(CloseInput((0,))).ok
    finished = sup.wait(30)
    assert finished is not None and 0 in finished.result.failures
    assert rec.of(RankInput, rank=0, eof=True)
    entries = read_entries(stdin_log_path(sup.snapshot().ranks[0].stdout_path))
    assert entries[-1].eof


def test_a_rank_not_running_is_refused_with_words(start) -> None:
    sup, _rec = start("bp_job.py")
    _wait_of(sup, 0)
    wait_until(lambda: sup.snapshot().ranks[1].state is RankState.SUCCEEDED, 15)
    result = sup.execute(SendInput((1,), "c"))
    assert not result.ok and "rank 1 is not running" in result.message
    # Two named, one gone: sent to the one, the other named in the answer's data.
    result = sup.execute(SendInput((0, 1), "p x"))
    assert result.ok and result.data == {"sent": [0], "refused": {"1": "not running"}}
    assert sup.execute(SendInput((0,), "c")).ok
    assert sup.wait(30) is not None


@pytest.mark.parametrize("mode", ["null", "inherit"])
def test_without_a_pipe_input_is_refused_naming_the_flag(start, mode: str) -> None:
    sup, _rec = start("bp_job.py", nprocs=1, stdin=mode)
    result = sup.execute(SendInput((0,), "c"))
    assert not result.ok and "--stdin pipe" in result.message
    assert sup.snapshot().stdin == mode
    sup.wait(30)


def test_a_rank_that_reads_devnull_says_so_in_its_exit_cause(start) -> None:
    sup, _rec = start("ask_job.py", nprocs=1, stdin="null")
    finished = sup.wait(30)
    assert finished is not None and 0 in finished.result.failures
    cause = sup.snapshot().ranks[0].exit_cause
    assert cause is not None
    assert "EOFError" in cause.text and "/dev/null" in cause.text and "--stdin pipe" in cause.text


def test_a_restarted_rank_gets_a_fresh_pipe(start) -> None:
    sup, rec = start("ask_job.py", nprocs=1)
    first = _wait_of(sup, 0)
    assert sup.execute(RestartRank(0)).ok
    wait_until(lambda: sup.snapshot().ranks[0].restart_count == 1
               and sup.snapshot().ranks[0].input_wait is not None, 20)
    again = sup.snapshot().ranks[0]
    assert again.input_wait is not None and again.input_wait.since > first.since
    assert sup.execute(SendInput((0,), "yes")).ok
    finished = sup.wait(30)
    assert finished is not None and not finished.result.failures
    assert "got 'yes'" in Path(again.stdout_path).read_text()
    assert os.path.dirname(stdin_log_path(again.stdout_path)).endswith("restart_1")


def test_the_timeline_has_the_typed_lines_in_order(start) -> None:
    from rankvisor.engine.forensics.timeline import rank_lines

    sup, _rec = start("bp_job.py", nprocs=1)
    _wait_of(sup, 0)
    assert sup.execute(SendInput((0,), "p x")).ok
    wait_until(lambda: "41" in _stdout(sup, 0), 15)
    _wait_of(sup, 0)
    assert sup.execute(SendInput((0,), "c")).ok
    assert sup.wait(30) is not None
    info = sup.snapshot().ranks[0]
    texts = [(x.stream, x.text) for x in rank_lines(0, info.stdout_path, info.stderr_path)]
    assert texts.index(("stdin", "\u2328 p x")) < texts.index(("stdout", "(Pdb) 41"))
    assert texts.index(("stdout", "(Pdb) 41")) < texts.index(("stdin", "\u2328 c"))
