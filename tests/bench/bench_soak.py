"""Flood soak, run by hand (not collected): N ranks x R lines/s for S s, an attached viewer.

    python tests/bench/bench_soak.py                              # 64 ranks x 10k lines/s, 60 s
    python tests/bench/bench_soak.py --ranks 8 --rate 10000 --seconds 5     # a smoke run

As a plain ``rankvisor run`` does: the Supervisor in a supervisor process of its own, the app
(headless, 160x48, ``tests/bench/bench_tui.py``'s ``BenchApp``) a client through
``RemoteHandle``. Each rank is ``tests/bench/tui_writer.py`` (numbered, timestamped lines of
about 100 bytes). Afterwards:

- every file intact: each rank's stdout.log holds lines 0..n-1, in order, none missing;
- the panes at the end: for each rank, how long after its writer's end (the last write to
  its file: the file's mtime) its pane showed the last line of its file [< 1 s];
- pane lag while the writers wrote (p50 / p99: now minus the stamp in the newest line drawn,
  at each drain tick) [p99 < 0.3 s], frames a second, and the machine's load (``uptime``)
  at the start and the end: on a shared machine the absolute figures move with it.

Prints one JSON object and a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rankvisor.engine.control.client import RemoteHandle  # noqa: E402
from rankvisor.engine.entry.daemon import Request  # noqa: E402
from rankvisor.engine.entry.spawn import start_supervisor  # noqa: E402
from rankvisor.engine.states import RankState  # noqa: E402

from tests.bench.bench_tui import (  # noqa: E402
    BenchApp,
    _check_files,
    _pct,
    _proc_cpu,
    _wait,
    _writer_config,
)


class SoakApp(BenchApp):
    """``BenchApp`` that notes, at each drain, when each pane's newest line last changed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.newest: dict[int, tuple[str, float]] = {}

    def _drain(self, upto: int | None = None, **kwargs: Any) -> set[int]:
        changed = super()._drain(upto, **kwargs)
        now = time.time()
        for rank in changed:
            line = self.run_view.ranks[rank].last_line
            if self.newest.get(rank, ("", 0.0))[0] != line:
                self.newest[rank] = (line, now)
        return changed


def _last_line(path: str) -> str:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 4096))
        lines = f.read().splitlines()
    return lines[-1].decode() if lines else ""


async def soak(nprocs: int, rate: float, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rankvisor-soak-") as tmp:
        os.environ["RANKVISOR_STATE_DIR"] = os.path.join(tmp, "state")
        config = _writer_config(nprocs, rate, seconds, os.path.join(tmp, "logs"))
        started = start_supervisor(Request(config, expect_viewer=True))
        handle = RemoteHandle.connect(started.socket, name="soak", pass_over_skipped=True)
        app = SoakApp(handle, freeze_heap=True)  # as `rankvisor run` does
        out: dict[str, Any] = {
            "ranks": nprocs, "rate_per_rank": rate, "seconds": seconds,
            "load_at_start": [round(x, 2) for x in os.getloadavg()],
        }
        try:
            async with app.run_test(size=(160, 48)) as pilot:
                ranks = app.run_view.ranks
                await _wait(pilot, lambda: all(v.state is RankState.RUNNING for v in ranks), 120)
                await _wait(pilot, lambda: all(v.lines_seen for v in ranks), 60 + nprocs * 0.05)
                app.measuring = True
                sup0, wall0 = _proc_cpu(started.pid), time.perf_counter()
                await _wait(
                    pilot, lambda: all(v.state is RankState.SUCCEEDED for v in ranks),
                    seconds + 300,
                )
                app.measuring = False
                measured = time.perf_counter() - wall0
                sup_cpu = _proc_cpu(started.pid) - sup0
                out["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
                paths = [v.stdout_path for v in ranks]
                ends = [os.stat(p).st_mtime for p in paths]  # each rank's last write
                last = [_last_line(p) for p in paths]
                await _wait(
                    pilot,
                    lambda: all(app.newest.get(r, ("",))[0] == last[r] for r in range(nprocs)),
                    120,
                )
                shown_at = {r: app.newest[r][1] for r in range(nprocs)}
                after = [shown_at[r] - ends[r] for r in range(nprocs)]
                on_disk, intact, bad, _late = _check_files(
                    Path(app.run_view.log_dir), nprocs, rate
                )
                out.update(
                    lines_on_disk=on_disk,
                    ranks_intact=f"{intact}/{nprocs}",
                    bad_lines=bad,
                    last_line_shown_after_writers_end_s_max=round(max(after), 3),
                    last_line_shown_after_writers_end_s_p50=round(_pct(after, 0.5), 3),
                    pane_lag_ms_p50=round(_pct(app.lags, 0.5) * 1000, 1),
                    pane_lag_ms_p99=round(_pct(app.lags, 0.99) * 1000, 1),
                    frames_per_s=round(
                        sum(1 for t in app.frames if wall0 <= t <= wall0 + measured) / measured, 1
                    ),
                    supervisor_cpu_pct=round(100 * sup_cpu / measured, 1),
                    file_reads=app.follower.reads,
                )
                await pilot.press("q")
                await _wait(pilot, lambda: app.shut_down or app.detached, 30)
        finally:
            handle.shutdown()
        return out


def table(r: dict[str, Any]) -> str:
    goal_end = "met" if r["last_line_shown_after_writers_end_s_max"] < 1.0 else "NOT MET"
    goal_files = "met" if r["ranks_intact"] == f"{r['ranks']}/{r['ranks']}" else "NOT MET"
    return "\n".join([
        "| ranks x lines/s x s | load start / end | files intact | lines on disk | last line "
        "shown after the writers' end, p50 / max | pane lag p50 / p99 | frames/s |",
        "|---|---|---|---|---|---|---|",
        f"| {r['ranks']} x {r['rate_per_rank']:g} x {r['seconds']:g} | "
        f"{r['load_at_start'][0]} / {r['load_at_end'][0]} | {r['ranks_intact']} "
        f"({r['bad_lines']} bad) | {r['lines_on_disk']} | "
        f"{r['last_line_shown_after_writers_end_s_p50']} / "
        f"{r['last_line_shown_after_writers_end_s_max']} s | {r['pane_lag_ms_p50']} / "
        f"{r['pane_lag_ms_p99']} ms | {r['frames_per_s']} |",
        "",
        f"- every file intact: {goal_files}",
        f"- each pane shows its rank's last line within 1 s of the writers' end: {goal_end}",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--rate", type=float, default=10_000, help="lines per second per rank")
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    result = asyncio.run(soak(a.ranks, a.rate, a.seconds))
    print(json.dumps(result))
    print()
    print(table(result))


if __name__ == "__main__":
    main()
