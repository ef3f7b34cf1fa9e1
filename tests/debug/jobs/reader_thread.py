"""Reads stdin from a thread (not the main one) through /dev/stdin opened again."""

import sys
import threading


def read() -> None:
    with open("/dev/stdin") as f:
        print("thread got", f.readline().strip(), flush=True)


print("ready", flush=True)
t = threading.Thread(target=read)
t.start()
t.join()
sys.exit(0)
