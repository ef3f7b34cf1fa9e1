"""Two gloo ranks: rank 0 stops at ``breakpoint()`` (a person would answer on its stdin),
rank 1 waits for it in an all_reduce until gloo's timeout (``argv[1]`` seconds) and fails.

Plain ``breakpoint()`` keeps the process group's timeout; ``torch.distributed.breakpoint()``
would raise it for the time a person sits at the prompt.
"""

from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
rank = dist.get_rank()
print(f"rank {rank}: joined", flush=True)
if rank == 0:
    x = 41
    breakpoint()  # the prompt: nobody answers
t = torch.ones(2)
dist.all_reduce(t)
print(f"rank {rank}: sum {t[0].item():g}", flush=True)
dist.destroy_process_group()
