"""What went wrong in a run, from outside: ``rankvisor stack`` (every rank's Python stack,
merged: the odd ranks first) and ``rankvisor bundle`` (one .tar.gz for a bug report)."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ...engine.control import registry
from .command import EXIT_OK, EXIT_REFUSED, Refused, Subcommand, on_a_run, say
from .ranks import Elsewhere, on_node, ranks_arg, targets
from .supervisor_call import connect_and_run

if TYPE_CHECKING:
    from ...engine.handle import CommandResult

__all__ = ["bundle", "collectives", "stack"]

_LINE_CAP = 2000
"""Characters of one line of ``collectives``' view (a rank's group has many sizes)."""


@on_a_run
def bundle(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.entry.bundle import DEFAULT_MAX_FILE_BYTES, make_bundle

    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest run)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write it (default: ./rankvisor-<run>-<time>.tar.gz)")
    p.add_argument("--max-log-mb", type=float, default=DEFAULT_MAX_FILE_BYTES / (1 << 20),
                   metavar="N", help="keep the last N MiB of each file (default: %(default)g)")
    p.add_argument("--with-stdin", action="store_true",
                   help="pack the lines typed to the ranks (stdin.log), redacted; left out "
                        "by default (a password typed at a prompt is in them)")
    args = p.parse_args(argv)
    if not args.max_log_mb > 0:
        p.error(f"--max-log-mb must be more than 0, not {args.max_log_mb}")
    entry = registry.resolve(args.run, running_only=False)
    try:
        made = make_bundle(entry.run_dir, args.output,
                           max_file_bytes=int(args.max_log_mb * (1 << 20)),
                           include_stdin=args.with_stdin)
    except OSError as e:
        say(sub.name, f"cannot write the bundle of {entry.run_dir}: {e.strerror or e}")
        return EXIT_REFUSED
    size = os.path.getsize(made.path)
    envs = ", ".join(f"{r}: {s}" for r, s in sorted(made.environments.items())) or "none"
    print(f"{made.path}  ({_size(size)}, {made.entries} files; "
          f"environments from {envs}; secrets redacted)")
    if made.truncated:
        print(f"  kept the last {args.max_log_mb:g} MiB of: {', '.join(made.truncated)}")
    return EXIT_OK


def _size(n: int) -> str:
    """``153.2 KiB``, ``12.4 MiB``: never "0.0 MiB" for a small archive."""
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


@on_a_run
def stack(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.handle import DumpStacks

    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("--rank", metavar="RANKS", default=None,
                   help="ranks to dump: 2, 0,2 or 0-3 (default: every running rank)")
    p.add_argument("--native", action="store_true",
                   help="C/C++ frames too (each rank is paused while it is read)")
    p.add_argument("--nonblocking", action="store_true",
                   help="never pause a rank (Python frames only; a read-only viewer's kind)")
    p.add_argument("--json", action="store_true",
                   help="the dump as JSON: groups (odd first), every rank's threads, path")
    args = p.parse_args(argv)
    if args.native and args.nonblocking:
        p.error("--native needs a blocking dump: leave out --nonblocking")
    ranks = ranks_arg(args.rank, p) if args.rank is not None else None

    def show(result: CommandResult) -> None:
        if args.json and result.data is not None:
            print(json.dumps(result.data, indent=2))
        elif result.data is not None:
            print(_stack_text(result.data))
        if not result.ok or (result.message and not args.json):
            print(result.message, file=sys.stdout if result.ok else sys.stderr)

    try:
        entry, _status, ranks = targets(args.run, ranks)
    except Elsewhere as there:
        return _remote_stack(sub.name, args, ranks or (), there, show)
    return connect_and_run(
        sub.name, entry,
        lambda _h: DumpStacks(ranks, native=args.native, nonblocking=args.nonblocking),
        show=show,
    )


def _job_collectives(command: str, entry: Any) -> tuple[dict[str, Any], str] | None:
    """A multi-node run's collectives as its supervisor reads them: this node's ranks asked
    now, the other nodes' from their last readings in the store, every rank by its global
    number (what the live suspect judges). None when the supervisor gives no answer: then
    this node's ranks are asked directly."""
    from ...engine.handle import ReadCollectives

    got: list[CommandResult] = []
    code = connect_and_run(command, entry, lambda _h: ReadCollectives(), show=got.append)
    if code != EXIT_OK or not got or not got[0].ok or not isinstance(got[0].data, dict):
        return None
    data = dict(got[0].data)
    return data, str(data.pop("source", "live")) or "live"


def _remote_stack(command: str, args: Any, ranks: tuple[int, ...], there: Elsewhere,
                  show: Any) -> int:
    """``stack --rank`` of ranks on another node: that node's supervisor dumps them."""
    from ...engine.handle import DumpStacks
    from .remote_rank import remote_dump

    entry = registry.resolve(args.run, running_only=True)
    status = registry.entry_state(entry)[1] or {}
    nodes = on_node(ranks, status)
    if len(nodes) != 1:
        raise Refused(f"ranks {','.join(map(str, ranks))} run on nodes "
                      f"{', '.join(map(str, sorted(nodes)))}: dump one node's at a time")
    code, result = remote_dump(command, entry, there.node, there.host,
                               DumpStacks(nodes[there.node], native=args.native,
                                          nonblocking=args.nonblocking))
    show(result)
    return code


def _stack_text(data: dict[str, Any]) -> str:
    """The merged view, each group's frames, and where the whole dump was saved."""
    from ...engine.forensics.stack_evidence import outside_collective
    from ...engine.forensics.stacks import StackDump

    dump = StackDump.from_dict(data)
    lines = [dump.merged_text()]
    odd = outside_collective(dump)
    if odd is not None:
        lines += ["", odd.words()]
    for group in dump.groups:
        if group.frames:
            lines += ["", f"{group.who()}:", *(f"    {f}" for f in group.frame_lines())]
    lines += ["", f"saved to {dump.path}" if dump.path else "not saved"]
    return "\n".join(lines)


@on_a_run
def collectives(sub: Subcommand, argv: list[str]) -> int:
    from ...engine.control.status import current_attempt
    from ...engine.forensics.collectives_run import read_run, text_of
    from ...engine.output.safe_text import one_line

    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest run)")
    p.add_argument("--json", action="store_true",
                   help="per rank and process group the last collective enqueued, started "
                   "and completed, and the verdicts (COLLECTIVES.md)")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=False)
    state, status = registry.entry_state(entry)
    answer = _job_collectives(sub.name, entry) if (
        state == "running" and int((status or {}).get("nnodes") or 1) > 1) else None
    if answer is not None:
        data, source = answer  # every node's ranks, by global rank
    else:
        attempt = current_attempt(entry.run_dir, status) or 0
        data, source = read_run(entry.run_dir, attempt)
    if args.json:
        print(json.dumps({**data, "source": source}, indent=2))
    else:
        # Group descriptions and names come from the ranks: nothing of them acts on the
        # terminal, and none is printed at megabytes.
        print("\n".join(one_line(line, _LINE_CAP) for line in text_of(data).split("\n")))
        print("" if source == "live" else
              f"(saved: {source})" if source else "(no rank answered, nothing saved)")
    return EXIT_OK if source else EXIT_REFUSED
