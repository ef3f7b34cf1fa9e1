"""How often the stats are sampled: every second while a person watches; while nobody does,
slower where cgroups hold the ranks (the guard needs no descendants list then), and the
first viewer to attach gets a sample at once. The stdin watch slows down likewise."""

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
        self.paced = 0

    def pace(self, interval: float) -> None:
        self.interval = interval
        self.paced += 1

    def sample_once(self) -> list[object]:
        self.samples += 1
        return []


def test_viewers_set_the_pace_and_the_first_gets_a_sample_at_once() -> None:
    """Stats and the stdin watch (whose ``pace`` passes at once when it speeds up)."""
    from rankvisor.engine.supervisor.core import Supervisor

    class _Config:
        sample_interval = 1.0

    sup = Supervisor.__new__(Supervisor)
    sup.config = _Config()  # type: ignore[assignment]
    sup._cgroups = object()  # type: ignore[assignment]
    sup._sampler = sampler = _Sampler(1.0)  # type: ignore[assignment]
    sup._input = stdin = _Sampler(0.25)  # type: ignore[assignment]
    rows = [  # (viewers now, the stats' pace then, samples at once so far, the stdin
        # watch's pace then, its changes of pace so far)
        (0, 5.0, 0, 2.0, 1),
        (1, 1.0, 1, 0.25, 2),
        (2, 1.0, 1, 0.25, 2),
        (1, 1.0, 1, 0.25, 2),
        (0, 5.0, 1, 2.0, 3),
        (1, 1.0, 2, 0.25, 4),
    ]
    for count, pace, samples, input_pace, paced in rows:
        sup.viewers(count)
        assert (sampler.interval, sampler.samples) == (pace, samples), count
        assert (stdin.interval, stdin.paced) == (input_pace, paced), count


def test_the_stdin_watch_keeps_its_quiet_and_deep_looks_in_seconds() -> None:
    from rankvisor.engine.supervisor.input_watch import InputWatch
    from rankvisor.engine.supervisor.publisher import Publisher
    from rankvisor.engine.supervisor.state import RunState

    state = RunState({}, max_restarts=0)
    watch = InputWatch(state, Publisher(state))
    rows = [  # (pace, a quiet rank's look every n passes, a deep look every n passes)
        (0.25, 8, 40),
        (2.0, 1, 5),
        (0.25, 8, 40),
    ]
    for pace, quiet, deep in rows:
        watch.pace(pace)
        assert (watch.interval, watch._quiet_every, watch._deep_every) == (pace, quiet, deep)


def test_the_stdin_watch_passes_on_the_run_loops_beat_and_a_new_pace_passes_at_once() -> None:
    from rankvisor.engine import clock
    from rankvisor.engine.supervisor.input_watch import InputWatch
    from rankvisor.engine.supervisor.publisher import Publisher
    from rankvisor.engine.supervisor.state import RunState
    from rankvisor.engine.supervisor.ticker import Beat

    fake = clock.FakeClock(monotonic=50.0)
    beat = Beat("test-input", driver=lambda: None)  # the loop: this test, by hand
    state = RunState({}, max_restarts=0)
    with clock.using(fake):
        watch = InputWatch(state, Publisher(state), beat=beat)
        watch.pace(2.0)  # not started: only remembered, no pass
        assert (watch.interval, watch.passes, beat.next_due()) == (2.0, 0, None)
        watch.start()
        rows = [  # (seconds on, the pace asked then or None, passes after, next due)
            (1.0, None, 0, 52.0),
            (1.0, None, 1, 54.0),      # due at 52: the beat's pass
            (0.5, 0.25, 2, 52.75),     # a viewer attached: a pass at once, then every 0.25 s
            (0.25, None, 3, 53.0),
            (0.0, 2.0, 4, 54.0),       # the last one left: a pass, then every 2 s
        ]
        for step, pace, passes, due in rows:
            fake.advance(step)
            if pace is not None:
                watch.pace(pace)
            beat.run_due(fake.monotonic())
            assert (watch.passes, beat.next_due()) == (passes, due), (step, pace)
        watch.stop()
        assert beat.next_due() is None
        watch.pace(0.25)
        fake.advance(5.0)
        beat.run_due(fake.monotonic())
        assert watch.passes == 4 and beat.next_due() is None  # stopped stays stopped
