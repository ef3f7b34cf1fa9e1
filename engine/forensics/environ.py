"""A rank's environment on record, secrets redacted: ``<rank dir>/env.json`` at each spawn.

Why record it: a bug report needs the variables a rank ran with (``NCCL_*``, ``CUDA_*``,
``OMP_NUM_THREADS``, torchrun's), and once the rank is gone nothing else knows them:
``/proc/<pid>/environ`` goes with the process. Why redact at write time: the run directory
is shared in bug reports and may be readable by others, so a secret must never reach the
disk. A variable whose name contains TOKEN, KEY, SECRET, PASSWORD, PASSWD, CREDENTIAL or
WEBHOOK, or has PAT or AUTH as a word of it (GITHUB_PAT, OAUTH_CLIENT; not PATH), any case,
keeps its name, its value becomes ``<redacted>``; in every other value a URL's password is
(``postgres://u:<redacted>@h/db``).

Cost: one JSON file of a few KiB per spawn (0.5-1 ms on a busy machine), written on a
thread of its own after the ranks started: a start is never delayed. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Final

from ..names.private_env import inherited as inherited_env
from .redaction import redact_url

__all__ = [
    "ENV_FILE",
    "REDACTED",
    "SECRET_WORDS",
    "is_secret",
    "read_proc_environ",
    "read_rank_env",
    "redact",
    "write_rank_env",
    "write_rank_envs_later",
]

ENV_FILE: Final = "env.json"
REDACTED: Final = "<redacted>"
SECRET_WORDS: Final = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "WEBHOOK")
SECRET_PARTS: Final = ("PAT", "AUTH", "OAUTH")
"""Short words that are secrets only as a word of the name (GITHUB_PAT, not PYTHONPATH)."""

_PARTS: Final = re.compile(r"[^A-Z0-9]+")


def is_secret(name: str) -> bool:
    """Whether a variable's value must not be shown: its name holds a secret word."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return True
    return any(part in SECRET_PARTS for part in _PARTS.split(upper))


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with each secret's value replaced by ``REDACTED`` and each URL's password
    in the others, sorted by name."""
    return {k: (REDACTED if is_secret(k) else redact_url(v)) for k, v in sorted(env.items())}


def write_rank_env(directory: str, additions: Mapping[str, str], *,
                   inherited: Mapping[str, str] | None = None) -> str | None:
    """Write ``<directory>/env.json``: the rank's whole environment (``inherited``, by
    default ``os.environ`` less the supervisor's own secrets, with ``additions`` over it,
    as the spawner builds it), redacted.

    Returns the path, or None when it could not be written (a full disk must not fail a
    spawn: the record is for a later report, the run comes first).
    """
    env = dict(inherited_env(os.environ) if inherited is None else inherited)
    env.update(additions)
    path = os.path.join(directory, ENV_FILE)
    data = json.dumps({"env": redact(env), "added": sorted(additions)}, separators=(",", ":"))
    try:
        # Owner-only: the names and paths in an environment are nobody else's business.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data.encode("utf-8", errors="surrogateescape"))
        finally:
            os.close(fd)
    except OSError:
        return None
    return path


def write_rank_envs_later(records: list[tuple[str, dict[str, str]]]) -> threading.Thread | None:
    """``write_rank_env`` for each ``(directory, additions)`` on a short-lived thread of its
    own: a file write costs ~0.5-1 ms on a busy machine, and the spawner holds the run's lock
    while it starts ranks. The thread is returned (tests join it); None for no records."""
    if not records:
        return None
    inherited = inherited_env(os.environ)
    thread = threading.Thread(
        target=lambda: [write_rank_env(d, a, inherited=inherited) for d, a in records],
        name="rankvisor-env-record", daemon=True,
    )
    thread.start()
    return thread


def read_rank_env(directory: str) -> dict[str, str] | None:
    """The environment recorded in ``<directory>/env.json`` (redacted), None without one."""
    try:
        with open(os.path.join(directory, ENV_FILE), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return None
    return redact({str(k): str(v) for k, v in env.items()})


def read_proc_environ(pid: int) -> dict[str, str] | None:
    """A live process's environment as it started (``/proc/<pid>/environ``), redacted;
    None when it is gone or not ours to read."""
    from ..process.proc_table import read_environ

    env = read_environ(pid)
    return None if env is None else redact(env)
