"""What NVML reports for a process that uses the GPU, and what rankvisor makes of it.

Run on a machine with an NVIDIA GPU, torch with CUDA and nvidia-ml-py installed:

    pip install nvidia-ml-py          # or: pip install -e '.[gpu]'
    PYTHONPATH=. python tests/bench/gpu_check.py [--gib 2] [--seconds 3]

It starts a child process that allocates ``--gib`` GiB on cuda:0 and keeps the GPU busy
with matrix products for ``--seconds``; meanwhile it prints NVML's raw answers for every
device (processes, their memory, per-process utilisation samples) and then rankvisor's
reading of the child (``engine.forensics.gpu``) and a ``StatsSampler`` sample of it, which is
what a pane header shows. Exit status 0 when rankvisor saw the child's memory on the GPU
(at least the allocation), 1 when it did not, 2 when the machine has no usable GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CHILD = r"""
import sys, time, torch
gib, seconds = float(sys.argv[1]), float(sys.argv[2])
x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda:0")
a = torch.randn(4096, 4096, device="cuda:0")
print("allocated", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
print("done", flush=True)
time.sleep(seconds)  # stays on the GPU, idle, while the parent reads the idle answers
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0)
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    try:
        import pynvml
    except ImportError:
        print("pynvml is not installed: pip install nvidia-ml-py")
        return 2
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        print(f"NVML does not start: {e}")
        return 2
    print(f"driver {pynvml.nvmlSystemGetDriverVersion()}, NVML "
          f"{pynvml.nvmlSystemGetNVMLVersion()}, {pynvml.nvmlDeviceGetCount()} device(s)")

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(a.gib), str(a.seconds)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "allocated":
            print("the child could not allocate on cuda:0")
            return 2
        time.sleep(min(1.0, a.seconds / 2))  # utilisation samples accumulate meanwhile
        print(f"\nchild pid {child.pid} (busy); NVML's raw answers:")
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            print(f"  gpu {i} {pynvml.nvmlDeviceGetName(h)}")
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                print(f"    compute pid {proc.pid} usedGpuMemory {proc.usedGpuMemory}")
            try:
                for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0):
                    print(f"    util pid {s.pid} t {s.timeStamp} sm {s.smUtil} mem {s.memUtil}")
            except pynvml.NVMLError as e:
                print(f"    util: {type(e).__name__}: {e}")

        from rankvisor.engine.forensics.gpu import GpuProbe
        from rankvisor.engine.supervisor.stats import StatsSampler

        probe = GpuProbe()
        snap = probe.snapshot()
        reading = snap.for_pids([child.pid]) if snap is not None else None
        print(f"\nrankvisor's reading of the child: {reading}")
        sampler = StatsSampler()
        sampler.track(0, child.pid)
        sampler.sample_once()
        time.sleep(0.5)
        (stats,) = sampler.sample_once()
        print(f"stats sample: gpu_memory_bytes={stats.gpu_memory_bytes} "
              f"gpu_util_percent={stats.gpu_util_percent} gpus={stats.gpus}")
        child.stdout.readline()  # "done": the GPU is idle now
        (idle,) = sampler.sample_once()
        print(f"idle sample:  gpu_memory_bytes={idle.gpu_memory_bytes} "
              f"gpu_util_percent={idle.gpu_util_percent} gpus={idle.gpus}")
        sampler.stop()
        probe.close()
        ok = stats.gpu_memory_bytes is not None and stats.gpu_memory_bytes >= a.gib * (1 << 30)
        print("\nOK: rankvisor sees the child's GPU memory" if ok else
              "\nNOT OK: rankvisor did not see the child's GPU memory (a pid namespace?)")
        return 0 if ok else 1
    finally:
        child.kill()
        child.wait()
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main())
