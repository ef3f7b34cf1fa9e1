"""Knock-on failures: errors a rank gets because another rank failed or stopped first.

When one rank of a collective dies or hangs, every other rank fails a little later with an
error about the collective (gloo's "Timed out waiting 30000ms for recv", "Connection closed
by peer", NCCL's watchdog timing out or aborting the communicator, a ``ProcessGroup``
error). Such a failure says where the others were waiting, not what went wrong, so it is
demoted below a rank's own error when looking for the one that started it.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["KNOCK_ON", "knock_on_reason"]

KNOCK_ON: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"Timed out waiting \d+ ?ms for (?:recv|send)", re.I),
     "a gloo collective timed out"),
    (re.compile(r"Connection closed by peer", re.I), "a peer closed its connection"),
    (re.compile(r"Connection reset", re.I), "a peer reset its connection"),
    (re.compile(r"Watchdog caught collective operation timeout|NCCL watchdog|"
                r"ProcessGroupNCCL.{0,80}(?:timeout|timed out|abort)|"
                r"NCCL communicator (?:was|is) aborted|ncclRemoteError|"
                r"Some NCCL operations have failed or timed out", re.I),
     "an NCCL collective timed out or was aborted"),
    (re.compile(r"gloo/transport/|Gloo connectFullMesh failed", re.I),
     "a gloo transport error"),
    (re.compile(r"\bProcessGroup(?:Gloo|NCCL|MPI|UCC)?\b.{0,80}(?:error|timeout|abort)|"
                r"DistBackendError|DistNetworkError|DistStoreError", re.I),
     "a ProcessGroup error"),
)
"""Each pattern with the words that say what kind of knock-on it is; first match wins."""


def knock_on_reason(text: str) -> str | None:
    """What kind of knock-on error ``text`` (a failure's message, its last stderr lines)
    reports, in words; None when it reads like a rank's own error."""
    for pattern, words in KNOCK_ON:
        if pattern.search(text):
            return words
    return None

