"""What the Flight Recorder and the worker server cost a rank, run by hand (not collected).

    python tests/bench/bench_collectives.py [--starts 15] [--steps 300] [--repeat 3]

* ``start``: wall time of ``python -u SCRIPT`` run plainly and under rankvisor's bootstrap
  with its worker socket set (``RANKVISOR_WORKER_SOCKET``), interleaved, median of
  ``--starts``: an empty script (the hook never fires) and one that imports
  ``torch.distributed`` (the server starts during that import).
* ``ddp step``: a 2-rank gloo DDP job (a 3-layer MLP, batch 32) runs ``--steps`` steps and
  rank 0 reports the median step time, plainly and with ``TORCH_FR_BUFFER_SIZE`` set and
  the worker server asked every second (as the Supervisor does), interleaved ``--repeat``
  times. Prints JSON, then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rankvisor.engine.forensics.worker_server import ask  # noqa: E402
from rankvisor.engine.process.py_bootstrap import (  # noqa: E402
    ENV_WORKER_SOCKET,
    wrap_python_args,
)

DDP = r'''
import os, statistics, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
m = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
times = []
for i in range(int(sys.argv[1])):
    t = time.perf_counter()
    opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    times.append(time.perf_counter() - t)
if dist.get_rank() == 0:
    print(statistics.median(times[20:]) * 1000)
dist.destroy_process_group()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_once(script: str, boot: bool, sock: str) -> float:
    args = ["-u", script]
    env = dict(os.environ)
    if boot:
        args = list(wrap_python_args(args))
        env[ENV_WORKER_SOCKET] = sock
        if os.path.exists(sock):
            os.unlink(sock)
    t = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def bench_start(n: int, tmp: str) -> dict[str, dict[str, float]]:
    scripts = {"empty": "pass\n", "import torch.distributed": "import torch.distributed\n"}
    out = {}
    for name, text in scripts.items():
        path = os.path.join(tmp, f"s{len(out)}.py")
        Path(path).write_text(text)
        plain, boot = [], []
        for _ in range(n):
            plain.append(_start_once(path, False, ""))
            boot.append(_start_once(path, True, os.path.join(tmp, "w.sock")))
        out[name] = {"plain_ms": statistics.median(plain) * 1000,
                     "bootstrap_ms": statistics.median(boot) * 1000}
    return out


def _ddp_once(steps: int, fr: bool, tmp: str) -> float:
    script = os.path.join(tmp, "ddp.py")
    Path(script).write_text(DDP)
    port = _free_port()
    procs = []
    socks = []
    for r in range(2):
        env = {**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        args = ["-u", script, str(steps)]
        if fr:
            sock = os.path.join(tmp, f"ddp{r}.sock")
            if os.path.exists(sock):
                os.unlink(sock)
            socks.append(sock)
            env.update({"TORCH_FR_BUFFER_SIZE": "500", ENV_WORKER_SOCKET: sock})
            args = list(wrap_python_args(args))
        procs.append(subprocess.Popen([sys.executable, *args], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
    stop = threading.Event()

    def poll() -> None:  # as the Supervisor's CollectiveWatch does
        while not stop.wait(1.0):
            for s in socks:
                ask(s, "fr_trace_json")

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    out = procs[0].communicate()[0]
    procs[1].wait()
    stop.set()
    poller.join()
    return float(out.strip().splitlines()[-1])


def bench_ddp(steps: int, repeat: int, tmp: str) -> dict[str, float]:
    plain, fr = [], []
    for _ in range(repeat):
        plain.append(_ddp_once(steps, False, tmp))
        fr.append(_ddp_once(steps, True, tmp))
    return {"plain_ms": statistics.median(plain), "fr_ms": statistics.median(fr),
            "plain_runs": plain, "fr_runs": fr}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--starts", type=int, default=15)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="rv-fr-") as tmp:
        start = bench_start(a.starts, tmp)
        ddp = bench_ddp(a.steps, a.repeat, tmp)
    print(json.dumps({"start": start, "ddp_step": ddp}, indent=1))
    print("| what | plain | with rankvisor's bootstrap / FR |\n|---|---|---|")
    for name, v in start.items():
        print(f"| rank start, {name} | {v['plain_ms']:.0f} ms | {v['bootstrap_ms']:.0f} ms |")
    print(f"| DDP step, 2 gloo ranks | {ddp['plain_ms']:.2f} ms | {ddp['fr_ms']:.2f} ms |")


if __name__ == "__main__":
    main()
