"""Forensics: which rank started a failure, and what every rank was doing when it did.

Pure readings of what the supervisor and the files already hold (no process is touched
here): ``knockon`` tells a failure that only echoes another rank's (a collective timeout, a
peer that closed its connection) from one of a rank's own; ``activity`` keeps, per rank, when
its output last moved and how often it usually does; ``suspect`` combines them with the
signals a person sent into the rank most likely to have started it, with its evidence in
words; ``progress`` reads training progress (step, iteration, tqdm's N/M) from output lines;
``timeline`` merges every rank's lines from the files in the order they arrived.
Imports ``engine.events`` and the standard library only; the Supervisor imports it.
"""

from __future__ import annotations

from engine._lazy import face

__all__ = [
    "OutputActivity",
    "ProgressReader",
    "RankFacts",
    "SignalRecord",
    "TimelineLine",
    "find_suspect",
    "knock_on_reason",
    "merge_ranks",
    "stragglers",
]

__getattr__, __dir__ = face(
    __name__,
    {
        "OutputActivity": "activity",
        "ProgressReader": "progress",
        "RankFacts": "suspect",
        "SignalRecord": "suspect",
        "TimelineLine": "timeline",
        "find_suspect": "suspect",
        "knock_on_reason": "knockon",
        "merge_ranks": "timeline",
        "stragglers": "progress",
    },
)
