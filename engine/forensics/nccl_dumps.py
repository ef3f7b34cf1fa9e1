"""NCCL ranks' Flight Recorder dumps: files torch writes, and the pipe that asks for one.

An NCCL process group writes its FR dump to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (a pickle of
the same object the worker server answers as JSON) when its watchdog sees a timeout, or when
a byte is written to its named pipe ``$TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe``. rankvisor
points both into each rank incarnation's directory (``nccl_env``), writes to the pipes of
ranks about to be SIGKILLed (``poke``), and reads the dumps like a gloo rank's answer
(``read_dumps``). A dump is read as bounded plain data (``fr_dump.read_fr_pickle``: a
regular file only, capped, no global, a bounded tree), so a FIFO or a crafted pickle in its
place costs the watch nothing.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from typing import Any, Final

from .. import clock
from .fr_dump import read_fr_pickle

__all__ = ["DUMP_STEM", "PIPE_STEM", "nccl_env", "poke", "read_dumps"]

DUMP_STEM: Final = "nccl_fr_"
PIPE_STEM: Final = "nccl_fr_pipe_"
_DUMP_ENV: Final = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
_PIPE_ENV: Final = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"


def nccl_env(incarnation_dir: str, env: Mapping[str, str]) -> dict[str, str]:
    """Where ``incarnation_dir``'s rank dumps and listens (unless the job chose already)."""
    out = {}
    if not any(k in env or k in os.environ for k in _DUMP_ENV):
        out[_DUMP_ENV[0]] = os.path.join(incarnation_dir, DUMP_STEM)
    if _PIPE_ENV not in env and _PIPE_ENV not in os.environ:
        out[_PIPE_ENV] = os.path.join(incarnation_dir, PIPE_STEM)
    return out


def poke(incarnation_dir: str) -> int:
    """Ask every NCCL group of the rank in ``incarnation_dir`` for a dump; how many pipes
    took it (never blocks: a pipe nobody reads is skipped)."""
    done = 0
    for path in glob.glob(os.path.join(glob.escape(incarnation_dir), f"{PIPE_STEM}*.pipe")):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue  # ENXIO: no reader (the rank is gone)
        try:
            os.write(fd, b"1\n")
            done += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return done


_SETTLED_NS: Final = 2_000_000_000
"""A directory whose mtime is this much older than our last listing of it is known to hold
what that listing found (an mtime is coarser than a nanosecond: a file made just after a
listing can leave it unchanged)."""


def _dump_paths(
    incarnation_dir: str, listings: dict[str, tuple[int, int, list[str]]] | None
) -> list[str]:
    """The dump files in ``incarnation_dir``; listed again only if it changed (``listings``)."""
    if listings is None:
        return _list_dumps(incarnation_dir)
    try:
        mtime = os.stat(incarnation_dir).st_mtime_ns
    except OSError:
        return []
    known = listings.get(incarnation_dir)
    if known is not None and known[0] == mtime and known[1] - mtime > _SETTLED_NS:
        return known[2]
    listed_at = clock.wall_ns()
    paths = _list_dumps(incarnation_dir)
    listings[incarnation_dir] = (mtime, listed_at, paths)
    return paths


def _list_dumps(incarnation_dir: str) -> list[str]:
    pattern = os.path.join(glob.escape(incarnation_dir), f"{DUMP_STEM}*")
    return sorted(p for p in glob.glob(pattern) if not p.endswith(".pipe"))


def read_dumps(
    incarnation_dir: str,
    seen: dict[str, tuple[int, int]] | None = None,
    listings: dict[str, tuple[int, int, list[str]]] | None = None,
) -> list[tuple[dict[str, Any], int]]:
    """The FR dumps torch wrote in ``incarnation_dir``, each with its file's mtime (ns).

    ``seen`` (path -> (mtime, size), kept by the caller): a dump read before and unchanged
    since is left out (the watch looks once a second; a dump can be megabytes).
    ``listings`` (directory -> (its mtime, when listed, dump paths), kept by the caller): a
    directory unchanged since a settled listing is not listed again (a ``stat`` instead of a
    ``glob`` of every rank's directory once a second; its dumps are still looked at)."""
    out = []
    for path in _dump_paths(incarnation_dir, listings):
        try:
            st = os.lstat(path)
            stamp = (st.st_mtime_ns, st.st_size)
            if seen is not None and seen.get(path) == stamp:
                continue
            if seen is not None:
                seen[path] = stamp  # a bad dump is tried once, not every second
            data = read_fr_pickle(path)
        except (OSError, ValueError):
            continue
        out.append((data, st.st_mtime_ns))
    return out
