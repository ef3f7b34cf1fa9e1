"""Edge input that used to hang or crash ``rankvisor run``: each is refused in one line.

Every case runs ``python -m rankvisor.tui run ...`` as a process (with a timeout of its own, so a
hang fails the test instead of stalling the suite) and must give one line on stderr
(``rankvisor: error: ...``, saying what to do) and exit status 2, before anything starts:
no log directory made and no rank process left. Then the two ways a start can fail after
the checks (the run directory cannot be made, a rank cannot be spawned): neither may wait
out the term timeout when no rank is running. Last, the parts of a start that grew with the
square of the rank count, checked by counts and by a ratio within one run on pure CPU work;
the whole start of thousands of ranks is measured by tests/bench/bench_start.py instead
(spawning them here would weigh on everything else the machine runs).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from rankvisor.engine.output.pump import OutputPump
from rankvisor.engine.std import Std, to_map
from rankvisor.engine.supervisor.pump_link import PumpLink
from rankvisor.engine.supervisor.rank_slot import RankSlot
from rankvisor.engine.supervisor.run_config import SupervisorConfig

from tests.conftest import BIN, pid_alive, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def rankvisor(*args: str, env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankvisor.tui", "run", *args], cwd=ROOT, capture_output=True,
        text=True, timeout=timeout, env=env,
    )


def processes_running(marker: str) -> list[int]:
    """Pids whose command line mentions ``marker`` (other than ours)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline and pid_alive(int(name)):
            found.append(int(name))
    return found


Refuse = Callable[..., str]
"""``refused(*flags, words=..., env=None, log_dir=None)``: the refusal's line."""


@pytest.fixture(name="refused")
def refused_fixture(tmp_path: Path) -> Refuse:
    """Run ``rankvisor run`` with some flags and check that it was refused, as it must be."""
    rank = tmp_path / "rank.sh"
    rank.write_text("#!/bin/sh\nexec sleep 30\n")
    rank.chmod(0o755)
    logs = tmp_path / "logs"

    def check(*flags: str, words: tuple[str, ...], env: dict[str, str] | None = None,
              log_dir: str | None = None) -> str:
        argv = ["--headless", "--log-dir", log_dir or str(logs), *flags, "--no-python", str(rank)]
        before = set(tmp_path.iterdir())
        res = rankvisor(*argv, env=env)
        assert res.returncode == 2, res
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith("rankvisor: error: "), lines
        for w in words:
            assert w in lines[0], (w, lines[0])
        assert res.stdout == ""
        assert not logs.exists(), "a refused run made its log directory"
        assert set(tmp_path.iterdir()) == before, "a refused run left something behind"
        assert processes_running(str(rank)) == []
        return lines[0]

    return check


# -- run ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["a/b", "../../x", ".hidden", "", "sp ace", "r" * 300])
def test_a_run_id_that_cannot_name_a_directory_is_refused(refused: Refuse, run_id: str) -> None:
    refused("--run-id", run_id, words=("--run-id",))


def test_a_run_id_as_torch_has_them_is_accepted(tmp_path: Path) -> None:
    res = rankvisor("--headless", "--log-dir", str(tmp_path), "--run-id", "job-42.a_B",
                    "--no-python", "true")
    assert res.returncode == 0, res.stderr
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("job-42.a_B_")


# -- log directories -------------------------------------------------------------------


def test_a_log_dir_that_cannot_hold_a_run_is_refused(refused: Refuse) -> None:
    refused(log_dir="/proc", words=("--log-dir /proc",))
    refused(log_dir="/proc/rankvisor-logs", words=("--log-dir",))


def test_a_dangling_symlink_log_dir_is_refused(refused: Refuse, tmp_path: Path) -> None:
    link = tmp_path / "logs"
    link.symlink_to(tmp_path / "nowhere")
    try:
        for log_dir in (link, link / "sub"):
            line = refused(log_dir=str(log_dir), words=("symbolic link", "nowhere"))
            assert "does not exist" in line
    finally:
        link.unlink()


def test_an_over_long_path_component_is_refused(refused: Refuse, tmp_path: Path) -> None:
    long_dir = tmp_path / ("x" * 300) / "logs"
    refused(log_dir=str(long_dir), words=("--log-dir", "longer than"))


def test_checking_a_log_dir_leaves_nothing_behind(refused: Refuse, tmp_path: Path) -> None:
    # The log dir is checked by making a directory where it would be made (tmp_path); a
    # later check refuses the run, and the fixture finds tmp_path as it was.
    refused("--master-addr", "not a host!", words=("--master-addr",))


# -- rank counts -----------------------------------------------------------------------


@pytest.mark.parametrize("count", ["100000", "1025", "99999999999999999999999", "9" * 5000])
def test_more_than_1024_ranks_need_a_flag(refused: Refuse, count: str) -> None:
    refused("--nproc-per-node", count, words=("--nproc-per-node", "--allow-many-ranks"))


def test_a_huge_rank_count_is_refused_even_with_the_flag(refused: Refuse) -> None:
    refused("--allow-many-ranks", "--nproc-per-node", "99999999999999999999999",
            words=("--nproc-per-node", "at most"))


def test_a_rank_count_in_other_digits_is_refused(refused: Refuse) -> None:
    refused("--nproc-per-node", "\u00b2", words=("--nproc-per-node",))
    refused("--local-ranks-filter", "\u00b2", words=("--local-ranks-filter",))


# -- timeouts --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "1e309", "-1", "1e12"])
def test_a_term_timeout_that_never_kills_is_refused(refused: Refuse, value: str) -> None:
    refused("--term-timeout", value, words=("--term-timeout",))


def test_a_term_timeout_from_the_environment_is_checked(refused: Refuse) -> None:
    for text, word in (("abc", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"), ("nan", "--term-timeout")):
        env = dict(os.environ, TORCH_ELASTIC_SHUTDOWN_TIMEOUT=text)
        refused(env=env, words=(word,))


# -- master address --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addr", "word"),
    [
        ("not a host!", "not a host name"),
        ("bad-.example", "not a host name"),
        ("x" * 300, "not a host name"),
        ("192.0.2.1", "not an address of this machine"),  # TEST-NET-1: never ours
    ],
)
def test_a_master_addr_the_ranks_cannot_use_is_refused(
    refused: Refuse, addr: str, word: str
) -> None:
    refused("--master-addr", addr, words=("--master-addr", word))


# -- signals to handle -----------------------------------------------------------------


@pytest.mark.parametrize(
    "sig", ["SIGCHLD", "CHLD", "SIGKILL", "SIGSTOP", "SIGCONT", "SIGWINCH", "SIGURG", "SIGTSTP",
            "SIGSEGV", "SIGTERM,17"],
)
def test_a_signal_that_cannot_mean_stop_is_refused(refused: Refuse, sig: str) -> None:
    line = refused("--signals-to-handle", sig, words=("--signals-to-handle", "accepted:"))
    for ok in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1"):
        assert ok in line.split("accepted:")[1]


# -- a start that fails ----------------------------------------------------------------


def _mark() -> str:
    # A unique argument for ``sleep`` (it adds up its arguments): finds our ranks in /proc.
    return f"0.{random.randrange(10**8, 10**9)}"


def test_a_run_dir_that_cannot_be_made_does_not_wait_the_term_timeout(tmp_path: Path) -> None:
    # Before: the shutdown after the failed start waited term timeout + kill wait (1006 s
    # here) for slots that never had a process; the subprocess timeout would fire.
    mark = _mark()
    res = subprocess.run(
        [sys.executable, str(BIN / "failed_start.py"), "rundir", str(tmp_path / "logs"), mark],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 3, res
    assert "start failed" in res.stdout
    assert processes_running(mark) == []


def test_a_rank_that_cannot_be_spawned_tears_the_others_down_at_once(tmp_path: Path) -> None:
    # Before: the teardown ran while the ranks after the failed one were not yet recorded,
    # so they ran on (sleep 300) as if nothing had failed.
    mark = _mark()
    res = subprocess.run(
        [sys.executable, str(BIN / "failed_start.py"), "spawn", str(tmp_path / "logs"), mark],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 1, res
    assert "rank 0 could not start" in res.stderr
    assert "rank 0 failed first" in res.stderr
    wait_until(lambda: processes_running(mark) == [], timeout=10)


# -- the console table of many ranks ---------------------------------------------------


@pytest.mark.parametrize(
    ("redirects", "tee", "filt"),
    [
        (Std.NONE, Std.NONE, frozenset()),
        (Std.ALL, {1: Std.OUT, 7: Std.ERR}, frozenset()),
        ({0: Std.OUT, 2: Std.ALL, 99: Std.ERR}, Std.ERR, frozenset({0, 2})),
    ],
)
def test_console_per_rank_agrees_with_the_expanded_maps(
    redirects: Std | dict[int, Std], tee: Std | dict[int, Std], filt: frozenset[int]
) -> None:
    # console(rank) looks its rank up alone (it expanded both maps for every call, N^2 for
    # a console of N ranks); the answer must be what the expanded maps say.
    n = 8
    config = SupervisorConfig(entrypoint="true", nprocs=n, redirects=redirects, tee=tee,
                              local_ranks_filter=filt)
    rmap, tmap = to_map(redirects, n), to_map(tee, n)
    for rank in range(n):
        shown = (~rmap[rank] & Std.ALL) | tmap[rank]
        want = (bool(shown & Std.OUT), bool(shown & Std.ERR))
        if filt and rank not in filt:
            want = (False, False)
        assert config.console(rank) == want, rank


def _best_of_each(*fns: Callable[[], object], times: int = 7) -> list[float]:
    """The best CPU time of each of ``fns`` (this thread's), taken in turns. CPU time, not
    wall: on a loaded machine a short call fits in one time slice and a long one is shared
    with the others, which once took a linear ratio of 8 to 33."""
    best = [float("inf")] * len(fns)
    for _ in range(times):
        for i, fn in enumerate(fns):
            t = time.thread_time()
            fn()
            best[i] = min(best[i], time.thread_time() - t)
    return best


def test_the_console_table_of_many_ranks_grows_linearly() -> None:
    # The headless printer asks console(rank) of every rank before the first spawn: that
    # cost 0.5 s for 2000 ranks and 2.6 s for 4000 when each call expanded both maps.
    def table(n: int) -> Callable[[], object]:
        config = SupervisorConfig(entrypoint="true", nprocs=n, redirects={1: Std.OUT},
                                  tee=Std.ERR)
        return lambda: [config.console(r) for r in range(n)]

    # 8 times the ranks: 8 times the time when linear, 64 when quadratic. A loaded machine
    # took a ratio of 4 to 11.7 once, with 4 times the ranks taken one after the other.
    small, big = _best_of_each(table(500), table(4000))
    assert big / small < 24, (small, big)


def test_a_group_of_ranks_is_one_pump_call_with_one_wake_up(tmp_path: Path) -> None:
    # Each wake-up makes the pump read every file it tails: a poke per file added made a
    # start of N ranks up to N passes over 2N files.
    pump = OutputPump(lambda batch: None, name="test-pump").start()
    pokes = 0
    waker: Any = pump._waker  # noqa: SLF001 - the wake-ups are what is counted
    real_poke = waker.poke

    def counting_poke() -> None:
        nonlocal pokes
        pokes += 1
        real_poke()

    waker.poke = counting_poke
    try:
        n = 50
        paths = {r: tmp_path / str(r) / "stdout.log" for r in range(n)}
        for path in paths.values():
            path.parent.mkdir()
            path.write_text(f"hello from {path.parent.name}\n")
        pump.add_many([(r, "stdout", str(p), 0, "") for r, p in paths.items()])
        assert pokes == 1
        pump.add_many([(r, "stdout", str(p), 0, "") for r, p in paths.items()])  # nothing new
        assert pokes == 1
    finally:
        pump.stop()


def test_the_supervisor_queues_a_group_of_ranks_as_one_pump_call(tmp_path: Path) -> None:
    calls: list[list[tuple[int, str, str, int]]] = []

    class FakePump:
        def add_many(self, entries: list[tuple[int, str, str, int, str]]) -> None:
            calls.append(list(entries))

        def remove(self, rank: int, stream: str, drain: bool = True) -> None:
            calls.append([(rank, stream, "removed", -1)])

    link = PumpLink(SupervisorConfig(entrypoint="true", nprocs=4), {}, lambda event: None)
    link._pump = FakePump()  # type: ignore[assignment]  # noqa: SLF001 - no thread needed
    slots = [RankSlot(rank=r, argv=("true",), env={}) for r in range(4)]
    for slot in slots:
        slot.begin_incarnation(0, 0, (f"/l/{slot.rank}/o", f"/l/{slot.rank}/e", "/l/x"))
    for slot in slots[:3]:
        link.add(slot)
    link.remove(slots[0])
    link.add(slots[3])  # after a remove: a new call, so that the order holds
    link.run_ops()
    assert [len(c) for c in calls] == [6, 1, 1, 2]
    index = "/l/0/arrival.idx"  # beside the two logs: the merged view's arrival order
    assert calls[0][0] == (0, "stdout", "/l/0/o", 0, index)
    assert calls[0][1] == (0, "stderr", "/l/0/e", 0, index)
    index3 = "/l/3/arrival.idx"
    assert calls[3] == [(3, "stdout", "/l/3/o", 0, index3), (3, "stderr", "/l/3/e", 0, index3)]
