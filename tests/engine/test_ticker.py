"""The beat: periodic readings share one thread, fall due on a common grid, and stop for good.

No process is started; the beat runs on real threads with short intervals, and the tests
count calls and threads, never time them.
"""

from __future__ import annotations

import threading

import pytest
from rankvisor.engine.supervisor.ticker import Beat, Ticker, next_on_grid, on_grid_from

from tests.conftest import wait_until


@pytest.mark.parametrize("now,interval,due", [
    (10.2, 0.5, 10.5),
    (10.5, 0.5, 11.0),   # due now: the next one is a whole interval on
    (10.2, 1.0, 11.0),
    (10.7, 0.5, 11.0),   # 0.5 s and 1 s tickers fall due together at 11.0
    (0.0, 0.25, 0.25),
    # On a grid point whose division by the interval rounds below it (149.6 / 0.05 is
    # 2991.9999999999995): the next one still, never the point itself.
    (2992 * 0.05, 0.05, 2993 * 0.05),
    (2992 * 0.1, 0.1, 2993 * 0.1),
    (998 * 0.7, 0.7, 999 * 0.7),
])
def test_a_ticker_falls_due_on_the_grid_of_its_interval(now, interval, due) -> None:
    assert next_on_grid(now, interval) > now
    assert next_on_grid(now, interval) == pytest.approx(due)
    assert now <= on_grid_from(now, interval) <= now + interval


def test_a_wake_up_a_hair_early_for_a_point_the_floats_round_below_runs_once() -> None:
    # The hair-early wake-up is moved onto the grid point, 2992 * 0.05: the ticker's next
    # call was put at that same point again, and the beat, holding its lock, went round for
    # ever (a clean-clone run's stats test hung in it).
    from rankvisor.engine import clock

    fake = clock.FakeClock(monotonic=149.56)
    calls: list[float] = []
    beat = Beat("test-float-grid", driver=lambda: None)
    with clock.using(fake):
        ticker = Ticker("stats", 0.05, lambda: calls.append(fake.monotonic()), beat=beat)
        ticker.start()
        assert beat.next_due() == 2992 * 0.05
        fake.advance(149.5995 - fake.monotonic())
        beat.run_due(fake.monotonic())
        assert len(calls) == 1
        assert beat.next_due() == pytest.approx(149.65)
        ticker.stop()


def _beat_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_tickers_share_one_thread_and_keep_their_rates() -> None:
    beat = Beat("test-beat-share")
    fast_calls: list[str] = []
    slow_calls: list[str] = []
    fast = Ticker("fast", 0.02, lambda: fast_calls.append(threading.current_thread().name),
                  beat=beat)
    slow = Ticker("slow", 0.04, lambda: slow_calls.append(threading.current_thread().name),
                  beat=beat)
    fast.start()
    slow.start()
    try:
        assert len(_beat_threads("test-beat-share")) == 1
        wait_until(lambda: len(slow_calls) >= 10, timeout=20)
    finally:
        fast.stop()
        slow.stop()
    assert set(fast_calls) == set(slow_calls) == {"test-beat-share"}
    # The same grid: the fast one is called about twice as often (a late wake-up may
    # merge two of its beats into one, never add one).
    assert 1.5 * len(slow_calls) <= len(fast_calls) <= 2 * len(slow_calls) + 2
    assert _beat_threads("test-beat-share") == []  # no ticker left: no thread left


def test_after_stop_no_call_runs_and_a_failing_tick_goes_on() -> None:
    beat = Beat("test-beat-stop")
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise RuntimeError("a bad reading")

    ticker = Ticker("failing", 0.01, failing, beat=beat)
    ticker.start()
    wait_until(lambda: len(calls) >= 3, timeout=20)  # it raised, and was called again
    ticker.stop()
    seen = len(calls)
    other = Ticker("other", 0.01, lambda: None, beat=beat)
    other.start()  # a beat still running: the stopped one must not come back
    done: list[int] = []
    waiter = Ticker("waiter", 0.05, lambda: done.append(1), beat=beat)
    waiter.start()
    wait_until(lambda: len(done) >= 3, timeout=20)
    other.stop()
    waiter.stop()
    assert len(calls) == seen


def test_a_ticker_may_stop_itself_from_its_own_tick() -> None:
    beat = Beat("test-beat-self")
    calls: list[int] = []
    holder: list[Ticker] = []

    def once() -> None:
        calls.append(1)
        holder[0].stop()  # on the beat's own thread: must not wait for itself

    holder.append(Ticker("once", 0.01, once, beat=beat))
    holder[0].start()
    wait_until(lambda: not _beat_threads("test-beat-self") and calls, timeout=20)
    assert calls == [1]


def test_an_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Ticker("never", 0.0, lambda: None)


def test_a_driven_beat_has_no_thread_and_runs_what_fell_due_when_its_loop_asks() -> None:
    # The Supervisor's run loop drives its beat: it sleeps until ``next_due`` and calls
    # ``run_due``. A table of moments on a fake clock; no thread is started.
    from rankvisor.engine import clock

    fake = clock.FakeClock(monotonic=100.2)
    woken: list[int] = []
    calls: list[tuple[str, float]] = []
    beat = Beat("test-driven", driver=lambda: woken.append(1))
    before = threading.active_count()
    with clock.using(fake):
        stats = Ticker("stats", 1.0, lambda: calls.append(("stats", fake.monotonic())),
                       beat=beat)
        status = Ticker("status", 2.0, lambda: calls.append(("status", fake.monotonic())),
                        beat=beat)
        stats.start()
        status.start()
        assert woken == [1, 1]  # the loop is told: a new deadline may be nearer
        assert threading.active_count() == before
        assert beat.next_due() == pytest.approx(101.0)
        for now, due_next, seen in [
            (100.5, 101.0, []),                                # nothing due yet
            (100.9995, 102.0, [("stats", 100.9995)]),          # a hair early counts
            (102.0, 103.0, [("stats", 102.0), ("status", 102.0)]),  # one wake-up for both
            (105.3, 106.0, [("stats", 105.3), ("status", 105.3)]),  # late: once, not thrice
        ]:
            fake.advance(now - fake.monotonic())
            calls.clear()
            beat.run_due(fake.monotonic())
            assert calls == seen, now
            assert beat.next_due() == pytest.approx(due_next), now
        stats.stop()
        assert beat.next_due() == pytest.approx(106.0)  # the status ticker's, on its grid
        status.stop()
        assert beat.next_due() is None
        fake.advance(10)
        calls.clear()
        beat.run_due(fake.monotonic())
        assert calls == []


def test_a_tick_says_when_it_next_needs_a_call_and_a_poke_brings_it_forward() -> None:
    # A reading that knows when it next has something to look at returns that moment: its
    # next call is the first point of its grid at or after it (never before the next one);
    # a poke (what it reads changed) brings the call forward to the next grid point.
    from rankvisor.engine import clock

    fake = clock.FakeClock(monotonic=100.2)
    woken: list[int] = []
    calls: list[float] = []
    answers: list[float | None] = []
    beat = Beat("test-lazy", driver=lambda: woken.append(1))

    def look() -> float | None:
        calls.append(fake.monotonic())
        return answers.pop(0) if answers else None

    with clock.using(fake):
        lazy = Ticker("lazy", 1.0, look, beat=beat)
        lazy.start()
        woken.clear()
        for step, (now, answer, poke_at, due_next) in enumerate([
            # at      its answer  a poke at  next call
            (101.0,   130.0,      None,      130.0),   # nothing before 130
            (130.0,   145.3,      None,      146.0),   # off the grid: the point after it
            (146.0,   146.2,      None,      147.0),   # never before the next grid point
            (147.0,   None,       None,      148.0),   # no answer: one interval on
            (148.0,   190.0,      160.4,     161.0),   # poked at 160.4: called at 161
            (161.0,   170.0,      None,      170.0),
        ]):
            fake.advance(now - fake.monotonic())
            answers.append(answer)
            calls.clear()
            beat.run_due(fake.monotonic())
            assert calls == [now], step
            if poke_at is not None:
                fake.advance(poke_at - fake.monotonic())
                woken.clear()
                lazy.poke()
                assert woken == [1], step  # the loop sleeps no longer than the new deadline
                lazy.poke()
                assert woken == [1], step  # already as soon as it can be: nothing to wake
            assert beat.next_due() == pytest.approx(due_next), step

        # A poke during the call itself: the call's answer does not push it back.
        answers.clear()
        fake.advance(170.0 - fake.monotonic())

        def poked_meanwhile() -> float | None:
            lazy.poke()
            return 200.0

        answers_fn = lazy._tick
        lazy._tick = poked_meanwhile
        beat.run_due(fake.monotonic())
        assert beat.next_due() == pytest.approx(171.0)
        lazy._tick = answers_fn
        lazy.stop()
        lazy.poke()  # stopped: a poke brings nothing back
        assert beat.next_due() is None
