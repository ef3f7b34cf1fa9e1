"""Benchmark of input to ranks (``--stdin pipe``), run by hand (not collected by pytest).

    python tests/bench/bench_input.py [--lines 200] [--prompts 20] [--ranks 64] [--seconds 10]

Three figures, each from a Supervisor in this process with real ranks and real pipes:

- ``typed_line``: ``SendInput`` called to the rank's ``readline()`` returning: the rank reads
  lines carrying the send time (``time.time_ns()``) and prints the difference. p50 / p99 over
  ``--lines`` lines, one every 10 ms. Goal: p99 < 20 ms.
- ``prompt_to_waiting``: the rank prints a prompt (with its time in it) and reads; the figure
  is the time until a sink gets the ``RankInputWait``. p50 / p99 over ``--prompts`` prompts.
  Goal: < 0.5 s (the watch looks every 0.2 s).
- ``idle_cost``: ``--ranks`` sleeping ranks, none waiting: the CPU time of the input watch
  thread alone (read from /proc for that thread) over ``--seconds``, in % of one core, and
  per pass. Goal: < 0.1 % of a core. Measured for single-threaded ranks (``sleep``) and for
  Python ranks with 8 threads each (a deep look every fifth pass reads every thread).

Prints every result as JSON, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rankvisor.engine.events import RankInputWait  # noqa: E402
from rankvisor.engine.handle import SendInput  # noqa: E402
from rankvisor.engine.supervisor import Supervisor  # noqa: E402
from rankvisor.engine.supervisor.run_config import SupervisorConfig  # noqa: E402

PY = sys.executable
_ECHO_DELAY = (
    "import sys, time\n"
    "for line in sys.stdin:\n"
    "    sent = int(line)\n"
    "    print(time.time_ns() - sent, flush=True)\n"
)
_PROMPTER = (
    "import sys, time\n"
    "for _ in range({n}):\n"
    "    sys.stdout.write(f'ready {{time.time_ns()}}? '); sys.stdout.flush()\n"
    "    sys.stdin.readline()\n"
)
_THREADED_SLEEPER = (
    "import threading, time\n"
    "for _ in range(7): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
    "time.sleep(3600)\n"
)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def _supervisor(tmp: str, entry: str, args: tuple[str, ...], nprocs: int = 1) -> Supervisor:
    config = SupervisorConfig(entrypoint=entry, args=args, nprocs=nprocs, log_dir=tmp,
                              sample_interval=0, term_timeout=2.0, stdin="pipe")
    return Supervisor(config)


def typed_line(lines: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        sup = _supervisor(tmp, PY, ("-u", "-c", _ECHO_DELAY))
        sup.start()
        try:
            time.sleep(0.5)
            for _ in range(lines):
                assert sup.execute(SendInput((0,), str(time.time_ns()))).ok
                time.sleep(0.01)
            path = Path(sup.snapshot().ranks[0].stdout_path)
            deadline = time.monotonic() + 10
            while len(path.read_text().split()) < lines and time.monotonic() < deadline:
                time.sleep(0.05)
            ms = [int(x) / 1e6 for x in path.read_text().split()]
        finally:
            sup.shutdown()
    return {"name": "typed_line", "lines": len(ms), "p50_ms": round(_pct(ms, 0.5), 3),
            "p99_ms": round(_pct(ms, 0.99), 3), "max_ms": round(max(ms), 3)}


def prompt_to_waiting(prompts: int) -> dict[str, Any]:
    got: list[float] = []
    done = threading.Event()

    with tempfile.TemporaryDirectory() as tmp:
        sup = _supervisor(tmp, PY, ("-u", "-c", _PROMPTER.format(n=prompts)))

        def sink(event: object) -> None:
            if isinstance(event, RankInputWait) and event.wait is not None:
                now = time.time_ns()
                # No echo on a pipe: the prompts follow one another on one line.
                stamp = int(event.wait.prompt.split()[-1].rstrip("?"))
                got.append((now - stamp) / 1e6)
                done.set()

        sup.subscribe(sink)
        sup.start()
        try:
            for _ in range(prompts):
                if not done.wait(10):
                    break
                done.clear()
                assert sup.execute(SendInput((0,), "")).ok
        finally:
            sup.shutdown()
    return {"name": "prompt_to_waiting", "prompts": len(got),
            "p50_ms": round(_pct(got, 0.5), 1), "p99_ms": round(_pct(got, 0.99), 1),
            "max_ms": round(max(got), 1)}


def _thread_cpu(name: str) -> float:
    """CPU seconds of this process's thread called ``name`` (its own CPU clock, in ns)."""
    (thread,) = [t for t in threading.enumerate() if t.name == name]
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def idle_cost(ranks: int, seconds: float, threaded: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        if threaded:
            sup = _supervisor(tmp, PY, ("-c", _THREADED_SLEEPER), ranks)
        else:
            sup = _supervisor(tmp, "sleep", ("3600",), ranks)
        sup.start()
        try:
            time.sleep(3.0)  # every rank started, its threads too
            watch = sup._input  # noqa: SLF001 - the figure is this thread's alone
            c0, p0, t0 = _thread_cpu("rankvisor-input"), watch.passes, time.monotonic()
            time.sleep(seconds)
            c1, p1, t1 = _thread_cpu("rankvisor-input"), watch.passes, time.monotonic()
            waiting = sum(1 for r in sup.snapshot().ranks if r.input_wait is not None)
        finally:
            sup.shutdown()
    passes = max(1, p1 - p0)
    return {"name": f"idle_cost_{'threaded' if threaded else 'sleep'}", "ranks": ranks,
            "threads_per_rank": 8 if threaded else 1, "seconds": round(t1 - t0, 2),
            "cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 4), "passes": passes,
            "us_per_pass": round(1e6 * (c1 - c0) / passes, 1), "waiting": waiting}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    results = [
        typed_line(args.lines),
        prompt_to_waiting(args.prompts),
        idle_cost(args.ranks, args.seconds, threaded=False),
        idle_cost(args.ranks, args.seconds, threaded=True),
    ]
    for r in results:
        print(json.dumps(r))
    print()
    print("| what | figure | goal |")
    print("|---|---|---|")
    t, p, i, j = results
    print(f"| typed line to the rank's read, p50 / p99 | {t['p50_ms']} / {t['p99_ms']} ms "
          "| p99 < 20 ms |")
    print(f"| prompt to `RankInputWait`, p50 / p99 | {p['p50_ms']} / {p['p99_ms']} ms "
          "| < 500 ms |")
    for r in (i, j):
        print(f"| input watch CPU, {r['ranks']} ranks x {r['threads_per_rank']} thread(s), "
              f"none waiting | {r['cpu_pct']} % of a core ({r['us_per_pass']} us a pass) "
              "| < 0.1 % |")


if __name__ == "__main__":
    main()
