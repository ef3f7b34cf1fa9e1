"""A rank that writes the launcher's variables it sees to DIR/env.<RANK>.json and exits 0.

Usage: env_dump.py DIR [--gloo]  (with --gloo it first joins a gloo group of WORLD_SIZE,
so a world that does not come together fails).
"""

import json
import os
import sys

PREFIXES = ("RANK", "LOCAL_", "WORLD_", "GROUP_", "ROLE_", "TORCHELASTIC_", "MASTER_", "OMP_",
            "CUDA_VISIBLE")

if "--gloo" in sys.argv:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
seen = {k: v for k, v in os.environ.items()
        if k.startswith(PREFIXES) and not k.startswith("RANKVISOR_")}
with open(os.path.join(sys.argv[1], f"env.{os.environ['RANK']}.json"), "w") as f:
    json.dump(seen, f, sort_keys=True)
