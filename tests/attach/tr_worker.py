"""A torchrun worker for the attach tests: numbered lines, slowly, until told to stop.

Options: ``--lines N`` (then exit 0; default: for ever), ``--interval S``,
``--ignore-sigterm RANK`` (that rank ignores SIGTERM), ``--fail-attempt0`` (attempt 0
raises after 5 lines, through torch's ``record``: an error.json), ``--gloo`` (an
all_reduce on CPU first: the ranks really form a group),
``--ready-dir D`` (touch ``D/<rank>.<attempt>.ready`` once running).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=-1)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--ignore-sigterm", type=int, default=-1)
    p.add_argument("--fail-attempt0", action="store_true")
    p.add_argument("--gloo", action="store_true")
    p.add_argument("--ready-dir", default="")
    a = p.parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if a.ignore_sigterm == rank:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.gloo:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t)
        print(f"rank {rank} all_reduce {t.item():g}", flush=True)
        dist.destroy_process_group()
    if a.ready_dir:
        open(os.path.join(a.ready_dir, f"{rank}.{attempt}.ready"), "w").close()
    count = a.lines if a.lines >= 0 else 1 << 30
    if a.fail_attempt0 and attempt == 0:
        count = 5
    for i in range(count):
        print(f"rank {rank} attempt {attempt} line {i}", flush=True)
        if i % 5 == 0:
            print(f"rank {rank} attempt {attempt} err {i // 5}", file=sys.stderr, flush=True)
        time.sleep(a.interval)
    if a.fail_attempt0 and attempt == 0:
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def fail() -> None:
            raise RuntimeError(f"rank {rank} fails in attempt 0")

        fail()
    return 0


if __name__ == "__main__":
    sys.exit(main())
