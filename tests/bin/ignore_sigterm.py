"""Ignore SIGTERM, write our pid to PIDFILE, then sleep until killed.

Usage: ignore_sigterm.py PIDFILE
"""

import os
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])  # whole file or none
while True:
    time.sleep(60)
