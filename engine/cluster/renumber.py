"""A node's run end with its ranks as the job numbers them (a node's supervisor keys them
by local rank): for the headless report and for a viewer of every node."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..events import RunFinished
from ..result import RunProcsResult

__all__ = ["finished_globally"]


def finished_globally(finished: RunFinished, base: int) -> RunFinished:
    """``finished`` keyed by global rank (local rank + ``base``)."""
    r = finished.result

    def shift(d: dict[int, Any]) -> dict[int, Any]:
        return {base + k: v for k, v in d.items()}

    result = RunProcsResult(
        return_values=shift(r.return_values), failures=shift(r.failures),
        stdouts=shift(r.stdouts), stderrs=shift(r.stderrs), stopped=shift(r.stopped),
    )
    root = None if finished.root_cause_rank is None else base + finished.root_cause_rank
    return dataclasses.replace(finished, result=result, root_cause_rank=root)
