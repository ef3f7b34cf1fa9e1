"""Benchmark of the Supervisor against torch, run by hand (not collected by pytest).

    python tests/bench/bench_supervisor.py [--seconds 10] [--only NAME ...] [--write]

Each scenario runs in a fresh interpreter (``--child NAME``) so torch's import and threads
never weigh on rankvisor's figures or the other way round.
The child writes its result as JSON to a file (its stdout and stderr may be /dev/null);
the parent prints every result as JSON, then a Markdown table; ``--write`` also stores the
table in tests/bench/RESULTS_supervisor.md.

CPU is user+system time of the supervising process (all its threads; not its children, the
ranks) over a window that starts after a warm-up, in % of one core. rankvisor's figures
include the guard process and stats sampling at 1 s. torch's in-process figures poll
``PContext.wait(0)`` every 0.1 s, as LocalElasticAgent does (``--monitor-interval``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Final, Iterator

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "tests" / "bin"
SLEEPER = str(BIN / "sv_rank.py")
SPEW = str(BIN / "sv_spew.py")
PY = sys.executable
sys.path.insert(0, str(ROOT))


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _proc_cpu(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def _window(seconds: float, extra_pids: Callable[[], list[int]] = list,
            tick: Callable[[], None] | None = None) -> float:
    """% of a core used by this process (+ extra pids) over ``seconds``."""
    pids = extra_pids()
    c0 = _self_cpu() + sum(_proc_cpu(p) for p in pids)
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        if tick is None:
            time.sleep(min(0.5, end - time.monotonic()))
        else:
            tick()
            time.sleep(0.1)  # the agent's monitor interval
    c1 = _self_cpu() + sum(_proc_cpu(p) for p in pids)
    return 100.0 * (c1 - c0) / (time.monotonic() - t0)


# -- rankvisor in process ----------------------------------------------------------------


def _supervisor(nprocs: int, args: tuple[str, ...], entry: str = PY, **kw: Any) -> Any:
    from rankvisor.engine.entry.headless import _HeadlessPrinter
    from rankvisor.engine.std import Std
    from rankvisor.engine.supervisor import Supervisor
    from rankvisor.engine.supervisor.run_config import SupervisorConfig

    cfg = SupervisorConfig(entrypoint=entry, args=args, nprocs=nprocs, tee=Std.ALL,
                           redirects=Std.ALL, log_dir=tempfile.mkdtemp(prefix="bench_"), **kw)
    sup = Supervisor(cfg)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the scenario
    sup.subscribe(_HeadlessPrinter(cfg, sup.snapshot().log_line_prefixes, devnull, devnull))
    return sup


def child_sup_sleep(seconds: float) -> dict[str, Any]:
    sup = _supervisor(8, ("-u", SLEEPER))
    sup.start()
    time.sleep(3)  # ranks up, first samples taken
    pct = _window(seconds, lambda: [sup.guard_pid])
    sup.shutdown(timeout_s=5)
    return {"cpu_percent": pct}


def child_sup_log(seconds: float) -> dict[str, Any]:
    sup = _supervisor(8, ("-u", SPEW, "--rate", "10000", "--seconds", str(seconds + 6)))
    sup.start()
    time.sleep(2)
    pct = _window(seconds, lambda: [sup.guard_pid])
    sup.shutdown(timeout_s=5)
    return {"cpu_percent": pct}


def child_stats64(seconds: float) -> dict[str, Any]:
    from rankvisor.engine.supervisor.stats import StatsSampler

    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(64)]
    try:
        s = StatsSampler()
        for r, p in enumerate(procs):
            s.track(r, p.pid)
        s.sample_once()
        times = []
        for _ in range(20):
            c0 = _self_cpu()
            s.sample_once()
            times.append(_self_cpu() - c0)
        ms = statistics.median(times) * 1000
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return {"ms_per_sample": ms, "cpu_percent_at_1hz": ms / 10.0}


def child_term32(seconds: float) -> dict[str, Any]:
    from rankvisor.engine.events import RankStateChanged
    from rankvisor.engine.handle import TerminateRanks

    results = []
    for _ in range(3):
        sup = _supervisor(32, ("600",), entry="/bin/sleep", sample_interval=0)
        done: list[float] = []

        def sink(e: Any, done: list[float] = done) -> None:
            if isinstance(e, RankStateChanged) and e.new.is_final:
                done.append(time.monotonic())

        sup.subscribe(sink)
        sup.start()
        time.sleep(1)
        t0 = time.monotonic()
        sup.execute(TerminateRanks())
        while len(done) < 32:
            time.sleep(0.001)
        results.append((max(done) - t0) * 1000)
        sup.shutdown(timeout_s=5)
    return {"ms": statistics.median(results)}


def child_start_close32(seconds: float) -> dict[str, Any]:
    """Supervisor.start() and shutdown() of 32 ``sleep`` ranks, with a cgroup per rank and
    with the process-tree tracking (``RANKVISOR_CGROUPS=0``), taking turns round by round."""
    from rankvisor.engine.process.cgroups import CGROUPS_ENV

    modes = {"cgroup": "auto", "tree": "0"}
    starts: dict[str, list[float]] = {m: [] for m in modes}
    closes: dict[str, list[float]] = {m: [] for m in modes}
    names = list(modes)
    tracking = {}
    for i in range(8):
        for name in names if i % 2 == 0 else names[::-1]:
            os.environ[CGROUPS_ENV] = modes[name]
            sup = _supervisor(32, ("600",), entry="/bin/sleep", sample_interval=0)
            t0 = time.perf_counter()
            sup.start()
            t1 = time.perf_counter()
            tracking[name] = sup.snapshot().tracking
            sup.shutdown(timeout_s=5)
            t2 = time.perf_counter()
            if i >= 2:  # two warm-up rounds
                starts[name].append((t1 - t0) * 1000)
                closes[name].append((t2 - t1) * 1000)
    os.environ.pop(CGROUPS_ENV, None)
    out: dict[str, Any] = {}
    for name in names:
        out[f"{name}_tracking"] = tracking[name]
        out[f"{name}_start"] = statistics.median(starts[name])
        out[f"{name}_close"] = statistics.median(closes[name])
        out[f"{name}_start_min"] = min(starts[name])
        out[f"{name}_close_min"] = min(closes[name])
    return out


def child_exit_latency(seconds: float) -> dict[str, Any]:
    from rankvisor.engine.events import RankStateChanged
    from rankvisor.engine.states import RankState

    d = tempfile.mkdtemp(prefix="bench_exit_")
    code = ("import os, sys, time; r = int(os.environ['RANK']); time.sleep(1 + 0.15 * r); "
            f"open('{d}/' + str(r), 'w').write(str(time.time_ns())); os._exit(3)")
    seen: dict[int, int] = {}

    def sink(e: Any) -> None:
        if isinstance(e, RankStateChanged) and e.new is RankState.FAILED:
            seen[e.rank] = time.time_ns()

    lat = []
    for _ in range(2):
        sup = _supervisor(8, ("-c", code), teardown_on_failure=False, sample_interval=0)
        seen.clear()
        sup.subscribe(sink)
        sup.start()
        sup.wait(30)
        sup.shutdown(timeout_s=5)
        lat += [(seen[r] - int(Path(d, str(r)).read_text())) / 1e6 for r in range(8)]
    return {"median_ms": statistics.median(lat), "max_ms": max(lat)}


# -- torch in process ----------------------------------------------------------------------


def _torch_ctx(nprocs: int, entry: str, args: tuple[str, ...]) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

    # torch's tee threads write to our stdout/stderr: make them /dev/null, as rankvisor's
    # console is in its scenarios (a pipe to the parent would add the parent's reading).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)

    specs = DefaultLogsSpecs(log_dir=tempfile.mkdtemp(prefix="bench_torch_"), tee=Std.ALL,
                             redirects=Std.ALL)
    envs = {r: {"RANK": str(r), "LOCAL_RANK": str(r)} for r in range(nprocs)}
    return start_processes("trainer", entry, {r: args for r in range(nprocs)}, envs, specs)


def child_torch_sleep(seconds: float) -> dict[str, Any]:
    ctx = _torch_ctx(8, PY, ("-u", SLEEPER))
    time.sleep(3)
    pct = _window(seconds, tick=lambda: ctx.wait(0))
    ctx.close(timeout=5)
    return {"cpu_percent": pct}


def child_torch_log(seconds: float) -> dict[str, Any]:
    ctx = _torch_ctx(8, PY, ("-u", SPEW, "--rate", "10000", "--seconds", str(seconds + 6)))
    time.sleep(2)
    pct = _window(seconds, tick=lambda: ctx.wait(0))
    ctx.close(timeout=5)
    return {"cpu_percent": pct}


def child_torch_term32(seconds: float) -> dict[str, Any]:
    results = []
    for _ in range(3):
        ctx = _torch_ctx(32, "/bin/sleep", ("600",))
        time.sleep(1)
        t0 = time.monotonic()
        ctx.close()  # SIGTERM, wait for all, SIGKILL survivors
        results.append((time.monotonic() - t0) * 1000)
    return {"ms": statistics.median(results)}


def child_torch_exit_latency(seconds: float) -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="bench_torch_exit_")
    code = ("import os, time; time.sleep(1); "
            f"open('{d}/x', 'w').write(str(time.time_ns())); os._exit(3)")
    out = {}
    for name, period in (("wait_period_1s", 1.0), ("agent_poll_0.1s", 0.1)):
        lat = []
        for _ in range(4):
            ctx = _torch_ctx(1, PY, ("-c", code))
            if period == 1.0:
                ctx.wait(timeout=30, period=1.0)  # torch's default period
            else:
                while ctx.wait(0) is None:
                    time.sleep(0.1)
            lat.append((time.time_ns() - int(Path(d, "x").read_text())) / 1e6)
            ctx.close(timeout=5)
        out[name + "_median_ms"] = statistics.median(lat)
        out[name + "_max_ms"] = max(lat)
    return out


# -- whole processes: torchrun vs rankvisor run --headless ---------------------------------


@contextlib.contextmanager
def _launched(cmd: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A whole launcher process for the block; SIGTERM at its end, SIGKILL after 30 s."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        yield p
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _whole(cmd: list[str], seconds: float, warmup: float) -> float:
    with _launched(cmd) as p:
        time.sleep(warmup)
        c0, t0 = _proc_cpu(p.pid), time.monotonic()
        time.sleep(seconds)
        return 100.0 * (_proc_cpu(p.pid) - c0) / (time.monotonic() - t0)


def _launch_cmd(kind: str, script_args: list[str], std: str = "--tee") -> list[str]:
    """``std``: "--tee" (files and the console) or "--redirects" (files only: tee off)."""
    log_dir = tempfile.mkdtemp(prefix=f"bench_{kind}_")
    if kind == "torchrun":
        return [PY, "-m", "torch.distributed.run", std, "3", "--nproc-per-node", "8",
                "--log-dir", log_dir, *script_args]
    return [PY, "-m", "rankvisor.tui", "run", "--headless", std, "3", "--nproc-per-node", "8",
            "--log-dir", log_dir, *script_args]


def child_whole_sleep(seconds: float) -> dict[str, Any]:
    # Twice the window: a process's CPU time is counted in 10 ms ticks, and 0.1 % of a
    # core over 10 s is one tick.
    return {k: _whole(_launch_cmd(k, [SLEEPER]), 2 * seconds, warmup=8)
            for k in ("torchrun", "rankvisor")}


def child_whole_log(seconds: float) -> dict[str, Any]:
    args = [SPEW, "--rate", "10000", "--seconds", str(seconds + 12)]
    return {k: _whole(_launch_cmd(k, args), seconds, warmup=6) for k in ("torchrun", "rankvisor")}


def _threads(pid: int) -> dict[str, tuple[int, int, int]]:
    """Each thread of ``pid`` (name#tid): its voluntary context switches (each one a sleep
    it was woken from), its CPU ticks (utime + stime) and its CPU time in ns (schedstat:
    a tick is 10 ms, a whole idle second's worth of several readings)."""
    out: dict[str, tuple[int, int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # it ended between the listing and the read
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        name = fields.get("Name", "?").strip()
        out[f"{name}#{tid}"] = (int(fields["voluntary_ctxt_switches"]),
                                int(stat[11]) + int(stat[12]), ns)
    return out


def _wakeups(cmd: list[str], seconds: float, warmup: float) -> dict[str, Any]:
    """Wake-ups of an idle supervising process: per second, how many of its threads woke
    (a context switch or a CPU tick in that second) and how many wake-ups there were in
    all; and over the window, each thread's wake-ups a second and the CPU in % (the
    process's ticks, and in ns the threads alive at both ends: a thread that ended within
    the window, such as the one that takes a quiet spell's dumps, is missing there)."""
    with _launched(cmd) as p:
        time.sleep(warmup)
        first = before = _threads(p.pid)
        c0, t0 = _proc_cpu(p.pid), time.monotonic()
        awake, total = [], []
        for _ in range(int(seconds)):
            time.sleep(1.0)
            now = _threads(p.pid)
            woke = [t for t, (v, c, _ns) in now.items() if (v, c) != before.get(t, (0, 0, 0))[:2]]
            awake.append(len(woke))
            total.append(sum(v - before.get(t, (0, 0, 0))[0] for t, (v, _c, _ns) in now.items()))
            before = now
        elapsed = time.monotonic() - t0
        per_thread = {t: round((v - first.get(t, (0, 0, 0))[0]) / elapsed, 2)
                      for t, (v, _c, _ns) in before.items() if v != first.get(t, (0, 0, 0))[0]}
        ns = sum(n - first[t][2] for t, (_v, _c, n) in before.items() if t in first)
        return {"threads": len(before), "max_awake_in_a_second": max(awake),
                "wakeups_per_s": round(sum(total) / elapsed, 1),
                "cpu_pct": round(100.0 * (_proc_cpu(p.pid) - c0) / elapsed, 3),
                "cpu_pct_ns": round(100.0 * ns / 1e9 / elapsed, 4),
                "by_thread": dict(sorted(per_thread.items(), key=lambda kv: -kv[1]))}


def child_idle_wakeups(seconds: float) -> dict[str, Any]:
    """8 sleeping ranks, files only (--redirects 3), over 3 times the window (30 s by
    default): the supervisor's wake-ups, and torchrun's agent's beside it."""
    out: dict[str, Any] = {"load": round(os.getloadavg()[0], 2)}
    for kind in ("torchrun", "rankvisor"):
        # A long warm-up: the start (spawns, imports) must be over before the count begins.
        out[kind] = _wakeups(_launch_cmd(kind, [SLEEPER], "--redirects"), 3 * seconds,
                             warmup=20)
    for unit in ("cpu_pct", "cpu_pct_ns"):
        theirs = out["torchrun"][unit]
        out[f"ratio_{unit}"] = round(out["rankvisor"][unit] / theirs, 3) if theirs else None
    return out


LOG_LINES_PER_S: Final = 8 * 10_000
"""What the 8 ranks of the logging scenarios write (``sv_spew.py --rate 10000`` each)."""


def child_per_million(seconds: float) -> dict[str, Any]:
    """The whole process's CPU seconds per million lines the ranks write, tee on (--tee 3)
    and off (--redirects 3: files only), torchrun's and rankvisor's turn about."""
    args = [SPEW, "--rate", "10000", "--seconds", str(seconds + 12)]
    out: dict[str, Any] = {"load": round(os.getloadavg()[0], 2)}
    for std, name in (("--tee", "tee_on"), ("--redirects", "tee_off")):
        for kind in ("torchrun", "rankvisor"):
            pct = _whole(_launch_cmd(kind, args, std), seconds, warmup=6)
            out[f"{kind}_{name}"] = pct / 100 * 1e6 / LOG_LINES_PER_S
    # The floor: what the supervisor spends with the same 8 ranks printing nothing (stats,
    # forensics, status), in the same units, over the same window.
    pct = _whole(_launch_cmd("rankvisor", [SLEEPER], "--redirects"), seconds, warmup=6)
    out["rankvisor_idle"] = pct / 100 * 1e6 / LOG_LINES_PER_S
    out["bare_reader"] = _bare_reader(seconds)
    return out


def _bare_reader(seconds: float) -> float:
    """The least any supervisor that sees every line spends, in the same units: the same 8
    ranks' output in files, each read to its end four times a second (rankvisor's pace
    while nobody watches, torchrun's console tee reads as often) and its newlines counted,
    nothing else (no decoding, no index, no threads). CPU of this process alone."""
    log_dir = Path(tempfile.mkdtemp(prefix="bench_bare_"))
    writers, fds = [], []
    for rank in range(8):
        with open(log_dir / f"{rank}.log", "wb") as f:
            writers.append(subprocess.Popen(
                [PY, SPEW, "--rate", "10000", "--seconds", str(seconds + 12)], stdout=f,
                env={**os.environ, "RANK": str(rank)},
            ))
        fds.append(os.open(log_dir / f"{rank}.log", os.O_RDONLY))
    buf = bytearray(1 << 18)
    lines = 0

    def read_all() -> None:
        nonlocal lines
        for fd in fds:
            while n := os.readv(fd, [buf]):
                lines += buf.count(b"\n", 0, n)

    try:
        for _ in range(24):  # the 6 s warm-up of the other figures
            read_all()
            time.sleep(0.25)
        c0, t0, l0 = _self_cpu(), time.monotonic(), lines
        while time.monotonic() < t0 + seconds:
            read_all()
            time.sleep(0.25)
        return (_self_cpu() - c0) / ((lines - l0) / 1e6)
    finally:
        for w in writers:
            w.kill()
            w.wait()
        for fd in fds:
            os.close(fd)


NOTES = """Notes:
- CPU is user+system time of the supervising process over the window, in % of one core;
  rankvisor's in-process figures include the guard process and stats sampling at 1 s, and
  the console (tee) goes to /dev/null for both sides.
- The machine is a shared 2-CPU VM on which other test suites ran at the same time (load
  average 5-9): single figures move by +-30 % between runs; the ratios held in every run.
- "rank exit to its state event": the rank writes time.time_ns() just before os._exit; the
  figure is the time until a subscriber receives RankStateChanged. torch's PContext.wait()
  polls (period 1 s by default; LocalElasticAgent calls wait(0) every 0.1 s).
- terminate-all: SIGTERM to 32 `sleep` ranks until every exit is recorded (rankvisor: the
  last RankStateChanged; torch: PContext.close() returning).
- start / close of 32 ranks: `Supervisor.start()` (returns once every rank is spawned) and
  `shutdown()` (SIGTERM, every exit recorded, cgroups removed, guard gone); median of 6
  rounds, the two trackings taking turns."""

CHILDREN = {name[6:]: fn for name, fn in globals().items() if name.startswith("child_")}


def _table(r: dict[str, dict[str, Any]]) -> str:
    def g(name: str, key: str, fmt: str = "{:.2f}") -> str:
        v = r.get(name, {}).get(key)
        return "n/a" if v is None else fmt.format(v)

    rows = [
        "| measure | rankvisor | torch | goal |",
        "|---|---|---|---|",
        "| supervisor CPU, 8 ranks sleeping, tee on (stats at 1 s) | "
        f"{g('sup_sleep', 'cpu_percent')} % "
        f"| {g('torch_sleep', 'cpu_percent')} % (PContext + tee threads) | < 0.2 % |",
        f"| supervisor CPU, 8 ranks x 10k lines/s, tee on | {g('sup_log', 'cpu_percent')} % "
        f"| {g('torch_log', 'cpu_percent')} % | <= half of torch |",
        f"| stats sample of 64 ranks | {g('stats64', 'ms_per_sample')} ms "
        f"({g('stats64', 'cpu_percent_at_1hz')} % of a core at 1 Hz) | - | cheap |",
        "| start / close of 32 `sleep` ranks, a cgroup per rank | "
        f"{g('start_close32', 'cgroup_start', '{:.0f}')} / "
        f"{g('start_close32', 'cgroup_close', '{:.0f}')} ms | - | - |",
        "| start / close of 32 `sleep` ranks, process-tree tracking (`RANKVISOR_CGROUPS=0`) | "
        f"{g('start_close32', 'tree_start', '{:.0f}')} / "
        f"{g('start_close32', 'tree_close', '{:.0f}')} ms | - | - |",
        "| terminate-all to all reaped, 32 SIGTERM-obeying ranks | "
        f"{g('term32', 'ms', '{:.0f}')} ms "
        f"| {g('torch_term32', 'ms', '{:.0f}')} ms (PContext.close) | - |",
        f"| rank exit to its state event | median {g('exit_latency', 'median_ms')} ms, "
        f"max {g('exit_latency', 'max_ms')} ms | wait(period=1): median "
        f"{g('torch_exit_latency', 'wait_period_1s_median_ms', '{:.0f}')} ms; agent 0.1 s poll: "
        f"median {g('torch_exit_latency', 'agent_poll_0.1s_median_ms', '{:.0f}')} ms | < 50 ms |",
        f"| whole process, 8 ranks sleeping, --tee 3 | {g('whole_sleep', 'rankvisor')} % "
        f"(rankvisor run --headless) | {g('whole_sleep', 'torchrun')} % (torchrun) | - |",
        f"| whole process, 8 ranks x 10k lines/s, --tee 3 | {g('whole_log', 'rankvisor')} % "
        f"| {g('whole_log', 'torchrun')} % | - |",
        "| whole process, CPU s per million lines written, tee on / off (load "
        f"{g('per_million', 'load')}) | {g('per_million', 'rankvisor_tee_on', '{:.3f}')} / "
        f"{g('per_million', 'rankvisor_tee_off', '{:.3f}')} s "
        f"| {g('per_million', 'torchrun_tee_on', '{:.3f}')} / "
        f"{g('per_million', 'torchrun_tee_off', '{:.3f}')} s | <= half of torchrun's |",
        "| the same, 8 ranks printing nothing, tee off (the supervisor's floor) | "
        f"{g('per_million', 'rankvisor_idle', '{:.3f}')} s | - | - |",
        "| the least a reader of every line spends: the same output read 4 times a second, "
        f"newlines counted, nothing else | {g('per_million', 'bare_reader', '{:.3f}')} s "
        "| - | - |",
    ]
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    p.add_argument("--only", nargs="*", choices=sorted(CHILDREN), help="run only these")
    p.add_argument("--write", action="store_true", help="write RESULTS_supervisor.md")
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        Path(a.out).write_text(json.dumps(CHILDREN[a.child](a.seconds)))
        return
    results: dict[str, dict[str, Any]] = {}
    for name in a.only or CHILDREN:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            out = subprocess.run(
                [PY, __file__, "--child", name, "--seconds", str(a.seconds), "--out", f.name],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600,
            )
            try:
                results[name] = json.loads(Path(f.name).read_text())
            except ValueError:
                results[name] = {"error": out.stderr[-500:]}
        print(json.dumps({name: results[name]}), flush=True)
    table = _table(results)
    print(table)
    if a.write:
        cmd = "python tests/bench/bench_supervisor.py " + " ".join(sys.argv[1:])
        text = (f"# Supervisor benchmark\n\nCommand: `{cmd.strip()}`\n\n"
                f"Machine: {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}.\n\n{table}\n\n"
                f"{NOTES}\n\n"
                "Raw results:\n\n```json\n" + json.dumps(results, indent=1) + "\n```\n")
        Path(__file__).with_name("RESULTS_supervisor.md").write_text(text)


if __name__ == "__main__":
    main()
