"""``logs --rank`` and ``stack --rank`` of a rank that runs on another node.

The way there: this node's supervisor (its Unix socket, so same user) says where every
node's door is and the run's secret (``cluster?``); the other node's supervisor, reached
through its door, reads the rank's file (``read?``) or dumps its stack, as it would for a
viewer of its own. Nothing is read from this node's disk for a remote rank.
"""

from __future__ import annotations

import base64
import sys
import time
from typing import TYPE_CHECKING, Any

from ...engine.control.registry import RunEntry
from .command import EXIT_OK, EXIT_REFUSED, Refused
from .run_args import PROG

if TYPE_CHECKING:
    from ...engine.control.client import RemoteHandle
    from ...engine.handle import CommandResult, DumpStacks

__all__ = ["open_node", "remote_dump", "remote_logs"]

FOLLOW_POLL_S = 0.5


def open_node(command: str, entry: RunEntry, node: int, host: str) -> RemoteHandle:
    """A handle on node ``node``'s supervisor, through its door.

    Raises:
        Refused: one line saying why not (no door published, the secret refused, the link).
    """
    from ...engine.cluster.door import DoorRefused, connect_door
    from ...engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle

    try:
        here = RemoteHandle.connect(entry.socket, name=f"{PROG} {command}")
    except (OSError, ProtocolMismatch, NoAnswer) as e:
        raise Refused(f"this node's supervisor does not answer ({e}): it is the way to "
                      f"node {node}") from None
    try:
        answer = here.request("cluster?") or {}
    finally:
        here.detach()
    door = (answer.get("doors") or {}).get(str(node))
    secret = answer.get("secret")
    if answer.get("t") != "cluster" or not door or not secret:
        why = answer.get("message") or "no door or secret published yet"
        raise Refused(f"node {node} ({host}) cannot be reached from here: {why}")
    try:
        return connect_door(door, secret, name=f"{PROG} {command} (from another node)")
    except DoorRefused as e:
        raise Refused(str(e)) from None
    except (OSError, ProtocolMismatch, NoAnswer) as e:
        raise Refused(f"node {node} ({host}) does not answer at {door}: {e}") from None


def _read(handle: RemoteHandle, local: int, stream: str, offset: int) -> dict[str, Any]:
    answer = handle.request("read?", {"rank": local, "stream": stream, "offset": offset})
    if answer is None or answer.get("t") != "read":
        raise Refused(str((answer or {}).get("message") or "the node did not answer"))
    return answer


def remote_logs(command: str, entry: RunEntry, node: int, host: str, local: int,
                stream: str, follow: bool) -> int:
    """Print a remote rank's file (its bytes as written); with ``follow`` until its run
    finishes, across its restarts (the node names the current file)."""
    handle = open_node(command, entry, node, host)
    try:
        path, offset = "", 0
        while True:
            answer = _read(handle, local, stream, offset)
            if answer["path"] != path:
                if path:
                    print(f"==> {host}:{answer['path']} <==", file=sys.stderr)
                    offset = 0
                    answer = _read(handle, local, stream, 0)
                path = answer["path"]
            data = base64.b64decode(answer["data"])
            if data:
                _write(data)
                offset += len(data)
                continue
            if not follow or answer.get("finished") or not handle.connected:
                return EXIT_OK
            time.sleep(FOLLOW_POLL_S)
    finally:
        handle.detach()


def _write(data: bytes) -> None:
    if sys.stdout.isatty():
        from ...engine.output.sanitize import sanitize

        sys.stdout.write(sanitize(data.decode("utf-8", "replace")))
    else:
        sys.stdout.buffer.write(data)
    sys.stdout.flush()


def remote_dump(command: str, entry: RunEntry, node: int, host: str,
                dump: DumpStacks) -> tuple[int, CommandResult]:
    """``dump`` (local ranks of ``node``) carried out by that node's supervisor."""
    handle = open_node(command, entry, node, host)
    try:
        result = handle.execute(dump)
    finally:
        handle.detach()
    return (EXIT_OK if result.ok else EXIT_REFUSED), result
