"""UI benchmark: does the app keep up while every rank floods its log? (not collected)

    python tests/bench/bench_tui.py                      # both modes, 8x10k, 64x1.25k, 64x10k
    python tests/bench/bench_tui.py --mode attached --config 8x10000 --seconds 10 --json

Two ways to run the same app over the same ranks, one after the other in one invocation:

- ``inprocess``: the Supervisor (engine) in the app's process, as ``--foreground`` runs it;
- ``attached``: the Supervisor in a supervisor process of its own
  (``engine.entry.spawn.start_supervisor``), the app a client through ``RemoteHandle``
  over the control socket, as a plain ``rankvisor run`` does.

N ranks of ``tests/bench/tui_writer.py`` each write timestamped numbered lines at the given
rate; the log pipeline tails them; the app (headless, 160x48, drain tick 15 Hz) draws them.
Measured while the writers run:

- key to screen: a selection move pressed through the Pilot, until the first frame drawn
  with the move in it (frames are rendered to escape sequences as the terminal driver would,
  minus the write to a tty);
- CPU in % of one core: the UI thread alone; the app's whole process (in-process that
  includes the supervisor and its log pump); the supervisor process alone when attached (its
  own threads, not its children: the ranks are writers, not counted);
- pane lag: at each drain tick (not the drains before a lifecycle event), now minus the
  timestamp inside the newest line drawn for each rank that got lines (how far the panes are
  behind the files);
- lines drawn vs skipped: lines that reached the panes in the window, and lines the bridge
  dropped for the panes (marked in the pane); attached, lines the server dropped for a slow
  viewer are neither (the viewer reads the last of each skipped stretch back from the files);
- how busy the whole machine was (all cores: writers, app and anything else running), and
  how far the files themselves are behind the writers' intent (a CPU-starved writer writes
  late; no reader can make that up);
- files intact: afterwards every rank's stdout.log holds lines 0..n-1, in order, none missing.

Then (attached modes only) what an idle viewer costs the supervisor process: a run of
sleeping ranks, the supervisor's CPU over a window with no viewer, one subscribed
RemoteHandle, the headless app attached, and no viewer again (per-thread schedstat, finer
than clock ticks).

Goals: key to screen < 100 ms, panes within 250 ms of the files, no byte missing; attached
(printed with the figures, issue 21): 8x10k and 64x10k key to screen p90 < 80 ms; 64x10k
pane lag p99 < 300 ms (a pane that falls behind follows its files: bounded by the frame) and
at most a third of the in-process figure in the same run; an idle viewer costs the
supervisor < 0.1 % of a core. ``file_reads`` in the JSON: the follower's reads of the files.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import statistics
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
from rankvisor.engine.supervisor import Supervisor  # noqa: E402
from rankvisor.engine.supervisor.run_config import SupervisorConfig  # noqa: E402
from rankvisor.tui.app import RankvisorApp  # noqa: E402
from rich.console import Console  # noqa: E402
from textual._compositor import CompositorUpdate  # noqa: E402

WRITER = Path(__file__).with_name("tui_writer.py")
_STAMP = re.compile(r" t=(\d+\.\d+) ")
_NUM = re.compile(rb"^r\d+ n=(\d+) ")
_BSTAMP = re.compile(rb" t=(\d+\.\d+) ")


class BenchApp(RankvisorApp):
    """The app, with frames rendered as a terminal driver would and timed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frames: list[float] = []
        self.frame_hooks: list[Any] = []
        self.lags: list[float] = []
        self._last_seen: dict[int, str] = {}
        self.measuring = False
        self.frame_bytes = 0
        self.file_lines = 0
        """Lines the panes took from the files (under a flood the events bring none)."""
        add_file_tail = self.run_view.add_file_tail

        def counted(rank: int, stream: str, path: str, lines: Any, *args: Any,
                    **kwargs: Any) -> bool:
            self.file_lines += len(lines)
            return add_file_tail(rank, stream, path, lines, *args, **kwargs)

        self.run_view.add_file_tail = counted  # type: ignore[method-assign]
        self._render_console = Console(
            width=160,
            height=48,
            color_system="truecolor",
            force_terminal=True,
            legacy_windows=False,
            file=open("/dev/null", "w"),  # noqa: SIM115
        )

    def _display(self, screen: Any, renderable: Any) -> None:
        super()._display(screen, renderable)
        if renderable is None or self._batch_count:
            return
        # Headless Textual stops before turning the frame into escape sequences: do it here,
        # so the figures include the cost of a real terminal frame.
        if isinstance(renderable, CompositorUpdate):
            self.frame_bytes += len(renderable.render_segments(self._render_console))
        now = time.perf_counter()
        self.frames.append(now)
        for hook in list(self.frame_hooks):
            hook(now)

    tell_follow = True
    """False: the app does not tell its supervisor which files it follows (as before the
    ``follow`` message), for a turn-about comparison (``--without-follow``)."""

    def _tell_following(self, view: Any) -> None:
        if self.tell_follow:
            super()._tell_following(view)

    def _drain(self, upto: int | None = None, **kwargs: Any) -> set[int]:
        changed = super()._drain(upto, **kwargs)
        if self.measuring and upto is None:
            # Drain ticks only, and ranks whose newest line is new: a drain before an event
            # (a rank's exit) changes a rank without a line, and "now minus the stamp of a
            # line that was the last one written" is then how long ago the writer stopped.
            wall = time.time()
            for rank in changed:
                line = self.run_view.ranks[rank].last_line
                if line == self._last_seen.get(rank):
                    continue
                self._last_seen[rank] = line
                match = _STAMP.search(line)
                if match:
                    self.lags.append(wall - float(match.group(1)))
        return changed


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _wait(pilot: Any, predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await pilot.pause(0.02)
    return True


async def _key_latency(app: BenchApp, pilot: Any, key: str, target: int) -> float:
    """Seconds from pressing ``key`` to the first frame that shows rank ``target`` selected."""
    shown: list[float] = []

    def hook(now: float) -> None:
        if app.main_screen.selected == target and not shown:
            shown.append(now)

    app.frame_hooks.append(hook)
    start = time.perf_counter()
    try:
        await pilot.press(key)
        await _wait(pilot, lambda: bool(shown), 5.0)
    finally:
        app.frame_hooks.remove(hook)
    return (shown[0] - start) if shown else float("inf")


def _check_files(
    run_dir: Path, nprocs: int, rate: float
) -> tuple[int, int, int, list[float]]:
    """(lines on disk, ranks intact, bad lines, writer lateness): every stdout.log must be
    n=0..k-1 in order. Lateness, per burst: its stamp minus when the writer meant to write
    it (first stamp + n / rate): how far the files themselves are behind the writers' intent
    (a writer starved of CPU), which no reader can make up."""
    total = intact = bad = 0
    late: list[float] = []
    for rank in range(nprocs):
        path = run_dir / "attempt_0" / str(rank) / "stdout.log"
        expected = 0
        ok = True
        start: float | None = None
        last_stamp = ""
        with open(path, "rb") as f:
            for line in f:
                match = _NUM.match(line)
                if not match or int(match.group(1)) != expected or not line.endswith(b"\n"):
                    ok = False
                    bad += 1
                else:
                    stamp = _BSTAMP.search(line)
                    if stamp and stamp.group(1) != last_stamp:  # a new burst
                        last_stamp = stamp.group(1)
                        t = float(last_stamp)
                        if start is None:
                            start = t
                        late.append(t - (start + expected / rate))
                expected += 1
        total += expected
        intact += ok
    return total, intact, bad, late


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = values[3] + values[4]
    return (sum(values) - idle) / tick, sum(values) / tick


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` itself, all its threads, no children
    (the ranks are its children: writers, not counted)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_ns(pid: int) -> dict[int, int]:
    """Nanoseconds on a CPU of each thread of ``pid`` (schedstat: finer than clock ticks)."""
    out: dict[int, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def _ns_between(before: dict[int, int], after: dict[int, int]) -> int:
    """CPU ns spent between two ``_proc_ns`` looks (threads born meanwhile from zero)."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items())


def _writer_config(nprocs: int, rate: float, seconds: float, log_dir: str) -> SupervisorConfig:
    delay = 1.0 + nprocs * 0.05
    return SupervisorConfig(
        entrypoint=sys.executable,
        args=(
            "-u",
            str(WRITER),
            "--rate",
            str(rate),
            "--seconds",
            str(seconds),
            "--delay",
            str(delay),
        ),
        nprocs=nprocs,
        log_dir=log_dir,
        term_timeout=5.0,
        sample_interval=1.0,
    )


async def run_config(
    nprocs: int, rate: float, seconds: float, keys: int, mode: str = "inprocess"
) -> dict[str, Any]:
    """One config in one mode: ``inprocess`` (Supervisor in this process, as with
    ``--foreground``) or ``attached`` (a supervisor process of its own, the app a client
    through ``RemoteHandle``, as ``rankvisor run`` does by default)."""
    with tempfile.TemporaryDirectory(prefix="rankvisor-bench-tui-") as tmp:
        # The supervisor process registers its run: keep the user's registry out of it.
        os.environ["RANKVISOR_STATE_DIR"] = os.path.join(tmp, "state")
        delay = 1.0 + nprocs * 0.05
        config = _writer_config(nprocs, rate, seconds, os.path.join(tmp, "logs"))
        started: Any = None
        handle: Any
        if mode == "attached":
            started = start_supervisor(Request(config, expect_viewer=True))
            handle = RemoteHandle.connect(started.socket, name="bench", pass_over_skipped=True)
        else:
            handle = Supervisor(config)
        app = BenchApp(handle, freeze_heap=True)  # as `rankvisor run` does
        skipped_lines = [0]
        drain = app.bridge.drain

        def counting_drain(upto: int | None = None) -> Any:
            drained = drain(upto)
            skipped_lines[0] += sum(drained.skipped.values())
            return drained

        app.bridge.drain = counting_drain  # type: ignore[method-assign]
        result: dict[str, Any] = {
            "ranks": nprocs,
            "rate_per_rank": rate,
            "seconds": seconds,
            "mode": mode,
        }
        try:
            async with app.run_test(size=(160, 48)) as pilot:
                ranks = app.run_view.ranks
                await _wait(pilot, lambda: all(v.state is RankState.RUNNING for v in ranks), 60)
                await _wait(pilot, lambda: all(v.lines_seen for v in ranks), 30 + delay)
                await pilot.pause(0.5)
                # Steady state: measure CPU, lag and key latency while the writers write.
                app.measuring = True
                usage0 = resource.getrusage(resource.RUSAGE_SELF)
                sup0 = _proc_cpu(started.pid) if started else 0.0
                busy0, all0 = _machine_busy()
                thread0 = time.thread_time()
                wall0 = time.perf_counter()
                drawn0 = sum(v.lines_seen for v in ranks)
                files0 = app.file_lines
                skipped0 = skipped_lines[0]
                latencies: list[float] = []
                screen = app.main_screen
                for i in range(keys):
                    forward = i % 2 == 0
                    if screen.mode == "grid":
                        key = "l" if forward else "h"
                    else:
                        key = "j" if forward else "k"
                    target = screen.selected + (1 if forward else -1)
                    latencies.append(await _key_latency(app, pilot, key, target))
                    await pilot.pause(random.uniform(0.05, 0.15))
                measured = time.perf_counter() - wall0
                usage1 = resource.getrusage(resource.RUSAGE_SELF)
                sup1 = _proc_cpu(started.pid) if started else 0.0
                busy1, all1 = _machine_busy()
                thread_cpu = time.thread_time() - thread0
                app.measuring = False
                drawn_window = sum(v.lines_seen for v in ranks) - drawn0 + app.file_lines - files0
                lines = drawn_window  # from the events and from the files
                skipped_window = skipped_lines[0] - skipped0
                skipped = sum(
                    1 for v in ranks for i in range(len(v.buffer)) if v.buffer[i][0] == "marker"
                )
                # Let the writers finish, then check the files.
                await _wait(
                    pilot, lambda: all(v.state is RankState.SUCCEEDED for v in ranks), seconds + 60
                )
                await pilot.pause(0.3)
                on_disk, intact, bad, late = _check_files(
                    Path(app.run_view.log_dir), nprocs, rate
                )
                drawn = sum(v.lines_seen for v in ranks)
                proc_cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
                machine_busy = busy1 - busy0
                sup_cpu = sup1 - sup0
                result.update(
                    measured_s=round(measured, 2),
                    lines_per_s_seen=round(lines / measured),
                    lines_per_s_written=round(on_disk / seconds),
                    key_to_screen_ms_p50=round(statistics.median(latencies) * 1000, 1),
                    key_to_screen_ms_p90=round(_pct(latencies, 0.9) * 1000, 1),
                    key_to_screen_ms_max=round(max(latencies) * 1000, 1),
                    ui_thread_cpu_pct=round(100 * thread_cpu / measured, 1),
                    process_cpu_pct=round(100 * proc_cpu / measured, 1),
                    supervisor_cpu_pct=(
                        round(100 * sup_cpu / measured, 1) if started else "in app"
                    ),
                    total_cpu_pct=round(100 * (proc_cpu + sup_cpu) / measured, 1),
                    machine_busy_pct=round(100 * machine_busy / max(1e-9, all1 - all0), 1),
                    writer_late_ms_p99=round(_pct(late, 0.99) * 1000, 1),
                    writer_late_ms_max=round(max(late, default=float("nan")) * 1000, 1),
                    pane_lag_ms_p50=round(_pct(app.lags, 0.5) * 1000, 1),
                    pane_lag_ms_p90=round(_pct(app.lags, 0.9) * 1000, 1),
                    pane_lag_ms_p99=round(_pct(app.lags, 0.99) * 1000, 1),
                    pane_lag_ms_max=round(max(app.lags, default=float("nan")) * 1000, 1),
                    frames_per_s=round(
                        sum(1 for t in app.frames if wall0 <= t <= wall0 + measured) / measured, 1
                    ),
                    lines_drawn_window=drawn_window,
                    lines_skipped_window=skipped_window,
                    lines_on_disk=on_disk,
                    lines_received=drawn,
                    skip_markers=skipped,
                    file_reads=app.follower.reads,
                    ranks_intact=f"{intact}/{nprocs}",
                    bad_lines=bad,
                )
                await pilot.press("q")  # no rank alive: in-process it closes, attached detaches
                await _wait(pilot, lambda: app.shut_down or app.detached, 30)
        finally:
            handle.shutdown()
            if started is not None:
                # The run is over and its only viewer gone: the supervisor exits by itself.
                started.process.wait(timeout=30)
        return result


async def idle_cost(nprocs: int, window: float, rate: float) -> dict[str, Any]:
    """What an idle attached viewer costs the supervisor process, in % of one core.

    A run of ``nprocs`` ranks writing ``rate`` lines/s each (0: sleeping); the supervisor
    process's CPU over ``window`` seconds with no viewer, with one subscribed RemoteHandle
    (no app), with the headless app attached, and with no viewer again (the baseline is the
    mean of the two viewer-less windows, so a drift of the machine shows)."""
    with tempfile.TemporaryDirectory(prefix="rankvisor-bench-idle-") as tmp:
        os.environ["RANKVISOR_STATE_DIR"] = os.path.join(tmp, "state")
        if rate > 0:
            args: tuple[str, ...] = (
                "-u", str(WRITER), "--rate", str(rate), "--seconds", "600"
            )
        else:
            args = ("-c", "import time; time.sleep(600)")
        config = SupervisorConfig(
            entrypoint=sys.executable,
            args=args,
            nprocs=nprocs,
            log_dir=os.path.join(tmp, "logs"),
            term_timeout=5.0,
            sample_interval=1.0,
        )
        started = start_supervisor(Request(config, expect_viewer=False))
        pid = started.pid
        control = RemoteHandle.connect(started.socket, name="bench-control")
        control.detach()  # only to know the run started; measured without it

        def window_pct() -> float:
            before = _proc_ns(pid)
            time.sleep(window)
            return 100 * _ns_between(before, _proc_ns(pid)) / 1e9 / window

        result: dict[str, Any] = {"ranks": nprocs, "rate_per_rank": rate, "window_s": window}
        try:
            time.sleep(2.0)  # the ranks' start settles
            result["no_viewer_pct"] = window_pct()
            viewer = RemoteHandle.connect(started.socket, name="bench-idle")
            got: list[int] = [0]

            def sink(event: Any) -> None:
                got[0] += 1

            viewer.watch(sink)
            time.sleep(1.0)  # past the welcome and the replay
            result["handle_pct"] = window_pct()
            result["handle_events"] = got[0]
            viewer.detach()
            app_handle = RemoteHandle.connect(started.socket, name="bench-app")
            app = BenchApp(app_handle)
            async with app.run_test(size=(160, 48)) as pilot:
                await pilot.pause(1.0)
                before = _proc_ns(pid)
                await pilot.pause(window)
                result["app_pct"] = 100 * _ns_between(before, _proc_ns(pid)) / 1e9 / window
                app_handle.detach()
                app.exit(0)
            time.sleep(1.0)  # the server notices the viewer left
            result["no_viewer_again_pct"] = window_pct()
        finally:
            stopper = RemoteHandle.connect(started.socket, name="bench-stop")
            stopper.shutdown()
            started.process.wait(timeout=30)
        base = (result["no_viewer_pct"] + result["no_viewer_again_pct"]) / 2
        result["handle_cost_pct"] = result["handle_pct"] - base
        result["app_cost_pct"] = result["app_pct"] - base
        for key, value in list(result.items()):
            if key.endswith("_pct"):
                result[key] = round(value, 3)
        return result


COLUMNS = [
    ("ranks", "ranks"),
    ("rate_per_rank", "lines/s per rank"),
    ("mode", "mode"),
    ("lines_per_s_written", "lines/s written"),
    ("lines_per_s_seen", "lines/s seen by UI"),
    ("key_to_screen_ms_p50", "key→screen p50 ms"),
    ("key_to_screen_ms_p90", "key→screen p90 ms"),
    ("pane_lag_ms_p50", "pane lag p50 ms"),
    ("pane_lag_ms_p90", "pane lag p90 ms"),
    ("pane_lag_ms_p99", "pane lag p99 ms"),
    ("ui_thread_cpu_pct", "UI thread CPU %"),
    ("process_cpu_pct", "app process CPU %"),
    ("supervisor_cpu_pct", "supervisor process CPU %"),
    ("machine_busy_pct", "machine busy % (all cores)"),
    ("lines_drawn_window", "lines drawn"),
    ("lines_skipped_window", "lines skipped"),
    ("ranks_intact", "files intact"),
]


def table(results: list[dict[str, Any]], columns: list[tuple[str, str]] = COLUMNS) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    rows = ["| " + " | ".join(str(r.get(key, "")) for key, _ in columns) + " |" for r in results]
    return "\n".join([head, rule, *rows])


def _find(results: list[dict[str, Any]], ranks: int, rate: float, mode: str) -> dict[str, Any]:
    for r in results:
        if r["ranks"] == ranks and r["rate_per_rank"] == rate and r["mode"] == mode:
            return r
    return {}


def targets(results: list[dict[str, Any]]) -> list[str]:
    """The goals for an attached viewer, each with the figure measured in this run."""
    out: list[str] = []

    def row(what: str, figure: Any, goal: str, met: bool) -> None:
        out.append(f"- {what}: {figure} (goal {goal}): {'met' if met else 'NOT MET'}")

    small = _find(results, 8, 10000.0, "attached")
    if small:
        p90 = small["key_to_screen_ms_p90"]
        row("8x10000 attached key→screen p90", f"{p90} ms", "< 80 ms", p90 < 80)
    big = _find(results, 64, 10000.0, "attached")
    if big:
        p99 = big["pane_lag_ms_p99"]
        row("64x10000 attached pane lag p99", f"{p99} ms", "< 300 ms", p99 < 300)
        inproc = _find(results, 64, 10000.0, "inprocess")
        if inproc:
            ref = inproc["pane_lag_ms_p99"]
            row(
                "64x10000 attached pane lag p99 vs in-process in this run",
                f"{p99} vs {ref} ms ({p99 / max(ref, 1e-9):.2f}x)",
                "<= 1/3",
                p99 <= ref / 3,
            )
        p90 = big["key_to_screen_ms_p90"]
        row("64x10000 attached key→screen p90", f"{p90} ms", "< 80 ms", p90 < 80)
    return out


IDLE_COLUMNS = [
    ("ranks", "ranks"),
    ("rate_per_rank", "lines/s per rank"),
    ("window_s", "window s"),
    ("no_viewer_pct", "no viewer %"),
    ("handle_pct", "1 idle RemoteHandle %"),
    ("app_pct", "headless app attached %"),
    ("no_viewer_again_pct", "no viewer again %"),
    ("handle_cost_pct", "RemoteHandle costs %"),
    ("app_cost_pct", "app costs %"),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="rankvisor UI benchmark")
    p.add_argument("--config", action="append", help="RANKSxRATE, e.g. 8x10000 (repeatable)")
    p.add_argument(
        "--mode",
        choices=("inprocess", "attached", "both"),
        default="both",
        help="supervisor in the app's process, in a process of its own, or both in turn",
    )
    p.add_argument("--seconds", type=float, default=10.0, help="how long each writer writes")
    p.add_argument("--keys", type=int, default=20, help="key presses timed per config")
    p.add_argument("--idle-ranks", type=int, default=8, help="ranks of the idle-viewer run")
    p.add_argument("--idle-window", type=float, default=10.0, help="seconds per idle window")
    p.add_argument(
        "--idle-rate", type=float, default=0.0, help="lines/s per idle rank (0: sleeping)"
    )
    p.add_argument("--no-idle", action="store_true", help="skip the idle-viewer cost")
    p.add_argument(
        "--without-follow", choices=("no", "yes", "turn"), default="no",
        help="the app does not tell the supervisor the files it follows (turn: each config "
        "twice, with and without, in turn)",
    )
    p.add_argument("--json", action="store_true", help="print JSON only")
    a = p.parse_args(argv)
    configs = a.config or ["8x10000", "64x1250", "64x10000"]
    modes = ["inprocess", "attached"] if a.mode == "both" else [a.mode]
    results = []
    for spec in configs:
        nprocs, rate = spec.lower().split("x")
        tells = {"no": [True], "yes": [False], "turn": [True, False]}[a.without_follow]
        for mode, tell in ((m, t) for m in modes for t in tells):
            BenchApp.tell_follow = tell
            result = asyncio.run(run_config(int(nprocs), float(rate), a.seconds, a.keys, mode))
            if not tell:
                result["mode"] += " (no follow)"
            results.append(result)
            if not a.json:
                print(json.dumps(result), flush=True)
    idle = None
    if not a.no_idle and a.mode != "inprocess":
        idle = asyncio.run(idle_cost(a.idle_ranks, a.idle_window, a.idle_rate))
        if not a.json:
            print(json.dumps(idle), flush=True)
    if a.json:
        print(json.dumps({"runs": results, "idle_viewer": idle}, indent=2))
        return 0
    print()
    print(table(results))
    goals = targets(results)
    if goals:
        print()
        print("\n".join(goals))
    if idle is not None:
        print()
        print("Idle viewer: the supervisor process's CPU, % of one core")
        print(table([idle], IDLE_COLUMNS))
        worst = max(idle["handle_cost_pct"], idle["app_cost_pct"])
        print(f"- idle attached viewer costs the supervisor {worst:.3f} % of a core "
              f"(goal < 0.1 %): {'met' if worst < 0.1 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
