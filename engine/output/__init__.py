"""Rank output on its way from the log files to a viewer or a console.

One pump thread tails every rank's files (inotify wake-ups, a slow poll where there is none)
and turns bytes into batches of whole, sanitised lines: line assembly (split UTF-8, ``\\r``
progress frames, over-long lines), the sanitiser that keeps colours and neutralises every
other escape, the duplicate filters behind filtered_*.log, and the console sink that prints
prefixed lines. Above the events, the run directory's files and the process room (its
self-pipe); below the log-file room, which reads what the pump wrote.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "ConsoleSink": "console",
    "LineAssembler": "lines",
    "OutputPump": "pump",
    "TextBatch": "text_batch",
    "sanitize": "sanitize",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
