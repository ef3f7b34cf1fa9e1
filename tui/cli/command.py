"""A subcommand of ``rankvisor``: its row in the table, its parser, and how it ends.

The commands that reach a run from outside (``ls``, ``status``, ``stop``, ...) end with one
of these exit statuses, the same for every command:

- 0 done; 1 refused (the supervisor's message, or why not, is printed); 2 usage;
- 3 no such run; 4 the run is stale (its status says running, its supervisor is gone).

They only raise (a usage error, a refusal, no such run); ``on_a_run`` says it and turns it
into the status, so that every command says it alike.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ...engine.control.registry import NoSuchRun, RunEntry
from ...engine.control.status import FILENAME
from .run_args import PROG, _Parser

__all__ = [
    "EXIT_NO_RUN",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STALE",
    "EXIT_USAGE",
    "Handler",
    "Refused",
    "Subcommand",
    "Usage",
    "on_a_run",
    "say",
    "stale_line",
]

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NO_RUN: Final = 3
EXIT_STALE: Final = 4

Handler = Callable[["Subcommand", list[str]], int]
"""Runs a subcommand on the arguments after its name; returns the exit status."""


@dataclass(frozen=True)
class Subcommand:
    """One row of the table (``subcommands.SUBCOMMANDS``), read by the dispatch, by
    ``rankvisor -h`` and by the command's own parser: the name and its help live only here."""

    name: str
    help: str
    """One line: in ``rankvisor -h``, and the description of ``rankvisor NAME -h``."""
    handler: Handler

    def run(self, argv: list[str]) -> int:
        """Run the command on the arguments after its name; returns the exit status."""
        return self.handler(self, list(argv))

    def parser(self) -> argparse.ArgumentParser:
        """The command's own parser: a usage error is one line and status 2."""
        return _Parser(prog=f"{PROG} {self.name}", description=self.help)


class Usage(Exception):
    """A usage error found after parsing (a rank the run does not have)."""


class Refused(Exception):
    """A command this supervisor cannot carry out: a rank that runs on another node."""


def say(command: str, message: str) -> None:
    """One line to stderr; ``message`` may quote a run's files, so it is made safe first."""
    from ...engine.output.safe_text import one_line

    print(f"{PROG} {command}: {one_line(message, 4000)}", file=sys.stderr)


def stale_line(entry: RunEntry) -> str:
    return (f"run {entry.run_id} is stale: its supervisor (pid {entry.supervisor_pid}) is gone; "
            f"its last status is in {os.path.join(entry.run_dir, FILENAME)} "
            f"(`{PROG} rm {entry.run_dir}` removes it from the list)")


def on_a_run(handler: Handler) -> Handler:
    """``handler`` with the exit statuses of a command on a run, for what it raises."""

    @functools.wraps(handler)
    def guarded(sub: Subcommand, argv: list[str]) -> int:
        try:
            return handler(sub, argv)
        except SystemExit as e:  # argparse: -h (0) or a usage error (2), already printed
            return e.code if isinstance(e.code, int) else EXIT_USAGE
        except Usage as e:
            print(f"{PROG} {sub.name}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except Refused as e:
            say(sub.name, str(e))
            return EXIT_REFUSED
        except NoSuchRun as e:
            say(sub.name, str(e))
            return EXIT_NO_RUN
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # `rankvisor logs | head`: the reader has all it wanted
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
            except OSError:
                pass
            return EXIT_OK

    return guarded
