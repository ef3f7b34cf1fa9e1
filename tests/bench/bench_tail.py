"""Benchmark: torch's TailLog against ours (TailLog, and the OutputPump batch consumer).

Run: ``python tests/bench/bench_tail.py [--quick] [--json out.json]`` from the repository root.
Prints one JSON object and a Markdown table. Not collected by pytest. Each scenario runs
torch's implementation and ours one after the other, in the same run, on the same files or
on identical writer processes, so the machine's load affects both alike.

Scenarios (goal in brackets):
- latency: a writer appends one timestamped line every 10 ms; time from write to delivery
  (p50, p99) [p99 < 20 ms];
- throughput: finished files, 8 and 32 files of 200k lines, start() to stop(), best of 3
  interleaved rounds [3x torch];
- text file: 8 finished files of 100k lines of 100 bytes drained by TailLog into a text file
  on disk (``open(path, "w")``), best of 3 interleaved rounds [3x torch];
- live: N writers at full speed (one ``os.write`` a line, or 8 KiB-buffered like a Python
  rank's redirected print) or at 10k lines/s each; lag between the last writer's exit and
  the last line delivered [< 0.1 s], and lines lost or garbled, checked line by line [0];
- idle CPU: 16 files, nothing written, 10 s [< 0.2 % of a core];
- RSS: peak growth while our pump tails 8 files (1 GB, 10 M lines) and 8 LogStores index
  them, in a fresh interpreter [< 64 MB].
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rankvisor.engine.output.pump import OutputPump  # noqa: E402
from rankvisor.engine.tail_log import TailLog  # noqa: E402

WRITER = str(ROOT / "tests" / "bin" / "numbered_writer.py")
LINE = re.compile(r"\[w(\d+)\]:(\d+):(\d+):x+$")


def torch_tail_log() -> Any:
    from torch.distributed.elastic.multiprocessing.tail_log import TailLog as TorchTailLog

    return TorchTailLog


IMPLS: dict[str, Callable[[], Any]] = {"torch": torch_tail_log, "ours": lambda: TailLog}


class Tee:
    """A dst that forwards to a real text file (unlocked, like sys.stdout) and notes when
    it was last written to."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.t_last = 0.0

    def write(self, s: str) -> int:
        self.f.write(s)
        self.t_last = time.monotonic()
        return len(s)

    def flush(self) -> None:
        self.f.flush()


class Stamps(io.TextIOBase):
    """A dst that measures delivery latency of lines ``r:i:<time.time()>``."""

    def __init__(self) -> None:
        self.latency: list[float] = []

    def write(self, s: str) -> int:  # type: ignore[override]
        now = time.time()
        for line in s.splitlines():
            self.latency.append(now - float(line.rsplit(":", 1)[1]))
        return len(s)


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {
        "p50_ms": round(pick(0.5) * 1000, 1),
        "p99_ms": round(pick(0.99) * 1000, 1),
        "n": len(values),
    }


def spawn(files: dict[int, str], lines: int, *extra: str) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, WRITER, p, "--rank", str(r), "--lines", str(lines), *extra]
        )
        for r, p in files.items()
    ]


# -- scenarios -----------------------------------------------------------------------------


def bench_latency(tmp: Path, seconds: float) -> dict[str, Any]:
    path = str(tmp / "latency.log")
    Path(path).write_text("")
    out: dict[str, Any] = {}
    for impl in ("torch", "ours", "ours_pump"):
        Path(path).write_text("")
        stamps = Stamps()
        if impl == "ours_pump":

            def sink(batch: list[Any], stamps: Stamps = stamps) -> None:
                now = time.time()
                for b in batch:
                    stamps.latency.extend(now - float(x.rsplit(":", 1)[1]) for x in b.lines)

            tailer: Any = OutputPump(sink)
            tailer.add(0, "stdout", path)
            tailer.start()
        else:
            tailer = IMPLS[impl]()("w", {0: path}, stamps).start()
        time.sleep(0.3)
        n = int(seconds / 0.01)
        spawn({0: path}, n, "--interval", "0.01", "--stamp")[0].wait()
        time.sleep(0.3)
        tailer.stop()
        out[impl] = percentiles(stamps.latency)
    return out


def make_files(tmp: Path, n: int, lines: int, payload: int = 40) -> dict[int, str]:
    files = {}
    for r in range(n):
        path = tmp / f"fin-{n}-{r}.log"
        body = "".join(f"{r}:{i}:{'x' * payload}\n" for i in range(lines)).encode()
        path.write_bytes(body)
        files[r] = str(path)
    return files


def bench_throughput(tmp: Path, lines: int, rounds: int) -> dict[str, Any]:
    """Best of ``rounds`` interleaved runs per implementation (the machine is shared: the
    best run is the one least disturbed, for every implementation alike)."""
    out: dict[str, Any] = {}
    for n in (8, 32):
        files = make_files(tmp, n, lines)
        total = n * lines
        best: dict[str, float] = {}

        def keep(
            name: str, seconds: float, best: dict[str, float] = best, total: int = total
        ) -> None:
            best[name] = max(best.get(name, 0.0), total / seconds)

        for _ in range(rounds):
            t0 = time.perf_counter()
            for path in files.values():
                with open(path) as f:
                    for _ in f:
                        pass
            keep("readline_loop", time.perf_counter() - t0)
            for impl in ("torch", "ours"):
                with open(os.devnull, "w") as dst:
                    t0 = time.perf_counter()
                    IMPLS[impl]()("w", files, dst).start().stop()
                    keep(impl, time.perf_counter() - t0)
            count = [0]

            def sink(batch: list[Any], count: list[int] = count) -> None:
                for b in batch:
                    count[0] += len(b.lines)

            for name, indexed in (("ours_pump", False), ("ours_pump_indexed", True)):
                # Indexed: the pump also writes each rank's arrival index, as the
                # Supervisor's does (a record per read pass with new lines).
                count[0] = 0
                t0 = time.perf_counter()
                pump = OutputPump(sink)
                for r, path in files.items():
                    index = str(tmp / f"arrival_{r}.idx") if indexed else ""
                    pump.add(r, "stdout", path, index=index)
                pump.start()
                pump.stop()
                keep(name, time.perf_counter() - t0)
                assert count[0] == total, (count[0], total)
                for r in files:
                    Path(tmp / f"arrival_{r}.idx").unlink(missing_ok=True)
        out[f"{n}_files"] = {"lines": total, **{k: round(v) for k, v in best.items()}}
        for path in files.values():
            os.unlink(path)
    return out


def bench_text_file(tmp: Path, lines: int, rounds: int) -> dict[str, Any]:
    """8 finished files of ``lines`` lines of 100 bytes drained by each TailLog into a text
    file on disk; best of ``rounds`` interleaved runs, and the lines each sink holds."""
    files = {}
    for r in range(8):
        path = tmp / f"text-{r}.log"
        path.write_bytes(b"".join(
            f"{r}:{i}:".encode().ljust(99, b"x") + b"\n" for i in range(lines)
        ))
        files[r] = str(path)
    total = 8 * lines
    best: dict[str, float] = {}
    written: dict[str, int] = {}
    for _ in range(rounds):
        for impl in ("torch", "ours"):
            sink = tmp / f"text-sink-{impl}.txt"
            with open(sink, "w") as dst:
                t0 = time.perf_counter()
                IMPLS[impl]()("w", files, dst).start().stop()
                seconds = time.perf_counter() - t0
            best[impl] = max(best.get(impl, 0.0), total / seconds)
            with open(sink, "rb") as f:
                written[impl] = sum(1 for _ in f)
            sink.unlink()
    for path in files.values():
        os.unlink(path)
    assert written["ours"] == total, (written, total)
    return {
        "lines": total,
        "load": [round(x, 2) for x in os.getloadavg()],
        **{k: round(v) for k, v in best.items()},
        "lines_written": written,
    }


def check_lines(text: str, n: int, m: int) -> dict[str, int]:
    seen: set[tuple[int, int]] = set()
    garbled = duplicates = 0
    for line in text.splitlines():
        match = LINE.match(line)
        if not match or match.group(1) != match.group(2):
            garbled += 1
            continue
        key = (int(match.group(1)), int(match.group(3)))
        if key in seen:
            duplicates += 1
        seen.add(key)
    return {"lost": n * m - len(seen), "garbled": garbled, "duplicated": duplicates}


def bench_live(tmp: Path, n: int, m: int, *writer_args: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for impl in ("torch", "ours"):
        files = {r: str(tmp / f"live-{n}-{r}.log") for r in range(n)}
        for path in files.values():
            Path(path).write_text("")
        console = tmp / f"console-{impl}.txt"
        f = open(console, "w")
        dst = Tee(f)
        tailer = IMPLS[impl]()("w", files, dst).start()
        procs = spawn(files, m, "--payload", "8", *writer_args)
        for p in procs:
            p.wait()
        t_done = time.monotonic()
        # Delivered when the console has been quiet for 1 s (torch polls every 0.1 s).
        while time.monotonic() - max(dst.t_last, t_done) < 1.0:
            time.sleep(0.01)
        lag = max(0.0, dst.t_last - t_done)
        tailer.stop()
        f.close()
        row = check_lines(console.read_text(errors="replace"), n, m)
        row["lag_s"] = round(lag, 3)
        row["lines"] = n * m
        out[impl] = row
        console.unlink()
        for path in files.values():
            os.unlink(path)
    return out


def bench_idle(tmp: Path, seconds: float) -> dict[str, Any]:
    files = {r: str(tmp / f"idle-{r}.log") for r in range(16)}
    for path in files.values():
        Path(path).write_text("booted\n")
    out: dict[str, Any] = {}
    for impl in ("torch", "ours", "ours_pump"):
        if impl == "ours_pump":
            tailer: Any = OutputPump(lambda batch: None)
            for r, path in files.items():
                tailer.add(r, "stdout", path)
            tailer.start()
        else:
            tailer = IMPLS[impl]()("w", files, open(os.devnull, "w")).start()
        time.sleep(1.0)
        c0, w0 = time.process_time(), time.monotonic()
        time.sleep(seconds)
        cpu = (time.process_time() - c0) / (time.monotonic() - w0)
        tailer.stop()
        out[impl] = {"cpu_percent": round(cpu * 100, 3)}
    return out


def rss_child(tmp: str, impl: str, n: int, lines: int) -> None:
    """In a fresh interpreter: peak RSS growth while tailing (and, for ours, indexing)."""

    def rss_kb() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    files = {r: os.path.join(tmp, f"big-{r}.log") for r in range(n)}
    if impl == "torch":
        torch_tail_log()  # import torch before the baseline: only tailing is measured
    from rankvisor.engine.logfile.store import LogStore

    base = rss_kb()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss_kb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    if impl == "torch":
        with open(os.devnull, "w") as dst:
            torch_tail_log()("w", files, dst).start().stop()
        index_bytes = 0
    else:
        stores = {r: LogStore(p) for r, p in files.items()}
        count = [0]

        def sink(batch: list[Any]) -> None:  # the UI's pattern: count, refresh the store
            for b in batch:
                count[0] += len(b.lines)
                stores[b.rank].refresh()

        pump = OutputPump(sink)
        for r, p in files.items():
            pump.add(r, "stdout", p)
        pump.start()
        pump.stop()
        for s in stores.values():
            s.refresh()
        assert count[0] == n * lines and all(s.line_count == lines for s in stores.values())
        index_bytes = sum(s.index_bytes for s in stores.values())
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak[0] = max(peak[0], rss_kb())
    print(
        json.dumps(
            {
                "rss_growth_mb": round((peak[0] - base) / 1024, 1),
                "seconds": round(elapsed, 2),
                "index_bytes": index_bytes,
            }
        )
    )


def bench_rss(tmp: Path, n: int, lines: int, total: int) -> dict[str, Any]:
    payload = total // (n * lines) - 12
    chunk = 50_000
    for r in range(n):
        with open(tmp / f"big-{r}.log", "wb") as f:
            for start in range(0, lines, chunk):
                f.write(
                    "".join(
                        f"{r}:{i}:{'x' * payload}\n"
                        for i in range(start, min(lines, start + chunk))
                    ).encode()
                )
    size = sum(os.path.getsize(tmp / f"big-{r}.log") for r in range(n))
    out: dict[str, Any] = {"bytes": size, "lines": n * lines}
    for impl in ("ours", "torch"):
        res = subprocess.run(
            [sys.executable, __file__, "--rss-child", str(tmp), impl, str(n), str(lines)],
            capture_output=True,
            text=True,
            check=True,
        )
        out[impl] = json.loads(res.stdout.strip().splitlines()[-1])
    for r in range(n):
        os.unlink(tmp / f"big-{r}.log")
    return out


# -- report --------------------------------------------------------------------------------


def table_text_file(results: dict[str, Any]) -> str:
    text = results.get("text_file")
    if not text:
        return ""
    return (
        f"| text file, 8 files x {text['lines'] // 8 // 1000}k lines of 100 bytes (finished), "
        f"load {text['load'][0]} | {text['torch'] / 1e6:.2f} M lines/s | "
        f"{text['ours'] / 1e6:.2f} M lines/s ({text['ours'] / text['torch']:.1f}x) | | "
        ">= 3x torch |"
    )


def table(results: dict[str, Any]) -> str:
    rows = [
        "| scenario | torch TailLog | ours TailLog | ours pump (batches) | goal |",
        "|---|---|---|---|---|",
    ]
    lat = results.get("latency")
    if lat is None:  # --only text_file
        rows.append(table_text_file(results))
        return "\n".join(r for r in rows if r)
    rows.append(
        "| latency p50 / p99, 1 line / 10 ms | {} / {} ms | {} / {} ms | {} / {} ms "
        "| p99 < 20 ms |".format(
            lat["torch"]["p50_ms"],
            lat["torch"]["p99_ms"],
            lat["ours"]["p50_ms"],
            lat["ours"]["p99_ms"],
            lat["ours_pump"]["p50_ms"],
            lat["ours_pump"]["p99_ms"],
        )
    )
    rows.append(table_text_file(results))
    for key, row in results["throughput"].items():
        t = row["torch"]
        rows.append(
            f"| throughput, {key.replace('_', ' ')} x 200k lines (finished) "
            f"| {t / 1e6:.2f} M lines/s | {row['ours'] / 1e6:.2f} M lines/s "
            f"({row['ours'] / t:.1f}x) | {row['ours_pump'] / 1e6:.2f} M lines/s "
            f"({row['ours_pump'] / t:.1f}x; with arrival index "
            f"{row['ours_pump_indexed'] / 1e6:.2f} M) | >= 3x torch (readline loop: "
            f"{row['readline_loop'] / 1e6:.2f} M/s) |"
        )
    for key, row in results.get("live", {}).items():
        t, o = row["torch"], row["ours"]
        rows.append(
            f"| live {key}: lag after writers exit | {t['lag_s']} s | {o['lag_s']} s | | < 0.1 s |"
        )
        rows.append(
            f"| live {key}: lost / garbled of {t['lines']} | {t['lost']} / "
            f"{t['garbled']} ({100 * t['lost'] / t['lines']:.2f}%) | {o['lost']} / "
            f"{o['garbled']} | | 0 / 0 |"
        )
    idle = results["idle"]
    rows.append(
        f"| CPU, 16 idle files, {results['idle_seconds']} s | "
        f"{idle['torch']['cpu_percent']}% | {idle['ours']['cpu_percent']}% | "
        f"{idle['ours_pump']['cpu_percent']}% | < 0.2% |"
    )
    rss = results["rss"]
    rows.append(
        f"| peak RSS growth, {rss['bytes'] / 2**30:.2f} GB / {rss['lines'] / 1e6:.0f} M "
        f"lines, 8 files | {rss['torch']['rss_growth_mb']} MB (tail only) | | "
        f"{rss['ours']['rss_growth_mb']} MB (pump + 8 LogStores, index "
        f"{rss['ours']['index_bytes'] / 2**20:.1f} MB) | < 64 MB |"
    )
    return "\n".join(rows)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rss-child":
        rss_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    parser.add_argument("--json", help="also write the JSON here")
    parser.add_argument(
        "--only", choices=["text_file"], help="run one scenario (text_file: about 10 s)"
    )
    opts = parser.parse_args()
    q = opts.quick
    tmp = Path(tempfile.mkdtemp(prefix="bench_tail_"))
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    try:
        results["text_file"] = bench_text_file(tmp, 20_000 if q else 100_000, 3)
        if opts.only == "text_file":
            return report(results, opts.json)
        results["latency"] = bench_latency(tmp, 1.0 if q else 3.0)
        results["throughput"] = bench_throughput(tmp, 20_000 if q else 200_000, 3)
        m = 5_000 if q else 50_000
        results["live"] = {
            "8 x 10k lines/s": bench_live(tmp, 8, m, "--burst", "100", "--interval", "0.01"),
            "8 full speed": bench_live(tmp, 8, m),
            "32 full speed": bench_live(tmp, 32, m),
            "32 full speed, buffered": bench_live(tmp, 32, 2 * m, "--buffered"),
        }
        results["idle_seconds"] = 2.0 if q else 10.0
        results["idle"] = bench_idle(tmp, results["idle_seconds"])
        results["rss"] = bench_rss(tmp, 8, 100_000 if q else 1_250_000, 2**27 if q else 2**30)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(results, opts.json)


def report(results: dict[str, Any], json_path: str | None) -> None:
    print(json.dumps(results, indent=1))
    print()
    print(table(results))
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
