"""RankProcess: real processes, real signals, pidfds, death signals, the exit watcher."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from rankvisor.engine.process import proc_table as _proctable
from rankvisor.engine.process import spawner as _spawner
from rankvisor.engine.process.rank_process import (
    RankProcess,
    on_spawner_thread,
    send_signal_all,
    wait_any,
)

from tests.conftest import BIN, PYTHON, pid_alive, wait_until

pytestmark = pytest.mark.processes


def _sleep(seconds: float = 600) -> RankProcess:
    return RankProcess.spawn(["sleep", str(seconds)], None, None, None)


def _cleanup(*procs: RankProcess) -> None:
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait(10)


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _read_pids(path: Path) -> list[int]:
    wait_until(path.exists)
    return [int(x) for x in path.read_text().split()]


def test_spawn_own_session_files_and_exit_code(tmp_path: Path) -> None:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    proc = RankProcess.spawn(
        [PYTHON, str(BIN / "exit_with.py"), "--code", "3"], {"LOCAL_RANK": "5"}, str(out), str(err)
    )
    assert proc.pgid == proc.pid
    assert proc.wait(30) == 3 and proc.exitcode == 3 and proc.poll() == 3
    assert out.read_text() == "out from rank 5\n" and err.read_text() == "err from rank 5\n"
    assert proc.exit_time_ns is not None and proc.create_time is not None
    assert proc.create_time * 1e9 <= proc.exit_time_ns
    assert proc.argv == (PYTHON, str(BIN / "exit_with.py"), "--code", "3")
    proc.close()
    proc.close()  # idempotent


def test_log_mode_append_and_one_file_for_both_streams(tmp_path: Path) -> None:
    log = tmp_path / "both.log"
    log.write_text("earlier incarnation\n")
    cmd = [PYTHON, str(BIN / "say.py"), "out:a", "err:b", "out:c"]
    RankProcess.spawn(cmd, None, str(log), str(log), log_mode="a").wait(30)
    assert log.read_text() == "earlier incarnation\na\nb\nc\n"
    RankProcess.spawn(cmd, None, str(log), str(log)).wait(30)  # "w": torch's truncation
    assert log.read_text() == "a\nb\nc\n"


def test_env_is_laid_over_ours_unless_told_otherwise(tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    code = "import os; print(os.environ.get('HOME', '-'), os.environ['X_RANK'])"
    RankProcess.spawn([PYTHON, "-c", code], {"X_RANK": "7"}, str(out), None).wait(30)
    assert out.read_text() == f"{os.environ.get('HOME', '-')} 7\n"
    RankProcess.spawn(
        [PYTHON, "-c", code], {"X_RANK": "8"}, str(out), None, inherit_env=False
    ).wait(30)
    assert out.read_text() == "- 8\n"


def test_missing_and_non_executable_programs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        RankProcess.spawn([str(tmp_path / "nope")], None, None, None)
    assert str(tmp_path / "nope") in str(info.value)
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError, match="not executable"):
        RankProcess.spawn([str(script)], None, None, None)
    with pytest.raises(FileNotFoundError, match="PATH"):
        RankProcess.spawn(["no-such-program-anywhere"], None, None, None)


def test_send_signal_after_exit_does_nothing() -> None:
    proc = RankProcess.spawn(["true"], None, None, None)
    assert proc.wait(30) == 0
    assert proc.send_signal(signal.SIGKILL) is False
    assert proc.signals_sent == []


def test_group_signal_reaches_descendants_even_outside_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    proc = RankProcess.spawn([PYTHON, str(BIN / "spawn_tree.py"), str(pidfile)], None, None, None)
    child, escaped = _read_pids(pidfile)
    assert os.getpgid(child) == proc.pgid and os.getpgid(escaped) != proc.pgid
    assert {p.pid for p in proc.descendants()} >= {child, escaped}
    assert proc.send_signal(signal.SIGTERM) is True
    assert proc.wait(30) == -signal.SIGTERM
    assert proc.signals_sent[0][0] == signal.SIGTERM
    wait_until(lambda: not pid_alive(child) and not pid_alive(escaped))
    wait_until(lambda: group_gone(proc.pgid))  # zombies count until init reaps them


_THREADED_TREE = """
import os, subprocess, sys, threading, time
inner = (
    "import os, subprocess, sys, time\\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
    " start_new_session=True)\\n"
    "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()} {g.pid}')\\n"
    "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n"
    "time.sleep(600)\\n"
)
def fork_and_stay():
    # Forked by a thread that lives on: the child is listed under that thread's tid.
    subprocess.Popen([sys.executable, "-c", inner, sys.argv[1]])
    time.sleep(600)
threading.Thread(target=fork_and_stay, daemon=True).start()
time.sleep(600)
"""


@pytest.mark.parametrize("walk", ["children files", "scan"])
def test_setsid_grandchild_of_a_thread_dies_with_the_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, walk: str
) -> None:
    """A grandchild that left the group is found (either way) and signalled at close."""
    if walk == "scan":
        monkeypatch.setattr(_proctable, "_children_files", False)  # as without the files
    elif _proctable.needs_scan():
        pytest.skip("no /proc/<pid>/task/<tid>/children on this kernel")
    pidfile = tmp_path / "pids"
    proc = RankProcess.spawn([PYTHON, "-c", _THREADED_TREE, str(pidfile)], None, None, None)
    child, grandchild = _read_pids(pidfile)
    try:
        assert os.getpgid(child) == proc.pgid
        assert os.getsid(grandchild) == grandchild != proc.pgid
        assert {e.pid for e in _proctable.find_descendants(proc.pid)} >= {child, grandchild}
        assert send_signal_all([proc], signal.SIGTERM) == [proc]
        assert proc.wait(30) == -signal.SIGTERM
        wait_until(lambda: not pid_alive(child) and not pid_alive(grandchild))
    finally:
        for pid in (child, grandchild):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _cleanup(proc)


def test_find_descendants_of_a_gone_process_is_empty() -> None:
    proc = RankProcess.spawn(["true"], None, None, None)
    assert proc.wait(30) == 0
    assert _proctable.find_descendants(proc.pid) == []


def test_group_false_signals_only_the_rank(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    proc = RankProcess.spawn([PYTHON, str(BIN / "spawn_tree.py"), str(pidfile)], None, None, None)
    child, escaped = _read_pids(pidfile)
    try:
        assert proc.send_signal(signal.SIGKILL, group=False)
        assert proc.wait(30) == -signal.SIGKILL
        assert pid_alive(child) and pid_alive(escaped)
    finally:
        for pid in (child, escaped):
            os.kill(pid, signal.SIGKILL)


def test_a_stale_identity_is_never_signalled() -> None:
    """What protects descendants from recycled pids: (pid, starttime) is checked first."""
    victim = _sleep()
    try:
        entry = _proctable.read_entry(victim.pid)
        assert entry is not None
        # The same pid with another start time is another process: it must not be hit.
        stale = entry._replace(starttime=entry.starttime - 1)
        assert _proctable.signal_checked([stale], signal.SIGKILL) == 0
        assert victim.wait(0.2) is None  # still running
        assert _proctable.signal_checked([entry], signal.SIGKILL) == 1
        assert victim.wait(30) == -signal.SIGKILL
    finally:
        _cleanup(victim)


def test_reaped_rank_is_not_signalled_through_its_old_pid() -> None:
    """Once reaped the pid may be reused: send_signal must refuse, pidfd or not."""
    proc = RankProcess.spawn(["true"], None, None, None)
    proc.wait(30)
    wait_until(lambda: not os.path.exists(f"/proc/{proc.pid}"))  # reaped, pid free
    assert proc.send_signal(signal.SIGTERM) is False


def test_wait_any_returns_the_first_exit_and_orders_exit_times(tmp_path: Path) -> None:
    fast = RankProcess.spawn([PYTHON, "-c", "pass"], None, None, None)
    slow = _sleep()
    try:
        done = wait_any([slow, fast], 30)
        assert done == [fast]
        assert wait_any([slow], 0) == []
        assert slow.send_signal(signal.SIGTERM)
        assert wait_any([slow], 30) == [slow]
        assert fast.exit_time_ns is not None and slow.exit_time_ns is not None
        assert fast.exit_time_ns < slow.exit_time_ns
    finally:
        _cleanup(slow)


def test_exit_time_is_the_real_exit_not_when_someone_asked(tmp_path: Path) -> None:
    """The watcher stamps the exit as it happens; polling much later does not move it."""
    stamp = tmp_path / "stamp"
    code = f"import time; open({str(stamp)!r}, 'w').write(str(time.time_ns()))"
    proc = RankProcess.spawn([PYTHON, "-c", code], None, None, None)
    wait_until(lambda: proc.exit_time_ns is not None)  # nobody polled: the watcher saw it
    later = time.time_ns()
    assert proc.poll() == 0
    written = int(stamp.read_text())
    assert proc.exit_time_ns is not None
    assert written <= proc.exit_time_ns <= later


def test_fileno_is_a_pollable_pidfd() -> None:
    import select

    proc = RankProcess.spawn([PYTHON, "-c", "pass"], None, None, None)
    readable, _, _ = select.select([proc], [], [], 30)
    assert readable == [proc]
    proc.wait(30)


def test_a_rank_its_caller_watches_is_left_alone_by_the_exit_watcher(tmp_path: Path) -> None:
    """``watched=False`` (the Supervisor's run loop): the exit watcher neither watches nor
    reaps it; the caller's ``observe_exit`` reaps it when its pidfd is readable, and keeps
    its identity first; ``wait`` still returns, looking for itself."""
    import select

    from rankvisor.engine.process import exit_watch

    gate = tmp_path / "gate"
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)"
    proc = RankProcess.spawn([PYTHON, "-c", code], None, None, None, watched=False)
    try:
        assert proc.pidfd is not None
        assert proc.pidfd not in exit_watch.watcher()._by_fd
        assert proc.observe_exit() is None  # running: nothing to reap
        started = proc.create_time
        gate.touch()
        select.select([proc], [], [], 30)  # as the run loop sleeps on it
        time.sleep(0.2)  # nobody else reaps it meanwhile
        assert proc.exit_time_ns is None
        assert proc.observe_exit() == 0
        assert proc.exit_time_ns is not None
        assert proc.create_time == pytest.approx(started, abs=0.05)  # its own, kept
    finally:
        gate.touch()
        proc.wait(30)
    other = RankProcess.spawn([PYTHON, "-c", "pass"], None, None, None, watched=False)
    assert other.wait(30) == 0  # no watcher thread to wake it: it looks every 10 ms
    other.close()
    proc.close()


def test_close_refuses_while_running() -> None:
    proc = _sleep()
    try:
        with pytest.raises(RuntimeError, match="still running"):
            proc.close()
    finally:
        _cleanup(proc)
    proc.close()


def test_send_signal_all_scans_once_and_reports_who_got_it() -> None:
    procs = [_sleep() for _ in range(3)]
    done = RankProcess.spawn(["true"], None, None, None)
    done.wait(30)
    got = send_signal_all([*procs, done], signal.SIGTERM)
    assert got == procs
    for p in procs:
        assert p.wait(30) == -signal.SIGTERM


def test_cpu_affinity_is_applied_without_touching_ours() -> None:
    ours = os.sched_getaffinity(0)
    target = {min(ours)}
    proc = RankProcess.spawn(["sleep", "600"], None, None, None, cpu_affinity=target)
    try:
        assert os.getsid(proc.pid) == proc.pid == os.getpgid(proc.pid)  # own session
        assert os.sched_getaffinity(proc.pid) == target
        assert os.sched_getaffinity(0) == ours
    finally:
        _cleanup(proc)


def test_rank_outlives_the_short_lived_thread_that_asked_for_it() -> None:
    """PR_SET_PDEATHSIG follows the forking thread: forks happen on the spawner thread."""
    box: list[RankProcess] = []
    t = threading.Thread(target=lambda: box.append(_sleep()))
    t.start()
    t.join()
    try:
        assert box[0].wait(0.3) is None  # still running after its requester exited
    finally:
        _cleanup(*box)


@pytest.mark.parametrize("mode", ["setpriv", "preexec"])
def test_ranks_die_when_their_parent_is_sigkilled(mode: str) -> None:
    env = {**os.environ, "RANKVISOR_PDEATHSIG": mode}
    holder = subprocess.Popen(
        [PYTHON, str(BIN / "spawn_holder.py")], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        rank_pid = int(holder.stdout.readline())
        assert pid_alive(rank_pid)
        # With the setpriv trampoline the death signal is set once setpriv runs, before it
        # execs the program: a SIGKILL of the holder before then is the known window that
        # the Supervisor's guard covers, not what this test is about. Its exec is the mark.
        wait_until(lambda: _comm(rank_pid) == "sleep")
    finally:
        holder.kill()  # SIGKILL: no cleanup code of ours runs
        holder.wait(30)
    wait_until(lambda: not pid_alive(rank_pid))


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_pdeathsig_mode_is_probed_once() -> None:
    assert _spawner.pdeathsig_mode() in {"setpriv", "preexec", "none"}
    assert _spawner.pdeathsig_mode() == _spawner.pdeathsig_mode()


def test_interrupted_spawn_leaves_nothing_running() -> None:
    """A caller interrupted while the spawner works (a signal handler raising) gives up;
    what the job started is SIGKILLed when the job ends."""
    started: list[RankProcess] = []
    release = threading.Event()

    def job() -> None:
        started.append(_sleep())
        release.wait(30)  # keep the job running until the caller has been interrupted

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: object) -> None:
        raise Interrupted

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        timer = threading.Thread(
            target=lambda: (wait_until(lambda: started), os.kill(os.getpid(), signal.SIGUSR1))
        )
        timer.start()
        with pytest.raises(Interrupted):
            on_spawner_thread(job)
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, old)
        release.set()
    assert started[0].wait(30) == -signal.SIGKILL


def test_on_spawner_thread_returns_and_raises() -> None:
    assert on_spawner_thread(lambda: threading.current_thread().name) == "rankvisor-spawner"
    with pytest.raises(ZeroDivisionError):
        on_spawner_thread(lambda: 1 / 0)


def test_no_fd_leak_across_many_spawns(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    procs = [
        RankProcess.spawn(["true"], None, str(tmp_path / f"{i}.out"), str(tmp_path / f"{i}.err"))
        for i in range(3)
    ]
    for p in procs:
        p.wait(30)
        p.close()
    before = open_fds()
    for i in range(10):
        p = RankProcess.spawn(
            ["true"], None, str(tmp_path / f"{i}.out"), str(tmp_path / f"{i}.err")
        )
        p.wait(30)
        p.close()
    assert open_fds() == before


def test_interpreter_exit_takes_ranks_along(tmp_path: Path) -> None:
    """A program that exits normally without stopping its ranks does not orphan them."""
    code = (
        "from rankvisor.engine.process.rank_process import RankProcess;"
        "print(RankProcess.spawn(['sleep', '600'], None, None, None).pid, flush=True)"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    wait_until(lambda: not pid_alive(int(out.stdout)))


def test_a_rank_not_yet_leading_its_group_still_gets_the_signal() -> None:
    # A function rank calls setsid() itself during its bootstrap; a teardown that comes
    # before that finds no group named after its pid and must still reach the rank.
    popen = subprocess.Popen(["sleep", "30"])  # stays in our process group
    rank = RankProcess(popen, ("sleep", "30"), None, None)
    try:
        assert os.getpgid(popen.pid) != popen.pid
        assert rank.send_signal(signal.SIGTERM, group=True)
        assert popen.wait(timeout=10) == -signal.SIGTERM
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


class _LateStatus:
    """A Popen whose exit status is not known yet, as a fork server's comes later."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.known = False

    def poll(self) -> int | None:
        return self.popen.poll() if self.known else None


def test_an_exited_rank_whose_status_is_not_known_yet_is_not_signalled() -> None:
    # The kernel knows of the exit (the pidfd is readable) before our Popen does: another
    # thread holds its waitpid lock, or the fork server has not passed the status on yet.
    # Signalling the zombie "succeeds"; the rank's own exit must not become ours.
    popen = subprocess.Popen([PYTHON, "-c", "import sys; sys.exit(3)"], start_new_session=True)
    late = _LateStatus(popen)
    rank = RankProcess(late, ("python",), None, None)  # type: ignore[arg-type]
    try:
        assert rank.pidfd is not None
        wait_until(lambda: (_proctable.stat_fields(popen.pid) or [b""])[0] == b"Z")
        assert rank.poll() is None  # the status is not known here yet
        assert rank.send_signal(signal.SIGTERM, group=True) is False
        assert rank.signals_sent == []
        late.known = True
        assert rank.poll() == 3  # its own exit code: nothing we sent ended it
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()
        rank.close()
