"""A log file as a viewer reads it: any line on demand, search, bounded memory.

The file on disk is the buffer: a compact index of where lines start (about 1 MB per GB),
scrollback read with ``pread``, and plain or regex search that runs off the UI thread and can
be cancelled. Imports the standard library and ``engine.output`` (line cutting, sanitising);
nothing of the process or supervisor packages.
"""

from __future__ import annotations

from engine._lazy import face

__all__ = ["LineIndex", "LogStore", "SearchJob", "last_lines", "search_file"]

__getattr__, __dir__ = face(
    __name__,
    {
        "LineIndex": "line_index",
        "LogStore": "store",
        "SearchJob": "search",
        "last_lines": "tail",
        "search_file": "search",
    },
)
