"""Append numbered lines to a file, the way a busy rank does; for the tailer tests.

Usage: numbered_writer.py PATH --rank R --lines M [--jitter S] [--split] [--no-newline-at-end]
                          [--interval S] [--burst K] [--payload N] [--stamp]

Each line is ``"{rank}:{i}:{payload}"`` written with ``os.write`` (no buffering in between).
``--split`` writes every line in two ``os.write`` calls with a short pause between them, so a
reader can see half a line. ``--jitter S`` sleeps up to S seconds at random after some lines.
``--interval S`` sleeps S seconds after every line, or after every ``--burst K`` lines
(``--burst 100 --interval 0.01``: about 10 000 lines/s). ``--stamp`` puts ``time.time()`` in the
payload (for latency measurements). ``--no-newline-at-end`` leaves the last line unterminated.
``--buffered`` writes through an 8 KiB-buffered file instead, as a Python rank's redirected
``print`` does: the fastest writer, whose writes end in the middle of lines.
"""

import argparse
import os
import random
import time

parser = argparse.ArgumentParser()
parser.add_argument("path")
parser.add_argument("--rank", type=int, default=0)
parser.add_argument("--lines", type=int, default=1000)
parser.add_argument("--jitter", type=float, default=0.0)
parser.add_argument("--interval", type=float, default=0.0)
parser.add_argument("--burst", type=int, default=1)
parser.add_argument("--split", action="store_true")
parser.add_argument("--no-newline-at-end", action="store_true")
parser.add_argument("--payload", type=int, default=16)
parser.add_argument("--stamp", action="store_true")
parser.add_argument("--seed", type=int, default=None)
parser.add_argument("--buffered", action="store_true")
opts = parser.parse_args()

rng = random.Random(opts.rank if opts.seed is None else opts.seed)
fd = os.open(opts.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
pad = "x" * opts.payload
if opts.buffered:
    with os.fdopen(fd, "w", buffering=8192) as f:
        tail = "" if opts.no_newline_at_end else "\n"
        write = f.write
        for i in range(opts.lines - 1):
            write(f"{opts.rank}:{i}:{pad}\n")
        write(f"{opts.rank}:{opts.lines - 1}:{pad}{tail}")
    raise SystemExit(0)
for i in range(opts.lines):
    payload = repr(time.time()) if opts.stamp else pad
    line = f"{opts.rank}:{i}:{payload}"
    last = i == opts.lines - 1
    data = (line if (last and opts.no_newline_at_end) else line + "\n").encode()
    if opts.split:
        cut = len(data) // 2
        os.write(fd, data[:cut])
        time.sleep(0.0005)
        os.write(fd, data[cut:])
    else:
        os.write(fd, data)
    if opts.interval and (i + 1) % opts.burst == 0:
        time.sleep(opts.interval)
    elif opts.jitter and rng.random() < 0.05:
        time.sleep(rng.random() * opts.jitter)
os.close(fd)
