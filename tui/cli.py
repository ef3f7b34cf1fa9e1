"""``rankvisor``: the command line. ``run`` takes torchrun's flags; ``demo``; ``serve``; and
the commands that reach a run from outside (``ls``, ``status``, ``stop``, ... in ``tui.ctl``).

A torchrun command line works by changing its first word: ``torchrun --nproc-per-node 4
train.py`` becomes ``rankvisor run --nproc-per-node 4 train.py`` (or, since ``run`` is the
default, ``rankvisor --nproc-per-node 4 train.py``). Flags torchrun has for multi-node
rendezvous are accepted when they describe one node and refused with a clear line otherwise.

Everything that can be checked is checked before a process starts: a bad value gets one
line on stderr (``rankvisor: error: ...``) and exit status 2. The run's exit status is
torchrun's: 0 when every rank succeeded, 1 when one failed (after the root-cause report),
128 + N when rankvisor itself was stopped by signal N.

This module parses and dispatches only; processes are started, watched and signalled by the
engine (``engine.supervisor.core``), never here.
"""

from __future__ import annotations

import sys
from typing import Any

from ..engine.supervisor.run_config import ConfigError
from .run_args import PROG, Job, parse_job

__all__ = ["main"]

_SUBCOMMANDS = ("run", "demo", "serve", "attach")
_CTL_COMMANDS = (
    "ls", "status", "stop", "terminate", "signal", "restart", "wait", "logs", "rm", "bundle",
    "stack",
)
"""The commands that reach a run from outside (``tui.ctl``; kept equal to its ``COMMANDS``)."""
_INPUT_COMMANDS = ("input", "debug")
"""Typing to a run's ranks (``tui.debug_cli``)."""


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _serve(argv: list[str]) -> int:
    try:
        from . import serve
    except ImportError:
        return _fail("'serve' is not available in this installation")
    return int(serve.main(argv) or 0)


def _launch(job: Job) -> int:
    """Run ``job``: by default a supervisor process of its own with the TUI attached to it.

    With no terminal (nohup, sbatch, a pipe) the run is headless, as torchrun is.
    ``--foreground`` keeps the supervisor inside the TUI's process; ``--detach`` starts the
    supervisor process and returns.
    """
    from ..engine.supervisor.headless import run_headless, run_interactive

    if job.detach:
        return _start_detached(job)
    if not job.headless and sys.stdout.isatty():
        try:
            from .run import run_tui, run_viewer
        except ImportError:
            print(f"{PROG}: the TUI is not available here; running headless", file=sys.stderr)
        else:
            if job.foreground and job.config.cluster is not None:
                return _fail("--foreground runs one node; a multi-node run has a supervisor "
                             "process (leave out --foreground) or runs --headless")
            if job.foreground:
                return run_interactive(job.config, run_tui, on_failure=job.on_failure)
            return _run_attached(job, run_viewer)
    if job.config.cluster is not None:
        from ..engine.cluster.run import run_cluster

        status, _sup, host = run_cluster(job.config, on_failure=job.on_failure)
        if host is not None:
            host.close()
        return status
    return run_headless(job.config, on_failure=job.on_failure)


def _start_detached(job: Job) -> int:
    from ..engine.control.daemon import Request
    from ..engine.control.spawn import SpawnError, start_supervisor
    from .run import attach_hint

    try:
        started = start_supervisor(
            Request(job.config, on_failure=job.on_failure, expect_viewer=False),
            timeout_s=_ready_timeout(job),
        )
    except SpawnError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    print(attach_hint(started.run_dir).replace("detached; ", "started; "), end="")
    return 0


def _ready_timeout(job: Job) -> float:
    """A multi-node run's ranks start after the rendezvous, which may take its join_timeout."""
    from ..engine.control.spawn import READY_TIMEOUT_S

    cluster = job.config.cluster
    return READY_TIMEOUT_S + (cluster.join_timeout_s if cluster is not None else 0.0)


def _run_attached(job: Job, run_viewer: Any) -> int:
    from ..engine.control.client import RemoteHandle
    from ..engine.control.daemon import Request
    from ..engine.control.spawn import SpawnError, start_supervisor

    try:
        started = start_supervisor(Request(job.config, on_failure=job.on_failure),
                                   timeout_s=_ready_timeout(job))
        handle = RemoteHandle.connect(started.socket)
    except (SpawnError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return int(run_viewer(handle))


def _attach(argv: list[str]) -> int:
    from .attach import main as attach_main

    return attach_main(argv)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankvisor")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rankvisor`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        from .ctl import HELP

        names = ",".join(_SUBCOMMANDS + _CTL_COMMANDS + _INPUT_COMMANDS)
        lines = [f"usage: {PROG} {{{names}}} ...\n",
                 "  run        run a script's ranks (torchrun's flags; the default)",
                 "  demo       run the 4-rank demo job",
                 "  serve      serve the TUI in a browser (a viewer of a run)",
                 "  attach     the TUI on a running run (or a finished one, from its files)"]
        from .debug_cli import HELP as INPUT_HELP

        lines += [f"  {name:<10} {HELP[name]}" for name in _CTL_COMMANDS]
        lines += [f"  {name:<10} {INPUT_HELP[name]}" for name in _INPUT_COMMANDS]
        lines.append(f"\n{PROG} COMMAND -h says more; a script named like a command runs as "
                     f"`{PROG} run NAME`.")
        print("\n".join(lines))
        return 0
    if argv and argv[0] in ("-V", "--version"):
        print(f"{PROG} {_version()}")
        return 0
    if argv and argv[0] in _INPUT_COMMANDS:
        from .debug_cli import main as input_main

        return input_main(argv[0], argv[1:])
    if argv and argv[0] in _CTL_COMMANDS:
        from .ctl import main as ctl_main

        return ctl_main(argv[0], argv[1:])
    command = argv.pop(0) if argv and argv[0] in _SUBCOMMANDS else "run"
    if command == "serve":
        return _serve(argv)
    if command == "attach":
        return _attach(argv)
    try:
        job = parse_job(command, argv)
    except ConfigError as e:
        return _fail(str(e))
    return _launch(job)


if __name__ == "__main__":
    sys.exit(main())
