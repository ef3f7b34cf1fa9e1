"""Write numbered lines when told to: for the truncation tests of the output pump.

Usage: paced_writer.py [--append PATH] [--payload N]

Reads commands on stdin, one a line: a number N writes the next N lines
``"{i}:{payload}\\n"`` (i counts from 0 across commands), each with one ``os.write``, then
answers "ok" on stderr, so the caller knows they are on disk. End of input ends it.

Without ``--append`` the lines go to stdout, which the caller opens the way a rank's log is
opened (``open(path, "wb")``: no O_APPEND, so after a ``truncate`` the next write lands at
the old offset and leaves a hole of NUL bytes before it). With ``--append PATH`` they go to
PATH opened with O_APPEND (the way multiprocessing ranks write), so after a truncation
they land at the start of the file.
"""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--append")
parser.add_argument("--payload", type=int, default=16)
opts = parser.parse_args()

fd = 1
if opts.append:
    fd = os.open(opts.append, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
pad = "x" * opts.payload
i = 0
for command in sys.stdin:
    for _ in range(int(command)):
        os.write(fd, f"{i}:{pad}\n".encode())
        i += 1
    sys.stderr.write("ok\n")
    sys.stderr.flush()
