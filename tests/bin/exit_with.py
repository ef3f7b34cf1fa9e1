"""Print a line to stdout and to stderr, optionally sleep, then exit with a code.

Usage: exit_with.py [--after FILE] [--code N] [--sleep S] [--signal NAME] [--segfault]
                    [--mark FILE]
``--after FILE`` waits until FILE exists before anything else (a barrier between ranks);
``--mark FILE`` creates FILE once the lines are printed. ``--signal SIGKILL`` kills itself
with that signal instead of exiting; ``--segfault`` reads address 0 (a real SIGSEGV).
"""

import argparse
import ctypes
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--after", default=None)
parser.add_argument("--code", type=int, default=0)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--signal", default=None)
parser.add_argument("--segfault", action="store_true")
parser.add_argument("--mark", default=None)
opts = parser.parse_args()
if opts.after:
    while not os.path.exists(opts.after):
        time.sleep(0.001)  # polling a file another rank creates: the barrier, not a wait time
rank = os.environ.get("LOCAL_RANK", "?")
print(f"out from rank {rank}", flush=True)
print(f"err from rank {rank}", file=sys.stderr, flush=True)
if opts.mark:
    open(opts.mark, "w").close()
if opts.sleep:
    time.sleep(opts.sleep)
if opts.signal:
    os.kill(os.getpid(), getattr(signal, opts.signal))
    time.sleep(10)  # the signal arrives while we sleep; never reached for fatal signals
if opts.segfault:
    ctypes.string_at(0)
sys.exit(opts.code)
