"""``run``'s debugging flags: ``--post-mortem [RANKS]``, ``--debugpy RANKS[:BASEPORT]``,
``--debugpy-wait``, turned into the engine's ``DebugOptions``.

``--post-mortem`` takes its ranks optionally, before the script: ``ranks_optional`` makes
``--post-mortem job.py`` mean every rank (argparse alone would read ``job.py`` as the
ranks). RANKS are written as for ``terminate``: ``0``, ``0,2``, ``0-3``, ``all``.
"""

from __future__ import annotations

import argparse
import re
from typing import Final

from ...engine.supervisor.debug_options import DEFAULT_DEBUGPY_PORT, DebugOptions
from ...engine.supervisor.run_config import ConfigError
from .rank_list import parse_ranks

__all__ = ["add_debug_flags", "debug_options", "ranks_optional"]

_RANKS: Final = re.compile(r"(all|[0-9][0-9,\- ]*)", re.I)


def add_debug_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--post-mortem", dest="post_mortem", nargs="?", const="all", default=None,
                   metavar="RANKS",
                   help="an uncaught exception in these Python ranks (default: all) writes "
                        "error.json, then stops at a pdb prompt in the frame that raised")
    p.add_argument("--debugpy", dest="debugpy", default=None, metavar="RANKS[:BASEPORT]",
                   help="these Python ranks listen for a debugpy client on "
                        f"127.0.0.1:BASEPORT+rank (default {DEFAULT_DEBUGPY_PORT}); "
                        "needs pip install 'rankvisor[debug]'")
    p.add_argument("--debugpy-wait", dest="debugpy_wait", action="store_true",
                   help="with --debugpy: each of those ranks waits for a client to attach")


def ranks_optional(p: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with a bare ``--post-mortem`` written ``--post-mortem=all`` when what
    follows it is not ranks (the script, or another flag). Only flags before the script
    are looked at: the script's own arguments are never touched."""
    out = list(argv)
    i = 0
    while i < len(out):
        arg = out[i]
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            break  # the script: what follows is its own
        if arg == "--post-mortem":
            nxt = out[i + 1] if i + 1 < len(out) else ""
            if not _RANKS.fullmatch(nxt):
                out[i] = "--post-mortem=all"
            i += 1 if out[i] != arg else 2
            continue
        action = p._option_string_actions.get(arg.split("=", 1)[0])
        takes_value = action is not None and action.nargs is None and action.const is None
        i += 2 if takes_value and "=" not in arg else 1
    return out


def _ranks(flag: str, text: str, nprocs: int) -> frozenset[int]:
    try:
        ranks = parse_ranks(text)
    except ValueError as e:
        raise ConfigError(f"{flag} {e}") from None
    return frozenset(range(nprocs)) if ranks is None else frozenset(ranks)


def debug_options(args: argparse.Namespace, nprocs: int) -> DebugOptions | None:
    """The parsed flags as ``DebugOptions`` (None when none was given).

    Raises:
        ConfigError: a bad rank list or port, in one line.
    """
    post = getattr(args, "post_mortem", None)
    debugpy = getattr(args, "debugpy", None)
    wait = bool(getattr(args, "debugpy_wait", False))
    if wait and debugpy is None:
        raise ConfigError("--debugpy-wait needs --debugpy RANKS: which ranks should wait")
    if post is None and debugpy is None:
        return None
    port = DEFAULT_DEBUGPY_PORT
    ranks: frozenset[int] = frozenset()
    if debugpy is not None:
        text, colon, port_text = debugpy.rpartition(":") if ":" in debugpy else (debugpy, "", "")
        if colon:
            try:
                port = int(port_text)
            except ValueError:
                raise ConfigError(
                    f"--debugpy {debugpy}: {port_text!r} is not a port (RANKS:BASEPORT)"
                ) from None
        ranks = _ranks("--debugpy", text, nprocs)
    return DebugOptions(
        post_mortem=_ranks("--post-mortem", post, nprocs) if post is not None else frozenset(),
        debugpy=ranks,
        debugpy_port=port,
        debugpy_wait=wait,
    )
