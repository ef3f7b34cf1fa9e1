"""A one-rank gloo job that raises once its process group is up (torch's worker server, which
rankvisor's bootstrap starts when torch.distributed is imported, is running by then)."""

import torch.distributed as dist

dist.init_process_group("gloo")
raise RuntimeError("raised on purpose after init")
