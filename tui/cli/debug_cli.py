"""``rankvisor input`` and ``rankvisor debug``: typing to a rank from a plain shell.

``input [RUN] RANKS TEXT`` sends one line to the stdin of some ranks (``--eof`` closes it
instead; without TEXT, or with ``-``, the line is read from stdin, so that a secret is not
in a command line every user can read in ``/proc``); ``debug [RUN] [--rank N]`` opens a
line-mode console on one rank (``engine.entry.debug_console``), like ``kubectl attach
-it``; ``debug [RUN] --all --eval EXPR`` asks every rank at a pdb prompt for one value
(``rank_eval``). Both go through the run's control socket, so they work from any shell of
the run's user and the supervisor refuses them as it refuses any command (a read-only
viewer, a run without ``--stdin pipe``, a rank that is not running).
"""

from __future__ import annotations

import sys
from typing import Any, Final

from ...engine.control import registry
from .command import EXIT_OK, EXIT_REFUSED, Subcommand, on_a_run, say
from .ranks import local_ranks, parse_ranks, ranks_arg, targets
from .supervisor_call import connect_and_run

__all__ = ["debug_main", "input_main"]


# -- rankvisor input --------------------------------------------------------------------


@on_a_run
def input_main(sub: Subcommand, argv: list[str]) -> int:
    """``rankvisor input [RUN] RANKS TEXT`` / ``rankvisor input [RUN] RANKS --eof``."""
    from ...engine.handle import CloseInput, SendInput

    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("ranks", metavar="RANKS",
                   help="global ranks: 0, 0,2, 0-3 or all (every running rank)")
    p.add_argument("text", nargs="?", metavar="TEXT",
                   help="the line to send (one line); left out or '-': read from stdin, "
                        "without echo on a terminal (a command line is visible to every "
                        "user of the machine)")
    p.add_argument("--eof", action="store_true",
                   help="close the ranks' stdin instead (they read end of file)")
    args = p.parse_args(argv)
    run, ranks_text, text = args.run, args.ranks, args.text
    if text is None and run is not None and _is_ranks(run):
        run, ranks_text, text = None, run, ranks_text  # `input RANKS TEXT`: no RUN
    if args.eof and text is not None:
        p.error(f"--eof sends no text: leave out {text!r}")
    ranks = ranks_arg(ranks_text, p)
    if not args.eof and text in (None, "-"):
        text = _line_from_stdin(p, ranks_text)
    entry, _status, ranks = targets(run, ranks)
    outcome = {"code": EXIT_OK}

    def show(result: Any) -> None:
        if result.message:
            print(result.message, file=sys.stdout if result.ok else sys.stderr)
        refused = (result.data or {}).get("refused") or {}
        if ranks is not None and refused:
            outcome["code"] = EXIT_REFUSED  # a rank named was not reached

    command = CloseInput(ranks) if args.eof else SendInput(ranks, str(text))
    code = connect_and_run(sub.name, entry, lambda _h: command, show=show)
    return code if code != EXIT_OK else outcome["code"]


def _is_ranks(text: str) -> bool:
    try:
        parse_ranks(text, allow_all=True)
    except ValueError:
        return False
    return True


_MAX_LINE: Final = 1 << 20


def _line_from_stdin(p: Any, ranks_text: str) -> str:
    """The line to send, read where no other user can see it: a no-echo prompt on a
    terminal, else the first line of stdin (its newline dropped)."""
    if sys.stdin is None:
        p.error("give TEXT, or the line on stdin")
    if sys.stdin.isatty():
        import getpass

        try:
            return getpass.getpass(f"line for rank(s) {ranks_text} (not shown): ")
        except EOFError:
            p.error("no line given (end of file at the prompt)")
    data = sys.stdin.buffer.readline(_MAX_LINE + 1)
    if not data:
        p.error("no line on stdin: give TEXT, or pipe the line in (--eof closes the "
                "ranks' stdin)")
    if len(data) > _MAX_LINE:
        p.error(f"the line on stdin is over {_MAX_LINE >> 20} MiB: send a shorter one")
    return data.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8", "surrogateescape")


# -- rankvisor debug --------------------------------------------------------------------


@on_a_run
def debug_main(sub: Subcommand, argv: list[str]) -> int:
    """``rankvisor debug [RUN] [--rank N]``."""
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("--rank", type=int, default=None, metavar="N",
                   help="the global rank (default: the first rank waiting for input, else 0)")
    p.add_argument("--all", action="store_true",
                   help="with --eval: every rank at a pdb prompt")
    p.add_argument("--eval", dest="expr", default=None, metavar="EXPR",
                   help="evaluate EXPR at the pdb prompt of the rank (--all: of every rank) "
                        "and print rank -> value, the ranks that differ marked (a tensor: "
                        "shape, dtype, norm)")
    p.add_argument("--json", action="store_true",
                   help="with --eval: {\"values\": {rank: value}, \"odd\": [...], "
                        "\"not_at_prompt\": [...]}")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="with --eval: how long each rank may take to answer (default 10)")
    args = p.parse_args(argv)
    if args.expr is None and (args.all or args.json):
        p.error("--all and --json go with --eval EXPR")
    if args.all and args.rank is not None:
        p.error("--all or --rank N, not both")
    entry = registry.resolve(args.run, running_only=True)
    _, status = registry.entry_state(entry)
    rank = args.rank if args.rank is not None else _first_waiting(status)
    if rank < 0:
        p.error(f"--rank must be 0 or more, not {rank}")
    (local,) = local_ranks((rank,), status)
    if args.expr is not None:
        from .rank_eval import eval_command

        return eval_command(sub.name, entry, None if args.all else [local], args)
    from ...engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle
    from ...engine.entry.debug_console import DebugConsole

    try:
        handle = RemoteHandle.connect(entry.socket, name="rankvisor debug")
    except (OSError, ProtocolMismatch, NoAnswer) as e:
        say(sub.name, f"cannot reach the run's supervisor at {entry.socket}: {e}")
        return EXIT_REFUSED
    try:
        return DebugConsole(handle, local, shown_rank=rank).run()
    finally:
        handle.detach()


def _first_waiting(status: dict[str, Any] | None) -> int:
    for r in (status or {}).get("ranks", []):
        if r.get("input_wait"):
            return int(r["rank"])
    return 0
