"""Prints, as one JSON line, what a rank can observe of how it was started, with a DataLoader
of 2 workers started by spawn: argv, ``__file__``, ``sys.path[0]``, ``__main__``'s spec, the
signal handlers, and what each worker saw of ``__main__``. Then initialises gloo and runs
one all_reduce (the worker server, when rankvisor serves one, starts there)."""

import json
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Seen(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple:
        import __main__ as m

        info = torch.utils.data.get_worker_info()
        return (i, info.id if info else -1, m.__name__, getattr(m, "__file__", ""))


def main() -> None:
    loader = DataLoader(Seen(), batch_size=None, num_workers=2,
                        multiprocessing_context="spawn")
    items = sorted(tuple(x) for x in loader)
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    print(json.dumps({
        "rank": dist.get_rank(),
        "argv": sys.argv,
        "file": __file__,
        "path0": sys.path[0],
        "spec": None if spec is None else spec.name,
        # A handler's repr names its address: the kind of handler is what counts.
        "handlers": [str(signal.getsignal(s)).split(" at 0x")[0] for s in signal.valid_signals()],
        "workers": [list(x[1:]) for x in items],
        "sum": t.item(),
        # rankvisor's own variables (its guard's, a rank's restart count) are documented
        # ones; the bootstrap's must be gone.
        "env": sorted(k for k in os.environ if k.startswith("RANKVISOR_")
                      and k not in ("RANKVISOR_RESTART_COUNT", "RANKVISOR_GUARD")),
    }, sort_keys=True), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
