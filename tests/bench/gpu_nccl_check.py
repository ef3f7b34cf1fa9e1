"""The Flight Recorder on NCCL, run by hand on a machine with CUDA GPUs (not collected).

    PYTHONPATH=. python tests/bench/gpu_nccl_check.py [--ranks 2] [--timeout 20]

Runs ``rankvisor run --headless`` on a job of ``--ranks`` NCCL ranks (one GPU each, or all
on cuda:0 with one GPU) doing an all_reduce a step; rank 1 never enters all_reduce #5 and
sleeps. It checks, printing each finding:

1. while it hangs, ``rankvisor collectives --json`` answers from every rank's worker server
   (NCCL groups serve the same FR) with a verdict naming rank 1 missing from #5;
2. once NCCL's watchdog times out (``--timeout``), the FR dumps NCCL wrote in the ranks'
   dirs (``nccl_fr_<rank>``, from ``TORCH_FR_DUMP_TEMP_FILE``) are read like a gloo
   answer, and the suspect names rank 1 ("never entered all_reduce #5");
3. the named pipes ``nccl_fr_pipe_<rank>.pipe`` existed while the ranks ran (rankvisor
   writes to them before a SIGKILL).

Exit status 0 when all three held, 1 when one did not, 2 without a usable GPU.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

JOB = r"""
import datetime, os, sys, time, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(rank % torch.cuda.device_count())
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
t = torch.ones(4, device="cuda")
for i in range(1, 100):
    if rank == 1 and i == 5:
        time.sleep(3600)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"step {i}", flush=True)
    time.sleep(0.05)
"""


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--timeout", type=float, default=20.0)
    a = p.parse_args()
    try:
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device")
            return 2
    except ImportError:
        print("no torch")
        return 2
    ok = True
    with tempfile.TemporaryDirectory(prefix="rv-nccl-") as tmp:
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        logs = os.path.join(tmp, "logs")
        run = subprocess.Popen(
            [sys.executable, "-m", "rankvisor.tui", "run", "--headless", "--nproc-per-node",
             str(a.ranks), "--log-dir", logs, "--term-timeout", "5", job, str(a.timeout)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 120
        verdict = None
        pipes: list[str] = []
        while time.monotonic() < deadline and verdict is None:
            time.sleep(1)
            dirs = glob.glob(os.path.join(logs, "*"))
            if not dirs:
                continue
            pipes = pipes or glob.glob(os.path.join(dirs[0], "attempt_0", "*", "nccl_fr_pipe_*"))
            out = subprocess.run([sys.executable, "-m", "rankvisor.tui", "collectives",
                                  dirs[0], "--json"], capture_output=True, text=True)
            try:
                found = json.loads(out.stdout).get("verdicts") or []
            except ValueError:
                found = []
            verdict = next((v for v in found if v["missing"] == [1]), None)
        print(f"1. live verdict: {verdict}")
        ok &= verdict is not None and verdict["seq"] == 5
        print(f"3. pipes seen while running: {pipes}")
        ok &= bool(pipes)
        text = run.communicate(timeout=a.timeout + 180)[0]
        suspect = [ln for ln in text.splitlines() if ln.startswith("rankvisor: suspect:")]
        dumps = glob.glob(os.path.join(logs, "*", "attempt_0", "*", "nccl_fr_[0-9]*"))
        print(f"2. NCCL dumps: {dumps}\n   {suspect}")
        ok &= bool(suspect) and "rank 1: never entered all_reduce #5" in suspect[0]
    print("OK" if ok else "NOT OK")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
