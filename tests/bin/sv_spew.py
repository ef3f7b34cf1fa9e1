"""Write numbered lines at a steady rate: --rate lines/s for --seconds, in 10 ms bursts."""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args()
    rank = os.environ.get("RANK", "0")
    tick = 0.01
    per_tick = max(1, int(a.rate * tick))
    out = sys.stdout
    n = 0
    start = time.monotonic()
    end = start + a.seconds
    next_t = start
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if now < next_t:
            time.sleep(next_t - now)
        lines = "".join(
            f"rank {rank} step {n + i} loss=0.{(n + i) % 997:03d} lr=1e-4\n"
            for i in range(per_tick)
        )
        out.write(lines)
        out.flush()
        n += per_tick
        next_t += tick


if __name__ == "__main__":
    main()
