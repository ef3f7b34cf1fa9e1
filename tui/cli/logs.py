"""``rankvisor logs``: a rank's stdout or stderr file, printed, and with ``-f`` followed
across its restarts until the run finishes.

Into a pipe or a file the bytes go as the rank wrote them; on a terminal they are decoded
and every escape but colours is neutralised (a rank writes anything).
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Any

from ...engine.control import registry
from ...engine.control.status import FILENAME, current_attempt
from ...engine.logfile.regular_file import NotRegular, open_regular
from ...engine.output.safe_text import one_line
from .command import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_STALE,
    Refused,
    Subcommand,
    Usage,
    on_a_run,
    say,
    stale_line,
)
from .ranks import check_ranks, local_ranks, nprocs, world
from .watch import watch

__all__ = ["current_log", "logs"]


def current_log(run_dir: str, status: dict[str, Any] | None, rank: int, stream: str) -> str:
    """The path of ``rank``'s ``stream`` ("stdout"/"stderr") file of its current incarnation.

    The layout is the supervisor's: ``attempt_<n>/<rank>/<stream>.log`` for a rank's first
    incarnation in an attempt, ``attempt_<n>/<rank>/restart_<k>/`` once it was restarted
    alone (the highest k is the current one).
    """
    attempt = current_attempt(run_dir, status) or 0
    rank_dir = os.path.join(run_dir, f"attempt_{attempt}", str(rank))
    best = 0
    try:
        for name in os.listdir(rank_dir):
            if name.startswith("restart_") and name[8:].isdigit():
                best = max(best, int(name[8:]))
    except OSError:
        pass
    base = os.path.join(rank_dir, f"restart_{best}") if best else rank_dir
    return os.path.join(base, f"{stream}.log")


class _Copier:
    """Copies a log file's new bytes to stdout: exact bytes into a pipe or a file; on a
    terminal, decoded and with every escape but colours neutralised (a rank writes anything)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._tty = sys.stdout.isatty()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump(self) -> int:
        """Copy what was appended since the last call; returns the bytes copied."""
        try:
            with open_regular(self.path) as f:  # never a FIFO's hang, never a link
                if os.fstat(f.fileno()).st_size < self.offset:  # truncated: start again
                    self.offset = 0
                f.seek(self.offset)
                total = 0
                while chunk := f.read(1 << 16):
                    self._write(chunk)
                    total += len(chunk)
                self.offset += total
        except FileNotFoundError:
            return 0
        except NotRegular as e:
            raise Refused(f"{one_line(self.path)} {e}: not read") from None
        sys.stdout.flush()
        return total

    def _write(self, chunk: bytes) -> None:
        if not self._tty:
            sys.stdout.buffer.write(chunk)
            return
        from ...engine.output.sanitize import sanitize

        sys.stdout.write(sanitize(self._decoder.decode(chunk)))


@on_a_run
def logs(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--rank", type=int, default=0, metavar="N", help="the global rank (default 0)")
    p.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing as the rank writes, until the run finishes")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    if args.rank < 0:
        raise Usage(f"--rank must be 0 or more, not {args.rank}")
    check_ranks((args.rank,), world(status) if nprocs(status) is not None else None)
    (local,) = local_ranks((args.rank,), status)  # the files are this node's, by local rank
    stream = "stderr" if args.stderr else "stdout"
    path = current_log(entry.run_dir, status, local, stream)
    if not os.path.exists(path) and (not args.follow or state != "running"):
        say(sub.name, f"rank {args.rank} has no {stream} file at {path} "
                      "(its output may have gone to the console only)")
        return EXIT_REFUSED
    copier = _Copier(path)
    copier.pump()
    if not args.follow:
        return EXIT_OK
    outcome = {"state": state}

    def step() -> bool:
        # The state first, the bytes after: a run seen finished has written its last line,
        # so the copy that follows drains the file.
        now, st = registry.entry_state(entry)
        newer = current_log(entry.run_dir, st, local, stream)
        if newer != copier.path and os.path.exists(newer):
            copier.pump()  # the rest of the old incarnation, then the new one from its start
            print(f"==> {newer} <==", file=sys.stderr)
            copier.path, copier.offset = newer, 0
        copier.pump()
        outcome["state"] = now
        return now != "running"

    watch(lambda: [copier.path, os.path.join(entry.run_dir, FILENAME)], step)
    if outcome["state"] == "stale":
        say(sub.name, stale_line(entry))
        return EXIT_STALE
    return EXIT_OK
