"""Run a start that fails, headless, with a term timeout of 1000 s; exit with its status.

Usage: failed_start.py {rundir|spawn} LOG_DIR MARK

* ``rundir``: the run directory cannot be made (a run id with a slash, which ``validate``
  refuses: this config is built without it, as an embedding program may). ``start`` raises;
  the status is 3 and stdout says ``start failed``.
* ``spawn``: rank 0's program cannot be found (its PATH has no ``sleep``); ranks 1 and 2
  start ``sleep 300 MARK`` and must be torn down at once, not left running.

Either way the run must end long before the term timeout, or the caller's timeout fires.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rankvisor.engine.entry.headless import run_headless  # noqa: E402
from rankvisor.engine.supervisor.run_config import SupervisorConfig  # noqa: E402

mode, log_dir, mark = sys.argv[1:4]
common = {"entrypoint": "sleep", "args": ("300", mark), "log_dir": log_dir,
          "term_timeout": 1000.0, "sample_interval": 0}
if mode == "rundir":
    config = SupervisorConfig(nprocs=2, run_id="a/b", **common)
else:
    config = SupervisorConfig(
        nprocs=3, rank_env={0: {"PATH": "/nonexistent"}}, **common
    )
try:
    status = run_headless(config)
except OSError as e:
    print(f"start failed: {e}", flush=True)
    status = 3
sys.exit(status)
