"""Print a line to stdout and to stderr, optionally sleep, then exit with a code.

Usage: exit_with.py [--code N] [--sleep S] [--signal NAME]
``--signal SIGKILL`` kills itself with that signal instead of exiting.
"""

import argparse
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--code", type=int, default=0)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--signal", default=None)
opts = parser.parse_args()
rank = os.environ.get("LOCAL_RANK", "?")
print(f"out from rank {rank}", flush=True)
print(f"err from rank {rank}", file=sys.stderr, flush=True)
if opts.sleep:
    time.sleep(opts.sleep)
if opts.signal:
    os.kill(os.getpid(), getattr(signal, opts.signal))
    time.sleep(10)  # the signal arrives while we sleep; never reached for fatal signals
sys.exit(opts.code)
