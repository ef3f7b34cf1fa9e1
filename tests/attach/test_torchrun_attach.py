"""Attaching to a real torchrun job: discovery, lines, signals, attempts, and the app on it.

Each test starts ``python -m torch.distributed.run --standalone --nproc-per-node 2
--log-dir D -r 3 --tee 3`` on ``tr_worker.py`` (numbered lines, slowly) in a session of its
own, and ends it (and every worker it had) whatever happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from rankvisor.engine.attach import (
    AttachError,
    TorchrunHandle,
    discover,
    find_by_log_dir,
    find_by_pid,
)
from rankvisor.engine.attach.discovery import workers_of
from rankvisor.engine.attach.handle import INPUT_REFUSED, RESTART_REFUSED, UNKNOWN_EXIT
from rankvisor.engine.events import (
    AttemptStarted,
    EscalationFinished,
    Event,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from rankvisor.engine.handle import (
    CloseInput,
    DumpStacks,
    RestartAll,
    RestartRank,
    SendInput,
    TerminateRanks,
)
from rankvisor.engine.process.proc_table import find_descendants, read_entry
from rankvisor.engine.states import RankState
from rankvisor.tui.cli.torchrun_view import run_torchrun_view

from tests.conftest import GLOO_JOBS, NEEDS_PIDFD_EXIT, pid_alive, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.gloo, GLOO_JOBS]
WORKER = str(Path(__file__).with_name("tr_worker.py"))
SLOW = 90.0
"""Seconds a torchrun may take to start its workers (torch imports on a busy machine)."""


class Torchrun:
    """A torchrun job started by a test; ``stop`` leaves no process of it behind."""

    def __init__(self, tmp_path: Path, *worker_args: str, max_restarts: int = 0) -> None:
        self.log_dir = str(tmp_path / "logs")
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
        self.out = open(tmp_path / "torchrun.out", "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", "--log-dir", self.log_dir, "-r", "3", "--tee", "3",
                "--max-restarts", str(max_restarts), "--monitor-interval", "0.1",
                WORKER, *worker_args,
            ],
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: the cleanup signals all of it
        )
        self.pid = self.proc.pid
        self.seen: dict[int, int] = {}
        """Every worker pid seen -> its start time (workers are in sessions of their own)."""

    def workers(self, attempt: int = 0) -> list[Any]:
        """Wait until both workers of ``attempt`` are up with their files; return them."""

        def ready() -> list[Any] | None:
            assert self.proc.poll() is None, "torchrun exited early"
            found = workers_of(self.pid)
            self.note()
            ok = len(found) == 2 and all(
                w.restart_count == attempt and w.stdout_path and w.stderr_path for w in found
            )
            return found if ok else None

        return wait_until(ready, timeout=SLOW, interval=0.05)  # type: ignore[return-value]

    def note(self) -> None:
        for entry in find_descendants(self.pid):
            self.seen.setdefault(entry.pid, entry.starttime)

    def stop(self) -> None:
        self.note()
        if self.proc.poll() is None:
            # torchrun stops its workers on SIGTERM; SIGKILL if it does not end in time.
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        for pid, start in self.seen.items():
            entry = read_entry(pid)
            if entry is not None and entry.starttime == start:
                os.kill(pid, signal.SIGKILL)  # a worker torchrun left behind
        self.out.close()

    def left_behind(self) -> list[int]:
        """Workers of this job still alive (none, once ``stop`` returned)."""
        out = []
        for pid, start in self.seen.items():
            entry = read_entry(pid)
            if entry is not None and entry.starttime == start and pid_alive(pid):
                out.append(pid)
        return out

    def output(self) -> str:
        self.out.flush()
        return Path(self.out.name).read_text(errors="replace")


@pytest.fixture
def torchrun(tmp_path: Path) -> Iterator[Any]:
    started: list[Torchrun] = []

    def start(*args: str, max_restarts: int = 0) -> Torchrun:
        job = Torchrun(tmp_path, *args, max_restarts=max_restarts)
        started.append(job)
        return job

    try:
        yield start
    finally:
        for job in started:
            job.stop()
        for job in started:
            assert not job.left_behind(), job.left_behind()


class Events(list[Event]):
    """A sink that keeps every event (appends are atomic: safe from engine threads)."""

    def __call__(self, event: Event) -> None:
        self.append(event)

    def lines(self, rank: int, stream: str = "stdout", attempt: int = 0) -> list[str]:
        """The rank's lines in order; each batch must start where the last one ended."""
        out: list[str] = []
        for e in list(self):
            if isinstance(e, RankOutput) and (e.rank, e.stream, e.attempt) == (
                rank, stream, attempt
            ):
                assert e.first_line == len(out), (e.first_line, len(out))
                out.extend(e.lines)
        return out

    def of(self, kind: type) -> list[Any]:
        return [e for e in list(self) if isinstance(e, kind)]

    def final(self, rank: int, attempt: int = 0) -> RankStateChanged | None:
        for e in self.of(RankStateChanged):
            if e.rank == rank and e.attempt == attempt and e.new.is_final:
                return e  # type: ignore[no-any-return]
        return None


def _numbered(lines: list[str], rank: int, attempt: int = 0, kind: str = "line") -> list[int]:
    """The numbers of the worker's own ``kind`` lines (``line`` on stdout, ``err`` on stderr):
    whatever else a rank prints (torch's warnings at import) is not counted."""
    prefix = f"rank {rank} attempt {attempt} {kind} "
    return [int(x[len(prefix):]) for x in lines if x.startswith(prefix)]


def test_discovery_lines_and_refused_restart(torchrun: Any) -> None:
    job = torchrun("--gloo", "--lines", "30", "--interval", "0.05")
    workers = job.workers()
    by_pid = find_by_pid(job.pid)
    assert [(w.local_rank, w.rank) for w in by_pid.workers] == [(0, 0), (1, 1)]
    assert {w.pid for w in by_pid.workers} == {w.pid for w in workers}
    run_dir = by_pid.run_dir
    assert run_dir.startswith(job.log_dir + "/") and by_pid.attempt == 0
    for w in by_pid.workers:
        rank_dir = os.path.join(run_dir, "attempt_0", str(w.local_rank))
        assert w.stdout_path == os.path.join(rank_dir, "stdout.log")
        assert w.stderr_path == os.path.join(rank_dir, "stderr.log")
        assert w.error_file == os.path.join(rank_dir, "error.json")
    # The same job from the log dir, the run dir, an attempt dir, and a worker's pid.
    for target in (job.log_dir, run_dir, os.path.join(run_dir, "attempt_0")):
        assert find_by_log_dir(target).agent_pid == job.pid
    assert discover(str(by_pid.workers[1].pid)).agent_pid == job.pid

    handle = TorchrunHandle(by_pid, term_timeout_s=5)
    events = Events()
    try:
        info, _ = handle.watch(events)
        assert info.nprocs == 2 and info.log_dir == run_dir
        assert [r.state for r in info.ranks] == [RankState.RUNNING] * 2
        assert handle.execute(RestartRank(1)).message == RESTART_REFUSED
        # torchrun holds its workers' stdin: nothing can be typed to them from here.
        assert handle.execute(SendInput((0,), "c")).message == INPUT_REFUSED
        assert not handle.execute(CloseInput(None)).ok
        assert not handle.execute(RestartAll()).ok
        done = wait_until(lambda: handle.finished, timeout=SLOW)
        assert isinstance(done, RunFinished) and not done.result.failures
        for rank in (0, 1):
            lines = events.lines(rank)
            assert lines[0] == f"rank {rank} all_reduce 3"  # 1 + 2: the group really met
            assert _numbered(lines, rank) == list(range(30))
            stderr = events.lines(rank, "stderr")
            assert _numbered(stderr, rank) == []  # stdout's lines stay on stdout
            assert _numbered(stderr, rank, kind="err") == list(range(6))
            final = events.final(rank)
            # Read from /proc while the worker was a zombie, before torchrun reaped it.
            assert final is not None and final.exitcode == 0, final
        # A second viewer, late: the lines so far once each, then nothing twice.
        late = Events()
        handle.watch(late)
        assert late.lines(0) == events.lines(0) and late.lines(1) == events.lines(1)
        assert late.of(RunFinished)
    finally:
        handle.detach()


@NEEDS_PIDFD_EXIT
def test_a_worker_reaped_before_the_handle_looked_keeps_its_exit_code(
    torchrun: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load torchrun's agent can reap a worker before the handle reads its zombie; the
    handle then reads the status the kernel kept with its pidfd (Linux 6.15 and later)."""
    from rankvisor.engine.attach import handle as attach_handle

    missed: list[int] = []

    def too_late(w: Any) -> None:
        # As if the agent had been first: wait until it has reaped the worker, then miss it.
        wait_until(lambda: not os.path.exists(f"/proc/{w.pid}"), timeout=SLOW)
        missed.append(w.pid)

    monkeypatch.setattr(attach_handle, "_zombie_status", too_late)
    job = torchrun("--lines", "5", "--interval", "0.05")
    job.workers()
    handle = TorchrunHandle.attach(str(job.pid), term_timeout_s=5)
    events = Events()
    try:
        handle.watch(events)
        done = wait_until(lambda: handle.finished, timeout=SLOW)
        assert len(missed) == 2
        for rank in (0, 1):
            final = events.final(rank)
            assert final is not None and final.new is RankState.SUCCEEDED, final
            assert final.exitcode == 0
        assert isinstance(done, RunFinished) and not done.result.failures
        notices = [n.message for n in events.of(SupervisorNotice)]
        assert not any(UNKNOWN_EXIT in m for m in notices), notices
    finally:
        handle.detach()


def test_the_workers_stacks_are_dumped_and_saved_with_the_job(torchrun: Any) -> None:
    """The handle dumps torchrun's workers too (rankvisor runs as root here: Yama would
    otherwise allow only their ancestors); a read-only view may take a nonblocking dump, and
    ask for the collectives."""
    from rankvisor.engine.forensics.stacks import StackDump, find_py_spy
    from rankvisor.engine.handle import CommandResult, ReadCollectives
    from rankvisor.engine.names.refusals import NO_WORKER_SERVER
    from rankvisor.tui.cli.torchrun_view import build_handle

    if find_py_spy() is None:
        pytest.skip("py-spy is not installed")
    job = torchrun("--interval", "0.05")
    job.workers()
    handle = build_handle(str(job.pid), read_only=True, term_timeout_s=30)
    events = Events()
    try:
        handle.watch(events)
        wait_until(lambda: len(_numbered(events.lines(1), 1)) >= 3, timeout=SLOW)
        assert not handle.execute(DumpStacks()).ok  # blocking: refused to a viewer
        result = handle.execute(DumpStacks(nonblocking=True))
        assert result.ok, result.message
        dump = StackDump.from_dict(result.data or {})
        assert sorted(r for g in dump.groups for r in g.ranks) == [0, 1]
        assert os.path.dirname(dump.path) == os.path.join(handle.snapshot().log_dir, "stacks")
        assert "--- rank 1 " in Path(dump.path).read_text()
        # The collectives pause nobody either; torchrun started no worker server in these
        # workers (their script does not run under worker_main()): the view says so.
        asked = handle.execute(ReadCollectives())
        assert asked == CommandResult(False, f"no collectives: {NO_WORKER_SERVER}")
    finally:
        handle.detach()


def test_terminate_rank_one_and_what_torchrun_does(torchrun: Any) -> None:
    job = torchrun("--interval", "0.05")
    job.workers()
    handle = TorchrunHandle.attach(str(job.pid), term_timeout_s=30)
    events = Events()
    try:
        handle.watch(events)
        wait_until(lambda: len(_numbered(events.lines(1), 1)) >= 3, timeout=SLOW)
        result = handle.execute(TerminateRanks((1,)))
        assert result.ok, result
        final = wait_until(lambda: events.final(1), timeout=30)
        assert final.new is RankState.SIGNALLED and final.signal_name == "SIGTERM"
        assert final.exitcode == -signal.SIGTERM and final.caused_by_us
        # torchrun (no restarts left) then stops rank 0 itself and exits: the job is over.
        done = wait_until(lambda: handle.finished, timeout=60)
        zero = events.final(0)
        assert zero is not None and not zero.caused_by_us
        if zero.exitcode is None:
            # torchrun waits on rank 0 right after its SIGTERM and reaps it at once: the
            # zombie was gone before we looked, and the handle says it cannot know.
            notices = [n.message for n in events.of(SupervisorNotice)]
            assert any(m.startswith("rank 0 ") and UNKNOWN_EXIT in m for m in notices)
        else:
            assert zero.exitcode == -signal.SIGTERM and 0 in done.result.failures
        assert isinstance(done, RunFinished) and 1 in done.result.stopped  # ours
        if 0 in done.result.failures:
            # The person's terminate is the first domino, as torchrun's report says.
            assert done.suspect is not None and done.suspect.rank == 1, done.suspect
            assert done.suspect.reason.startswith("rank 1: terminated by your SIGTERM")
        assert job.proc.wait(timeout=30) != 0
        summary = job.output()  # torchrun's own report: both died of SIGTERM
        assert "ChildFailedError" in summary and summary.count("exitcode  : -15") == 2
    finally:
        handle.detach()


def test_sigterm_ignored_gets_sigkill_after_the_timeout(torchrun: Any) -> None:
    """...with the worker's stack saved under the job's log dir before that SIGKILL."""
    from rankvisor.engine.forensics.stacks import find_py_spy

    job = torchrun("--interval", "0.05", "--ignore-sigterm", "0")
    job.workers()
    handle = TorchrunHandle.attach(job.log_dir)
    events = Events()
    try:
        handle.watch(events)
        wait_until(lambda: len(_numbered(events.lines(0), 0)) >= 3, timeout=SLOW)
        assert handle.execute(TerminateRanks((0,), timeout_s=3.0)).ok
        final = wait_until(lambda: events.final(0), timeout=30)
        assert final.signal_name == "SIGKILL" and final.caused_by_us
        finished = wait_until(lambda: events.of(EscalationFinished), timeout=10)
        assert finished[0].ranks == (0,) and finished[0].killed == (0,)
        # It ignored SIGTERM: it wrote on after the signal.
        assert len(_numbered(events.lines(0), 0)) > 3
        if find_py_spy() is not None:
            notices = [e for e in events.of(SupervisorNotice) if "before SIGKILL" in e.message]
            assert len(notices) == 1 and notices[0].message.startswith(
                "rank(s) 0: stack saved before SIGKILL: "), notices
            # Saved before the kill: the notice came before the rank's end.
            assert list(events).index(notices[0]) < list(events).index(final)
            path = Path(notices[0].message.rpartition(": ")[2])
            assert path.parent == Path(handle.snapshot().log_dir) / "stacks"
            text = path.read_text()
            assert "before SIGKILL (terminate)" in text and "--- rank 0 " in text
    finally:
        handle.detach()


def test_follows_torchrun_to_its_next_attempt(torchrun: Any) -> None:
    job = torchrun("--fail-attempt0", "--lines", "12", "--interval", "0.05", max_restarts=1)
    first = job.workers()
    handle = TorchrunHandle.attach(str(job.pid))
    events = Events()
    try:
        handle.watch(events)
        started = wait_until(lambda: events.of(AttemptStarted), timeout=SLOW)
        assert started[0].attempt == 1 and started[0].log_dir.endswith("attempt_1")
        new_pids = set(started[0].pids)
        assert new_pids.isdisjoint(w.pid for w in first)
        restarted = events.of(RankRestarted)
        assert {r.rank for r in restarted} == {0, 1} and all(r.whole_attempt for r in restarted)
        assert all("/attempt_1/" in r.stdout_path for r in restarted)
        ended = [events.final(rank, attempt=0) for rank in (0, 1)]
        assert all(e is not None for e in ended), ended
        # Both raise after 5 lines; the one torchrun sees first fails, and torchrun may
        # SIGTERM the other before it raises too.
        failed = [e for e in ended if e is not None and e.new is RankState.FAILED]
        assert failed, ended
        for e in failed:
            # The error.json torch's record wrote is what the error view shows.
            assert e.failure is not None and "fails in attempt 0" in str(e.failure.message)
        done = wait_until(lambda: handle.finished, timeout=SLOW)
        assert not done.result.failures and done.attempt == 1
        for rank in (0, 1):
            assert _numbered(events.lines(rank, attempt=0), rank) == list(range(5))[
                : len(_numbered(events.lines(rank, attempt=0), rank))
            ]
            assert _numbered(events.lines(rank, attempt=1), rank, 1) == list(range(12))
        snap = handle.snapshot()
        assert snap.attempt == 1 and {r.pid for r in snap.ranks} == new_pids
    finally:
        handle.detach()


async def test_the_app_shows_a_torchrun_jobs_panes(torchrun: Any) -> None:
    from rankvisor.tui.app import make_app
    from rankvisor.tui.screens.confirm import ConfirmScreen, QuitScreen, RestartRankScreen

    from tests.tui.conftest import wait_for

    job = torchrun("--interval", "0.05")
    job.workers()
    # The job runs a second before the attach, so that a clock from the attach and one from
    # the job's start differ by more than the check's margin (torchrun can start in 0.4 s).
    # Its start is read against the boot clock, as /proc counts it: psutil's start times
    # rest on the kernel's whole-second boot time, which two readings may see differ by 1 s.
    def agent_started() -> float:
        ticks = int(Path(f"/proc/{job.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.time() - (boot - ticks / os.sysconf("SC_CLK_TCK"))

    time.sleep(max(0.0, 1.0 - (time.time() - agent_started())))
    handle = TorchrunHandle.attach(str(job.pid))
    attached = time.time()
    app = make_app(handle)
    made = time.time()
    async with app.run_test(size=(120, 36)) as pilot:
        ranks = app.run_view.ranks
        assert len(ranks) == 2 and all(v.state is RankState.RUNNING for v in ranks)
        await wait_for(
            pilot,
            lambda: all(_numbered([v.last_line], v.rank) and
                        _numbered([v.last_line], v.rank)[0] >= 5 for v in ranks),
            timeout=SLOW,
        )
        await pilot.pause(0.2)
        for rank in (0, 1):
            pane = app.main_screen.query_one(f"#rank-{rank}")
            log = pane.query_one("RankLog")
            rows = [log.render_line(y).text for y in range(log.size.height)]  # type: ignore[attr-defined]
            assert any(f"rank {rank} attempt 0 line" in row for row in rows), rows
        # Issue 22: the clock counts from the job's start (the agent's, from /proc), not
        # from the attach; restarts, which torchrun owns, are not offered to be refused.
        # The app's clock is fixed (make_app's): its elapsed time is what it counted when it
        # was made, between the attach and now, from the job's start (to a clock tick).
        elapsed, started = app.summary_args()["elapsed"], agent_started()
        assert attached - started - 0.02 <= elapsed <= made - started + 0.02, (
            elapsed, attached - started, made - started)
        assert elapsed >= 0.98  # the job ran a second before the attach: not the viewer's
        await pilot.press("r")
        assert not isinstance(app.screen, (RestartRankScreen, ConfirmScreen))
        assert "no restart here: torchrun owns these processes" in app.notices[-1].message
        await pilot.press("R")
        assert not isinstance(app.screen, (RestartRankScreen, ConfirmScreen))
        await pilot.press("q")
        # The job is torchrun's: quitting asks to detach (the default) or to end it.
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("d")
        await wait_for(pilot, lambda: app.return_value is not None, timeout=30)
        assert app.detached
    # Quitting the viewer only detached: the job runs on.
    assert job.proc.poll() is None
    assert len(workers_of(job.pid)) == 2


def test_attach_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    cases = {
        str(gone.pid): "gone",
        str(os.getpid()): "not a torchrun agent",
        str(tmp_path): "not a torchrun log dir",
    }
    for target, words in cases.items():
        assert run_torchrun_view(target) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    run = tmp_path / "r_abc" / "attempt_0" / "0"
    run.mkdir(parents=True)
    with pytest.raises(AttachError, match="no live torchrun worker"):
        find_by_log_dir(str(tmp_path))
    # --no-stack-on-kill is the torchrun handle's: a run of rankvisor's own took it at run.
    from rankvisor.tui.cli.attach import main as attach_main

    assert attach_main(["--no-stack-on-kill"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--no-stack-on-kill goes with --torchrun" in err, err


def test_agent_killed_leaves_orphans_that_can_still_be_ended(torchrun: Any) -> None:
    job = torchrun("--interval", "0.05")
    job.workers()
    handle = TorchrunHandle.attach(str(job.pid), term_timeout_s=10)
    events = Events()
    try:
        handle.watch(events)
        job.note()
        os.kill(job.pid, signal.SIGKILL)  # the agent only: its workers are in their own sessions
        job.proc.wait(timeout=30)
        wait_until(
            lambda: any("orphaned" in n.message for n in events.of(SupervisorNotice)), timeout=30
        )
        assert handle.finished is None
        assert all(r.state is RankState.RUNNING for r in handle.snapshot().ranks)
        assert handle.execute(TerminateRanks()).ok
        done = wait_until(lambda: handle.wait(0.1), timeout=30)
        assert isinstance(done, RunFinished) and not done.result.failures
        assert not job.left_behind()
    finally:
        handle.detach()
