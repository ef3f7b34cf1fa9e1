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

from engine.supervisor.run_config import ConfigError, SupervisorConfig
from tui.run_args import PROG, parse_job

__all__ = ["main"]

_SUBCOMMANDS = ("run", "demo", "serve")
_CTL_COMMANDS = ("ls", "status", "stop", "terminate", "signal", "restart", "wait", "logs", "rm")
"""The commands that reach a run from outside (``tui.ctl``; kept equal to its ``COMMANDS``)."""


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _serve(argv: list[str]) -> int:
    try:
        from tui import serve
    except ImportError:
        return _fail("'serve' is not available in this installation")
    return int(serve.main(argv) or 0)


def _launch(config: SupervisorConfig, headless: bool) -> int:
    from engine.supervisor.headless import run_headless, run_interactive

    if not headless and sys.stdout.isatty():
        try:
            from tui.run import run_tui
        except ImportError:
            print(f"{PROG}: the TUI is not available here; running headless", file=sys.stderr)
        else:
            return run_interactive(config, run_tui)
    return run_headless(config)


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
        from tui.ctl import HELP

        names = ",".join(_SUBCOMMANDS + _CTL_COMMANDS)
        lines = [f"usage: {PROG} {{{names}}} ...\n",
                 "  run        run a script's ranks (torchrun's flags; the default)",
                 "  demo       run the 4-rank demo job",
                 "  serve      serve the TUI in a browser"]
        lines += [f"  {name:<10} {HELP[name]}" for name in _CTL_COMMANDS]
        lines.append(f"\n{PROG} COMMAND -h says more; a script named like a command runs as "
                     f"`{PROG} run NAME`.")
        print("\n".join(lines))
        return 0
    if argv and argv[0] in ("-V", "--version"):
        print(f"{PROG} {_version()}")
        return 0
    if argv and argv[0] in _CTL_COMMANDS:
        from tui.ctl import main as ctl_main

        return ctl_main(argv[0], argv[1:])
    command = argv.pop(0) if argv and argv[0] in _SUBCOMMANDS else "run"
    if command == "serve":
        return _serve(argv)
    try:
        config, headless = parse_job(command, argv)
    except ConfigError as e:
        return _fail(str(e))
    return _launch(config, headless)


if __name__ == "__main__":
    sys.exit(main())
