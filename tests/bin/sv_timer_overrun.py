"""A rank that uses torch's file-based expiry timers; --overrun-rank R overruns its scope."""

from __future__ import annotations

import argparse
import os
import signal
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--overrun-rank", type=int, default=0)
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    client = FileTimerClient(
        file_path=os.environ["TORCHELASTIC_TIMER_FILE"], signal=signal.SIGKILL
    )
    configure(client)
    with expires(after=0.5, scope="quick_step"):
        time.sleep(0.05)
    print(f"rank {rank} quick step done", flush=True)
    if rank == a.overrun_rank:
        with expires(after=1, scope="slow_step"):
            time.sleep(60)
    time.sleep(60)


if __name__ == "__main__":
    main()
