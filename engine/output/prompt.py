"""What a rank waiting for input asks: its unfinished last line, and where pdb stopped.

Read from the ends of the rank's own log files when the wait is found (the files are the
record and are up to date: the rank wrote its prompt before it blocked in ``read``), so the
answer never depends on how far the output pump has got. The prompt is the text after the
last newline of stdout (else of stderr), sanitised for display; ``where`` comes from pdb's
last ``> /path/job.py(7)<module>()`` line (after the prompt it answered, in the file),
shown as ``job.py:7 in <module>``.
"""

from __future__ import annotations

import os
import re

from .sanitize import sanitize, strip_sgr

__all__ = ["pdb_where", "read_prompt"]

_TAIL = 16384
"""Bytes read from the end of each file: a prompt, and the pdb lines before it."""
_PROMPT_CHARS = 200

_TORCH_BREAKPOINT = os.path.join("torch", "distributed", "__init__.py")
"""torch's distributed pdb stops in its own frame first: say so rather than name that file."""
_PDB_WHERE = re.compile(
    r"^(?:\(Pdb\+*\) |ipdb> )*> (?P<path>.+?)\((?P<line>\d+)\)(?P<func>[^()\s]*)\(\)", re.M
)


def _tail(path: str) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _TAIL))
            data = f.read(_TAIL)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _unfinished(text: str) -> str:
    line = text.rsplit("\n", 1)[-1].rsplit("\r", 1)[-1]
    return strip_sgr(sanitize(line))[-_PROMPT_CHARS:]


def pdb_where(text: str) -> str:
    """``job.py:7 in <module>`` from the last pdb location line in ``text``; "" if none."""
    matches = list(_PDB_WHERE.finditer(text))
    if not matches:
        return ""
    last = matches[-1]
    full = last["path"].strip()
    if full.endswith(_TORCH_BREAKPOINT) and last["func"] == "breakpoint":
        return "torch.distributed.breakpoint() ('up' goes to its caller)"
    path = os.path.basename(full) or full
    func = last["func"]
    return f"{path}:{last['line']} in {func}" if func else f"{path}:{last['line']}"


def read_prompt(stdout_path: str, stderr_path: str) -> tuple[str, str]:
    """(prompt, where) of a rank from the ends of its two log files."""
    out = _tail(stdout_path)
    prompt = _unfinished(out)
    err = ""
    if not prompt:
        err = _tail(stderr_path)
        prompt = _unfinished(err)
    where = ""
    if "Pdb" in prompt or "pdb" in prompt:
        where = pdb_where(out) or pdb_where(err or _tail(stderr_path))
    return prompt, where
