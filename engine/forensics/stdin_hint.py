"""A rank that died reading a stdin that is /dev/null: say so in the failure's words.

Under ``--stdin null`` a rank's ``input()`` raises ``EOFError`` and its ``breakpoint()`` ends
in ``bdb.BdbQuit``: the traceback alone reads like a bug of the script. The rank's exit
cause then says that its stdin is /dev/null and which flag gives it one a person can answer.
"""

from __future__ import annotations

from .exit_cause import ExitCause

__all__ = ["NULL_STDIN_NOTE", "note_null_stdin"]

NULL_STDIN_NOTE = (
    "its stdin is /dev/null (--stdin null): it read end of file; run with --stdin pipe to "
    "answer prompts and pdb (rankvisor input / debug, or the TUI)"
)
_MARKERS = ("EOFError: EOF when reading a line", "bdb.BdbQuit", "EOFError")
_TAIL = 4096


def note_null_stdin(cause: ExitCause | None, stderr_path: str) -> ExitCause | None:
    """``cause`` with ``NULL_STDIN_NOTE`` added when the end of stderr shows a read of
    stdin that met EOF; ``cause`` itself otherwise."""
    if not stderr_path:
        return cause
    try:
        with open(stderr_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - _TAIL))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return cause
    if not any(m in tail for m in _MARKERS):
        return cause
    if cause is None:
        return ExitCause("exception", NULL_STDIN_NOTE)
    return ExitCause(cause.code, f"{cause.text}; {NULL_STDIN_NOTE}", cause.detail)
