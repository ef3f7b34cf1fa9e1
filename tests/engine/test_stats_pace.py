"""How often the stats are sampled: every second while a person watches; while nobody does,
slower where cgroups hold the ranks (the guard needs no descendants list then), and the
first viewer to attach gets a sample at once."""

from __future__ import annotations

import pytest
from rankvisor.engine.supervisor.stats import StatsSampler, sample_every


@pytest.mark.parametrize(("interval", "watched", "cgroups", "every"), [
    (1.0, True, True, 1.0),
    (1.0, True, False, 1.0),
    (1.0, False, False, 1.0),  # the guard reads each rank's descendants from the samples
    (1.0, False, True, 5.0),
    (10.0, False, True, 10.0),  # a slower pace asked for stays
    (0.2, True, True, 0.2),
])
def test_the_pace(interval: float, watched: bool, cgroups: bool, every: float) -> None:
    assert sample_every(interval, watched=watched, cgroups=cgroups) == every


def test_a_new_pace_takes_the_beat_from_now_and_stop_ends_it() -> None:
    s = StatsSampler(None, interval=1.0, gpu=None)
    s.pace(5.0)  # not sampling yet: only remembered
    assert s.interval == 5.0 and s._thread is None
    s.start()
    try:
        first = s._thread
        assert first is not None and first.interval_s == 5.0
        s.pace(5.0)
        assert s._thread is first  # the same pace: the same ticker
        s.pace(1.0)
        assert s._thread is not first and s._thread.interval_s == 1.0
    finally:
        s.stop()
    assert s._thread is None
    s.pace(5.0)
    assert s._thread is None  # stopped stays stopped


class _Sampler:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples = 0

    def pace(self, interval: float) -> None:
        self.interval = interval

    def sample_once(self) -> list[object]:
        self.samples += 1
        return []


def test_viewers_set_the_pace_and_the_first_gets_a_sample_at_once() -> None:
    from rankvisor.engine.supervisor.core import Supervisor

    class _Config:
        sample_interval = 1.0

    sup = Supervisor.__new__(Supervisor)
    sup.config = _Config()  # type: ignore[assignment]
    sup._cgroups = object()  # type: ignore[assignment]
    sup._sampler = sampler = _Sampler(1.0)  # type: ignore[assignment]
    rows = [  # (viewers now, the pace then, samples taken at once so far)
        (0, 5.0, 0),
        (1, 1.0, 1),
        (2, 1.0, 1),
        (1, 1.0, 1),
        (0, 5.0, 1),
        (1, 1.0, 2),
    ]
    for count, pace, samples in rows:
        sup.viewers(count)
        assert (sampler.interval, sampler.samples) == (pace, samples), count
