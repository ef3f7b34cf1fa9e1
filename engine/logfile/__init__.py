"""A log file as a viewer reads it: any line on demand, search, bounded memory.

The file on disk is the buffer: a compact index of where lines start (about 1 MB per GB),
scrollback read with ``pread``, and plain or regex search that runs off the UI thread and can
be cancelled; the arrival index (``arrival``) that the output pump writes beside a rank's two
logs, and ``MergedSource``, which shows both logs as one in the order their lines arrived.
Imports the standard library and ``engine.output`` (line cutting, sanitising);
nothing of the process or supervisor packages.
"""

from __future__ import annotations

from .._lazy import face

__all__ = [
    "ArrivalWriter",
    "LineIndex",
    "LogStore",
    "MergedOrder",
    "MergedSource",
    "SearchJob",
    "last_lines",
    "search_file",
]

__getattr__, __dir__ = face(
    __name__,
    {
        "ArrivalWriter": "arrival",
        "LineIndex": "line_index",
        "MergedOrder": "arrival",
        "MergedSource": "merged",
        "LogStore": "store",
        "SearchJob": "search",
        "last_lines": "tail",
        "search_file": "search",
    },
)
