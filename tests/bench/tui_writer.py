"""A rank for the UI benchmark: numbered, timestamped lines at a steady rate, 10 ms bursts.

Each line is ``r<RANK> n=<N> t=<wall time> <padding>``, about 100 bytes, so the benchmark
can tell how far behind the files a pane is and check that no line is missing on disk.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

PAD = "loss=0.1234 lr=3.0e-04 grad_norm=1.000 tokens/s=123456 " + "x" * 20


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--delay", type=float, default=0.0, help="sleep first (let all ranks start)")
    a = p.parse_args()
    rank = os.environ.get("RANK", "0")
    time.sleep(a.delay)
    tick = 0.01
    out = sys.stdout
    n = 0
    start = time.monotonic()
    end = start + a.seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        # Catch up to the rate if a burst was late (a loaded machine), never run ahead.
        due = int((now - start) * a.rate) + 1
        if due > n:
            stamp = f"{time.time():.6f}"
            out.write("".join(f"r{rank} n={i} t={stamp} {PAD}\n" for i in range(n, due)))
            out.flush()
            n = due
        time.sleep(tick)
    sys.exit(0)


if __name__ == "__main__":
    main()
