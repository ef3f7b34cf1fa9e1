"""A two-node gloo job for the multi-node tests: init, all_reduce, then maybe fail.

``FAIL_RANK``: the global rank that raises after the first all_reduce (the others then die
in the second one: "Connection closed by peer"); ``FAIL_ATTEMPTS``: how many rounds it fails
in (default every one); ``HOLD_FILE``: wait until this file exists before finishing.
"""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    print(f"start rank {os.environ['RANK']} restart {os.environ['TORCHELASTIC_RESTART_COUNT']} "
          f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()} group {os.environ['GROUP_RANK']} "
          f"restart {os.environ['TORCHELASTIC_RESTART_COUNT']} sum {int(t.item())}", flush=True)
    hold = os.environ.get("HOLD_FILE")
    if hold:
        while not os.path.exists(hold):
            time.sleep(0.05)
    fail = int(os.environ.get("FAIL_RANK", "-1"))
    attempts = int(os.environ.get("FAIL_ATTEMPTS", "1000"))
    if rank == fail and int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < attempts:
        raise RuntimeError(f"rank {rank} fails on purpose")
    dist.all_reduce(t)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
