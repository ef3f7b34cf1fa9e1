"""A small gloo training loop whose ranks go wrong on demand, for the suspect's tests.

Every rank prints ``step N`` each step (an all_reduce per step) and, while it waits for an
all_reduce, redraws a ``waiting`` progress line with ``\\r`` every 0.1 s (as tqdm does), so a
rank that waits is seen to be alive. At step ``--at``:

  --hang R     rank R goes silent (sleeps) before its all_reduce; the others time out in the
               collective after ``--timeout`` seconds (gloo's own timeout) and fail
  --raise R    rank R raises (torch's @record writes error.json); R may be "1,2"
  --segv R     rank R dies of SIGSEGV (faulthandler prints its stack)
  --wait R     rank R prints ``rank R: waiting to be killed`` and sleeps (the test kills it)
  --no-heartbeat  no ``waiting`` redraws (a job that says nothing while it waits)
  --dying R    rank R prints a knock-on's traceback (a peer closed its connection), creates
               ``--marker`` and sleeps: a rank caught in its exit by the teardown's SIGTERM
  --after R    rank R waits for ``--marker``, then raises (the first failure, after ``--dying``)
  --slow-exit S  every rank takes S seconds to exit after its error is recorded (a loaded
               machine, a process group's slow teardown)
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def _ranks(text: str) -> set[int]:
    return {int(x) for x in text.split(",") if x}


def _dying(marker: str) -> None:
    """A knock-on's traceback on stderr, as a rank prints it on its way out, then a slow
    exit (a process group's destructor waiting): the teardown's SIGTERM ends it there."""
    try:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    except RuntimeError:
        traceback.print_exc()
    sys.stderr.flush()
    open(marker, "w").close()
    time.sleep(3600)


@record
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hang", type=_ranks, default=set())
    p.add_argument("--raise", dest="raise_", type=_ranks, default=set())
    p.add_argument("--segv", type=_ranks, default=set())
    p.add_argument("--wait", type=_ranks, default=set())
    p.add_argument("--dying", type=_ranks, default=set())
    p.add_argument("--after", type=_ranks, default=set())
    p.add_argument("--marker", default="")
    p.add_argument("--at", type=int, default=5)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=4.0)
    p.add_argument("--no-heartbeat", action="store_true")
    p.add_argument("--slow-exit", type=float, default=0.0)
    a = p.parse_args()
    if a.slow_exit:
        # Runs at the interpreter's exit: after @record wrote the error file and the
        # traceback was printed.
        atexit.register(time.sleep, a.slow_exit)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank = dist.get_rank()
    out = sys.stdout
    for step in range(1, a.steps + 1):
        if step == a.at:
            if rank in a.dying:
                _dying(a.marker)
            if rank in a.after:
                while not os.path.exists(a.marker):
                    time.sleep(0.01)
                raise RuntimeError(f"rank {rank} raised on purpose at step {step}")
            if rank in a.raise_:
                raise RuntimeError(f"rank {rank} raised on purpose at step {step}")
            if rank in a.segv:
                out.flush()
                ctypes.string_at(0)  # SIGSEGV
            if rank in a.hang:
                time.sleep(3600)  # silent: no output, no collective
            if rank in a.wait:
                print(f"rank {rank}: waiting to be killed (pid {os.getpid()})", flush=True)
                time.sleep(3600)
        t = torch.ones(4) * (rank + 1)
        work = dist.all_reduce(t, async_op=True)
        waited_from = time.monotonic()
        next_draw = waited_from + 0.1
        while not work.is_completed():
            now = time.monotonic()
            if not a.no_heartbeat and now >= next_draw:
                out.write(f"\rstep {step}: waiting {now - waited_from:4.1f}s for all_reduce")
                out.flush()
                next_draw = now + 0.1
            time.sleep(0.01)
        work.wait()  # raises the collective's error (a timeout, a peer gone)
        out.write(f"\rstep {step} sum {t[0].item():g}\n")
        out.flush()
        time.sleep(a.step_s)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
