"""StatsSampler on real processes: trees, CPU, memory, placement, and death as a state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.events import RankStats
from rankvisor.engine.supervisor.stats import StatsSampler, cpu_to_numa_node, descendants

from tests.conftest import BIN, wait_until

pytestmark = pytest.mark.processes

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 60: pass"


def _rank_with_child(tmp_path: Path) -> subprocess.Popen[bytes]:
    # Its own session, so that _kill_rank can take the child down with it by group.
    p = subprocess.Popen(
        [sys.executable, str(BIN / "sv_rank.py"), "--pid-dir", str(tmp_path), "--child", "group"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(lambda: (tmp_path / "0.0.pids").exists())
    return p


def _kill_rank(p: subprocess.Popen[bytes]) -> None:
    """SIGKILL the rank's whole process group (the rank and its child) and reap the rank."""
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def test_sample_covers_the_rank_and_its_descendants(tmp_path: Path) -> None:
    p = _rank_with_child(tmp_path)
    try:
        child = int((tmp_path / "0.0.pids").read_text().split()[1])
        assert descendants(p.pid) == [child]
        import psutil

        # Both asleep first: a loaded run once sampled the child still starting (a small
        # RSS) while the rank had given memory back since it was read alone.
        last: list[tuple[int, int]] = []

        def settled() -> bool:
            now = (psutil.Process(p.pid).memory_info().rss,
                   psutil.Process(child).memory_info().rss)
            same = bool(last) and last[-1] == now
            last.append(now)
            return same

        wait_until(settled, timeout=30, interval=0.2)
        rank_alone = last[-1][0]
        got: list[RankStats] = []
        s = StatsSampler(got.append)
        s.track(3, p.pid)
        s.sample_once()
        (st,) = got
        assert (st.rank, st.pid, st.num_descendants) == (3, p.pid, 1)
        assert st.status in ("sleeping", "running")
        assert st.rss_bytes > 0 and st.num_threads >= 1
        assert st.cpu_affinity == tuple(sorted(os.sched_getaffinity(p.pid)))
        assert st.cpu_num in st.cpu_affinity
        numa = cpu_to_numa_node()
        assert st.numa_node == numa.get(st.cpu_num)
        assert st.uptime_s >= 0
        # The tree's memory is the rank's plus the child's: more than the rank alone.
        assert st.rss_bytes > rank_alone
    finally:
        _kill_rank(p)


def test_cpu_percent_counts_busy_descendants(tmp_path: Path) -> None:
    # The rank sleeps; its child spins: the rank's figure must include the child.
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {BUSY!r}])\ntime.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_until(lambda: descendants(p.pid))
        s = StatsSampler()
        s.track(0, p.pid)
        first = s.sample_once()[0]
        assert first.cpu_percent == 0.0  # primed: no interval yet

        def busy() -> bool:
            return s.sample_once()[0].cpu_percent > 10.0

        wait_until(busy, timeout=20, interval=0.3)
    finally:
        for pid in descendants(p.pid):
            os.kill(pid, 9)
        p.kill()
        p.wait()


def test_zombie_and_gone_are_states_not_errors(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    s = StatsSampler()
    s.track(0, p.pid)
    # Exited but not reaped by us: a zombie.
    wait_until(lambda: s.sample_once()[0].status == "zombie")
    st = s.sample_once()[0]
    assert (st.rss_bytes, st.num_descendants, st.cpu_percent) == (0, 0, 0.0)
    p.wait()
    assert s.sample_once()[0].status == "gone"
    s.untrack(0)
    assert s.sample_once() == []


def test_thread_publishes_and_stops(tmp_path: Path) -> None:
    p = _rank_with_child(tmp_path)
    got: list[RankStats] = []
    s = StatsSampler(got.append, interval=0.05)
    seen: dict[int, list[int]] = {}
    s.on_descendants(lambda rank, pids: seen.__setitem__(rank, pids))
    s.track(0, p.pid)
    s.start()
    try:
        wait_until(lambda: len(got) >= 3)
        assert seen[0] and seen[0][0] != p.pid
    finally:
        s.stop()
        _kill_rank(p)
    n = len(got)
    assert not s._thread
    assert len(got) == n  # nothing after stop


def test_numa_map_from_sysfs(tmp_path: Path) -> None:
    for node, cpus in ((0, "0-1,4"), (1, "2-3,5-6")):
        d = tmp_path / f"node{node}"
        d.mkdir()
        (d / "cpulist").write_text(cpus + "\n")
    (tmp_path / "possible").write_text("0-1\n")  # not a node directory
    assert cpu_to_numa_node(str(tmp_path)) == {0: 0, 1: 0, 4: 0, 2: 1, 3: 1, 5: 1, 6: 1}
    assert cpu_to_numa_node(str(tmp_path / "missing")) == {}


def test_a_rank_s_proc_files_stay_open_between_samples_and_close_once_untracked() -> None:
    import subprocess

    from rankvisor.engine.supervisor.stats import StatsSampler

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    p = subprocess.Popen(["sleep", "60"])
    try:
        sampler = StatsSampler(gpu=None)
        sampler.track(0, p.pid)
        before = open_files()
        first = sampler.sample_once()
        kept = open_files()
        assert kept == before + 2  # its stat and its (single thread's) children file
        second = sampler.sample_once()
        assert open_files() == kept  # read again, not reopened
        assert "gone" not in (first[0].status, second[0].status)
        assert second[0].num_threads == 1
        sampler.untrack(0)
        assert sampler.sample_once() == [] and open_files() == before
    finally:
        p.kill()
        p.wait()
    sampler.track(1, os.getpid())
    sampler.sample_once()
    sampler.stop()  # closes them too
    assert open_files() == before
    sampler.untrack(1)
    q = subprocess.Popen(["sleep", "60"])
    sampler.track(2, q.pid)
    sampler.sample_once()
    q.kill()
    q.wait()  # reaped: its open stat file reads nothing now
    assert [s.status for s in sampler.sample_once()] == ["gone"]
    sampler.untrack(2)
    sampler.sample_once()
    assert open_files() == before


def test_a_rank_s_cgroup_memory_files_are_read_again_while_open_and_by_path_once_closed(
    tmp_path: Path,
) -> None:
    from rankvisor.engine.process.cgroups import _OpenFiles, _read_memory

    d = tmp_path
    (d / "memory.usage_in_bytes").write_text("4096\n")
    (d / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    files = _OpenFiles()
    first = _read_memory("v1", str(d), files)
    assert first is not None and (first.current_bytes, first.oom_kills) == (4096, 0)
    with open(d / "memory.oom_control", "r+") as f:  # the same file, changed in place
        f.write("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    opened = len(os.listdir("/proc/self/fd"))
    again = _read_memory("v1", str(d), files)
    assert again is not None and again.oom_kills == 2
    assert len(os.listdir("/proc/self/fd")) == opened  # read again, nothing reopened
    files.close()
    assert len(os.listdir("/proc/self/fd")) == opened - 2
    (d / "memory.usage_in_bytes").write_text("8192\n")
    late = _read_memory("v1", str(d), files)  # closed: read by path
    assert late is not None and late.current_bytes == 8192
    assert len(os.listdir("/proc/self/fd")) == opened - 2
