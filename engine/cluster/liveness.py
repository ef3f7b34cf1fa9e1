"""Which nodes still answer: a small beat per node in the rendezvous store, read back.

A node's status record is written only when something changed (and a heartbeat every
``HEARTBEAT_S``, which readers do not read unless the record counter moved), so a node
whose link went down looked "running" for as long as anyone read its last record. Each
node therefore also sets ``rankvisor/beat/<node>`` (a counter, a few bytes) every
``beat_interval`` and reads the others' beats (one ``multi_get``) at each of its reads; a
node whose beat has not moved for ``STALE_BEATS`` intervals plus one read interval is
unreachable: its ranks are shown with their last known state, and nothing waits on it.
When its beat moves again it is back. The costs grow with the node count on purpose
(docs/clusters.md, "On paper: 1,000 nodes"): at 1,000 nodes a beat every 5 s is 200 small
writes a second for the store, and each read of the beats about 10 kB.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .. import clock

__all__ = ["STALE_BEATS", "Liveness", "beat_interval"]

STALE_BEATS = 3
"""Beats a node may miss before it is unreachable."""

PREFIX = "rankvisor/beat/"


def beat_interval(nnodes: int) -> float:
    """Seconds between two beats of a node: 1 s up to 200 nodes, 5 s at 1,000."""
    return max(1.0, nnodes / 200.0)


class Liveness:
    """This node's beat to write and the others' beats as last read (one board's)."""

    def __init__(self) -> None:
        self.count = 0
        self.beat_at = 0.0
        self._seen: dict[int, tuple[bytes, float]] = {}
        self.unreachable: frozenset[int] = frozenset()

    def reset(self) -> None:
        """A new round: every node starts fresh."""
        self._seen = {}
        self.unreachable = frozenset()

    def due(self, nnodes: int, now: float | None = None) -> bool:
        """Whether this node's beat is due; counts it as written if so."""
        now = clock.monotonic() if now is None else now
        if now - self.beat_at < beat_interval(nnodes):
            return False
        self.beat_at = now
        self.count += 1
        return True

    @staticmethod
    def key(node: int) -> str:
        return f"{PREFIX}{node}"

    def keys(self, nnodes: int, me: int) -> list[str]:
        return [self.key(n) for n in range(nnodes) if n != me]

    def note(self, nodes: Sequence[int], values: Iterable[bytes | None], nnodes: int,
             read_interval: float, now: float | None = None) -> bool:
        """Take the beats just read (None: not there yet); whether ``unreachable`` changed."""
        now = clock.monotonic() if now is None else now
        limit = STALE_BEATS * beat_interval(nnodes) + read_interval
        gone: set[int] = set()
        for node, value in zip(nodes, values, strict=True):
            value = bytes(value or b"")
            before = self._seen.get(node)
            if before is None or before[0] != value:
                self._seen[node] = (value, now)
            elif value and now - before[1] > limit:
                gone.add(node)
        changed = frozenset(gone) != self.unreachable
        self.unreachable = frozenset(gone)
        return changed
