"""Wait where a stuck job waits: most ranks in a collective, ODD_RANK in its data loader.

Usage: stack_waiter.py READY_DIR [ODD_RANK] [--ignore-term] [--fail=RANK]

Writes READY_DIR/<rank> once it is in its waiting function (py-spy then finds it there), and
sleeps until killed. With --ignore-term, SIGTERM is ignored (a rank the escalation must
SIGKILL). With --fail=RANK, that rank exits 3 once every rank (WORLD_SIZE) is ready: the
failure a teardown follows.
"""

import os
import signal
import sys
import time


def wait_in_collective(ready: str) -> None:
    _ready(ready)
    while True:
        time.sleep(60)


def stuck_in_data_loader(ready: str) -> None:
    _ready(ready)
    while True:
        time.sleep(60)


def _ready(path: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)  # whole file or none


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank = int(os.environ.get("RANK", "0"))
    odd = int(args[1]) if len(args) > 1 else 1
    ready = os.path.join(args[0], str(rank))
    fail = [int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--fail=")]
    if fail and fail[0] == rank:
        _ready(ready)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        while len([n for n in os.listdir(args[0]) if n.isdigit()]) < world:
            time.sleep(0.02)  # polling a directory: no other way to learn the others are in
        sys.exit(3)
    if rank == odd:
        stuck_in_data_loader(ready)
    else:
        wait_in_collective(ready)


main()
