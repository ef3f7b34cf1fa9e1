"""A real torch.distributed job: gloo all_reduce over every rank (env:// rendezvous).

  --fail-rank R   rank R raises after joining the group (torch's @record writes error.json);
                  the others are then stuck in all_reduce until the launcher stops them.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fail-rank", type=int, default=-1)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    if rank == a.fail_rank:
        raise RuntimeError(f"rank {rank} raised on purpose")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    assert t.item() == expected, (t.item(), expected)
    print(f"rank {rank}/{world}: all_reduce ok = {t.item():g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
