"""A run's lifecycle from outside: ``rankvisor stop``, ``terminate``, ``signal``,
``restart`` and ``wait``.

RANKS are global, as a person types them (``ranks``); the first four are commands to the
run's supervisor (``supervisor_call``), ``wait`` watches the run's status.json and exits
with the run's own exit status.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from ...engine.control import registry
from ...engine.control.status import FILENAME
from ...engine.names.signals import parse_signal
from .command import EXIT_STALE, Subcommand, on_a_run, say, stale_line
from .ranks import all_ranks, check_ranks, local_ranks, ranks_arg, same_round, targets, world
from .supervisor_call import connect_and_run
from .watch import watch

if TYPE_CHECKING:
    from ...engine.handle import Command

__all__ = ["restart", "send_signal", "stop", "terminate", "wait"]


def _timeout(value: float | None, p: argparse.ArgumentParser) -> float | None:
    from ...engine.handle import MAX_TIMEOUT_S

    if value is not None and not value >= 0:
        p.error(f"--timeout must be a number of seconds >= 0, not {value}")
    if value is not None and value > MAX_TIMEOUT_S:
        p.error(f"--timeout must be at most {MAX_TIMEOUT_S:g} seconds (a week), not {value:g}")
    return value


@on_a_run
def stop(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.handle import TerminateRanks

    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds from SIGTERM to SIGKILL (default: the run's own)")
    p.add_argument("--no-wait", action="store_true",
                   help="return once the supervisor accepted, not when the ranks are gone")
    args = p.parse_args(argv)
    timeout = _timeout(args.timeout, p)
    entry = registry.resolve(args.run, running_only=True)
    return connect_and_run(sub.name, entry, lambda _h: TerminateRanks(None, timeout_s=timeout),
                           wait=not args.no_wait)


@on_a_run
def terminate(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.handle import TerminateRanks

    p = sub.parser()
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("ranks", metavar="RANKS", help="global ranks: 2, 0,2, 0-3 or all")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds from SIGTERM to SIGKILL (default: the run's own)")
    args = p.parse_args(argv)
    timeout = _timeout(args.timeout, p)
    ranks = ranks_arg(args.ranks, p)
    entry, status, ranks = targets(args.run, ranks)

    def build(h: Any) -> Command:
        if ranks is not None:
            same_round(status, h)
        return TerminateRanks(ranks, timeout_s=timeout)

    return connect_and_run(sub.name, entry, build)


@on_a_run
def send_signal(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.handle import SignalRanks

    p = sub.parser()
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("ranks", metavar="RANKS", help="global ranks: 2, 0,2, 0-3 or all")
    p.add_argument("sig", metavar="SIG", help="a name (TERM, SIGUSR1) or a number")
    args = p.parse_args(argv)
    ranks = ranks_arg(args.ranks, p)
    try:
        sig = parse_signal(args.sig)
    except ValueError as e:
        p.error(str(e))
    entry, status, ranks = targets(args.run, ranks)

    def build(h: Any) -> Command:
        if ranks is not None:
            same_round(status, h)
        return SignalRanks(ranks if ranks is not None else all_ranks(status, h), sig)

    return connect_and_run(sub.name, entry, build)


@on_a_run
def restart(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.handle import RestartAll, RestartRank

    p = sub.parser()
    p.add_argument("run", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("rank", metavar="RANK",
                   help="a global rank, or all (every rank: a new attempt)")
    args = p.parse_args(argv)
    command: Command
    if args.rank.strip().lower() == "all":
        command = RestartAll()
    else:
        ranks = ranks_arg(args.rank, p, allow_all=False)
        if ranks is None or len(ranks) != 1:
            p.error(f"RANK is one rank or all, not {args.rank!r}")
        command = RestartRank(ranks[0])
    entry = registry.resolve(args.run, running_only=True)
    status = registry.entry_state(entry)[1]
    if isinstance(command, RestartRank):
        check_ranks((command.rank,), world(status))
        (local,) = local_ranks((command.rank,), status)
        command = RestartRank(local)

    def build(h: Any) -> Command:
        if isinstance(command, RestartRank):
            same_round(status, h)
        return command

    return connect_and_run(sub.name, entry, build)


def _exit_of(status: dict[str, Any] | None) -> int:
    code = status.get("exitcode") if status else None
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        return code
    return 1


@on_a_run
def wait(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    seen: dict[str, Any] = {}

    def step() -> bool:
        seen["state"], seen["status"] = registry.entry_state(entry)
        return bool(seen["state"] != "running")

    watch(lambda: [os.path.join(entry.run_dir, FILENAME)], step)
    if seen["state"] == "stale":
        say(sub.name, stale_line(entry))
        return EXIT_STALE
    return _exit_of(seen["status"])
