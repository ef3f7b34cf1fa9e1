"""The cluster key: what each node derives the door's secret from, so that reading the
rendezvous store is not enough to drive the job's ranks.

torch's rendezvous store has no authentication: whoever reaches its port reads every key in
it. So the store carries only a nonce per run (``door_nonce``), and each node's door proves
``door_secret(key, nonce)``, an HMAC-SHA256 under a key the store never sees, held on every
host of the job by its user alone:

- ``RANKVISOR_CLUSTER_KEY``, when set: a scheduler hands the submitting shell's environment to
  every host of the job (``export RANKVISOR_CLUSTER_KEY=$(openssl rand -hex 32)`` before
  ``sbatch``/``srun``);
- else ``cluster.key`` in the state directory (0700, its file 0600), made at the first
  multi-node run: a home directory shared by the job's hosts shares it.

A key file that is not a plain file of ours, or that others may read, is refused in one line.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from typing import Final

from ..control.registry import state_dir, state_dir_problem
from ..names.private_env import CLUSTER_KEY_ENV

__all__ = ["ENV_KEY", "KEY_FILE", "NoClusterKey", "cluster_key", "door_secret", "key_path"]

ENV_KEY: Final = CLUSTER_KEY_ENV
"""Read by the supervisor only: its ranks never inherit it (``engine.names.private_env``)."""
KEY_FILE: Final = "cluster.key"
MIN_KEY_CHARS: Final = 32
_MAX_KEY_BYTES: Final = 4096
_TAG: Final = b"rankvisor cluster door\0"


class NoClusterKey(ValueError):
    """No key can be had safely; the message says what to do."""


def key_path() -> str:
    """Where the key file lives."""
    return os.path.join(state_dir(), KEY_FILE)


def door_secret(key: bytes, nonce: str) -> str:
    """The door's secret for the run whose store holds ``nonce`` (hex, as the door wants)."""
    return hmac.new(key, _TAG + nonce.encode(), hashlib.sha256).hexdigest()


def cluster_key() -> bytes:
    """This host's cluster key (the environment's, else the state directory's file, made
    on first use).

    Raises:
        NoClusterKey: the variable is too short, or the file is unsafe or unreadable.
    """
    given = os.environ.get(ENV_KEY, "").strip()
    if given:
        if len(given) < MIN_KEY_CHARS:
            raise NoClusterKey(
                f"{ENV_KEY} is too short ({len(given)} characters, at least {MIN_KEY_CHARS}); "
                f"set it to a random one on every host: export {ENV_KEY}=$(openssl rand -hex 32)")
        return given.encode()
    path = key_path()
    if not os.path.lexists(path):
        _make(path)
    return _read(path)


def _make(path: str) -> None:
    """Write a fresh key; a host that made it first (a shared home) wins: its key stays."""
    root = os.path.dirname(path)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError as e:
        raise NoClusterKey(f"the cluster key cannot be made in {root} ({e.strerror}); "
                           f"set {ENV_KEY} on every host of the job") from None
    problem = state_dir_problem()
    if problem:
        raise NoClusterKey(problem)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, (secrets.token_hex(32) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # never over a key another host made meanwhile
        except FileExistsError:
            pass
    except OSError as e:
        raise NoClusterKey(f"the cluster key cannot be made at {path} ({e.strerror}); "
                           f"set {ENV_KEY} on every host of the job") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _read(path: str) -> bytes:
    try:
        st = os.lstat(path)
    except OSError as e:
        raise NoClusterKey(f"the cluster key {path} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise NoClusterKey(f"the cluster key {path} is not a plain file; remove it (a new one "
                           "is made) or set " + ENV_KEY)
    if st.st_uid != os.getuid():
        raise NoClusterKey(f"the cluster key {path} belongs to uid {st.st_uid}, not to you "
                           f"(uid {os.getuid()}); remove it (a new one is made) or set {ENV_KEY}")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise NoClusterKey(f"the cluster key {path} is open to others (mode {mode:o}): make a "
                           f"new one (rm {path}) on every host, or set {ENV_KEY}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            key = os.read(fd, _MAX_KEY_BYTES).strip()
        finally:
            os.close(fd)
    except OSError as e:
        raise NoClusterKey(f"the cluster key {path} cannot be read ({e.strerror})") from None
    if len(key) < MIN_KEY_CHARS:
        raise NoClusterKey(f"the cluster key {path} is too short; remove it (a new one is made)")
    return key
