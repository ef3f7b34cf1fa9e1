"""A node's record read back from the rendezvous store, checked before anything uses it.

torch's TCPStore has no authentication: whoever reaches its port can write
``rankvisor/node/<n>``. A record is therefore hostile input, like a rank's output: its
shape, types and sizes are checked here, its strings sanitised and capped, its ranks bounded
by the world size, and a record that claims another node's rank (or this node's) is refused.
``check_record`` returns the clean record, or raises ``BadRecord`` with one line saying what
is wrong, for the board's one notice; nothing of a bad record is kept.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..output.safe_text import one_line
from ..states import RankState

__all__ = ["MAX_RECORD_BYTES", "BadRecord", "check_record"]

MAX_RECORD_BYTES = 4 * 1024 * 1024
"""A record is about 60 bytes a rank: 4 MiB holds 60,000 ranks and is read, never more."""

HOST_CAP = 255
"""A host name is at most 253 characters."""

MESSAGE_CAP = 300
"""As ``board.MESSAGE_CAP``: what a node keeps of its root cause's message."""

_NO_WORLD_RANKS = 65_536
"""The bound on a node's ranks when the world size is not known."""

_STATES = frozenset(s.value for s in RankState)


class BadRecord(ValueError):
    """A record that is not one a rankvisor node writes; the message says why."""


def _int(value: Any, what: str, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRecord(f"{what} is not an integer")
    if value < low or (high is not None and value > high):
        raise BadRecord(f"{what} {value} is out of range")
    return value


def _opt_int(value: Any, what: str) -> int | None:
    return None if value is None else _int(value, what, low=-(2**31), high=2**31)


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRecord(f"{what} is not a finite number")
    return float(value)


def _str(value: Any, what: str, cap: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BadRecord(f"{what} is not a string")
    return one_line(value, cap)


def _ranks(value: Any, world: int) -> list[list[Any]]:
    if not isinstance(value, list):
        raise BadRecord("ranks is not a list")
    if len(value) > world:
        raise BadRecord(f"{len(value)} ranks, more than the world's {world}")
    out = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 6:
            raise BadRecord("a rank entry is not a list of 6")
        local, glob, state, code, count, age = entry
        if state not in _STATES:
            raise BadRecord("a rank's state is not one rankvisor writes")
        out.append([
            _int(local, "a local rank", high=world - 1), _int(glob, "a rank", high=world - 1),
            state, _opt_int(code, "an exit code"), _int(count, "a restart count"),
            _number(age, "an output age"),
        ])
    return out


def _cause(value: Any, node: int, world: int) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRecord("rc is not an object")
    if value.get("node_rank") != node:
        raise BadRecord("rc names another node")
    t = _number(value.get("t"), "rc.t")
    return {
        "rank": _int(value.get("rank"), "rc.rank", high=world - 1),
        "local_rank": _int(value.get("local_rank"), "rc.local_rank", high=world - 1),
        "node_rank": node,
        "host": _str(value.get("host"), "rc.host", HOST_CAP),
        "exitcode": _opt_int(value.get("exitcode"), "rc.exitcode"),
        "signal": _str(value.get("signal"), "rc.signal", 32, optional=True),
        "message": _str(value.get("message", ""), "rc.message", MESSAGE_CAP),
        "t": 0.0 if t is None else t,
        "knock_on": bool(value.get("knock_on") is True),
    }


def _suspect(value: Any, world: int) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRecord("suspect is not an object")
    ranks = value.get("ranks", [])
    if not isinstance(ranks, list) or len(ranks) > world:
        raise BadRecord("suspect.ranks is not a list of ranks")
    return {
        "rank": _int(value.get("rank"), "suspect.rank", high=world - 1),
        "reason": _str(value.get("reason", ""), "suspect.reason", MESSAGE_CAP),
        "ranks": [_int(r, "a suspect's rank", high=world - 1) for r in ranks],
        # Named while the ranks still hang (not at the end of the run): said as on its node.
        "live": value.get("live") is True,
    }


def check_record(value: bytes, *, node: int, this_node: int,
                 world_size: int | None) -> dict[str, Any]:
    """The clean record stored under ``rankvisor/node/<node>``.

    Raises:
        BadRecord: the record is too big, not JSON, of the wrong shape or types, or claims
            a node rank other than ``node`` (or ``this_node``'s).
    """
    if len(value) > MAX_RECORD_BYTES:
        raise BadRecord(f"{len(value)} bytes, over the {MAX_RECORD_BYTES} a record may have")
    try:
        rec = json.loads(bytes(value))
    except (ValueError, RecursionError) as e:
        raise BadRecord(f"not JSON ({type(e).__name__})") from None
    if not isinstance(rec, dict):
        raise BadRecord("not a JSON object")
    claimed = rec.get("node_rank")
    if claimed != node or isinstance(claimed, bool) or node == this_node:
        raise BadRecord(f"it claims node rank {one_line(repr(claimed), 40)}")
    world = world_size if world_size is not None and world_size > 0 else _NO_WORLD_RANKS
    return {
        "node_rank": node,
        "host": _str(rec.get("host"), "host", HOST_CAP),
        "round": _int(rec.get("round", 0), "round"),
        "attempt": _int(rec.get("attempt", 0), "attempt"),
        "finished": rec.get("finished") is True,
        "over": rec.get("over") is True,
        "ranks": _ranks(rec.get("ranks", []), world),
        "rc": _cause(rec.get("rc"), node, world),
        "suspect": _suspect(rec.get("suspect"), world),
        "door": _door(rec.get("door")),
    }


def _door(value: Any) -> str | None:
    """A node's TCP door, ``HOST:PORT`` (a viewer connects there: no other shape is taken)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > HOST_CAP + 6:
        raise BadRecord("door is not HOST:PORT")
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(
        c.isspace() or not c.isprintable() for c in host
    ):
        raise BadRecord("door is not HOST:PORT")
    return value
