"""Every rank stops at breakpoint(); x is 41 but on rank 2 (7), t a tensor alike on all."""

import os

import torch

rank = int(os.environ["RANK"])
x = 7 if rank == 2 else 41
t = torch.ones(2, 3)
breakpoint()  # noqa: T100 - the test answers it
print(f"done {rank}", flush=True)
