"""``rankvisor logs``: a rank's output, both streams in the order they arrived (logging and
tqdm write to stderr, print to stdout) or one of them, printed, and with ``-f`` followed
across its restarts until the run finishes.

Into a pipe or a file the bytes go as the rank wrote them; on a terminal they are decoded
and every escape but colours is neutralised (a rank writes anything), and a line that a
progress bar redrew with ``\r`` shows its last frame, as the panes do (``--raw``: every
frame, each ``\r`` shown as a mark). A line still unfinished is shown at the end.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Any, Final

from ...engine.control import registry
from ...engine.control.status import FILENAME, current_attempt
from ...engine.output.lines import LineAssembler
from ...engine.output.safe_text import one_line
from ...engine.rundir.arrival import arrival_path, read_records
from ...engine.rundir.regular_file import NotRegular, open_regular
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
from .ranks import Elsewhere, check_ranks, local_ranks, nprocs, world
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
    terminal, decoded and with every escape but colours neutralised (a rank writes anything).
    ``lines`` counts the complete lines copied, so that two files can be interleaved by
    their arrival index (``_Merged``)."""

    def __init__(self, path: str, *, raw: bool = False) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0
        self._tty = sys.stdout.isatty()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = None if raw or not self._tty else LineAssembler()
        """On a terminal: whole lines, the last frame of each (None: every byte)."""

    def pump(self, upto: int | None = None) -> int:
        """Copy what was appended since the last call, or only up to the end of complete
        line ``upto``; returns the bytes copied."""
        if upto is not None and upto <= self.lines:
            return 0
        total = 0
        try:
            with open_regular(self.path) as f:  # never a FIFO's hang, never a link
                if os.fstat(f.fileno()).st_size < self.offset:  # truncated: start again
                    self.offset = self.lines = 0
                f.seek(self.offset)
                while chunk := f.read(1 << 16):
                    if upto is not None:
                        chunk = _first_lines(chunk, upto - self.lines)
                    self._write(chunk)
                    total += len(chunk)
                    self.lines += chunk.count(b"\n")
                    if upto is not None and self.lines >= upto:
                        break
                self.offset += total
        except FileNotFoundError:
            return 0
        except NotRegular as e:
            raise Refused(f"{one_line(self.path)} {e}: not read") from None
        sys.stdout.flush()
        return total

    @property
    def paths(self) -> list[str]:
        return [self.path]

    def drain(self, *, final: bool = False) -> None:
        self.pump()
        if final:
            self.finish()

    def finish(self) -> None:
        """The stream ended: show its unfinished line (the bar's current frame), if any."""
        if self._lines is not None and self._lines.partial:
            sys.stdout.write(self._lines.partial + "\n")
            self._lines = LineAssembler()
            sys.stdout.flush()

    def pending(self) -> bool:
        """Bytes on disk not copied yet."""
        try:
            return os.path.getsize(self.path) > self.offset
        except OSError:
            return False

    def _write(self, chunk: bytes) -> None:
        if not self._tty:
            sys.stdout.buffer.write(chunk)
            return
        if self._lines is not None:
            lines = self._lines.feed(chunk)
            if lines:
                sys.stdout.write("\n".join(lines) + "\n")
            return
        from ...engine.output.sanitize import sanitize

        sys.stdout.write(sanitize(self._decoder.decode(chunk)))


def _first_lines(chunk: bytes, count: int) -> bytes:
    """``chunk`` up to the end of its ``count``-th line (all of it if it has fewer)."""
    end = -1
    for _ in range(count):
        end = chunk.find(b"\n", end + 1)
        if end < 0:
            return chunk
    return chunk[: end + 1]


class _Merged:
    """Both streams of a rank, in the order their lines arrived, as the zoomed view shows
    them: the supervisor's arrival index (``engine.rundir.arrival``) says how many lines of
    which file came next. Lines no record covers yet are copied once only one file has any
    (their order is then plain), and at the end; without an index, each file's new bytes in
    turn."""

    def __init__(self, stdout_path: str, stderr_path: str, *, raw: bool = False) -> None:
        self.copiers = (_Copier(stdout_path, raw=raw), _Copier(stderr_path, raw=raw))
        self.index = arrival_path(stdout_path, stderr_path)
        self._offset = 0

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.copiers] + ([self.index] if self.index else [])

    def drain(self, *, final: bool = False) -> None:
        """Copy what the index says came next; with ``final`` (the run ended) the rest."""
        if not self.index or not os.path.exists(self.index):
            for copier in self.copiers:
                copier.drain(final=final)
            return
        records, self._offset = read_records(self.index, self._offset)
        for stream, lines_end, _ in records:
            self.copiers[stream].pump(lines_end)
        waiting = [c for c in self.copiers if c.pending()]
        if final or len(waiting) == 1:
            for copier in waiting:
                copier.pump()
        if final:
            for copier in self.copiers:
                copier.finish()


@on_a_run
def logs(sub: Subcommand, argv: list[str]) -> int:
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN", help="a run dir, log dir or run id")
    p.add_argument("--rank", type=int, default=0, metavar="N", help="the global rank (default 0)")
    one = p.add_mutually_exclusive_group()
    one.add_argument("--stdout", action="store_true", help="stdout only")
    one.add_argument("--stderr", action="store_true", help="stderr only")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing as the rank writes, until the run finishes")
    p.add_argument("--typed", action="store_true",
                   help="with the lines typed to the rank (its stdin.log), marked, where they "
                        "arrived (not with -f)")
    p.add_argument("--raw", action="store_true",
                   help="on a terminal, every frame of a progress bar's \\r line (each \\r "
                        "marked), not its last")
    args = p.parse_args(argv)
    if args.typed and args.follow:
        raise Usage("--typed shows a log as it is: leave out -f")
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    if args.rank < 0:
        raise Usage(f"--rank must be 0 or more, not {args.rank}")
    check_ranks((args.rank,), world(status) if nprocs(status) is not None else None)
    try:
        (local,) = local_ranks((args.rank,), status)  # this node's files, by local rank
    except Elsewhere as there:
        from .remote_rank import remote_logs

        # Another node's rank: read through its door, one stream (stdout unless --stderr).
        return remote_logs(sub.name, entry, there.node, there.host, there.local,
                           "stderr" if args.stderr else "stdout", args.follow)
    streams = ("stdout",) if args.stdout else ("stderr",) if args.stderr else _BOTH

    def source(st: dict[str, Any] | None) -> _Merged | _Copier:
        paths = [current_log(entry.run_dir, st, local, name) for name in streams]
        if len(paths) == 2:
            return _Merged(*paths, raw=args.raw)
        return _Copier(paths[0], raw=args.raw)

    copier = source(status)
    paths = copier.paths
    if not any(map(os.path.exists, paths)) and (not args.follow or state != "running"):
        what = " or ".join(streams)
        say(sub.name, f"rank {args.rank} has no {what} file in {os.path.dirname(paths[0])} "
                      "(its output may have gone to the console only)")
        return EXIT_REFUSED
    if args.typed:
        from ...engine.logfile.stdin_log import typed_view
        from ...engine.output.sanitize import sanitize

        # The typed lines among one stream's lines (stdout unless --stderr: pdb's is stdout).
        one = streams[0] if len(streams) == 1 else "stdout"
        path = current_log(entry.run_dir, status, local, one)
        text = "\n".join(typed_view(path, 1 if one == "stderr" else 0)) + "\n"
        print(sanitize(text) if sys.stdout.isatty() else text, end="")
        return EXIT_OK
    copier.drain(final=not args.follow or state != "running")
    if not args.follow:
        return EXIT_OK
    outcome = {"state": state, "copier": copier}

    def step() -> bool:
        # The state first, the bytes after: a run seen finished has written its last line,
        # so the copy that follows drains the file.
        now, st = registry.entry_state(entry)
        current = outcome["copier"]
        newer = source(st)
        first = newer.paths[0]
        if first != current.paths[0] and any(map(os.path.exists, newer.paths)):
            current.drain(final=True)  # the rest of the old incarnation, then the new one
            print(f"==> {os.path.dirname(first)} <==", file=sys.stderr)
            outcome["copier"] = current = newer
        current.drain(final=now != "running")
        outcome["state"] = now
        return now != "running"

    watch(lambda: outcome["copier"].paths + [os.path.join(entry.run_dir, FILENAME)], step)
    if outcome["state"] == "stale":
        say(sub.name, stale_line(entry))
        return EXIT_STALE
    return EXIT_OK


_BOTH: Final = ("stdout", "stderr")
