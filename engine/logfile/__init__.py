"""A log file as a viewer reads it: any line on demand, search, bounded memory.

The file on disk is the buffer: a compact index of where lines start (about 1 MB per GB),
scrollback read with ``pread``, and plain or regex search that runs off the UI thread and can
be cancelled; ``FileFollower``, the newest lines of files that grow faster than a viewer's
events can follow (a pane under a flood); ``MergedSource``, which shows a rank's two logs as
one in the order their lines arrived (on the arrival index of ``engine.rundir``). Sits above
``engine.output`` (line cutting, sanitising).
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "FileFollower": "follow",
    "FileTail": "follow",
    "LineIndex": "line_index",
    "MergedSource": "merged",
    "LogStore": "store",
    "SearchJob": "search",
    "last_lines": "tail",
    "search_file": "search",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
