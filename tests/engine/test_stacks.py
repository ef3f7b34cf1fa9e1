"""Stacks of every rank: real ranks, a real py-spy, real files, real SIGKILLs.

A 3-rank job with two ranks waiting in one function and one in another is dumped and merged
(the odd rank first, the file saved); a rank behind a shell is read through its Python child;
what cannot be read says why in one line; a rank that ignores SIGTERM has its stack saved
before the escalation's SIGKILL, which is not later than announced, after a person's
terminate and after a teardown; ``stack_on_kill=False`` saves none; ranks allow their
supervisor as tracer where Yama asks for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.events import EscalationScheduled, RankStateChanged, SupervisorNotice
from rankvisor.engine.forensics import stacks
from rankvisor.engine.forensics.stacks import (
    Frame,
    RankStack,
    StackDump,
    ThreadStack,
    list_dumps,
    merge,
    yama_ptrace_scope,
)
from rankvisor.engine.handle import DumpStacks, TerminateRanks
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, wait_until

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy is not installed"),
]

WAITER = str(BIN / "stack_waiter.py")


class Job:
    """A Supervisor over stack_waiter.py, its events, and when each arrived (monotonic)."""

    def __init__(self, tmp_path: Path, nprocs: int, *extra: str,
                 flags: tuple[str, ...] = ("-u",), **config: Any) -> None:
        self.ready = tmp_path / "ready"
        self.ready.mkdir()
        self.sup = Supervisor(SupervisorConfig(
            entrypoint=PYTHON, args=(*flags, WAITER, str(self.ready), *extra), nprocs=nprocs,
            log_dir=str(tmp_path / "logs"), sample_interval=0, **config,
        ))
        self.events: list[tuple[float, Any]] = []
        self.sup.subscribe(lambda e: self.events.append((time.monotonic(), e)))
        self.sup.start()

    def wait_ready(self, count: int) -> None:
        wait_until(lambda: len([p for p in self.ready.iterdir() if p.name.isdigit()]) >= count,
                   timeout=30)

    def of(self, kind: type) -> list[tuple[float, Any]]:
        return [(t, e) for t, e in list(self.events) if isinstance(e, kind)]

    @property
    def run_dir(self) -> str:
        return self.sup.snapshot().log_dir


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Any]:
    made: list[Job] = []

    def make(nprocs: int, *extra: str, **config: Any) -> Job:
        made.append(Job(tmp_path, nprocs, *extra, **config))
        return made[-1]

    yield make
    for j in made:
        j.sup.shutdown(timeout_s=0.5)


def _names(group: Any) -> list[str]:
    return [f.name for f in group.frames]


def test_merge_puts_the_smallest_group_first_and_marks_it() -> None:
    def rank(r: int, *names: str, line: int = 1) -> RankStack:
        frames = tuple(Frame(n, f"/job/{n}.py", line) for n in names)
        return RankStack(r, 100 + r, (ThreadStack(100 + r, "MainThread", frames, main=True),))

    ranks = [rank(0, "all_reduce", "train_step", "main", "<module>"),
             rank(1, "stuck_in_data_loader", "main", "<module>"),
             rank(2, "all_reduce", "train_step", "main", "<module>", line=7),
             rank(3, "all_reduce", "train_step", "main", "<module>"),
             RankStack(4, 104, error="exited before it could be read")]
    groups = merge(ranks)
    assert [g.summary() for g in groups] == [
        "rank 1: stuck_in_data_loader <- main",
        "ranks 0, 2, 3: all_reduce <- train_step <- main",
        "rank 4: no stack: exited before it could be read",
    ]
    assert [g.odd for g in groups] == [True, False, False]
    assert groups[1].frame_lines()[0] == "all_reduce (all_reduce.py:1, 7)"
    # Everyone in the same place: nobody stands out.
    same = merge([rank(0, "f", "main"), rank(1, "f", "main")])
    assert len(same) == 1 and not same[0].odd
    # Native frames without a symbol differ in every process by their address only.
    a = RankStack(0, 1, (ThreadStack(1, "MainThread", (Frame("0x7f01", "libc.so.6"),
                                                       Frame("main", "t.py", 1)), main=True),))
    b = RankStack(1, 2, (ThreadStack(2, "MainThread", (Frame("0x7f99", "libc.so.6"),
                                                       Frame("main", "t.py", 1)), main=True),))
    (one,) = merge([a, b])
    assert one.ranks == (0, 1) and one.summary() == "ranks 0, 1: main"


def test_three_ranks_merged_the_odd_one_first_and_saved(job: Any) -> None:
    j = job(3, "1")
    j.wait_ready(3)
    result = j.sup.execute(DumpStacks())
    assert result.ok, result.message
    assert result.data is not None
    dump = StackDump.from_dict(result.data)
    assert [(g.ranks, g.odd) for g in dump.groups] == [((1,), True), ((0, 2), False)]
    assert _names(dump.groups[0])[:2] == ["stuck_in_data_loader", "main"]
    assert _names(dump.groups[1])[:2] == ["wait_in_collective", "main"]
    # Issue 22: each frame's source line, read as a debugger does (the file, where it runs).
    assert dump.groups[0].frames[0].code == "time.sleep(60)"
    assert "    time.sleep(60)" in dump.groups[0].frame_lines()
    assert dump.merged_text().splitlines()[0].startswith("odd  rank 1: stuck_in_data_loader")
    # Saved under the run directory: the merged view first, then every rank's threads.
    path = Path(dump.path)
    assert path.parent == Path(j.run_dir) / "stacks" and path.suffix == ".txt"
    text = path.read_text()
    assert text.index("rank 1: stuck_in_data_loader") < text.index("--- rank 0 ")
    for r in range(3):
        assert f"--- rank {r} (pid {j.sup.snapshot().ranks[r].pid})" in text
    assert "        time.sleep(60)" in text
    assert '"MainThread"' in text
    (saved,) = list_dumps(j.run_dir)
    assert saved.path == dump.path and saved.merged[0].startswith("odd  rank 1")

    # Native frames (blocking) still merge; one rank alone; a nonblocking dump.
    native = StackDump.from_dict(j.sup.execute(DumpStacks(native=True)).data or {})
    assert [g.ranks for g in native.groups] == [(1,), (0, 2)]
    assert "stuck_in_data_loader" in _names(native.groups[0])
    alone = StackDump.from_dict(j.sup.execute(DumpStacks((2,), nonblocking=True)).data or {})
    assert [g.ranks for g in alone.groups] == [(2,)] and alone.nonblocking
    assert len(list_dumps(j.run_dir)) == 3


def test_the_main_thread_is_named_where_nothing_imported_threading(job: Any) -> None:
    """py-spy names threads from the ``threading`` module; a rank run from a venv often never
    imports it (``-S`` here: no site, so no .pth imports it, whichever Python runs the tests)
    and py-spy gives no name. The thread whose id is the pid is named the main thread."""
    j = job(2, flags=("-u", "-S"))
    j.wait_ready(2)
    result = j.sup.execute(DumpStacks())
    assert result.ok, result.message
    dump = StackDump.from_dict(result.data or {})
    for rank in dump.ranks:
        (thread,) = rank.threads
        assert (thread.name, thread.main, thread.thread_id) == ("MainThread", True, rank.pid)
    assert {g.ranks: g.frames[0].name for g in dump.groups} == {
        (0,): "wait_in_collective", (1,): "stuck_in_data_loader"}
    assert Path(dump.path).read_text().count('(main, idle): "MainThread"') == 2


def test_a_rank_behind_a_shell_is_read_through_its_python_child(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    sup = Supervisor(SupervisorConfig(
        entrypoint="/bin/sh", args=("-c", f'"{PYTHON}" -u "{WAITER}" "{ready}" 5; exit 0'),
        nprocs=1, log_dir=str(tmp_path / "logs"), sample_interval=0,
    ))
    try:
        sup.start()
        wait_until(lambda: (ready / "0").exists(), timeout=30)
        result = sup.execute(DumpStacks())
        assert result.ok, result.message
        dump = StackDump.from_dict(result.data or {})
        (rank,) = dump.ranks
        assert rank.dumped_pid == int((ready / "0").read_text()) != rank.pid
        assert _names(dump.groups[0])[0] == "wait_in_collective"
    finally:
        sup.shutdown(timeout_s=0.5)


def test_what_cannot_be_read_says_why_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sup = Supervisor(SupervisorConfig(
        entrypoint=shutil.which("sleep") or "sleep", args=("300",), nprocs=1,
        log_dir=str(tmp_path / "logs"), sample_interval=0,
    ))
    try:
        sup.start()
        wait_until(lambda: sup.snapshot().ranks[0].state is RankState.RUNNING)
        result = sup.execute(DumpStacks())
        assert not result.ok
        assert result.message.startswith("no stack dumped: rank 0: not a Python process")
        assert "\n" not in result.message
        assert not os.path.exists(os.path.join(sup.snapshot().log_dir, "stacks"))
        monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
        result = sup.execute(DumpStacks())
        assert not result.ok and "py-spy is not installed: `pip install py-spy`" in result.message
        result = sup.execute(DumpStacks(native=True, nonblocking=True))
        assert not result.ok and "native frames need a blocking dump" in result.message
    finally:
        sup.shutdown(timeout_s=0.5)


def test_permission_lines_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The words for each way ptrace is refused (the kernel's answers cannot be produced
    here, as root without Yama; each line is chosen from what the machine says)."""
    denied = "Error: Failed to open process\n\nCaused by:\n    Permission denied (os error 13)"
    me = os.getpid()
    cases = [
        (None, False, "--cap-add SYS_PTRACE"),
        (1, False, "kernel.yama.ptrace_scope=1"),
        (2, False, "kernel.yama.ptrace_scope=2"),
        (3, True, "ptrace_scope=3"),
        (None, True, "security module"),
    ]
    for scope, cap, words in cases:
        monkeypatch.setattr(stacks, "yama_ptrace_scope", lambda s=scope: s)
        monkeypatch.setattr(stacks, "has_ptrace_capability", lambda c=cap: c)
        line = stacks.explain(denied, me)
        assert words in line and "\n" not in line, (scope, cap, line)


def _kill_time(j: Job, rank: int) -> float:
    (t, _), *_ = [(t, e) for t, e in j.of(RankStateChanged)
                  if e.rank == rank and e.new is RankState.SIGNALLED]
    return t


def test_a_rank_ignoring_sigterm_has_its_stack_saved_before_the_sigkill(job: Any) -> None:
    j = job(2, "1", "--ignore-term", term_timeout=2.0)
    j.wait_ready(2)
    assert j.sup.execute(TerminateRanks((1,))).ok
    wait_until(lambda: any(e.rank == 1 and e.new is RankState.SIGNALLED
                           for _, e in j.of(RankStateChanged)), timeout=30)
    ((_, scheduled),) = j.of(EscalationScheduled)
    saved = [(t, e) for t, e in j.of(SupervisorNotice) if "stack saved before SIGKILL" in e.message]
    assert len(saved) == 1
    t_saved, notice = saved[0]
    killed_at = _kill_time(j, 1)
    # Ordering, not wall-clock: the stack was saved before the kill, and the kill came at the
    # announced deadline (the slack only covers the exit being noticed on a busy machine).
    assert t_saved < killed_at
    assert killed_at <= scheduled.deadline + 1.0
    assert t_saved < scheduled.deadline
    path = notice.message.rpartition(": ")[2]
    text = Path(path).read_text()
    assert "rank 1: stuck_in_data_loader <- main" in text and "before SIGKILL (terminate)" in text
    assert ["SIGKILL" in e.message for _, e in j.of(SupervisorNotice)].count(True) == 2


def test_a_teardown_saves_the_stacks_of_ranks_it_must_kill(job: Any) -> None:
    j = job(3, "1", "--ignore-term", "--fail=2", term_timeout=2.0)
    wait_until(lambda: all(any(e.rank == r and e.new is RankState.SIGNALLED
                               for _, e in j.of(RankStateChanged)) for r in (0, 1)), timeout=30)
    ((_, scheduled),) = j.of(EscalationScheduled)
    assert scheduled.ranks == (0, 1)
    (dump,) = list_dumps(j.run_dir)
    assert "before SIGKILL (teardown)" in dump.first_line
    # One rank in each place: neither stands out (the rank that failed is gone).
    assert dump.merged == ("rank 0: wait_in_collective <- main",
                           "rank 1: stuck_in_data_loader <- main")
    (t_saved, _), = [(t, e) for t, e in j.of(SupervisorNotice) if "stack saved" in e.message]
    assert t_saved < min(_kill_time(j, 0), _kill_time(j, 1))
    assert max(_kill_time(j, 0), _kill_time(j, 1)) <= scheduled.deadline + 1.0


def test_on_a_later_node_dumps_and_notices_name_the_global_ranks(tmp_path: Path) -> None:
    """A multi-node agent sets ``rank_base`` (node 1 of a 4-rank-per-node job: 4): the engine
    keeps local ranks in commands and events, but what a person reads names ranks 4 to 6."""
    ready = tmp_path / "ready"
    ready.mkdir()
    sup = Supervisor(SupervisorConfig(
        entrypoint=PYTHON, args=("-u", WAITER, str(ready), "1", "--ignore-term"), nprocs=3,
        log_dir=str(tmp_path / "logs"), sample_interval=0, term_timeout=2.0,
    ))
    sup.rank_base = 4
    notices: list[str] = []
    sup.subscribe(lambda e: notices.append(e.message) if isinstance(e, SupervisorNotice) else None)
    sup.start()
    try:
        wait_until(lambda: len([p for p in ready.iterdir() if p.name.isdigit()]) >= 3, timeout=30)
        dump = StackDump.from_dict(sup.execute(DumpStacks()).data or {})
        assert [g.ranks for g in dump.groups] == [(5,), (4, 6)]
        assert dump.merged_text().splitlines()[0].startswith("odd  rank 5: stuck_in_data_loader")
        refused = sup.execute(TerminateRanks((3,)))
        assert not refused.ok and refused.message == "no rank 7 (ranks are 4..6)"
        assert sup.execute(TerminateRanks((1,))).ok
        sup_ranks = sup.snapshot().ranks
        wait_until(lambda: any("rank(s) 5 outlived the 2 s deadline" in n for n in notices),
                   timeout=30)
        wait_until(lambda: any("stack saved before SIGKILL" in n for n in notices), timeout=30)
        (saved,) = [n for n in notices if "stack saved before SIGKILL" in n]
        assert saved.startswith("rank(s) 5: ")
        text = Path(saved.rpartition(": ")[2]).read_text()
        assert "rank 5: stuck_in_data_loader <- main" in text
        assert f"--- rank 5 (pid {sup_ranks[1].pid})" in text
    finally:
        sup.shutdown(timeout_s=0.5)


def test_no_stack_on_kill_saves_none(job: Any) -> None:
    j = job(2, "1", "--ignore-term", term_timeout=1.0, stack_on_kill=False)
    j.wait_ready(2)
    assert j.sup.execute(TerminateRanks()).ok
    wait_until(lambda: j.sup.snapshot().finished, timeout=30)
    assert not os.path.exists(os.path.join(j.run_dir, "stacks"))
    assert not [e for _, e in j.of(SupervisorNotice) if "stack" in e.message]


def test_ranks_allow_their_supervisor_as_tracer_when_asked(
        job: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``RANKVISOR_PTRACER=always`` takes the Yama path here: each rank is forked with a
    preexec_fn that calls prctl(PR_SET_PTRACER, supervisor pid) (EINVAL without Yama:
    harmless), and still starts and is read."""
    from rankvisor.engine.process import spawner

    seen: list[int | None] = []
    real = spawner.preexec_join

    def spy(parent: int, fds: tuple[int, ...], pdeathsig: bool, ptracer: int | None = None) -> Any:
        seen.append(ptracer)
        return real(parent, fds, pdeathsig, ptracer)

    monkeypatch.setenv("RANKVISOR_PTRACER", "always")
    monkeypatch.setattr(spawner, "preexec_join", spy)
    j = job(2, "1")
    j.wait_ready(2)
    assert seen == [os.getpid(), os.getpid()]
    result = j.sup.execute(DumpStacks())
    assert result.ok and [g.ranks for g in StackDump.from_dict(result.data or {}).groups] == [
        (0,), (1,)]


def _yama_1_skip() -> str:
    scope = yama_ptrace_scope()
    if scope is None:
        return "needs the kernel's Yama with ptrace_scope=1: this kernel has no Yama " \
               "(/proc/sys/kernel/yama is absent)"
    if scope != 1:
        return f"needs Yama's ptrace_scope=1, this machine has {scope}"
    if stacks.has_ptrace_capability():
        return "runs as root (CAP_SYS_PTRACE): Yama's scope 1 does not restrict it"
    return ""


@pytest.mark.skipif(bool(_yama_1_skip()), reason=_yama_1_skip())
def test_under_yama_scope_1_a_dump_works_as_the_ranks_own_user(job: Any) -> None:
    """Where only ancestors may trace, the py-spy the supervisor starts (the ranks' sibling)
    can read them because each rank allowed the supervisor and its descendants."""
    j = job(2, "1")
    j.wait_ready(2)
    result = j.sup.execute(DumpStacks())
    assert result.ok, result.message


def test_ptracer_is_needed_only_under_yama_scope_1_without_the_capability(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rankvisor.engine.process import spawner

    monkeypatch.setenv("RANKVISOR_PTRACER", "never")
    assert spawner.ptracer_for_ranks() is None
    monkeypatch.setenv("RANKVISOR_PTRACER", "auto")
    expected = (os.getpid() if yama_ptrace_scope() == 1 and not stacks.has_ptrace_capability()
                else None)
    assert spawner.ptracer_for_ranks() == expected


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_a_capture_never_starts_too_close_to_its_deadline() -> None:
    from rankvisor.engine.supervisor.stack_capture import capture_time

    now = 100.0
    # A long timeout: the budget before the deadline; a short one: halfway.
    assert capture_time(now, now + 30.0, 1.0) == now + 29.0
    assert capture_time(now, now + 1.0, 1.0) == now + 0.5
    assert signal.SIGKILL  # the capture is for escalations that end in one


def test_the_capture_schedule_owes_one_capture_per_escalation_and_one_per_pid() -> None:
    from rankvisor.engine.kernel.escalation import EscalationTable
    from rankvisor.engine.supervisor.stack_capture import CaptureSchedule

    table = EscalationTable(kill_wait_s=5.0)
    schedule = CaptureSchedule(lambda now, deadline: deadline - 1.0)
    pids = {0: 100, 1: 101, 2: 102}
    first = table.add((0, 1), signal.SIGTERM, 10.0, now=0.0)
    schedule.add(first, 0.0, "terminate")
    second = table.add((1,), signal.SIGINT, 5.0, now=1.0)
    schedule.add(second, 1.0, "signal")
    gone = table.add((2,), signal.SIGTERM, 3.0, now=1.0)
    schedule.add(gone, 1.0, "teardown")
    table.rank_gone(2)  # rank 2 exited on its own: its capture is no longer owed
    assert schedule.next_time() == 5.0
    assert schedule.due(4.9, pids.get) == []
    # Rank 1's pid is dumped with the second escalation; the first one then takes rank 0 only.
    assert schedule.due(5.0, pids.get) == [({1: 101}, 6.0, "signal")]
    assert schedule.next_time() == 9.0
    assert schedule.due(9.0, pids.get) == [({0: 100}, 10.0, "terminate")]
    assert schedule.next_time() is None


def _fake_py_spy(tmp_path: Path, failures: int, complaint: str) -> tuple[str, Path]:
    """A py-spy stand-in: says ``complaint`` and fails its first ``failures`` calls, then
    answers a one-thread dump; every call is counted in a file."""
    calls = tmp_path / "calls"
    program = tmp_path / "py-spy"
    program.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"calls = {str(calls)!r}\n"
        "with open(calls, 'a') as f: f.write('x')\n"
        f"if len(open(calls).read()) <= {failures}:\n"
        f"    sys.stderr.write({complaint!r}); sys.exit(1)\n"
        "pid = int(sys.argv[sys.argv.index('--pid') + 1])\n"
        "print(json.dumps([{'os_thread_id': pid, 'thread_name': 'MainThread', 'active': True,"
        " 'frames': [{'name': 'step', 'filename': 'train.py', 'line': 3}]}]))\n")
    program.chmod(0o755)
    return str(program), calls


def test_a_read_that_failed_in_passing_is_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A nonblocking read of a running rank can catch its interpreter mid-change (py-spy:
    "Failed to get stack traces"): the dump is tried again within the rank's time; a
    refusal that no try can change (ptrace denied) is said after one."""
    program, calls = _fake_py_spy(tmp_path, 2, "Error: Failed to get stack traces\n")
    monkeypatch.setattr(stacks, "find_py_spy", lambda: program)
    dump = stacks.dump_stacks({0: os.getpid()}, nonblocking=True)
    assert calls.read_text() == "xxx"
    (rank,) = dump.ranks
    assert not rank.error and rank.threads[0].frames[0].name == "step"

    (tmp_path / "denied").mkdir()
    program, calls = _fake_py_spy(
        tmp_path / "denied", 5, "Error: Failed to open process\n"
        "Caused by:\n    Permission denied (os error 13)\n")
    monkeypatch.setattr(stacks, "find_py_spy", lambda: program)
    dump = stacks.dump_stacks({0: os.getpid()}, nonblocking=True)
    assert calls.read_text() == "x"
    assert dump.ranks[0].error and not dump.ranks[0].threads

    (tmp_path / "always").mkdir()
    program, calls = _fake_py_spy(tmp_path / "always", 99, "Error: Failed to get stack traces\n")
    monkeypatch.setattr(stacks, "find_py_spy", lambda: program)
    dump = stacks.dump_stacks({0: os.getpid()}, nonblocking=True)
    assert calls.read_text() == "x" * (1 + stacks._READ_RETRIES)
    assert dump.ranks[0].error == "py-spy: Failed to get stack traces"


def test_a_reading_nobody_waits_for_takes_its_ranks_one_after_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live suspect's dump (``workers=1``) reads every rank from the calling thread: no
    pool, so an idle supervisor never wakes a thread a rank; the dump is the same."""
    program, calls = _fake_py_spy(tmp_path, 0, "")
    monkeypatch.setattr(stacks, "find_py_spy", lambda: program)

    def no_pool(*_a: object, **_kw: object) -> None:
        raise AssertionError("a pool of threads for a one-worker dump")

    monkeypatch.setattr(stacks, "ThreadPoolExecutor", no_pool)
    dump = stacks.dump_stacks({0: os.getpid(), 1: os.getpid(), 2: os.getpid()},
                              nonblocking=True, workers=1)
    assert calls.read_text() == "xxx"
    assert [r.rank for r in dump.ranks] == [0, 1, 2]
    assert all(r.threads[0].frames[0].name == "step" for r in dump.ranks)
