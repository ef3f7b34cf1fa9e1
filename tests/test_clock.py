"""One clock: every "now" in engine/ and tui/ is read through ``engine.clock``.

The scan is what ruff's TID251 ban says, held here too because the suite runs where ruff may
not be installed: a direct read of the time module's clocks (or ``datetime.now``) anywhere
in the packages but the clock itself and the rank-side bootstrap fails it. A rule that
depends on time can then be tried with a ``FakeClock`` at given moments.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest
from rankvisor.engine import clock

ROOT = Path(__file__).resolve().parents[1]
CLOCKS = {"time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                   "perf_counter_ns", "thread_time", "process_time", "process_time_ns"},
          "datetime": {"now", "utcnow", "today"}}
STANDALONE = {"engine/process/py_bootstrap.py", "tui/cli/demo_job.py",
              "engine/process/cgroups.py"}
"""Modules that run outside the package, where nothing of ours can be imported: the bootstrap
around a Python rank and the demo's training job (each a rank's own script), and the cgroup
code the guard program loads from beside itself (it runs isolated, ``python -I -S``)."""
EXEMPT = {"engine/clock.py", *STANDALONE}
"""The clock itself, and the modules that cannot import it."""


def direct_reads(source: str) -> list[tuple[int, str]]:
    """The lines of ``source`` that read a clock without the clock module, and what."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                if alias.name in CLOCKS["time"]:
                    found.append((node.lineno, f"from time import {alias.name}"))
        if isinstance(node, ast.Attribute) and node.attr in CLOCKS["time"] | CLOCKS["datetime"]:
            base = node.value
            name = base.id if isinstance(base, ast.Name) else (
                base.attr if isinstance(base, ast.Attribute) else "")
            if name == "time" and node.attr in CLOCKS["time"]:
                found.append((node.lineno, f"time.{node.attr}"))
            if name in ("datetime", "date") and node.attr in CLOCKS["datetime"]:
                found.append((node.lineno, f"{name}.{node.attr}"))
    return found


@pytest.mark.parametrize("source,expected", [
    ("import time\ntime.monotonic()", ["time.monotonic"]),
    ("import time\nf = time.time", ["time.time"]),
    ("from time import perf_counter", ["from time import perf_counter"]),
    ("import datetime\ndatetime.datetime.now()", ["datetime.now"]),
    ("from datetime import date\ndate.today()", ["date.today"]),
    ("import time\ntime.sleep(1)\ntime.strftime('%H', time.localtime(0))", []),
    ("from . import clock\nclock.monotonic()", []),
])
def test_the_scan_finds_direct_reads(source: str, expected: list[str]) -> None:
    assert [what for _, what in direct_reads(source)] == expected


def test_no_module_reads_a_clock_but_the_clock() -> None:
    reads = []
    for package in ("engine", "tui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT:
                continue
            reads += [f"{rel}:{line}: {what}" for line, what in direct_reads(path.read_text())]
    assert reads == [], "read the clock through engine/clock.py:\n" + "\n".join(reads)


@pytest.mark.parametrize("rel", sorted(STANDALONE))
def test_a_module_run_outside_the_package_imports_nothing_of_ours(rel: str) -> None:
    """The reason they are exempt, held: a relative import there fails at run time (the
    demo's rank died of an ImportError; the guard lost its cgroup cleanup in silence)."""
    tree = ast.parse((ROOT / rel).read_text())  # at its top: a function may look first
    relative = [node.lineno for node in tree.body
                if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert relative == [], f"{rel} imports relatively at line(s) {relative}"


def test_a_fake_clock_moves_only_when_told_and_never_back() -> None:
    fake = clock.FakeClock(monotonic=10.0, wall=1_000.0)
    assert (fake.monotonic(), fake.wall(), fake.thread_cpu()) == (10.0, 1_000.0, 0.0)
    fake.advance(0.25)
    fake.spend(0.5)
    assert (fake.monotonic_ns(), fake.wall_ns()) == (10_750_000_000, 1_000_750_000_000)
    assert fake.thread_cpu() == 0.5
    with pytest.raises(ValueError, match="does not go back"):
        fake.advance(-1)


def test_using_puts_a_fake_in_the_machines_place_and_back() -> None:
    real = clock.monotonic()
    with clock.using(clock.FakeClock(monotonic=5.0, wall=86_400.0)) as fake:
        assert clock.monotonic() == 5.0
        seen = []
        worker = threading.Thread(target=lambda: seen.append(clock.wall()))
        worker.start()
        worker.join()
        assert seen == [86_400.0]  # every thread reads the one clock
        fake.advance(2)
        assert (clock.monotonic(), clock.wall_ns()) == (7.0, 86_402 * 10**9)
    assert clock.monotonic() >= real
    assert clock.local_stamp("%Y", 0.0) in ("1970", "1969")
