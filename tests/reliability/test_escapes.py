"""Processes that try to escape a rank's end: with a cgroup per rank, none does.

Real ranks (tests/bin/escaper.py) double-fork daemons that drop their environment, leave
children behind when they exit 0, and allocate past a memory limit; rankvisor runs
in-process or as ``python -m rankvisor.tui run --headless`` in a child process that is SIGKILLed.
Needs writable cgroups (root here); each test is skipped with the reason where there are
none. Every process and cgroup a test makes is removed at the end, even on failure.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from rankvisor.engine.events import RankStateChanged, RankStats
from rankvisor.engine.process import cgroups
from rankvisor.engine.process.guard import Guard
from rankvisor.engine.process.rank_process import RankProcess
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor import Supervisor
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, PYTHON, limit_memory, pid_alive, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).parents[2]
ESCAPER = str(BIN / "escaper.py")


def _why_no_cgroups(mode: str = "auto") -> str | None:
    old = os.environ.get(cgroups.CGROUPS_ENV)
    os.environ[cgroups.CGROUPS_ENV] = mode
    try:
        tree, detail = cgroups.open_run("probe")
    finally:
        if old is None:
            del os.environ[cgroups.CGROUPS_ENV]
        else:
            os.environ[cgroups.CGROUPS_ENV] = old
    if tree is None:
        return detail
    tree.close()
    return None


_NO_CGROUPS = _why_no_cgroups()
_NO_V1 = _why_no_cgroups("v1")
needs_cgroups = pytest.mark.skipif(
    _NO_CGROUPS is not None, reason=f"cgroups are not writable here: {_NO_CGROUPS}"
)
MODES = [
    "auto",
    pytest.param("v1", marks=pytest.mark.skipif(
        _NO_V1 is not None, reason=f"no writable cgroup v1 freezer: {_NO_V1}"
    )),
]


def _run_dirs(owner: int) -> list[str]:
    """The run cgroups an owner process made (``rankvisor-<run id>-<pid>``)."""
    found: list[str] = []
    for base in cgroups._bases(writable=False).values():
        found += glob.glob(os.path.join(base, f"rankvisor-*-{owner}"))
        found += glob.glob(os.path.join(base, f"rankvisor-*-{owner}.*"))
    return found


class Leftovers:
    """Processes and cgroup owners a test made: whatever survives is removed at the end."""

    def __init__(self) -> None:
        self.pids: list[tuple[int, int]] = []
        self.owners: list[int] = [os.getpid()]

    def read(self, path: Path) -> list[int]:
        """The "pid starttime" lines escaper.py wrote; remembered for the clean-up."""
        wait_until(path.exists, timeout=30)
        pairs = [tuple(map(int, line.split())) for line in path.read_text().splitlines()]
        self.pids += [(p, s) for p, s in pairs]
        return [p for p, _ in pairs]

    def alive(self) -> list[int]:
        return [p for p, s in self.pids if pid_alive(p) and _starttime(p) == s]

    def clean(self) -> list[str]:
        for pid in self.alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = [d for owner in self.owners for d in _run_dirs(owner)]
        for d in sorted(left, key=lambda d: "memory" in d):  # killing hierarchies first
            kind = "v2" if "/unified/" in d or os.path.exists(d + "/cgroup.kill") else "v1"
            cgroups.kill_tree("memory" if "memory" in d else kind, d)
            cgroups.remove_tree(d, timeout_s=5)
        return left


def _starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@pytest.fixture(autouse=True)
def _cgroups_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever the caller's environment says; a test that wants another mode sets it.
    monkeypatch.setenv(cgroups.CGROUPS_ENV, "auto")


@pytest.fixture
def leftovers() -> Iterator[Leftovers]:
    lo = Leftovers()
    yield lo
    left = lo.clean()
    assert not left, f"cgroup directories left behind: {left}"


@pytest.fixture
def supervise(tmp_path: Path, leftovers: Leftovers) -> Iterator[Any]:
    """``supervise(nprocs, *escaper_args, rank_args=...)`` -> a started Supervisor.

    Shut down before ``leftovers`` looks for what is left.
    """
    sups: list[Supervisor] = []
    events: list[Any] = []

    def make(nprocs: int, *args: str, **config: Any) -> Supervisor:
        cfg = SupervisorConfig(
            entrypoint=PYTHON, args=("-u", ESCAPER, str(tmp_path), *args), nprocs=nprocs,
            log_dir=str(tmp_path / "logs"), term_timeout=5.0,
            **{"sample_interval": 0, **config},
        )
        sup = Supervisor(cfg)
        sup.subscribe(events.append)
        sups.append(sup)
        sup.start()
        return sup

    make.events = events  # type: ignore[attr-defined]
    yield make
    for sup in sups:
        sup.shutdown(timeout_s=5)


@needs_cgroups
@pytest.mark.parametrize("mode", MODES)
def test_a_setsid_double_fork_daemon_with_an_empty_environment_is_gone_after_the_run(
    tmp_path: Path, supervise: Any, leftovers: Leftovers, mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(cgroups.CGROUPS_ENV, mode)
    sup = supervise(1, "--daemon")
    assert sup.snapshot().tracking == "cgroup"
    rank, daemon = leftovers.read(tmp_path / "0.pids")
    # Nothing ties the daemon to the rank but its cgroup: no group, no parent, no token.
    assert os.getpgid(daemon) != rank and _ppid(daemon) != rank
    assert b"RANKVISOR_GUARD" not in Path(f"/proc/{daemon}/environ").read_bytes()
    sup.shutdown(timeout_s=5)
    wait_until(lambda: not leftovers.alive(), timeout=10)
    assert not _run_dirs(os.getpid())


@needs_cgroups
@pytest.mark.parametrize("mode", MODES)
def test_children_of_a_rank_that_exited_0_are_gone_once_it_is_reaped(
    tmp_path: Path, supervise: Any, leftovers: Leftovers, mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(cgroups.CGROUPS_ENV, mode)
    # Rank 0 starts children (one in its group, one in a new session), a daemon, and exits
    # 0; rank 1 sleeps, so the run goes on.
    sup = supervise(
        2, "--children", "--daemon",
        rank_args={0: ("-u", ESCAPER, str(tmp_path), "--children", "--daemon",
                       "--then", "exit0")},
    )
    pids = leftovers.read(tmp_path / "0.pids")
    other = leftovers.read(tmp_path / "1.pids")
    events = supervise.events
    wait_until(lambda: any(
        isinstance(e, RankStateChanged) and e.rank == 0 and e.new is RankState.SUCCEEDED
        for e in events
    ), timeout=15)
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout=10)
    # The run is not over: the other rank and everything it started still run.
    assert all(pid_alive(p) for p in other)
    assert sup.snapshot().ranks[1].state is RankState.RUNNING


@needs_cgroups
@pytest.mark.parametrize("tracking", ["cgroup", "process-tree"])
def test_sigkill_of_the_guard_then_of_rankvisor_leaves_no_process_of_the_run(
    tmp_path: Path, leftovers: Leftovers, tracking: str
) -> None:
    # With cgroups even the empty-environment daemon is reached; the process-tree
    # tracking cannot see it (no group, parent or token), so that case runs without one.
    env = dict(os.environ, **{cgroups.CGROUPS_ENV: "auto" if tracking == "cgroup" else "0"})
    extra = ["--daemon"] if tracking == "cgroup" else []
    cmd = [
        sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node", "2",
        "--term-timeout", "3", "--log-dir", str(tmp_path / "logs"),
        ESCAPER, str(tmp_path), "--children", *extra,
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    leftovers.owners.append(proc.pid)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("process tracking:" in ln for ln in lines), timeout=30)
        (first,) = [ln for ln in lines if "process tracking:" in ln]
        assert first.startswith(f"[rankvisor] process tracking: {tracking} ("), first
        pids = leftovers.read(tmp_path / "0.pids") + leftovers.read(tmp_path / "1.pids")
        assert len(pids) == 2 * (3 + len(extra))
        guard = _guard_of(proc.pid)
        os.kill(guard, signal.SIGKILL)
        # rankvisor sees its guard die and starts another before we kill rankvisor too.
        wait_until(lambda: any("started a new one" in ln for ln in lines), timeout=15)
        assert _guard_of(proc.pid) != guard
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        wait_until(lambda: not leftovers.alive(), timeout=15)
        wait_until(lambda: not _run_dirs(proc.pid), timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_cgroups
def test_an_oom_kill_shows_in_the_rank_stats_and_in_the_rank_info(
    tmp_path: Path, supervise: Any, leftovers: Leftovers
) -> None:
    go_child, go_self = tmp_path / "go_child", tmp_path / "go_self"
    sup = supervise(
        1, "--oom-child", str(go_child), "--oom-self", str(go_self), sample_interval=0.05
    )
    (rank,) = leftovers.read(tmp_path / "0.pids")
    memory_dir = cgroups.cgroup_dirs_of(rank).get("memory") or cgroups.cgroup_dirs_of(rank)["v2"]
    assert "rankvisor-" in memory_dir, memory_dir
    limit_memory(memory_dir, 160 << 20)
    info = sup.snapshot().ranks[0]
    assert info.oom_kills == 0 and not info.oom_killed
    events = supervise.events

    # A child of the rank allocates past the limit: the OOM killer ends it, the rank lives.
    go_child.touch()
    wait_until((tmp_path / "0.oom_child").exists, timeout=30)
    assert int((tmp_path / "0.oom_child").read_text()) == -signal.SIGKILL
    wait_until(lambda: any(
        isinstance(e, RankStats) and e.rank == 0 and e.oom_kills == 1 for e in events
    ), timeout=10)
    stats = [e for e in events if isinstance(e, RankStats) and e.oom_kills == 1][-1]
    assert stats.cgroup_memory_bytes is not None and 0 < stats.cgroup_memory_bytes <= 160 << 20
    info = sup.snapshot().ranks[0]
    assert info.oom_kills == 1 and not info.oom_killed and info.state is RankState.RUNNING

    # Then the rank itself: it is OOM-killed, and its info says so after the exit.
    go_self.touch()
    wait_until(lambda: sup.snapshot().ranks[0].state.is_final, timeout=30)
    info = sup.snapshot().ranks[0]
    assert info.exitcode == -signal.SIGKILL
    assert info.oom_kills == 2 and info.oom_killed


@needs_cgroups
def test_tracking_is_cgroup_here_and_process_tree_when_cgroups_are_disabled(
    tmp_path: Path, supervise: Any, leftovers: Leftovers, monkeypatch: pytest.MonkeyPatch
) -> None:
    sup = supervise(1)
    snap = sup.snapshot()
    assert snap.tracking == "cgroup" and snap.tracking_detail.startswith("cgroup (")
    (rank,) = leftovers.read(tmp_path / "0.pids")
    assert any("/rankvisor-" in d for d in cgroups.cgroup_dirs_of(rank).values())
    assert snap.ranks[0].oom_kills == 0  # a memory cgroup is there to count
    sup.shutdown(timeout_s=5)
    (tmp_path / "0.pids").unlink()

    monkeypatch.setenv(cgroups.CGROUPS_ENV, "0")
    sup = supervise(1)
    snap = sup.snapshot()
    assert snap.tracking == "process-tree"
    assert snap.tracking_detail == f"process-tree ({cgroups.CGROUPS_ENV}=0)"
    (rank,) = leftovers.read(tmp_path / "0.pids")
    assert not any("rankvisor-" in d for d in cgroups.cgroup_dirs_of(rank).values())
    assert snap.ranks[0].oom_kills is None
    assert not _run_dirs(os.getpid())


@needs_cgroups
def test_a_killed_guard_is_replaced_by_one_that_knows_every_rank_and_cgroup(
    tmp_path: Path, leftovers: Leftovers
) -> None:
    tree, _ = cgroups.open_run("guard")
    assert tree is not None
    guard = Guard()
    guard.start()
    try:
        for kind, path in tree.guard_dirs:
            guard.add_cgroup(kind, path)
        rank = RankProcess.spawn(
            [PYTHON, ESCAPER, str(tmp_path), "--daemon"], {"RANK": "0", **guard.env},
            None, None, cgroup=tree.new_rank(0),
        )
        guard.add_rank(rank.pid, rank.pgid)
        assert len(leftovers.read(tmp_path / "0.pids")) == 2  # the rank and its daemon
        first = guard.pid
        assert first is not None and guard.restart_if_dead() is None  # alive: kept
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: guard.restart_if_dead() is not None, timeout=10)
        assert guard.pid != first and guard.alive
        # Our end closes as if we had died: the new guard kills through the cgroups (the
        # daemon carries no token) and removes them.
        guard.close()
        wait_until(lambda: not leftovers.alive(), timeout=10)
        wait_until(lambda: not os.path.exists(tree.path), timeout=10)
        rank.wait(timeout=10)
        rank.close()
    finally:
        guard.close()
        tree.close()


@needs_cgroups
def test_run_cgroups_whose_owner_died_are_swept_by_the_next_run(
    tmp_path: Path, leftovers: Leftovers
) -> None:
    # The owner dies with nobody left to clean up (no guard at all here): its rank's
    # child lives on in the cgroup until the next run under the same cgroup sweeps it.
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from rankvisor.engine.process import cgroups\n"
        "from rankvisor.engine.process.rank_process import RankProcess\n"
        "tree, _ = cgroups.open_run('stale')\n"
        f"RankProcess.spawn([sys.executable, {ESCAPER!r}, {str(tmp_path)!r}, '--children'],"
        " {'RANK': '0'}, None, None, cgroup=tree.new_rank(0))\n"
        "print(tree.path, flush=True)\n"
        "time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    leftovers.owners.append(owner.pid)
    try:
        assert owner.stdout is not None
        run_dir = owner.stdout.readline().strip()
        pids = leftovers.read(tmp_path / "0.pids")
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        # The rank died with its parent (death signal); its children did not.
        wait_until(lambda: not pid_alive(pids[0]), timeout=10)
        # A run another test starts meanwhile sweeps the same cgroups (every gone owner's):
        # then it kills the children and removes the directory itself. Otherwise they live
        # on (had they died with their parent, nothing would remove it: the wait fails).
        if all(pid_alive(p) for p in pids[1:]) and os.path.isdir(run_dir):
            cgroups.sweep_stale()
        assert wait_until(lambda: not os.path.exists(run_dir), timeout=10), run_dir
        assert not _run_dirs(owner.pid)
        wait_until(lambda: not leftovers.alive(), timeout=10)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _guard_of(rankvisor: int) -> int:
    """The live guard process: rankvisor's child running engine/process/guard.py."""
    found = set()
    for tid in os.listdir(f"/proc/{rankvisor}/task"):
        for kid in map(int, Path(f"/proc/{rankvisor}/task/{tid}/children").read_text().split()):
            try:
                cmdline = Path(f"/proc/{kid}/cmdline").read_bytes()
            except OSError:
                continue  # exited meanwhile
            if b"guard.py" in cmdline and pid_alive(kid):
                found.add(kid)
    assert len(found) == 1, found
    return found.pop()
