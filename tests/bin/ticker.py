"""A rank that says hello, then writes ``rank R tick N`` every ``--every`` seconds, for ever.

Writes its pid to ``--pid-dir``/<RANK>.pid first, so a test knows every rank's process."""

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--pid-dir", required=True)
parser.add_argument("--every", type=float, default=0.3)
opts = parser.parse_args()
rank = int(os.environ["RANK"])
with open(os.path.join(opts.pid_dir, f"{rank}.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(opts.pid_dir, f"{rank}.pid.tmp"), os.path.join(opts.pid_dir, f"{rank}.pid"))
print(f"hello from rank {rank}", flush=True)
n = 0
while True:
    print(f"rank {rank} tick {n}", flush=True)
    n += 1
    time.sleep(opts.every)
