"""The live suspect's rules on made-up readings at given times (engine.forensics.live_rule):
a rank a person holds is never quiet or named, the wait is timed from the end of a hold, a
quiet start is no hang before every rank has a cadence, and a verdict is dropped the moment
its evidence is gone (the real jobs: tests/test_live_pause_gloo.py)."""

from __future__ import annotations

import pytest
from rankvisor.engine.events import Suspect
from rankvisor.engine.forensics.live_rule import (
    STARTUP_QUIET_S,
    Quiet,
    RankNow,
    Waited,
    every_rank_quiet,
    has_cadence,
    quiet_due,
    waited_due,
    waited_verdict,
    why_dropped,
)
from rankvisor.engine.supervisor.live_suspect import LiveReading, LiveSuspect
from rankvisor.engine.supervisor.state import RunState

S = 1_000_000_000
T0 = 1_700_000_000 * S
KEY = ("0", 7, (0,))


def _rank(rank: int, last_s: float | None, *, steps: int = 50, gaps: int = 50,
          gap: float | None = 0.1, held: str = "", released_s: float | None = None) -> RankNow:
    return RankNow(rank, None if last_s is None else T0 + int(last_s * S), gap, gaps, steps,
                   held, None if released_s is None else T0 + int(released_s * S))


def _quiet(ranks: list[RankNow], now_s: float) -> Quiet | None:
    return every_rank_quiet(ranks, T0 + int(now_s * S), factor=3.0, min_s=4.0)


def _waited(ranks: list[RankNow], now_s: float, entered_s: float = 1.0) -> Waited | None:
    verdicts = [(KEY, T0 + int(entered_s * S), (0,))]
    return waited_verdict(verdicts, {r.rank: r for r in ranks}, T0 + int(now_s * S), min_s=4.0)


HELD = ["at a prompt", "at its post-mortem prompt", "stopped by SIGSTOP",
        "waiting for a debugger"]


@pytest.mark.parametrize("held", HELD)
def test_a_rank_a_person_holds_is_never_quiet_nor_named(held: str) -> None:
    ranks = [_rank(0, 1.0, held=held), _rank(1, 1.0)]
    assert _quiet(ranks, 60) is None
    assert _waited(ranks, 60) is None
    free = [_rank(0, 1.0), _rank(1, 1.0)]
    assert _quiet(free, 60) == Quiet(T0 + 1 * S)
    assert _waited(free, 60) == Waited(KEY, T0 + 1 * S, (0,))
    # A verdict named before: dropped, saying why.
    assert why_dropped((0,), 0, 0, {0: held}, evidence=True) == \
        f"rank 0 is {held}: a person holds it"
    assert why_dropped((1,), 0, 0, {0: held}, evidence=True) == \
        f"the ranks wait for rank 0 ({held})"


@pytest.mark.parametrize(("now_s", "quiet", "waited"), [
    (21.0, None, None),  # just continued ("c" at 20 s): its peers waited for the person
    (23.0, None, None),  # 3 s after: below the 4 s a wait needs
    (24.5, Quiet(T0 + 20 * S), Waited(KEY, T0 + 20 * S, (0,))),  # a hang of its own now
])
def test_the_wait_is_timed_from_the_end_of_the_hold(
    now_s: float, quiet: Quiet | None, waited: Waited | None
) -> None:
    ranks = [_rank(0, 1.0, released_s=20.0), _rank(1, 1.0)]
    assert _quiet(ranks, now_s) == quiet
    assert _waited(ranks, now_s) == waited


@pytest.mark.parametrize(("steps", "gaps", "now_s", "quiet"), [
    (0, 3, 6.0, None),    # a few start-up lines, then 5 s of DDP set-up: no hang
    (0, 3, 26.0, None),   # a 25 s dataset load
    (1, 4, 26.0, None),   # one step is no cadence yet
    (0, 3, 1 + STARTUP_QUIET_S + 0.5, Quiet(T0 + 1 * S, startup=True)),  # past the threshold
    (2, 3, 6.0, Quiet(T0 + 1 * S)),  # two steps: a cadence
    (0, 5, 6.0, Quiet(T0 + 1 * S)),  # five gaps between batches: a cadence
])
def test_a_quiet_start_is_no_hang_before_every_rank_has_a_cadence(
    steps: int, gaps: int, now_s: float, quiet: Quiet | None
) -> None:
    ranks = [_rank(0, 1.0, steps=steps, gaps=gaps, gap=0.01), _rank(1, 1.0)]
    assert has_cadence(ranks[1]) and has_cadence(ranks[0]) == (steps >= 2 or gaps >= 5)
    assert _quiet(ranks, now_s) == quiet
    if quiet is not None and quiet.startup:
        assert quiet.words() == ("every rank is quiet past the 30 s start-up threshold "
                                 "(not every rank has a cadence yet)")


def test_a_rank_that_wrote_nothing_yet_is_not_quiet() -> None:
    assert _quiet([_rank(0, None, steps=0, gaps=0), _rank(1, 1.0)], 100) is None


@pytest.mark.parametrize(("attempt", "held", "evidence", "why"), [
    (0, {}, True, ""),
    (1, {}, True, "attempt 1 began"),  # restart-all: no verdict outlives its attempt
    (1, {0: "at a prompt"}, False, "attempt 1 began"),
    (0, {}, False, "the ranks went on"),  # the rank continued
    (0, {0: "at a prompt"}, True, "rank 0 is at a prompt: a person holds it"),
])
def test_a_verdict_is_dropped_the_moment_its_evidence_is_gone(
    attempt: int, held: dict[int, str], evidence: bool, why: str
) -> None:
    assert why_dropped((0,), 0, attempt, held, evidence=evidence) == why


def test_the_watch_drops_a_reading_of_an_attempt_that_is_over() -> None:
    # Restart-all: attempt 0's live suspect must not be shown in attempt 1 (while the new
    # ranks start, none runs yet). No processes: the watch over an empty run's state.
    state = RunState({}, max_restarts=1)
    said: list[str] = []
    watch = LiveSuspect(state, None, None, said.append,  # type: ignore[arg-type]
                        silence_factor=3.0, silence_min_s=4.0)
    suspect = Suspect(rank=1, reason="rank 1: never entered all_reduce #314 (live, still "
                      "hanging)", ranks=(1,), kind="collective")
    watch.reading = LiveReading(suspect, T0, attempt=0)
    watch._check()
    assert watch.reading is not None and said == []  # its attempt: the last reading stays
    state.attempt = 1
    watch._check()
    assert watch.reading is None
    assert said == ["live suspect dropped: rank 1: attempt 1 began"]


@pytest.mark.parametrize(("ranks", "due_s"), [
    # every rank's last output + its need (3 x its median gap, at least 4 s): the latest
    ([_rank(0, 1.0), _rank(1, 2.5)], 6.5),
    ([_rank(0, 1.0, gap=2.0), _rank(1, 2.5)], 7.0),            # rank 0 needs 6 s
    ([_rank(0, 1.0, steps=0, gaps=3), _rank(1, 2.5)], 2.5 + STARTUP_QUIET_S),  # starting
    ([_rank(0, 1.0, released_s=20.0), _rank(1, 1.0)], 24.0),  # timed from the hold's end
    ([_rank(0, 0.3), _rank(1, 0.1)], 4.3),
    ([_rank(0, 1.0, held="at a prompt"), _rank(1, 1.0)], None),  # a person holds it
    ([_rank(0, None), _rank(1, 1.0)], None),                    # it wrote nothing yet
    ([_rank(0, 1.0)], None),                                    # one rank: never a hang
])
def test_the_watch_knows_when_every_rank_will_be_quiet(
    ranks: list[RankNow], due_s: float | None
) -> None:
    # The live watch looks again at this moment (unless something changes before): the
    # rule must answer there, and not a nanosecond before.
    due = quiet_due(ranks, factor=3.0, min_s=4.0)
    if due_s is None:
        assert due is None
        return
    assert due is not None and abs(due - (T0 + int(due_s * S))) <= 1
    assert every_rank_quiet(ranks, due, factor=3.0, min_s=4.0) is not None
    assert every_rank_quiet(ranks, due - 1, factor=3.0, min_s=4.0) is None


@pytest.mark.parametrize(("now_s", "entered_s", "ranks", "due_s"), [
    (2.0, 1.0, [_rank(0, 1.0), _rank(1, 1.0)], 5.0),    # entered at 1 s: named at 5 s
    (6.0, 1.0, [_rank(0, 1.0), _rank(1, 1.0)], None),   # already long enough: nothing later
    (21.0, 1.0, [_rank(0, 1.0, released_s=20.0), _rank(1, 1.0)], 24.0),  # from the hold
    (2.0, 1.0, [_rank(0, 1.0, held="stopped by SIGSTOP"), _rank(1, 1.0)], None),
    (2.0, 1.0, [_rank(1, 1.0), _rank(2, 1.0)], None),   # rank 0 is not one of these
])
def test_the_watch_knows_when_a_collective_will_have_been_waited_in_long_enough(
    now_s: float, entered_s: float, ranks: list[RankNow], due_s: float | None
) -> None:
    verdicts = [(KEY, T0 + int(entered_s * S), (0,))]
    by_rank = {r.rank: r for r in ranks}
    due = waited_due(verdicts, by_rank, T0 + int(now_s * S), min_s=4.0)
    assert due == (None if due_s is None else T0 + int(due_s * S))
    if due is not None:
        assert waited_verdict(verdicts, by_rank, due, min_s=4.0) is not None
        assert waited_verdict(verdicts, by_rank, due - 1, min_s=4.0) is None


def test_the_watch_looks_when_its_rules_could_answer_or_something_changed() -> None:
    # The check on the run's beat, on a fake clock: it looks when the quiet rule could
    # first answer (on its 1 s grid: when a look every second would have answered), and
    # any event of the run brings the look forward to the next second; while a spell is in
    # force nothing is looked at until something changes (a net: a look a minute).
    from types import SimpleNamespace

    from rankvisor.engine import clock
    from rankvisor.engine.events import RankOutput, RankStats
    from rankvisor.engine.states import RankState
    from rankvisor.engine.supervisor.live_suspect import LONGEST_LOOK_S
    from rankvisor.engine.supervisor.publisher import Publisher
    from rankvisor.engine.supervisor.rank_slot import RankSlot
    from rankvisor.engine.supervisor.ticker import Beat

    fake = clock.FakeClock(monotonic=1000.0, wall=1_700_000_000.0)
    slots = {r: RankSlot(rank=r) for r in (0, 1)}
    for r, slot in slots.items():
        slot.state = RankState.RUNNING
        slot.proc = SimpleNamespace(pid=100 + r)  # type: ignore[assignment]
    state = RunState(slots, max_restarts=0)
    events = Publisher(state)
    said: list[str] = []
    spells: list[float] = []
    beat = Beat("test-live", driver=lambda: None)
    with clock.using(fake):
        watch = LiveSuspect(state, None, None, said.append,  # type: ignore[arg-type]
                            silence_factor=3.0, silence_min_s=4.0, beat=beat, events=events)
        watch._take_quietly = lambda *a: spells.append(fake.monotonic())  # type: ignore
        watch.start()

        def output(rank: int) -> None:
            event = RankOutput(rank, "stdout", ("ready",))
            state.activity.note(event)
            events.publish_now(event)

        looks = 0
        for step, (at, act, due) in enumerate([
            # at      what happens            the next look
            (1000.5,  "output",               1001.0),   # soon: something changed
            (1001.0,  "look",                 1031.0),   # starting: 30 s after 1000.5
            (1005.2,  "stats",                1031.0),   # a stats sample changes nothing
            (1031.0,  "look",                 1032.0),   # every rank quiet: the spell
            (1032.0,  "look",                 1032.0 + LONGEST_LOOK_S),  # in force
            (1040.3,  "output",               1041.0),   # the ranks go on: a look soon
            (1041.0,  "look",                 1041.0 + LONGEST_LOOK_S),  # no spell: quiet
            # again at 1040.3 + 3 x its 39.8 s gap: 1159.7, past the net
            (1101.0,  "look",                 1160.0),
        ]):
            fake.advance(at - fake.monotonic())
            if act == "output":
                output(0)
                output(1)
            elif act == "stats":
                events.publish_now(RankStats(rank=0, pid=100, status="sleeping",
                                             cpu_percent=0.0, rss_bytes=0, num_threads=1,
                                             num_descendants=0, cpu_affinity=(),
                                             cpu_num=None, numa_node=None, uptime_s=1.0,
                                             t=fake.wall()))
            else:
                looks += 1
                beat.run_due(fake.monotonic())
                if watch._taking is not None:
                    watch._taking.join()
            assert beat.next_due() == pytest.approx(due), step
        assert looks == 5 and spells == [1031.0]
        watch.stop()
