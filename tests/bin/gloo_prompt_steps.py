"""Two gloo ranks stepping (an all_reduce a step, ``step N`` lines, a heartbeat line a second
from a thread); rank 0 stops at ``breakpoint()`` at step ``argv[1]``, its peer waits for it
in that step's all_reduce until a person answers ``c`` on rank 0's stdin."""

from __future__ import annotations

import datetime
import sys
import threading
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
at = int(sys.argv[1])


def _heartbeat() -> None:
    while True:
        print(f"rank {rank}: heartbeat", flush=True)
        time.sleep(1)


threading.Thread(target=_heartbeat, daemon=True).start()
for step in range(1, at + 4):
    if rank == 0 and step == at:
        x = 41
        breakpoint()  # a person reads here, types a few commands, then c
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"step {step}", flush=True)
    time.sleep(0.1)
dist.destroy_process_group()
