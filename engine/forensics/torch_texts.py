"""What torch itself prints about a bad collective, read as evidence naming a rank.

- ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` checks each collective's fingerprint across ranks and
  raises "Detected mismatch between collectives on ranks. Rank 1 is running collective:
  CollectiveFingerPrint(SequenceNumber=4, OpType=BROADCAST, ...), but Rank 0 is running
  collective: ... OpType=ALLREDUCE": the rank whose op differs from the others' is named;
- ``monitored_barrier`` raises "Rank 1 failed to pass monitoredBarrier in 4000 ms" (or
  "Ranks 1, 2 failed to pass ...") in rank 0: those ranks are named;
- NCCL's watchdog logs "last enqueued NCCL work: 5, last completed NCCL work: 4" per rank:
  a rank whose last enqueued work is behind the others' is named.

``torch_named`` reads the failed ranks' messages (error.json or their last stderr lines)
and returns the ranks named with one line each, or nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Final

from .collectives import ranks_words

__all__ = ["torch_named"]

_PRINT: Final = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
    r"OpType=(\w+)"
)
_BARRIER: Final = re.compile(r"Ranks? ([\d, ]+?) failed to pass monitoredBarrier")
_NCCL: Final = re.compile(
    r"\[(?:PG [^\]]*)?Rank (\d+)\][^\n]*?last enqueued NCCL work: (-?\d+), "
    r"last completed NCCL work: (-?\d+)", re.S)


def _mismatch(messages: Mapping[int, str]) -> dict[int, str]:
    ops: dict[int, tuple[int, str]] = {}
    for text in messages.values():
        for m in _PRINT.finditer(text):
            ops.setdefault(int(m.group(1)), (int(m.group(2)), m.group(3)))
    if len(ops) < 2:
        return {}
    counts = Counter(op for _, op in ops.values())
    if len(counts) < 2:
        return {}
    common, n = counts.most_common(1)[0]
    if list(counts.values()).count(n) > 1:
        # A tie (two ranks, two ops): the two differ; neither is the odd one.
        return {}
    others = sorted(r for r, (_, op) in ops.items() if op == common)
    return {
        r: f"rank {r}: ran {op} where {ranks_words(others)} ran {common} (collective #{seq}; "
           "torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check)"
        for r, (seq, op) in sorted(ops.items()) if op != common
    }


def _barrier(messages: Mapping[int, str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for reporter, text in sorted(messages.items()):
        for m in _BARRIER.finditer(text):
            for r in (int(x) for x in re.findall(r"\d+", m.group(1))):
                out.setdefault(r, f"rank {r}: failed to pass monitored_barrier (torch's "
                                  f"own check, in rank {reporter}'s error)")
    return out


def _nccl(messages: Mapping[int, str]) -> dict[int, str]:
    last: dict[int, int] = {}
    for text in messages.values():
        for m in _NCCL.finditer(text):
            last.setdefault(int(m.group(1)), int(m.group(2)))
    if len(last) < 2:
        return {}
    top = max(last.values())
    ahead = sorted(r for r, n in last.items() if n == top)
    return {r: f"rank {r}: its last enqueued NCCL work was #{n}, where {ranks_words(ahead)} "
               f"enqueued #{top} (NCCL's watchdog)"
            for r, n in sorted(last.items()) if n < top}


def torch_named(messages: Mapping[int, str]) -> dict[int, str]:
    """The ranks torch's own texts name (rank -> one line), strongest reading first."""
    for read in (_mismatch, _barrier, _nccl):
        found = read(messages)
        if found:
            return found
    return {}
