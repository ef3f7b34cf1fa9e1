"""Rank 1 raises ZeroDivisionError in ``divide`` (its local ``y`` is 7) once rank 0 has ended
well, so the run's outcome never depends on which of them a loaded machine runs first; with
``fail-after-hold`` rank 0 instead waits for rank 1's debug hold to begin, then exits 3."""

import os
import sys
import time

rank = int(os.environ["RANK"])
mine = os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"])
attempt = os.path.dirname(mine)
hold_test = sys.argv[1:] == ["fail-after-hold"]


def divide() -> float:
    y = 7
    return y / 0


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


if rank == 1:
    if not hold_test:  # rank 0 ends first (its pid file, then its exit)
        pid_file = os.path.join(attempt, "rank0.pid")
        while not os.path.exists(pid_file):
            time.sleep(0.02)
        pid = int(open(pid_file).read() or 0)
        while pid and not gone(pid):
            time.sleep(0.02)
    divide()
if hold_test:
    hold = os.path.join(attempt, "1", "debug_hold")
    while not os.path.exists(hold):
        time.sleep(0.02)
    print("rank 0: rank 1 is held; failing", flush=True)
    sys.exit(3)
print(f"rank {rank}: done", flush=True)
with open(os.path.join(attempt, "rank0.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(attempt, "rank0.pid.tmp"), os.path.join(attempt, "rank0.pid"))
