"""How the start of a run grows with its rank count, run by hand (not collected by pytest).

    python tests/bench/bench_start.py [--ranks 500 1000 2000] [--repeat 1] [--profile N]

Each count runs in a fresh interpreter (``--child N``): the run is built from the command
line a person would type (``rankvisor run --headless --allow-many-ranks --nproc-per-node N
--term-timeout 2 --no-python sleep 30``) and supervised in-process with the headless
printer subscribed, as ``run --headless`` does. Figures, in seconds:

* ``built``: from the command line to a Supervisor with its headless printer, before
  ``start()`` (argument checks, the run's slots, the console's per-rank table);
* ``running``: from the command line to the last rank's RUNNING event delivered;
* ``CPU to all RUNNING``: user + system time of the supervising process (all its threads,
  not the ranks) over ``running``: less moved by other load on the machine than wall time;
* ``settled``: until the monitor's first pass over every rank is over too (its wake-up
  pipe drained and its lock free);
* ``spawning``: the spawner's share, from the first rank's fork to the last one's (the
  kernel's fork and exec through the ``setpriv`` trampoline, a few ms a rank); ``rest`` is
  ``running`` less ``built`` and ``spawning``: the run directories, the ranks' environments,
  recording each spawn (guard, sampler, pump) and delivering the events;
* ``shutdown``: SIGTERM to every rank until every exit is recorded.

``per rank`` is settled / N in milliseconds: flat when the start is linear. ``2nd half /
1st`` compares the spawner's time for the last N/2 ranks with the first N/2 (from the log
files' change times): 1.0 when a spawn costs the same however many ranks already run.
``--profile N`` prints the 25 costliest functions of one start of N ranks instead. Figures
and their reading: tests/bench/RESULTS_start.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _child(n: int, profile: bool) -> dict[str, float]:
    from rankvisor.engine.entry.headless import _HeadlessPrinter
    from rankvisor.engine.events import Event, RankStateChanged
    from rankvisor.engine.states import RankState
    from rankvisor.engine.supervisor.core import Supervisor
    from rankvisor.tui.cli.run_args import parse_job

    log_dir = tempfile.mkdtemp(prefix="bench_start_")
    cpu0 = _self_cpu()
    t0 = time.perf_counter()
    config, _headless = parse_job("run", [
        "--headless", "--allow-many-ranks", "--nproc-per-node", str(n), "--term-timeout", "2",
        "--log-dir", log_dir, "--no-python", "sleep", "30",
    ])
    config.sample_interval = 0
    running = 0
    all_running = threading.Event()

    def count(event: Event) -> None:
        nonlocal running
        if isinstance(event, RankStateChanged) and event.new is RankState.RUNNING:
            running += 1
            if running == n:
                all_running.set()

    sup = Supervisor(config)
    with open(os.devnull, "w") as null:
        sup.subscribe(_HeadlessPrinter(config, sup.snapshot().log_line_prefixes, null, null))
        sup.subscribe(count)
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
        t_built = time.perf_counter() - t0
        sup.start()
        all_running.wait(600)
        t_running = time.perf_counter() - t0
        cpu_running = _self_cpu() - cpu0
        _settle(sup)
        t_settled = time.perf_counter() - t0
        spawning, halves = _spawn_halves(sup.snapshot().log_dir, n)
        guard_cpu = _cpu(sup.guard_pid)
        pump_wakeups = sup._pump._pump.wakeups  # noqa: SLF001 - a benchmark may look inside
        if profile:
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
        t1 = time.perf_counter()
        sup.shutdown()
        t_shutdown = time.perf_counter() - t1
    shutil.rmtree(log_dir, ignore_errors=True)  # thousands of rank directories
    return {
        "ranks": n, "built": t_built, "running": t_running, "cpu": cpu_running,
        "settled": t_settled,
        "shutdown": t_shutdown, "guard_cpu": guard_cpu, "pump_wakeups": pump_wakeups,
        "spawning": spawning, "halves": halves,
    }


def _spawn_halves(run_dir: str, n: int) -> tuple[float, float]:
    """The spawner's time from the first rank to the last, and the time it took for the
    second half of the ranks over the first half's (1.0: linear).

    Each rank's stdout.log is created just before its fork, in rank order, so the files'
    change times are the spawner's progress.
    """
    times = [os.stat(os.path.join(run_dir, "attempt_0", str(r), "stdout.log")).st_ctime_ns
             for r in range(n)]
    half = n // 2
    first, second = times[half] - times[0], times[-1] - times[half]
    return (times[-1] - times[0]) / 1e9, second / first if first else float("nan")


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu(pid: int | None) -> float:
    """User + system seconds of ``pid`` so far (the guard process)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settle(sup: object) -> None:
    """Wait until the monitor's pass after the spawns is over (its wake-ups drained)."""
    from rankvisor.engine.supervisor.core import Supervisor

    assert isinstance(sup, Supervisor)
    wakeup = sup._wakeup  # noqa: SLF001 - a benchmark may look inside
    state = sup._state  # noqa: SLF001
    # The monitor drains the pipe, then takes the lock for its pass: once the pipe is empty
    # and we got the lock after that, the pass that saw every spawn has ended.
    while True:
        time.sleep(0.005)
        with state.lock:
            pending = _pipe_pending(wakeup.fd)
        if not pending:
            return


def _pipe_pending(fd: int) -> int:
    import fcntl
    import termios

    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        result = _child(args.child, profile=False)
        print(json.dumps(result))
        return
    if args.profile:
        _child(args.profile, profile=True)
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rows = []
    for n in args.ranks:
        for _ in range(args.repeat):
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(n)], env=env, capture_output=True,
                text=True, check=True, timeout=900,
            ).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| ranks | built | all RUNNING | CPU to all RUNNING | monitor settled | per rank "
          "| spawning | rest | 2nd half / 1st | shutdown | guard CPU | pump wake-ups |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        rest = r["running"] - r["built"] - r["spawning"]
        print(f"| {r['ranks']} | {r['built']:.2f} s | {r['running']:.2f} s | "
              f"{r['cpu']:.2f} s | {r['settled']:.2f} s | "
              f"{1000 * r['settled'] / r['ranks']:.2f} ms | {r['spawning']:.2f} s "
              f"| {rest:.2f} s | {r['halves']:.2f} "
              f"| {r['shutdown']:.2f} s "
              f"| {r['guard_cpu']:.2f} s | {r['pump_wakeups']} |")


if __name__ == "__main__":
    main()
