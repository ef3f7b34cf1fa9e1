"""Rank 1 raises ZeroDivisionError in ``divide`` (its local ``y`` is 7); rank 0 ends well,
or with ``fail-after-hold`` it waits for rank 1's debug hold to begin, then exits 3."""

import os
import sys
import time

rank = int(os.environ["RANK"])


def divide() -> float:
    y = 7
    return y / 0


if rank == 1:
    divide()
if sys.argv[1:] == ["fail-after-hold"]:
    mine = os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"])
    hold = os.path.join(os.path.dirname(mine), "1", "debug_hold")
    while not os.path.exists(hold):
        time.sleep(0.02)
    print("rank 0: rank 1 is held; failing", flush=True)
    sys.exit(3)
print(f"rank {rank}: done", flush=True)
