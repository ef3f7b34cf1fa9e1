"""Prints, as JSON, what a script can observe of how it was started (argv, ``__main__``,
``sys.path[0]``, signal handlers, environment, a spawn-started child's ``__main__``), then
ends as ``argv[1]`` says: ``ok``, ``exit3``, ``raise`` or ``interrupt``."""

import json
import multiprocessing as mp
import os
import signal
import sys

import __main__


def child(q):
    import __main__ as m

    q.put([m.__name__, getattr(m, "__file__", None)])


if __name__ in ("__main__",):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    seen = q.get()
    p.join()
    spec = getattr(__main__, "__spec__", None)
    print(json.dumps({
        "argv": sys.argv,
        "orig_argv": sys.orig_argv[1:],
        "path0": sys.path[0],
        "names": sorted(vars(__main__)),
        "file": __file__,
        "spec": None if spec is None else [spec.name, spec.origin],
        "loader": type(__loader__).__name__,
        "cached": __cached__,
        "handlers": [str(signal.getsignal(s)) for s in signal.valid_signals()],
        "env": sorted(k for k in os.environ if k.startswith(("RANKVISOR_POST", "RANKVISOR_DEBUG"))),
        "child": seen,
        "excepthook": sys.excepthook is sys.__excepthook__,
        "modules": sorted(m for m in sys.modules if "rankvisor" in m and "editable" not in m),
    }, sort_keys=True), flush=True)
    how = sys.argv[1] if len(sys.argv) > 1 else "ok"
    if how == "exit3":
        sys.exit(3)
    if how == "raise":
        raise ValueError("probe raised")
    if how == "interrupt":
        raise KeyboardInterrupt
