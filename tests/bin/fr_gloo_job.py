"""A gloo loop of all_reduces for the Flight Recorder's tests (3 ranks).

  --skip R[,R..]  rank R (each one named) never enters all_reduce #AT: it sleeps instead (the
                  others wait in it until gloo's ``--timeout``)
  --desync R --how op|size|dtype
                  at all_reduce #AT rank R calls a barrier instead (op), or all-reduces a
                  tensor of another size (size) or dtype (dtype): the same sequence number
                  in a different collective, which torch's analyser calls a mismatch
  --heartbeat     every rank prints ``heartbeat`` from a thread every 0.4 s, the hung one too
                  (as logging and progress threads do)
  --worker-main   the loop runs inside torch's ``worker_main()``
  --mismatch R    rank R calls broadcast where the others call all_reduce #AT (run it with
                  TORCH_DISTRIBUTED_DEBUG=DETAIL: torch names the mismatch)
  --barrier R     at step AT every rank calls monitored_barrier, rank R only after sleeping
  --behind R      rank R stays in the all_reduce line one collective behind the others: from
                  step AT-1 a thread of its own waits until the main thread waits in an
                  all_reduce, then holds the GIL in one long C call (as a C extension may),
                  so the main thread cannot return from a collective gloo has completed; the
                  others, a step ahead, wait in the next one in the same line
"""

from __future__ import annotations

import argparse
import datetime
import linecache
import sys
import threading
import time

import torch
import torch.distributed as dist


def _hog_once_in_a_collective(main: threading.Thread) -> None:
    """Wait until ``main`` waits for a collective's work (in ``work.wait()``, the GIL
    released), then hold the GIL for good: one C call that does not let go of it."""
    while True:
        frame = sys._current_frames().get(main.ident or 0)
        if (frame is not None and frame.f_code.co_name == "all_reduce"
                and "wait()" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)):
            break
        time.sleep(0.01)
    sum(range(10**15))


def _beat() -> None:
    while True:
        print("heartbeat", flush=True)
        time.sleep(0.4)


def loop(a: argparse.Namespace) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank = dist.get_rank()
    if a.heartbeat:
        threading.Thread(target=_beat, daemon=True).start()
    t = torch.ones(4)
    for i in range(1, a.steps + 1):
        if rank in a.skip and i == a.at:
            time.sleep(3600)
        if i == a.at - 1 and a.behind >= 0:
            if rank == a.behind:
                threading.Thread(target=_hog_once_in_a_collective,
                                 args=(threading.main_thread(),), daemon=True).start()
            else:
                time.sleep(1.0)  # so that it waits in this step's all_reduce first
        if i == a.at and a.barrier >= 0:
            if rank == a.barrier:
                time.sleep(3600)
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=a.timeout))
        if i == a.at and rank == a.mismatch:
            dist.broadcast(t, src=0)
        elif i == a.at and rank == a.desync:
            if a.how == "op":
                dist.barrier()
            else:
                odd = torch.ones(8) if a.how == "size" else torch.ones(4, dtype=torch.float64)
                dist.all_reduce(odd)
        else:
            dist.all_reduce(t)
        print(f"step {i}", flush=True)
        time.sleep(a.step_s)
    dist.destroy_process_group()
    print("done", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--skip", type=lambda v: {int(x) for x in v.split(",")}, default=set())
    p.add_argument("--at", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=5.0)
    p.add_argument("--mismatch", type=int, default=-1)
    p.add_argument("--barrier", type=int, default=-1)
    p.add_argument("--desync", type=int, default=-1)
    p.add_argument("--how", choices=("op", "size", "dtype"), default="op")
    p.add_argument("--behind", type=int, default=-1)
    p.add_argument("--heartbeat", action="store_true")
    p.add_argument("--worker-main", action="store_true")
    a = p.parse_args()
    if a.worker_main:
        from torch.distributed.elastic.control_plane import worker_main

        with worker_main():
            loop(a)
    else:
        loop(a)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
