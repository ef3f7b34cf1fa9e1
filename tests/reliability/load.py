"""A load run through the real Supervisor, checked line by line; shared by test and soak.

N ranks write numbered lines (``tests/bin/sv_spew.py``) at a steady rate; every line the
Supervisor delivers is compared with the file on disk and with the numbering: a line lost,
delivered twice, out of order or garbled is counted, never silently tolerated.
"""

from __future__ import annotations

import re
import resource
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rankvisor.engine.events import Event, RankOutput, RunFinished
from rankvisor.engine.supervisor import Supervisor, SupervisorConfig

from tests.conftest import BIN, PYTHON

LINE = re.compile(r"rank (\d+) step (\d+) loss=0\.(\d{3}) lr=1e-4")


def run_load(log_dir: Path, ranks: int, rate: int, seconds: float) -> dict[str, Any]:
    """Run the load and return its figures (lines written, lost, duplicated, ...)."""
    seen: dict[int, list[str]] = defaultdict(list)
    lock = threading.Lock()

    def sink(event: Event) -> None:
        if isinstance(event, RankOutput) and event.stream == "stdout":
            with lock:
                seen[event.rank].extend(event.lines)

    config = SupervisorConfig(
        entrypoint=PYTHON,
        args=("-u", str(BIN / "sv_spew.py"), "--rate", str(rate), "--seconds", str(seconds)),
        nprocs=ranks, log_dir=str(log_dir), sample_interval=0, term_timeout=5.0,
    )
    cpu0 = time.process_time()
    start = time.monotonic()
    sup = Supervisor(config)
    sup.subscribe(sink)
    sup.start()
    try:
        finished = sup.wait(timeout=seconds * 10 + 60)
    finally:
        sup.shutdown(timeout_s=2.0)
    wall = time.monotonic() - start
    if not isinstance(finished, RunFinished) or finished.result.failures:
        raise RuntimeError(f"the load run did not finish cleanly: {finished}")
    figures = {"ranks": ranks, "rate": rate, "seconds": seconds, "written": 0,
               "delivered": 0, "lost": 0, "duplicated": 0, "out_of_order": 0, "garbled": 0,
               "mismatch_with_file": 0}
    for rank in range(ranks):
        on_disk = Path(finished.result.stdouts[rank]).read_text().splitlines()
        got = seen[rank]
        figures["delivered"] += len(got)
        figures["mismatch_with_file"] += int(got != on_disk)
        steps: list[int] = []
        for line in got:
            m = LINE.fullmatch(line)
            if m is None or int(m.group(1)) != rank or int(m.group(3)) != int(m.group(2)) % 997:
                figures["garbled"] += 1
                continue
            steps.append(int(m.group(2)))
        written = sum(1 for line in on_disk if LINE.fullmatch(line))
        figures["written"] += written
        figures["duplicated"] += len(steps) - len(set(steps))
        figures["out_of_order"] += sum(1 for a, b in zip(steps, steps[1:], strict=False) if b <= a)
        figures["lost"] += len(set(range(written)) - set(steps))
    figures["wall_s"] = round(wall, 2)
    figures["supervisor_cpu_s"] = round(time.process_time() - cpu0, 2)
    figures["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return figures
