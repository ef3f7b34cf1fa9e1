"""Asking a rank's torch worker server, from outside the rank: its Flight Recorder, its stacks.

torch (2.4 and later) can serve a few handlers on a unix socket inside each rank
(``_WorkerServer``; ``worker_main()`` starts one on ``TORCH_WORKER_SERVER_SOCKET``):
``fr_trace_json`` (the Flight Recorder's entries: every collective the rank enqueued, with its
sequence number per process group), ``dump_traceback``, ``pyspy_dump``,
``wait_counter_values``. rankvisor's bootstrap starts one in every Python rank
(``py_bootstrap.ENV_WORKER_SOCKET``) on ``socket_path(<incarnation dir>)``, fresh for each
incarnation. The server speaks HTTP: a ``POST /handler/<name>`` answers the handler's bytes.
The server answers on its own C++ thread: asking never pauses the rank's Python threads.

Who may connect: a unix socket is reached by whoever may write to it and search its
directory, and torch makes the socket with the rank's umask. So a rank's socket sits in a
directory of its own, ``worker/`` beside the rank's logs, made 0700 by the supervisor before
the rank starts: another local user never reaches it, whatever the umask (the rank's logs keep
the log dir's own mode).

A socket path may hold 107 bytes; a deep run dir gets a short path under the temporary
directory instead, derived from the incarnation dir so that both sides find it, in a
directory checked to be ours and private (``rundir.private_tmp``: another user may make
``<tmp>/rankvisor-<uid>`` first and serve a fake Flight Recorder there). A socket that is
not ours is never asked.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import os
import socket
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .. import clock
from ..rundir.private_tmp import private_tmp_dir

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_BYTES",
    "SOCKET_NAME",
    "Answer",
    "ask",
    "ask_all",
    "prepare",
    "socket_path",
]

SOCKET_DIR: Final = "worker"
"""The rank's private directory (0700) in its incarnation dir, where its socket goes."""
SOCKET_NAME: Final = "sock"
"""``worker/sock``: as long as the ``worker.sock`` it replaced, so a log dir that fitted a
socket's path still does."""
_MAX_PATH: Final = 100  # sun_path holds 108 bytes with its NUL; a margin for odd kernels
DEFAULT_TIMEOUT_S: Final = 2.0
MAX_ANSWER_BYTES: Final = 32 << 20
"""An answer read whole at most: torch's 2000 entries with stacks are a few MB."""


def socket_path(incarnation_dir: str, *, create: bool = False) -> str:
    """Where the worker server of the rank incarnation whose files are in
    ``incarnation_dir`` listens (``create``: the supervisor, about to start the rank, may
    make the private directory a deep run dir's socket goes in).

    Raises:
        NoPrivateDir: the path would be in the temporary directory, and no private
            directory of ours is there (the rank runs without a worker server).
    """
    path = os.path.join(os.path.abspath(incarnation_dir), SOCKET_DIR, SOCKET_NAME)
    if len(path.encode()) <= _MAX_PATH:
        return path
    digest = hashlib.sha1(path.encode()).hexdigest()[:20]
    return os.path.join(private_tmp_dir(create=create), f"{digest}.sock")


def prepare(path: str) -> None:
    """Make ``path``'s directory ours and private (0700, whatever the umask) and remove a
    socket left there (torch refuses a path that exists: "already exists"). Called before
    the rank starts.

    Raises:
        PermissionError: the directory is not ours, or not a directory (the rank then runs
            without a worker server).
    """
    where = os.path.dirname(path)
    os.makedirs(where, mode=0o700, exist_ok=True)
    st = os.lstat(where)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise PermissionError(errno.EPERM, "not a private directory of ours", where)
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(where, 0o700)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@dataclass(frozen=True, slots=True)
class Answer:
    """One handler's answer from one rank: its bytes, or why there are none."""

    body: bytes = b""
    error: str = ""
    at_ns: int = 0
    """When the answer came (``clock.wall_ns()``)."""

    @property
    def ok(self) -> bool:
        return not self.error


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def ask(path: str, handler: str, *, query: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S) -> Answer:
    """``handler``'s answer from the worker server on ``path`` (never raises)."""
    try:
        st = os.lstat(path)
    except OSError:
        return Answer(error="no worker server (the rank has not imported torch.distributed, "
                      "runs a torch without one, or runs without rankvisor's bootstrap)")
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return Answer(error=f"worker server: {path} is not a socket of ours "
                      f"(uid {st.st_uid}): not asked")
    conn = _UnixHTTP(path, timeout_s)
    try:
        conn.request("POST", f"/handler/{handler}" + (f"?{query}" if query else ""))
        resp = conn.getresponse()
        body = resp.read(MAX_ANSWER_BYTES + 1)
        if len(body) > MAX_ANSWER_BYTES:
            return Answer(error=f"worker server: {handler}: answer over "
                          f"{MAX_ANSWER_BYTES >> 20} MiB, not read")
    except (OSError, http.client.HTTPException) as e:
        if isinstance(e, TimeoutError):
            why = "no answer in time"
        elif isinstance(e, ConnectionRefusedError):
            why = "the rank is gone"
        else:
            why = str(e) or type(e).__name__
        return Answer(error=f"worker server: {why}")
    finally:
        conn.close()
    if resp.status != 200:
        text = body.decode("utf-8", "replace").strip()[:200]
        return Answer(error=f"worker server: {handler}: HTTP {resp.status} {text}")
    return Answer(body=body, at_ns=clock.wall_ns())


def ask_all(paths: Mapping[int, str], handler: str, *, query: str = "",
            timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[int, Answer]:
    """Every rank's answer (rank -> socket path), asked in parallel, within ``timeout_s``."""
    out: dict[int, Answer] = {}
    lock = threading.Lock()
    # A rank with no socket answers at once (``ask``): no thread for it. A watch that asks
    # every second ranks that never import torch.distributed would start one each.
    absent = {r: p for r, p in paths.items() if not os.path.exists(p)}
    for rank, path in absent.items():
        out[rank] = ask(path, handler, query=query, timeout_s=timeout_s)
    present = {r: p for r, p in paths.items() if r not in absent}

    def one(rank: int, path: str) -> None:
        a = ask(path, handler, query=query, timeout_s=timeout_s)
        with lock:
            out[rank] = a

    threads = [threading.Thread(target=one, args=(r, p), daemon=True,
                                name="rankvisor-worker-ask") for r, p in present.items()]
    for t in threads:
        t.start()
    end = clock.monotonic() + timeout_s + 0.5
    for t in threads:
        t.join(max(0.0, end - clock.monotonic()))
    with lock:
        return {r: out.get(r, Answer(error="worker server: no answer in time")) for r in paths}
