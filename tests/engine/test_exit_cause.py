"""Why a rank ended, in words: real ranks die each way this machine can produce, and the
supervisor's state event, its snapshot and status.json all say why.

Real processes (tests/bin/die_of.py): a SIGSEGV with faulthandler's stack, a SIGBUS from a
truncated mapping, exit(137), "CUDA out of memory" raised, a SIGKILL and a SIGTERM from
outside, a gloo job whose collective times out, rankvisor's own teardown, and OOM kills in a
memory-limited cgroup the test makes (counted by the rank's cgroup, or found in the kernel
log when rankvisor has no cgroup). The pure classification is tested on facts alone.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control import wire
from rankvisor.engine.control.status import build_status
from rankvisor.engine.events import Event, RankStateChanged
from rankvisor.engine.forensics.exit_cause import (
    ExitCause,
    ExitFacts,
    classify,
    faulthandler_block,
    kernel_oom_line,
)
from rankvisor.engine.process import cgroups
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, limit_memory, pid_alive, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo]

DIE_OF = str(BIN / "die_of.py")


class _Events:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.all: list[Event] = []

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.all.append(event)

    def finals(self, rank: int) -> list[RankStateChanged]:
        with self._lock:
            return [e for e in self.all if isinstance(e, RankStateChanged)
                    and e.rank == rank and e.new.is_final]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``run(nprocs, *die_of_args, cgroups="0")`` -> (Supervisor, events), started."""
    sups: list[Supervisor] = []

    def make(nprocs: int, *args: str, cgroups_mode: str = "0", **config: Any) -> Any:
        monkeypatch.setenv(cgroups.CGROUPS_ENV, cgroups_mode)
        cfg = SupervisorConfig(
            entrypoint=PYTHON, args=("-u", DIE_OF, *args, "--dir", str(tmp_path)),
            nprocs=nprocs, log_dir=str(tmp_path / "logs"), term_timeout=5.0,
            **{"sample_interval": 0, **config},
        )
        sup = Supervisor(cfg)
        events = _Events()
        sup.subscribe(events)
        sups.append(sup)
        sup.start()
        return sup, events

    yield make
    for sup in sups:
        sup.shutdown(timeout_s=5)


def _ended(sup: Supervisor, events: _Events, rank: int = 0) -> ExitCause:
    """The rank's cause, once it ended, after checking that the event, the snapshot,
    status.json and the wire all carry the same."""
    wait_until(lambda: events.finals(rank), timeout=60)
    event = events.finals(rank)[-1]
    info = sup.snapshot().ranks[rank]
    assert event.exit_cause is not None and event.exit_cause == info.exit_cause
    status = build_status(sup.snapshot(), None, socket="", supervisor_pid=1,
                          supervisor_start=1, exitcode=None, started=0.0)
    assert status["ranks"][rank]["exit_cause"] == {
        "code": event.exit_cause.code, "text": event.exit_cause.text}
    back = wire.event_from_wire(wire.decode_message(wire.encode_event(event)))
    assert isinstance(back, RankStateChanged) and back.exit_cause == event.exit_cause
    return event.exit_cause


def _ready_pid(tmp_path: Path, rank: int) -> int:
    path = tmp_path / f"{rank}.ready"
    wait_until(path.exists, timeout=60)
    return int(path.read_text())


# -- real ranks -----------------------------------------------------------------------------


def test_a_segfault_names_the_signal_and_faulthandlers_innermost_frame(run: Any) -> None:
    cause = _ended(*run(1, "segfault"))
    assert cause.code == "sigsegv"
    assert "segmentation fault (SIGSEGV)" in cause.text and "in string_at (" in cause.text
    assert cause.detail.startswith("Fatal Python error: Segmentation fault")
    assert 'in string_at' in cause.detail and "die_of.py" in cause.detail


def test_a_sigbus_points_at_dev_shm_and_shows_its_size(run: Any) -> None:
    cause = _ended(*run(1, "sigbus"))
    assert cause.code == "sigbus"
    assert "often a too-small /dev/shm (docker --shm-size)" in cause.text
    assert "/dev/shm here: " in cause.text and " used" in cause.text


@pytest.mark.parametrize(("code", "name"), [(137, "SIGKILL"), (143, "SIGTERM")])
def test_exit_137_and_143_read_as_a_shells_report_of_a_signal(
    run: Any, code: int, name: str
) -> None:
    cause = _ended(*run(1, "exit", str(code)))
    assert cause.code == "shell_signal"
    assert cause.text.startswith(f"exit code {code} (128+{code - 128}): ")
    assert f"killed by {name}" in cause.text and f"exit({code})" in cause.text


def test_cuda_out_of_memory_is_named_from_the_message(run: Any) -> None:
    cause = _ended(*run(1, "cuda-oom"))
    assert cause.code == "cuda_oom"
    assert cause.text.startswith("CUDA out of memory: Tried to allocate 20.00 GiB")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_signal_from_outside_is_not_rankvisors(
    run: Any, tmp_path: Path, sig: signal.Signals
) -> None:
    sup, events = run(1, "wait")
    os.kill(_ready_pid(tmp_path, 0), sig)
    cause = _ended(sup, events)
    assert cause.code == "outside_signal"
    assert cause.text.startswith(f"killed by {sig.name} from outside rankvisor")
    if sig == signal.SIGKILL:
        # No cgroup (RANKVISOR_CGROUPS=0): the kernel log, when readable, clears the OOM
        # killer; else the text says it cannot tell.
        assert ("the kernel log names no OOM kill" in cause.text
                or "the kernel log is not readable" in cause.text)


def test_ranks_rankvisor_stopped_say_so_and_the_failure_keeps_its_own_cause(
    run: Any, tmp_path: Path
) -> None:
    sup, events = run(2, "exit", "3", "--rank", "0")
    _ready_pid(tmp_path, 1)
    sup.wait(60)
    assert _ended(sup, events, 0) == ExitCause("exit", "exited with code 3")
    stopped = _ended(sup, events, 1)
    assert stopped.code == "stopped"
    assert stopped.text == (
        "stopped by rankvisor after another rank failed (teardown): SIGTERM")


def test_a_gloo_collective_that_times_out_is_named(run: Any, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    sup, events = run(2, "gloo")
    assert sup.wait(120) is not None
    cause = _ended(sup, events, 0)
    assert cause.code == "gloo_timeout", cause
    assert "Timed out waiting 2000ms" in cause.text
    assert _ended(sup, events, 1).code == "stopped"


# -- OOM kills in a memory-limited cgroup ----------------------------------------------------


def _probe_memory_cgroup() -> tuple[str | None, str | None]:
    """(the memory controller a rank's cgroup would get, why none would), probed once."""
    old = os.environ.get(cgroups.CGROUPS_ENV)
    os.environ[cgroups.CGROUPS_ENV] = "auto"
    try:
        tree, detail = cgroups.open_run("probe")
    finally:
        if old is None:
            del os.environ[cgroups.CGROUPS_ENV]
        else:
            os.environ[cgroups.CGROUPS_ENV] = old
    if tree is None:
        return None, detail
    kind = tree.memory_kind
    tree.close()
    return kind, None if kind is not None else f"no memory controller: {detail}"


_MEMORY_KIND, _NO_MEMORY_CGROUP = _probe_memory_cgroup()


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_an_oom_kill_in_the_ranks_memory_cgroup_is_named(
    run: Any, tmp_path: Path, kind: str
) -> None:
    if _NO_MEMORY_CGROUP is not None:
        pytest.skip(f"no writable memory cgroup here: {_NO_MEMORY_CGROUP}")
    if _MEMORY_KIND != kind:
        pytest.skip(f"this machine reads memory from cgroup {_MEMORY_KIND}, not {kind} "
                    f"(cgroup {kind} has no writable memory controller here)")
    sup, events = run(1, "oom", cgroups_mode="auto")
    pid = _ready_pid(tmp_path, 0)
    memory_dir = cgroups.cgroup_dirs_of(pid).get("memory") or cgroups.cgroup_dirs_of(pid)["v2"]
    assert "rankvisor-" in memory_dir, memory_dir
    limit_memory(memory_dir, 96 << 20)
    (tmp_path / "go").touch()
    cause = _ended(sup, events)
    assert cause.code == "oom_killed"
    assert cause.text.startswith("killed by the kernel's OOM killer (its cgroup counted 1 ")
    assert sup.snapshot().ranks[0].oom_killed


@pytest.fixture
def memory_cgroup() -> Iterator[str]:
    """A v1 or v2 memory cgroup the test makes itself, removed at the end."""
    bases = cgroups._bases(writable=True)
    base = bases.get("memory")
    if base is None and "v2" in bases and "memory" in (
        Path(bases["v2"], "cgroup.subtree_control").read_text().split()
    ):
        base = bases["v2"]
    if base is None:
        pytest.skip("no writable memory cgroup (v1 memory hierarchy, or v2 with the memory "
                    "controller delegated) to make a limited one in")
    path = os.path.join(base, f"rv-test-oom-{os.getpid()}")
    os.mkdir(path)
    yield path
    for pid in cgroups._pids(path):
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    cgroups.remove_tree(path, timeout_s=10)


def test_without_a_cgroup_of_its_own_the_kernel_log_names_the_oom_kill(
    run: Any, tmp_path: Path, memory_cgroup: str
) -> None:
    if kernel_oom_line(os.getpid())[1] is False:
        pytest.skip("the kernel log (/dev/kmsg) is not readable here (not root, or "
                    "kernel.dmesg_restrict=1)")
    sup, events = run(1, "oom", cgroups_mode="0")  # process-tree tracking: nothing counts
    pid = _ready_pid(tmp_path, 0)
    limit_memory(memory_cgroup, 96 << 20)
    Path(memory_cgroup, "cgroup.procs").write_text(str(pid))
    (tmp_path / "go").touch()
    cause = _ended(sup, events)
    assert cause.code == "oom_killed", cause
    assert cause.text == "killed by the kernel's OOM killer (the kernel log names it)"
    assert f"Killed process {pid} " in cause.detail


# -- the classification alone ---------------------------------------------------------------


def test_rankvisors_sigkill_after_sigterm_is_a_stop_not_an_oom_kill() -> None:
    cause = classify(ExitFacts(-9, caused_by_us=True, stop_reason="teardown",
                               our_signals=(15, 9), oom_kills=1))
    assert cause == ExitCause(
        "stopped", "stopped by rankvisor after another rank failed (teardown): "
                   "SIGKILL after it outlived SIGTERM")


def test_a_worker_oom_killed_before_the_rank_failed_is_said() -> None:
    cause = classify(ExitFacts(1, oom_kills=1, stderr_tail="RuntimeError: DataLoader worker "
                               "(pid 12) is killed by signal: Killed."))
    assert cause is not None and cause.code == "child_oom_killed"
    assert "the OOM killer killed 1 process of the rank" in cause.text


def test_nccl_watchdog_timeouts_and_errors() -> None:
    watchdog = ("[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Watchdog caught collective"
                " operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 ms")
    cause = classify(ExitFacts(-6, stderr_tail=watchdog))
    assert cause is not None and cause.code == "sigabrt"
    assert "after: NCCL collective timed out" in cause.text
    error = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, " \
            "unhandled system error (run with NCCL_DEBUG=INFO for details)"
    cause = classify(ExitFacts(1, message=error))
    assert cause is not None and cause.code == "nccl_error"


def test_a_signal_a_person_sent_through_rankvisor_is_named() -> None:
    cause = classify(ExitFacts(-10, caused_by_us=True, stop_reason="signal", our_signals=(10,)))
    assert cause == ExitCause("stopped", "ended by the SIGUSR1 sent through rankvisor")


def test_a_python_exception_and_a_bare_exit_code() -> None:
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n' \
         'ValueError: bad batch\n'
    assert classify(ExitFacts(1, stderr_tail=tb)) == ExitCause(
        "exception", "raised ValueError: bad batch (exit code 1)")
    assert classify(ExitFacts(2, stderr_tail="usage: x\n")) == ExitCause(
        "exit", "exited with code 2")
    assert classify(ExitFacts(0)) is None


def test_faulthandler_block_stops_at_the_programs_own_output() -> None:
    text = ("noise\nFatal Python error: Bus error\n\nThread 0x01 (most recent call first):\n"
            '  File "a.py", line 3 in g\n\nCurrent thread 0x02 (most recent call first):\n'
            '  File "b.py", line 9 in f\n\nExtension modules: numpy (total: 1)\nmore\n')
    assert faulthandler_block(text) == (
        "Fatal Python error: Bus error\nThread 0x01 (most recent call first):\n"
        '  File "a.py", line 3 in g\nCurrent thread 0x02 (most recent call first):\n'
        '  File "b.py", line 9 in f')


# -- the headless report -------------------------------------------------------------------


def test_the_headless_report_says_a_cause_its_exit_code_does_not(run: Any) -> None:
    from rankvisor.engine.entry.headless import format_report, report_forensics

    sup, events = run(1, "sigbus")
    cause = _ended(sup, events)
    finished = sup.wait(30)
    assert finished is not None
    report = format_report("die_of.py", finished, *report_forensics(sup))
    lines = report.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("rankvisor: root cause: rank 0"))
    assert lines[at + 1] == f"rankvisor: rank 0: {cause.text}", report
    # A plain exit code says it all already: no line of its own.
    plain = format_report("die_of.py", finished, {0: ExitCause("exit", "exited with code 3")})
    assert "rankvisor: rank 0:" not in plain


def test_the_headless_report_names_the_newest_stack_dumps() -> None:
    from rankvisor.engine.entry.headless import REPORTED_DUMPS, format_report
    from rankvisor.engine.errors import ProcessFailure
    from rankvisor.engine.events import RunFinished
    from rankvisor.engine.result import RunProcsResult

    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file="")
    finished = RunFinished(RunProcsResult(failures={0: failure}), 0, 0)
    paths = [f"/run/stacks/{i}.txt" for i in range(REPORTED_DUMPS + 2)]
    lines = format_report("x.py", finished, dumps=paths).splitlines()
    said = [ln for ln in lines if ln.startswith("rankvisor: stacks saved: ")]
    assert said == [f"rankvisor: stacks saved: {p}" for p in paths[2:]]
    assert "rankvisor: ... and 2 older dump(s) beside them" in lines


_KNOCK_ON_TB = ('Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n'
                "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer\n")


@pytest.mark.parametrize(("facts", "code", "own"), [
    # It raised (a knock-on), then the teardown's SIGTERM ended it in its exit.
    (ExitFacts(-15, stop_reason="teardown", our_signals=(15,), stderr_tail=_KNOCK_ON_TB),
     "gloo_error", "gloo error"),
    # Its own error, from the error file.
    (ExitFacts(-15, stop_reason="teardown", our_signals=(15,), message="ValueError: bad batch"),
     "exception", "raised ValueError: bad batch"),
    # The signal cut its traceback short: what it raised is lost.
    (ExitFacts(-15, stop_reason="shutdown", our_signals=(15,),
               stderr_tail='Traceback (most recent call last):\n  File "x.py", line 3\n'),
     "exception", "printed a traceback of its own"),
    # Escalation's SIGKILL after SIGTERM.
    (ExitFacts(-9, stop_reason="teardown", our_signals=(15, 9), message="ValueError: x"),
     "exception", "raised ValueError: x"),
])
def test_a_signal_rankvisor_sent_is_never_from_outside(
    facts: ExitFacts, code: str, own: str
) -> None:
    cause = classify(facts)
    assert cause is not None and cause.code == code, cause
    assert "outside" not in cause.text
    name = signal.Signals(-facts.exitcode).name
    assert cause.text.startswith(f"failed on its own, then rankvisor's {name} ("), cause.text
    assert own in cause.text
    # Not ours: the same death by a signal we never sent.
    alone = classify(ExitFacts(facts.exitcode, stderr_tail=facts.stderr_tail))
    assert alone is not None and alone.code == "outside_signal"
