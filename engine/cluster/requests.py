"""The requests a node's supervisor answers for the cluster, beside the control protocol's.

``cluster?``: where every node's door is and the run's secret, for a viewer on this node
(a Unix-socket client: same uid or root, already trusted with this node's ranks); refused
to a read-only viewer, which must not gain commands through another door. ``read?``: bytes
of one of this node's ranks' current log files, from an offset, for a viewer on another node
(its zoom, ``rankvisor logs --rank``): only the files the supervisor names for a rank, never
a path the viewer sends.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from typing import Any, Final

from ..handle import SupervisorHandle
from ..rundir.arrival import arrival_path
from .board import StatusBoard

__all__ = ["MAX_READ", "cluster_request", "read_request"]

MAX_READ: Final = 1 << 20
"""The most bytes one ``read?`` answers with (the client asks again from the new offset)."""


def cluster_request(board: StatusBoard,
                    secret: Callable[[], str | None]) -> Callable[[dict[str, Any], bool],
                                                                  dict[str, Any]]:
    """The ``cluster?`` handler over the board (doors, every node's ranks) and the door's
    secret: ``node`` (this one's rank), ``nnodes``, ``doors``, ``nodes``
    (``StatusBoard.layout``), ``secret``."""

    def answer(_message: dict[str, Any], read_only: bool) -> dict[str, Any]:
        if read_only:
            return {"t": "error", "message": "read-only viewer: the cluster's secret is not "
                    "given (attach without --read-only)"}
        return {"t": "cluster", "node": board.node_rank, "nnodes": board.nnodes,
                "doors": board.doors(),
                "nodes": board.layout(), "secret": secret()}

    return answer


def read_request(handle: SupervisorHandle) -> Callable[[dict[str, Any], bool], dict[str, Any]]:
    """The ``read?`` handler: ``rank`` (local), ``stream`` ("stdout", "stderr", or
    "arrival": the index of their order beside them), ``offset``,
    ``max`` -> ``read`` with ``path``, ``offset``, ``size`` (the file's now) and ``data``
    (base64 of the bytes: a rank writes anything)."""

    def answer(message: dict[str, Any], _read_only: bool) -> dict[str, Any]:
        snap = handle.snapshot()
        try:
            rank = int(message.get("rank", -1))
            offset = max(0, int(message.get("offset", 0)))
            size = min(MAX_READ, max(0, int(message.get("max", MAX_READ))))
        except (TypeError, ValueError):
            return {"t": "error", "message": "read?: rank, offset and max are numbers"}
        ranks = {r.rank: r for r in snap.ranks}
        if rank not in ranks:
            return {"t": "error", "message": f"read?: this node has no local rank {rank}"}
        stream = message.get("stream")
        info = ranks[rank]
        paths = {"stdout": info.stdout_path, "stderr": info.stderr_path,
                 "arrival": arrival_path(info.stdout_path, info.stderr_path)}
        if stream not in paths:
            return {"t": "error", "message": "read?: stream is stdout, stderr or arrival"}
        path = paths[stream]
        data = b""
        total = 0
        try:
            with open(path, "rb") as f:
                total = os.fstat(f.fileno()).st_size
                f.seek(offset)
                data = f.read(size)
        except OSError:
            pass
        return {"t": "read", "path": path, "offset": offset, "size": total,
                "data": base64.b64encode(data).decode("ascii"),
                "finished": snap.finished}

    return answer
