"""Rank 0 adds up 0..2 (a line to break on); rank 1 stays until the file in argv[1] exists,
so that the run lives on while rank 0 is between two incarnations."""

import os
import sys
import time

rank = int(os.environ["RANK"])
if rank == 1:
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    sys.exit(0)
total = 0
for i in range(3):
    total += i  # the breakpoint
print(f"rank {rank}: total {total}", flush=True)
