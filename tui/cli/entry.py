"""``rankvisor``: the entry of the command line. ``-h``, ``-V``, and the dispatch of the
first word through the table of subcommands (``subcommands``); anything else is ``run``'s.

This module parses and dispatches only: every subcommand is a row of the table and runs in
its own module (``launch`` for ``run`` and ``demo``).
"""

from __future__ import annotations

import sys

from .run_args import PROG
from .subcommands import BY_NAME, DEFAULT, SUBCOMMANDS

__all__ = ["main"]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankvisor")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def _help() -> str:
    names = ",".join(sub.name for sub in SUBCOMMANDS)
    lines = [f"usage: {PROG} {{{names}}} ...\n"]
    lines += [f"  {sub.name:<10} {sub.help}" for sub in SUBCOMMANDS]
    lines.append(f"\n{PROG} COMMAND -h says more; a script named like a command runs as "
                 f"`{PROG} run NAME`.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rankvisor`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(_help())
        return 0
    if argv and argv[0] in ("-V", "--version"):
        print(f"{PROG} {_version()}")
        return 0
    sub = BY_NAME.get(argv[0]) if argv else None
    if sub is None:
        return DEFAULT.run(argv)
    return sub.run(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
