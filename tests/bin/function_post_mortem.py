"""Start one function rank (``tests.engine.mp_funcs.divide``, which raises) through
``start_processes`` with ``--post-mortem``'s variable, logs under ``argv[1]``; this
process's stdin is where the person's pdb lines come from. Prints the failure as JSON."""

import json
import sys

from rankvisor.engine import DefaultLogsSpecs, Std, start_processes
from rankvisor.engine.process.py_bootstrap import ENV_POST_MORTEM

from tests.engine.mp_funcs import divide

if __name__ == "__main__":
    ctx = start_processes(
        name="trainer", entrypoint=divide, args={0: (0,)}, envs={0: {ENV_POST_MORTEM: "1"}},
        logs_specs=DefaultLogsSpecs(log_dir=sys.argv[1], redirects=Std.ALL),
        start_method="spawn",
    )
    result = ctx.wait(timeout=120)
    assert result is not None
    failure = result.failures[0]
    print(json.dumps({"exitcode": failure.exitcode, "message": failure.message,
                      "stdout": result.stdouts[0]}), flush=True)
