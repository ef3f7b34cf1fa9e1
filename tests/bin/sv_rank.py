"""A configurable rank for the supervisor tests: record pids, fork descendants, misbehave.

Flags (all optional):
  --pid-dir DIR      write DIR/<RANK>.<RANKVISOR_RESTART_COUNT>.pids: this pid, then its
                     descendants' pids, and DIR/<RANK>.<RANKVISOR_RESTART_COUNT>.env.json
  --child MODE       start a sleeping grandchild: "group" (same process group), "setsid"
                     (its own session), or "both" (one of each)
  --ignore-term      ignore SIGTERM (so only SIGKILL ends it)
  --ignore SIGNUM    ignore this signal number too (repeatable)
  --exit CODE        exit with CODE after --after seconds (default: sleep for ever)
  --after SECONDS
  --raise MSG        raise RuntimeError(MSG) after --after, writing error.json like torch's
                     @record does (without importing torch, which costs seconds)
  --only-rank R      apply --exit/--raise only on rank R; other ranks sleep
  --wait-file PATH   before --exit/--raise, wait (after --after) until PATH exists
  --print N          print N numbered lines to stdout first
  --exit-on-file     once ready, poll --pid-dir for <RANK>.<RANKVISOR_RESTART_COUNT>.exit and
                     exit with the code written in it (negative: die of that signal), so a
                     test decides when each incarnation ends and how
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pid-dir")
    p.add_argument("--child", choices=["group", "setsid", "both"])
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--ignore", type=int, action="append", default=[])
    p.add_argument("--exit", type=int)
    p.add_argument("--raise", dest="raise_msg")
    p.add_argument("--after", type=float, default=0.0)
    p.add_argument("--only-rank", type=int)
    p.add_argument("--print", type=int, default=0)
    p.add_argument("--wait-file")
    p.add_argument("--exit-on-file", action="store_true")
    a = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for signum in a.ignore:
        signal.signal(signum, signal.SIG_IGN)
    for i in range(a.print):
        print(f"line {i} from rank {rank}")
    pids = [os.getpid()]
    modes = {"group": [False], "setsid": [True], "both": [False, True]}.get(a.child or "", [])
    for new_session in modes:
        code = "import time\nwhile True: time.sleep(1)"
        child = subprocess.Popen([sys.executable, "-c", code], start_new_session=new_session)
        pids.append(child.pid)
    if a.pid_dir:
        n = os.environ.get("RANKVISOR_RESTART_COUNT", "0")
        path = os.path.join(a.pid_dir, f"{rank}.{n}.pids")
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(map(str, pids)) + "\n")
        with open(os.path.join(a.pid_dir, f"{rank}.{n}.env.json"), "w") as f:
            json.dump(dict(os.environ), f)
        os.replace(path + ".tmp", path)  # readers never see half a file (env first)
    print(f"rank {rank} ready pid={os.getpid()}", flush=True)
    applies = a.only_rank is None or a.only_rank == rank
    if applies and (a.exit is not None or a.raise_msg):
        time.sleep(a.after)
        while a.wait_file and not os.path.exists(a.wait_file):
            time.sleep(0.01)
        if a.raise_msg:
            try:
                raise RuntimeError(a.raise_msg)
            except RuntimeError as e:
                _write_error_file(e)
                raise
        sys.exit(a.exit)
    if a.exit_on_file and a.pid_dir:
        n = os.environ.get("RANKVISOR_RESTART_COUNT", "0")
        order = os.path.join(a.pid_dir, f"{rank}.{n}.exit")
        while not os.path.exists(order):
            time.sleep(0.005)  # polling: the test's order may come at any moment
        code = int(open(order).read())
        if code < 0:
            os.kill(os.getpid(), -code)
            time.sleep(10)  # the signal arrives while we sleep
        sys.exit(code)
    while True:
        time.sleep(1)


def _write_error_file(e: BaseException) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {
            "message": f"{type(e).__name__}: {e}",
            "extraInfo": {
                "py_callstack": traceback.format_exc(),
                "timestamp": str(int(time.time())),
            },
        }
    }
    with open(path, "w") as f:
        json.dump(data, f)


if __name__ == "__main__":
    main()
