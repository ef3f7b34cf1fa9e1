"""Forensics: what a hung or failed run leaves to read, gathered without changing its code.

The stacks of every rank (py-spy dumps, merged into groups of ranks that share a stack, saved
under the run directory). Imports the standard library and ``engine.process``; never the
supervisor, the control package or textual.
"""

from __future__ import annotations

from engine._lazy import face

__all__ = [
    "StackDump",
    "dump_stacks",
    "list_dumps",
]

__getattr__, __dir__ = face(
    __name__,
    {
        "StackDump": "stacks",
        "dump_stacks": "stacks",
        "list_dumps": "stacks",
    },
)
