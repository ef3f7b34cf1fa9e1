"""Fill the file system of this rank's stdout log, then live on until told to end.

Usage: disk_filler.py WAIT_FILE CODE: writes to stdout (its log file) until even one byte
is refused (ENOSPC), says "full" on stderr (refused too, which is fine), then waits until
WAIT_FILE exists and exits with CODE: a run that goes on, for a while, on a full disk.
"""

import os
import sys
import time

wait_file, code = sys.argv[1], int(sys.argv[2])
chunk = b"x" * 4095 + b"\n"
for size in (len(chunk), 64, 1):
    while True:
        try:
            os.write(1, chunk[-size:])
        except OSError:
            break
try:
    os.write(2, b"full\n")
except OSError:
    pass
while not os.path.exists(wait_file):
    time.sleep(0.05)
sys.exit(code)
