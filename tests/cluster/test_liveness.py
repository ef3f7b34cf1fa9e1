"""Node beats: a node whose beat stops (not one that never beat) becomes unreachable after
``STALE_BEATS`` intervals and a read, and is back when its beat moves; the interval grows
with the node count so that 1,000 nodes cost the store 200 small writes a second."""

from __future__ import annotations

from rankvisor.engine.cluster.liveness import STALE_BEATS, Liveness, beat_interval


def test_a_silent_node_is_unreachable_then_back() -> None:
    live = Liveness()
    limit = STALE_BEATS * beat_interval(2) + 1.0
    assert not live.note([1], [b"1"], 2, 1.0, now=0.0)
    assert not live.note([1], [b"1"], 2, 1.0, now=limit - 0.1)
    assert live.note([1], [b"1"], 2, 1.0, now=limit + 0.1)
    assert live.unreachable == {1}
    assert live.note([1], [b"2"], 2, 1.0, now=limit + 1)
    assert live.unreachable == frozenset()


def test_a_node_that_never_beat_is_not_called_unreachable() -> None:
    live = Liveness()
    live.note([1], [None], 2, 1.0, now=0.0)
    assert not live.note([1], [None], 2, 1.0, now=1000.0)
    assert live.unreachable == frozenset()


def test_beats_are_rate_limited_by_the_node_count() -> None:
    assert beat_interval(2) == 1.0
    assert beat_interval(1000) == 5.0
    assert 1000 / beat_interval(1000) == 200
    live = Liveness()
    assert live.due(1000, now=10.0)
    assert not live.due(1000, now=14.9)
    assert live.due(1000, now=15.0)
    assert live.count == 2
