"""A rank that ends one chosen way, for the exit-cause tests.

Usage: die_of.py MODE [--dir DIR]
  segfault   faulthandler on, then read address 0 (a real SIGSEGV, with a Python stack)
  sigbus     map a file, truncate it, touch the mapped page (a real SIGBUS)
  exit N     sys.exit(N) (137 and 143 look like a shell's report of a signal)
  cuda-oom   raise the message PyTorch raises when a GPU allocation fails
  wait       write DIR/<rank>.ready and sleep until someone kills it
  oom        write DIR/<rank>.ready, wait for DIR/go, then allocate until the OOM killer
             ends it (run it under a memory limit)
  gloo       a gloo group with a 2 s timeout: rank 0 all_reduces, rank 1 never joins
Only the rank named by --rank (default: every rank) does MODE, once the others are up;
they wait to be stopped.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import mmap
import os
import sys
import tempfile
import time

p = argparse.ArgumentParser()
p.add_argument("mode")
p.add_argument("code", nargs="?", type=int, default=0)
p.add_argument("--dir", default=tempfile.gettempdir())
p.add_argument("--rank", type=int, default=-1)
a = p.parse_args()
rank = int(os.environ.get("RANK", "0"))
print(f"rank {rank} starts: {a.mode}", file=sys.stderr, flush=True)


def ready() -> None:
    path = os.path.join(a.dir, f"{rank}.ready")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def wait_forever() -> None:
    while True:
        time.sleep(3600)  # killed from outside: the test's signal ends this


if a.mode == "gloo":
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
    if rank == 1:
        ready()
        wait_forever()  # never joins the collective: rank 0 times out waiting for it
    dist.all_reduce(torch.ones(1))
    sys.exit(0)

if a.rank not in (-1, rank):
    ready()
    wait_forever()
if a.rank == rank:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    others = [os.path.join(a.dir, f"{r}.ready") for r in range(world) if r != rank]
    while not all(map(os.path.exists, others)):
        time.sleep(0.01)  # the others are up and waiting: a barrier, not a wait time
if a.mode == "segfault":
    faulthandler.enable()
    ctypes.string_at(0)
elif a.mode == "sigbus":
    fd, path = tempfile.mkstemp(dir=a.dir)
    os.write(fd, b"x" * mmap.PAGESIZE * 2)
    view = mmap.mmap(fd, mmap.PAGESIZE * 2)
    os.ftruncate(fd, 0)
    print(view[mmap.PAGESIZE + 1])  # the page has no file behind it any more
elif a.mode == "exit":
    sys.exit(a.code)
elif a.mode == "cuda-oom":
    raise RuntimeError(
        "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 15.78 GiB total capacity; "
        "1.20 GiB already allocated)"
    )
elif a.mode == "wait":
    ready()
    wait_forever()
elif a.mode == "oom":
    ready()
    while not os.path.exists(os.path.join(a.dir, "go")):
        time.sleep(0.01)  # the test sets the memory limit, then says go
    hoard = []
    while True:
        hoard.append(bytearray(16 << 20))  # touched pages: real memory, until the OOM kill
sys.exit(3)
