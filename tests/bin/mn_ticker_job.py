"""A two-node gloo job that keeps writing: init, all_reduce, then a line every ``TICK_S``
(its wall time in it, for a viewer's latency) until ``HOLD_FILE`` exists."""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
    hold = os.environ["HOLD_FILE"]
    tick = float(os.environ.get("TICK_S", "0.2"))
    n = 0
    while not os.path.exists(hold):
        print(f"tick {n} rank {rank} t={time.time():.6f}", flush=True)
        n += 1
        time.sleep(tick)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
