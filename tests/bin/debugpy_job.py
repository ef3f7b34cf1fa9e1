"""Adds up 0..2 and prints the total: a line to break on for the debugpy tests."""

import os

rank = int(os.environ["RANK"])
total = 0
for i in range(3):
    total += i  # the breakpoint
print(f"rank {rank}: total {total}", flush=True)
