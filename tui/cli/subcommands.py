"""The one table of ``rankvisor``'s subcommands: name, one line of help, handler.

The dispatch (``entry.main``), ``rankvisor -h`` and each command's own parser read it, so a
new subcommand is one row here, its handler in a module of its own (``@on_a_run`` when it
acts on a run, for the exit statuses every such command shares). Rows are in help order.
"""

from __future__ import annotations

from typing import Final

from . import attach, debug_cli, forensics, launch, lifecycle, listing, logs, mcp_server, serve
from .command import Subcommand

__all__ = ["BY_NAME", "DEFAULT", "SUBCOMMANDS"]

SUBCOMMANDS: Final[tuple[Subcommand, ...]] = (
    Subcommand("run", "run a script's ranks (torchrun's flags; the default)", launch.run_job),
    Subcommand("demo", "run the 4-rank demo job", launch.run_job),
    Subcommand("serve", "serve the TUI in a browser (a viewer of a run)", serve.serve_command),
    Subcommand("attach", "the TUI on a running run (or a finished one, from its files)",
               attach.attach_command),
    Subcommand("ls", "list your runs, newest first: when, how long, result, command",
               listing.ls),
    Subcommand("status", "a run's state, ranks and root cause (--json for scripts)",
               listing.status),
    Subcommand("stop", "terminate every rank of a run (with escalation) and wait until they "
               "are gone", lifecycle.stop),
    Subcommand("terminate", "terminate some ranks of a run, with escalation", lifecycle.terminate),
    Subcommand("signal", "send a signal to some ranks of a run", lifecycle.send_signal),
    Subcommand("restart", "restart one rank of a run, or all of them (a new attempt)",
               lifecycle.restart),
    Subcommand("wait", "wait until a run finishes; exit with its exit status", lifecycle.wait),
    Subcommand("logs", "print a rank's stdout or stderr (-f follows it)", logs.logs),
    Subcommand("rm", "remove a finished run from the list, or --finished [--older-than 7d] "
               "all of them (--logs: their run directories too)",
               listing.rm),
    Subcommand("bundle", "one .tar.gz of a run for a bug report: logs, errors, stacks, status, "
               "env", forensics.bundle),
    Subcommand("stack", "dump every rank's Python stack (py-spy), merged: the odd ranks first",
               forensics.stack),
    Subcommand("input", "send a line to some ranks' stdin (--eof: close it): answer pdb or a "
               "prompt", debug_cli.input_main),
    Subcommand("debug", "a console on one rank: its output live, each line typed sent to its "
               "stdin (--all --eval EXPR: one value from every rank at pdb)",
               debug_cli.debug_main),
    Subcommand("collectives", "each rank's last collectives (torch's Flight Recorder) and "
               "which rank did not enter one", forensics.collectives),
    Subcommand("mcp", "an MCP server on stdio for a coding agent: a run's status, logs, stacks, "
               "prompts (--allow-control: send to ranks)", mcp_server.mcp_command),
)

BY_NAME: Final = {sub.name: sub for sub in SUBCOMMANDS}
DEFAULT: Final = BY_NAME["run"]
"""A first word that names no subcommand is run's: ``rankvisor --nproc-per-node 4 train.py``."""
