"""A 2-rank gloo job: torch.distributed.breakpoint(rank=0), then an all_reduce on both."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = 41
dist.breakpoint(rank=0)
t = torch.ones(1)
dist.all_reduce(t)
print(f"done {os.environ['RANK']} sum={int(t.item())}", flush=True)
dist.destroy_process_group()
