"""``rankvisor attach [RUN] [--read-only]``, ``attach --torchrun PID|LOG_DIR``: a viewer.

A running run is watched through its supervisor's socket (commands allowed unless
``--read-only``); a finished run, or one whose supervisor is gone (stale), is opened from
its files as it was last recorded, read-only. With no RUN: this user's newest running run.
"""

from __future__ import annotations

import argparse
import sys

from .app_seam import app_runner
from .command import Subcommand, say
from .run_args import PROG, _Parser

__all__ = ["attach_command", "build_attach_parser", "main", "open_handle"]

NO_SUCH_RUN = 3
STALE = 4


def build_attach_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"{PROG} attach", description="Watch a run (or a torchrun job) in the TUI.")
    p.add_argument("run", nargs="?", default=None,
                   help="a run dir, a log dir or a run id (default: the newest running run)")
    p.add_argument("--read-only", action="store_true",
                   help="watch only: every command is refused")
    p.add_argument("--torchrun", metavar="PID|LOG_DIR", default=None,
                   help="a torchrun job rankvisor did not start: its agent's pid or --log-dir")
    p.add_argument("--this-node", action="store_true",
                   help="in a multi-node run: only this node's ranks (no other node is "
                        "connected)")
    p.add_argument("--no-stack-on-kill", dest="stack_on_kill", action="store_false",
                   help="with --torchrun: do not save the stacks of workers a terminate is "
                        "about to SIGKILL (a run of rankvisor's own takes this at `run`)")
    return p


def open_handle(run: str | None, *, read_only: bool, this_node: bool = False) -> object:
    """The handle a viewer of ``run`` holds: its socket's (every node's ranks in a
    multi-node run, unless ``this_node``), or its record's when it is over.

    Raises:
        LookupError: no such run (the message says what was tried).
    """
    from ...engine.control import registry, status
    from ...engine.control.client import RemoteHandle
    from ...engine.control.replay import RecordedRun

    entry = registry.resolve(run, running_only=run is None)
    record = status.read_status(entry.run_dir) if entry.run_dir else None
    state = status.effective_state(record) if record is not None else "stale"
    if state == "running":
        try:
            handle = RemoteHandle.connect(entry.socket, read_only=read_only,
                                          pass_over_skipped=True)
        except (FileNotFoundError, ConnectionRefusedError):
            pass  # it ended between the two looks: its record is complete now
        else:
            if this_node:
                return handle
            from ...engine.cluster.viewer import whole_job

            return whole_job(handle)
    return RecordedRun.open(entry.run_dir)


def main(argv: list[str], *, need_terminal: bool = True) -> int:
    """``rankvisor attach``; returns the exit status.

    ``need_terminal``: the command line refuses to draw the TUI into a pipe (a script wants
    ``status`` or ``logs``); ``rankvisor serve``'s browser sessions pass False, since their
    stdout is a pipe to textual-serve, which hands Textual a web driver.
    """
    args = build_attach_parser().parse_args(argv)
    if args.torchrun is not None:
        if args.run is not None:
            print(f"{PROG} attach: error: give a RUN or --torchrun, not both", file=sys.stderr)
            return 2
        from .torchrun_view import run_torchrun_view

        return run_torchrun_view(args.torchrun, read_only=args.read_only,
                                 stack_on_kill=args.stack_on_kill)
    if not args.stack_on_kill:
        print(f"{PROG} attach: error: --no-stack-on-kill goes with --torchrun (a run of "
              f"rankvisor's own takes it at `{PROG} run`)", file=sys.stderr)
        return 2
    from ...engine.control.client import NoAnswer, ProtocolMismatch
    from ...engine.control.registry import NoSuchRun

    try:
        handle = open_handle(args.run, read_only=args.read_only, this_node=args.this_node)
    except NoSuchRun as e:
        say("attach", str(e))
        return NO_SUCH_RUN
    except (ProtocolMismatch, NoAnswer, OSError) as e:
        say("attach", str(e))
        return STALE if isinstance(e, NoAnswer) else 1
    if need_terminal and not sys.stdout.isatty():
        print(f"{PROG} attach: needs a terminal (use `{PROG} status` or `{PROG} logs` "
              "in scripts)", file=sys.stderr)
        handle.detach()  # type: ignore[attr-defined]
        return 2
    return int(app_runner().run_viewer(handle))


def attach_command(_sub: Subcommand, argv: list[str]) -> int:
    """The ``attach`` row of the table: ``main`` with the terminal check."""
    return main(argv)
