"""A rank that tries to leave processes behind, for the escape tests.

Writes PIDDIR/<RANK>.pids ("pid starttime" per line, itself first) once everything it
started runs, then does what --then says.

Usage: escaper.py PIDDIR [--daemon] [--children] [--then sleep|exit0]
                         [--oom-child GOFILE] [--oom-self GOFILE]

  --daemon      double fork: the middle process calls setsid and exits, the grandchild
                execs with an EMPTY environment (no guard token) and sleeps: no process
                group, no parent, no token ties it to the rank any more
  --children    one sleeping child in our process group and one in a new session
  --then        after writing the pids: sleep for ever (default) or exit 0 at once
  --oom-child   once GOFILE exists, a child allocates memory until something stops it;
                its exit code goes to PIDDIR/<RANK>.oom_child
  --oom-self    then, once GOFILE exists, allocate memory ourselves until stopped
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SLEEP = "import time\nwhile True: time.sleep(1)"
HOG = "chunks = []\nwhile True: chunks.append(b'x' * (8 << 20))"


def starttime(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[19])


def daemon(piddir: str, rank: str) -> int:
    path = os.path.join(piddir, f"{rank}.daemon")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            code = f"import os\nopen({path!r}, 'w').write(str(os.getpid()))\n{SLEEP}"
            os.execve(sys.executable, [sys.executable, "-c", code], {})
        os._exit(0)  # the middle process: the daemon's parent is gone
    while not os.path.exists(path) or not open(path).read():
        time.sleep(0.005)
    return int(open(path).read())


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.005)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("piddir")
    p.add_argument("--daemon", action="store_true")
    p.add_argument("--children", action="store_true")
    p.add_argument("--then", choices=["sleep", "exit0"], default="sleep")
    p.add_argument("--oom-child")
    p.add_argument("--oom-self")
    a = p.parse_args()
    rank = os.environ.get("RANK", "0")
    pids = [os.getpid()]
    if a.children:
        for new_session in (False, True):
            child = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=new_session)
            pids.append(child.pid)
    if a.daemon:
        pids.append(daemon(a.piddir, rank))
    out = os.path.join(a.piddir, f"{rank}.pids")
    with open(out + ".tmp", "w") as f:
        f.write("".join(f"{pid} {starttime(pid)}\n" for pid in pids))
    os.replace(out + ".tmp", out)
    if a.oom_child:
        wait_for(a.oom_child)
        code = subprocess.call([sys.executable, "-c", HOG])
        with open(os.path.join(a.piddir, f"{rank}.oom_child"), "w") as f:
            f.write(str(code))
    if a.oom_self:
        wait_for(a.oom_self)
        chunks = []
        while True:
            chunks.append(b"x" * (8 << 20))
    if a.then == "exit0":
        sys.exit(0)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
