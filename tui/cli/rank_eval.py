"""``rankvisor debug RUN --all --eval EXPR``: one expression at every rank's pdb prompt, the
values side by side, the ranks that differ from the majority marked (``engine.entry.
rank_eval`` does the asking; this prints it)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ...engine.control.registry import RunEntry
from ...engine.output.safe_text import one_line
from .command import EXIT_OK, EXIT_REFUSED, Usage, say

__all__ = ["eval_command", "eval_table"]

VALUE_CHARS = 2000
"""Of one rank's value, what is shown (JSON and table alike)."""


def eval_table(result: Any) -> str:
    """``RANK  VALUE`` rows, an odd rank marked, then who could not answer."""
    values = {r: one_line(v, VALUE_CHARS) for r, v in sorted(result.values.items())}
    lines = ["RANK  VALUE"] if values else []
    odd = set(result.odd)
    late = set(result.timed_out)
    for rank, value in values.items():
        marks = ("   <- differs" if rank in odd else "") + (
            "   (no prompt yet: what came so far)" if rank in late else "")
        lines.append(f"{rank:<4}  {value}{marks}")
    if values and not odd:
        lines.append("every rank has the same value" if len(set(values.values())) == 1
                     else "no majority: the values differ")
    for rank, why in sorted(result.refused.items()):
        lines.append(f"rank {rank}: not sent: {one_line(why)}")
    away = [r for r in result.not_at_prompt if r not in result.refused]
    if away:
        lines.append("not at a pdb prompt: " + ", ".join(map(str, away)))
    return "\n".join(lines)


def eval_command(command: str, entry: RunEntry, ranks: list[int] | None,
                 args: argparse.Namespace) -> int:
    """Evaluate ``args.expr`` at ``ranks`` (local; None: every rank) and print the values."""
    from ...engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle
    from ...engine.entry.rank_eval import eval_line, eval_ranks

    try:
        eval_line(args.expr)
    except ValueError as e:
        raise Usage(f"--eval: {e}") from None
    try:
        handle = RemoteHandle.connect(entry.socket, name=f"rankvisor {command} --eval")
    except (OSError, ProtocolMismatch, NoAnswer) as e:
        say(command, f"cannot reach the run's supervisor at {entry.socket}: {e}")
        return EXIT_REFUSED
    try:
        base = int(handle.snapshot().rank_base)
        result = eval_ranks(handle, args.expr, ranks, timeout_s=args.timeout, rank_base=base)
    finally:
        handle.detach()
    if args.json:
        out = result.to_json()
        out["values"] = {r: one_line(v, VALUE_CHARS) for r, v in out["values"].items()}
        print(json.dumps(out, indent=1))
    else:
        print(eval_table(result) or "no rank is at a pdb prompt")
    return EXIT_OK if result.values else EXIT_REFUSED

