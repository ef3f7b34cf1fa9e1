"""Engine vs torch.distributed.elastic.multiprocessing, measured in one run.

Run by hand (not collected by pytest), from the repository root::

    python tests/bench/bench_engine.py [--quick]

Prints one JSON object, then a table with the ratios. What is measured:

* import: wall time and peak RSS of ``import engine`` and of
  ``import torch.distributed.elastic.multiprocessing``, each in a fresh interpreter;
* binary ranks: ``start_processes`` of 32 ``sleep 30`` ranks, then ``close()`` (torch and
  engine in alternating rounds, medians);
* function ranks under spawn: time from ``start_processes`` until 1 (and 8) trivial ranks
  have each created a file (first sign of life), and until the last has;
* exit latency: from a rank's exit (it writes ``time.time_ns()`` just before) to ``wait()``
  returning, with torch's default ``period`` of 1 s on both sides.

This module is re-imported by every spawned child (as ``__mp_main__``) of both
implementations, so its top level imports nothing heavy.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the children get this sys.path too

GOALS = {
    "import_s": 0.3,
    "function_alive_speedup": 5.0,
    "exit_latency_s": 0.05,
}


def touch(path: str) -> None:
    """A trivial function rank: its file appearing is its first sign of life."""
    Path(path).touch()


# -- measurements --------------------------------------------------------------------------


def measure_import(module: str, repeats: int) -> dict[str, float]:
    """Best wall time (s) and peak RSS (MiB) of importing ``module`` in a fresh interpreter."""
    code = (
        "import json, resource, time\n"
        "t = time.perf_counter()\n"
        f"import {module}\n"
        "dt = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps({'s': dt, 'rss_mib': rss}))\n"
    )
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
        )
        runs.append(json.loads(out.stdout))
    return {"s": min(r["s"] for r in runs), "rss_mib": min(r["rss_mib"] for r in runs)}


def measure_binary(
    impls: dict[str, Any], nprocs: int, repeats: int, tmp: Path
) -> dict[str, dict[str, float]]:
    """Median time (s) to start ``nprocs`` ``sleep 30`` ranks, and to close them, per impl.

    The implementations take turns round by round (the order alternating), after one
    unrecorded warm-up round each, so that load from elsewhere falls on both alike.
    """
    starts: dict[str, list[float]] = {name: [] for name in impls}
    closes: dict[str, list[float]] = {name: [] for name in impls}
    names = list(impls)
    for i in range(repeats + 1):
        for name in names if i % 2 == 0 else names[::-1]:
            impl = impls[name]
            specs = impl.DefaultLogsSpecs(log_dir=str(tmp / f"bin_{name}_{i}"))
            t0 = time.perf_counter()
            ctx = impl.start_processes(
                name="bench",
                entrypoint="sleep",
                args={r: ("30",) for r in range(nprocs)},
                envs={r: {} for r in range(nprocs)},
                logs_specs=specs,
            )
            t1 = time.perf_counter()
            ctx.close()
            t2 = time.perf_counter()
            if i:
                starts[name].append(t1 - t0)
                closes[name].append(t2 - t1)
    return {
        name: {
            "start_s": statistics.median(starts[name]),
            "close_s": statistics.median(closes[name]),
            "start_min_s": min(starts[name]),
            "close_min_s": min(closes[name]),
        }
        for name in impls
    }


def measure_function_alive(impl: Any, nprocs: int, tmp: Path) -> dict[str, float]:
    """Seconds from start_processes until the first, and the last, rank created its file."""
    run_dir = tmp / f"fn_{impl.__name__}_{nprocs}_{time.monotonic_ns()}"
    run_dir.mkdir()
    files = [run_dir / f"alive_{r}" for r in range(nprocs)]
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    ctx = impl.start_processes(
        name="bench",
        entrypoint=touch,
        args={r: (str(files[r]),) for r in range(nprocs)},
        envs={r: {} for r in range(nprocs)},
        logs_specs=impl.DefaultLogsSpecs(log_dir=str(run_dir / "logs")),
        start_method="spawn",
    )
    first = last = None
    deadline = time.perf_counter() + 300  # torch's 8 ranks take ~9 s here; never hang
    while last is None and time.perf_counter() < deadline:
        seen = sum(f.exists() for f in files)
        now = time.perf_counter() - t0
        if seen and first is None:
            first = now
        if seen == nprocs:
            last = now
        time.sleep(0.002)  # 2 ms resolution, far below what is measured
    result = ctx.wait(timeout=120, period=0.05)
    ctx.close()
    assert result is not None and not result.is_failed(), result
    # CPU the ranks burnt from exec to exit (all reaped by now): unlike wall times, it does
    # not depend on what else the machine is running.
    cpu = (_children_cpu() - cpu0) / nprocs
    return {"first_s": first or float("nan"), "all_s": last or float("nan"), "cpu_s_per_rank": cpu}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_exit_latency(impl: Any, repeats: int, tmp: Path) -> dict[str, float]:
    """Latency (s) from a binary rank's exit to ``wait()`` returning (default period)."""
    lat = []
    for i in range(repeats):
        stamp = tmp / f"exit_{impl.__name__}_{i}"
        # The rank writes the time, then exits at once (the shell's exit follows date's).
        script = 'sleep 0.2; date +%s%N > "$0"'
        ctx = impl.start_processes(
            name="bench",
            entrypoint="sh",
            args={0: ("-c", script, str(stamp))},
            envs={0: {}},
            logs_specs=impl.DefaultLogsSpecs(log_dir=str(tmp / f"exit_logs_{i}")),
        )
        result = ctx.wait()  # torch's default period: 1 s
        returned = time.time_ns()
        assert result is not None and not result.is_failed(), result
        lat.append((returned - int(stamp.read_text())) / 1e9)
    return {"median_s": statistics.median(lat), "max_s": max(lat)}


def measure_function_exit_latency(impl: Any, repeats: int, tmp: Path) -> dict[str, float]:
    """Latency (s) from a function rank's last Python statement to ``wait()`` returning."""
    lat = []
    for i in range(repeats):
        stamp = tmp / f"fexit_{impl.__name__}_{i}"
        ctx = impl.start_processes(
            name="bench",
            entrypoint=_stamp_after,
            args={0: (str(stamp),)},
            envs={0: {}},
            logs_specs=impl.DefaultLogsSpecs(log_dir=str(tmp / f"fexit_logs_{i}")),
            start_method="spawn",
        )
        result = ctx.wait()
        returned = time.time_ns()
        assert result is not None and not result.is_failed(), result
        lat.append((returned - int(stamp.read_text())) / 1e9)
    return {"median_s": statistics.median(lat), "max_s": max(lat)}


def _stamp_after(path: str) -> None:
    time.sleep(0.2)
    Path(path).write_text(str(time.time_ns()))


# -- report ---------------------------------------------------------------------------------


def _ratio(theirs: float, ours: float) -> str:
    return f"{theirs / ours:.1f}x" if ours > 0 else "-"


def table(r: dict[str, Any]) -> str:
    """The results as a Markdown table (torch, engine, torch/engine, goal)."""
    rows: list[tuple[str, float, float, str, str]] = []

    def row(what: str, theirs: float, ours: float, unit: str, goal: str) -> None:
        rows.append((what, theirs, ours, unit, goal))

    t, o = r["import"]["torch"], r["import"]["engine"]
    row("import time", t["s"], o["s"], "s", "engine < 0.3 s")
    row("import peak RSS", t["rss_mib"], o["rss_mib"], "MiB", "")
    n = r["binary"]["nprocs"]
    t, o = r["binary"]["torch"], r["binary"]["engine"]
    row(f"start {n} binary ranks", t["start_s"], o["start_s"], "s", "no slower than torch")
    row(f"close {n} binary ranks", t["close_s"], o["close_s"], "s", "no slower than torch")
    if "start_min_s" in t and "start_min_s" in o:
        row(f"start {n} binary ranks (best)", t["start_min_s"], o["start_min_s"], "s", "")
        row(f"close {n} binary ranks (best)", t["close_min_s"], o["close_min_s"], "s", "")
    for key, fn in r["function_alive"].items():
        t, o = fn["torch"], fn["engine"]
        row(f"{key} function rank(s): first alive", t["first_s"], o["first_s"], "s", ">= 5x")
        row(f"{key} function rank(s): all alive", t["all_s"], o["all_s"], "s", ">= 5x")
        row(f"{key} function rank(s): CPU per rank", t["cpu_s_per_rank"],
            o["cpu_s_per_rank"], "s", "")
    t, o = r["exit_latency"]["torch"], r["exit_latency"]["engine"]
    row("binary exit -> wait() (median)", t["median_s"], o["median_s"], "s", "< 50 ms")
    row("binary exit -> wait() (max)", t["max_s"], o["max_s"], "s", "< 50 ms")
    fe = r.get("function_exit_latency")
    if fe:
        t, o = fe["torch"], fe["engine"]
        # Includes the child's own interpreter shutdown after its last statement.
        row("function return -> wait() (median)", t["median_s"], o["median_s"], "s", "")
    lines = [
        "| measure | torch 2.13 | engine | torch / engine | goal |",
        "|---|---:|---:|---:|---|",
    ]
    for what, theirs, ours, unit, goal in rows:
        ratio = _ratio(theirs, ours)
        lines.append(f"| {what} | {theirs:.3f} {unit} | {ours:.3f} {unit} | {ratio} | {goal} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no 8-rank torch run")
    opts = parser.parse_args()
    repeats = 2 if opts.quick else 3
    # Both sides log every close at WARNING; the figures are the output here.
    logging.basicConfig(level=logging.ERROR)

    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
    }
    results["import"] = {
        "torch": measure_import("torch.distributed.elastic.multiprocessing", repeats),
        "engine": measure_import("engine", repeats),
    }
    import torch.distributed.elastic.multiprocessing as torch_mp
    from rankvisor import engine

    # torch gives its loggers their own handlers; quiet them the same way.
    for name in ("torch.distributed.elastic", "engine"):
        logging.getLogger(name).setLevel(logging.ERROR)

    impls: dict[str, Any] = {"torch": torch_mp, "engine": engine}
    with tempfile.TemporaryDirectory(prefix="rankvisor_bench_") as d:
        tmp = Path(d)
        results["binary"] = {"nprocs": 32, **measure_binary(impls, 32, 3 * repeats, tmp)}
        results["function_alive"] = {}
        for nprocs in (1,) if opts.quick else (1, 8):
            results["function_alive"][str(nprocs)] = {
                name: measure_function_alive(impl, nprocs, tmp) for name, impl in impls.items()
            }
        results["exit_latency"] = {
            name: measure_exit_latency(impl, repeats + 2, tmp) for name, impl in impls.items()
        }
        results["function_exit_latency"] = {
            name: measure_function_exit_latency(impl, 1 if name == "torch" else repeats, tmp)
            for name, impl in impls.items()
        }
    results["loadavg_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    print()
    print(table(results))


if __name__ == "__main__":
    main()
