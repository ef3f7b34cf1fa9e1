"""One expression at every rank's pdb prompt: "is this value the same everywhere?".

``rankvisor debug --all --eval EXPR`` and the TUI's ``=EXPR`` send each rank at a pdb prompt
one pdb line (``eval_line``) that prints a one-line summary of the value: for a tensor its
type, shape, dtype and norm (a repr of a million numbers compares badly, and prints
worse), else its ``repr``. The lines go through ``ask`` (so into each ``stdin.log``, as any
typed line); the values are compared, and the ranks whose value differs from the majority
are the odd ones.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from .ask import ask

__all__ = ["EvalResult", "eval_line", "eval_ranks", "is_pdb_prompt", "odd_ranks"]

DEFAULT_TIMEOUT_S: Final = 10.0

_SUMMARY: Final = (
    "(lambda v: '%s shape=%s dtype=%s norm=%.6g' % (type(v).__name__, tuple(v.shape), "
    "v.dtype, float(v.detach().double().norm())) if hasattr(v, 'detach') and "
    "hasattr(v, 'shape') and hasattr(v, 'dtype') else '%s shape=%s dtype=%s' % "
    "(type(v).__name__, tuple(v.shape), v.dtype) if hasattr(v, 'shape') and "
    "hasattr(v, 'dtype') and hasattr(v, 'size') and not isinstance(v, (int, float)) "
    "else repr(v))"
)
"""A lambda of builtins only (pdb evaluates it in the rank's frame, where ``torch`` may not
be a name): a tensor (anything with ``detach``, ``shape``, ``dtype``) as its type, shape,
dtype and norm; an array (numpy's) as its type, shape and dtype; anything else as its
repr."""


def eval_line(expr: str) -> str:
    """The pdb line that prints ``expr``'s one-line summary (``!``: a statement, never read
    as a pdb command). A newline in ``expr`` is refused: one line is one pdb command."""
    if "\n" in expr or "\r" in expr:
        raise ValueError("the expression must be one line")
    expr = expr.strip()
    if not expr:
        raise ValueError("give an expression, as x or loss.item()")
    return f"!print({_SUMMARY}(({expr})))"


def is_pdb_prompt(prompt: str) -> bool:
    """pdb's ``(Pdb) `` (torch.distributed.breakpoint's too) or ipdb's ``ipdb>``."""
    words = prompt.strip()
    return words.startswith("(Pdb") or words.startswith("ipdb>")


def odd_ranks(values: dict[int, str]) -> list[int]:
    """The ranks whose value differs from the majority's (the one value most ranks share;
    none when two values tie for most)."""
    counts = Counter(values.values()).most_common()
    if len(counts) < 2 or counts[0][1] == counts[1][1]:
        return []
    common = counts[0][0]
    return sorted(r for r, v in values.items() if v != common)


@dataclass(frozen=True)
class EvalResult:
    """Each rank's value (global ranks), the odd ones, and the ranks that could not answer."""

    values: dict[int, str] = field(default_factory=dict)
    odd: list[int] = field(default_factory=list)
    not_at_prompt: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    """Sent, but not back at a prompt in time (or ended): their value is what came."""
    refused: dict[int, str] = field(default_factory=dict)

    def summary(self, cap: int = 200) -> str:
        """One line: ``0: 41 · 1: 41 · 2: 7 (differs) · 3: 41``, then who did not answer."""
        from ..output.safe_text import one_line

        odd = set(self.odd)
        parts = [f"{r}: {one_line(v, cap)}" + (" (differs)" if r in odd else "")
                 for r, v in sorted(self.values.items())]
        away = [r for r in self.not_at_prompt if r not in self.refused]
        if away:
            parts.append("not at a pdb prompt: " + ", ".join(map(str, away)))
        parts += [f"rank {r} refused: {one_line(v, cap)}" for r, v in sorted(self.refused.items())]
        return " · ".join(parts) or "no rank is at a pdb prompt"

    def to_json(self) -> dict[str, Any]:
        return {"values": {str(r): v for r, v in sorted(self.values.items())},
                "odd": self.odd, "not_at_prompt": self.not_at_prompt,
                "timed_out": self.timed_out,
                "refused": {str(r): v for r, v in sorted(self.refused.items())}}


def eval_ranks(handle: Any, expr: str, ranks: list[int] | None = None, *,
               timeout_s: float | None = None, rank_base: int = 0) -> EvalResult:
    """Evaluate ``expr`` at the pdb prompt of ``ranks`` (local; None: every rank), each
    rank's value as one line. ``rank_base`` turns local ranks into the global ones shown."""
    line = eval_line(expr)
    info = handle.snapshot().ranks
    chosen = [r for r in info if ranks is None or r.rank in ranks]
    at_pdb = [r.rank for r in chosen
              if r.input_wait is not None and is_pdb_prompt(r.input_wait.prompt)]
    away = [r.rank + rank_base for r in chosen if r.rank not in at_pdb]
    if ranks is not None:
        known = {r.rank for r in info}
        away += [r + rank_base for r in ranks if r not in known]
    wait_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    answers = ask(handle, at_pdb, line, wait_s) if at_pdb else {}
    values: dict[int, str] = {}
    late: list[int] = []
    refused: dict[int, str] = {}
    for rank, answer in answers.items():
        shown = rank + rank_base
        if answer.refused:
            refused[shown] = answer.refused
            continue
        values[shown] = " ".join(answer.text.split("\n")).strip()
        if not answer.back:
            late.append(shown)
    return EvalResult(values, odd_ranks(values), sorted(away + list(refused)), sorted(late),
                      refused)
