"""A directory of our own under the shared temporary directory: ``<tmp>/rankvisor-<uid>``.

Short paths go there: the worker sockets of a run dir too deep for a socket path, the
bootstrap's stable copy. The temporary directory is shared, and anyone may make that name
first (a directory of theirs, a 0777 one, a symbolic link) and put a fake worker server in
it. So a directory is taken only when ``lstat`` says it is a directory, not a link, ours,
with no access for group or others (one of ours that is looser is tightened to 0700); one
that is not is passed over for the next name (``rankvisor-<uid>-1``, ...). Every side walks
the same names in the same order, so the supervisor that makes a socket and ``rankvisor
collectives`` that looks for it later agree on the directory.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import Final

__all__ = ["NoPrivateDir", "private_tmp_dir"]

_TRIES: Final = 8
"""Names tried before giving up (each one taken by someone else)."""


class NoPrivateDir(OSError):
    """No directory of ours could be had under the temporary directory (the message says
    whose they were)."""


def _ours(path: str) -> bool | None:
    """True: ``path`` is a private directory of ours (tightened if it was looser); False:
    it is there and not safe; None: nothing is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    if st.st_mode & 0o077:
        # Ours, in a sticky temporary directory: nobody else can rename or remove it.
        os.chmod(path, 0o700, follow_symlinks=False)
    return True


def private_tmp_dir(*, create: bool) -> str:
    """The first of ``<tmp>/rankvisor-<uid>``, ``...-<uid>-1``, ... that is a private
    directory of ours; with ``create``, the first made where none is.

    Raises:
        NoPrivateDir: every name is taken by something not ours (or, without ``create``,
            none of ours is there).
    """
    base = os.path.join(tempfile.gettempdir(), f"rankvisor-{os.getuid()}")
    passed: list[str] = []
    for n in range(_TRIES):
        path = base if n == 0 else f"{base}-{n}"
        found = _ours(path)
        if found:
            return path
        if found is None:
            if not create:
                continue  # a name freed since, or never used: a later one may be ours
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:  # someone was quicker: look at what they made
                pass
            if _ours(path):
                return path
        passed.append(_whose(path))
    if not create and not passed:
        raise NoPrivateDir(f"no directory of ours at {base}")
    raise NoPrivateDir(f"no private directory of ours under {tempfile.gettempdir()}: "
                       + "; ".join(passed))


def _whose(path: str) -> str:
    try:
        st = os.lstat(path)
    except OSError:
        return f"{path} is gone"
    kind = "a link" if stat.S_ISLNK(st.st_mode) else (
        "a directory" if stat.S_ISDIR(st.st_mode) else "not a directory")
    return f"{path} is {kind} of uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}"
