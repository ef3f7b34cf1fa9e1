"""A rank a person paused (at a prompt, by SIGSTOP) is not a hang: the pause log folded from
recorded events, the suspect's rule on made-up facts, and the view model's stragglers (the
real job: tests/test_paused_rank_gloo.py)."""

from __future__ import annotations

from rankvisor.engine.events import (
    LIVE_SUSPECT_DROPPED_PREFIX,
    LIVE_SUSPECT_PREFIX,
    AttemptStarted,
    InputWait,
    RankDebuggerWait,
    RankInputWait,
    RankOutput,
    RankRestarted,
    RanksSignalled,
    SupervisorNotice,
)
from rankvisor.engine.forensics.activity import RankActivity
from rankvisor.engine.forensics.pauses import Pause, PauseLog
from rankvisor.engine.forensics.suspect import RankFacts, SignalRecord, find_suspect
from rankvisor.engine.states import RankState
from rankvisor.tui.model import RunView
from rankvisor.tui.widgets.rank_pane import straggler_mark

from tests.scenarios import scripted_info

S = 1_000_000_000
T0 = 1_700_000_000 * S
GLOO = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 3000ms"


def _wait(since_s: float, where: str = "job.py:7 in <module>") -> InputWait:
    return InputWait(since=(T0 + since_s * S) / S, prompt="(Pdb) ", where=where)


def test_the_log_folds_prompts_stops_and_their_ends() -> None:
    log = PauseLog()
    log.observe(RankInputWait(0, _wait(5.0)), t_ns=T0 + 5 * S)
    log.observe(RanksSignalled((2,), "SIGSTOP", "person", "signal", (T0 + 6 * S) / S))
    log.observe(RanksSignalled((1,), "SIGSTOP", "rankvisor", "teardown", (T0 + 6 * S) / S))
    assert {r: p.how for r, p in log.paused().items()} == {0: "prompt", 2: "SIGSTOP"}
    assert log.paused()[0].where == "job.py:7 in <module>"
    # The answer ends the prompt; a SIGCONT ends the stop.
    log.observe(RankInputWait(0, None), t_ns=T0 + 8 * S)
    log.observe(RanksSignalled((2,), "SIGCONT", "person", "signal", (T0 + 9 * S) / S))
    assert log.paused() == {}
    # In force at 7 s: both; at 8.5 s the prompt had ended half a second before.
    assert [p.rank for p in log.at(T0 + 7 * S)] == [0, 2]
    assert [p.rank for p in log.at(T0 + 8 * S + S // 2)] == [2]
    assert [p.rank for p in log.at(T0 + 8 * S + S // 2, grace_ns=S)] == [0, 2]
    # A restart ends a rank's pauses; a new attempt forgets everything.
    log.observe(RankInputWait(3, _wait(10.0)))
    log.observe(RankRestarted(3, 99, 1, 0, False, "", "", ""), t_ns=T0 + 11 * S)
    assert log.paused() == {}
    log.observe(RankInputWait(1, _wait(12.0)))
    log.observe(AttemptStarted(1, "/tmp/x", (1, 2)))
    assert log.paused() == {} and log.at(T0 + 20 * S) == []
    log.observe(RankInputWait(1, _wait(12.0), attempt=0))  # late, of the attempt before
    assert log.paused() == {}


def test_a_wait_for_a_debugger_is_a_pause_until_the_debugger_came() -> None:
    log = PauseLog()
    log.observe(RankDebuggerWait(1, (T0 + 3 * S) / S), t_ns=T0 + 4 * S)
    paused = {r: (p.how, p.since_ns) for r, p in log.paused().items()}
    assert paused == {1: ("debugger", T0 + 3 * S)}
    log.observe(RankDebuggerWait(1, None), t_ns=T0 + 9 * S)
    assert log.paused() == {} and log.released() == {1: T0 + 9 * S}
    # A restart ends it; one of the attempt before is late.
    log.observe(RankDebuggerWait(2, (T0 + 10 * S) / S))
    log.observe(RankRestarted(2, 99, 1, 0, False, "", "", ""), t_ns=T0 + 11 * S)
    assert log.paused() == {}
    log.observe(AttemptStarted(1, "/tmp/x", (1, 2)))
    log.observe(RankDebuggerWait(0, (T0 + 12 * S) / S, attempt=0))
    assert log.paused() == {}


def _act(rank: int, last_s: float, gap: float = 0.1, line: str = "step") -> RankActivity:
    return RankActivity(rank, T0 + int(last_s * S), gap, 50, last_line=line)


def _gloo_run() -> list[RankFacts]:
    """Rank 0 went quiet at 5 s (a person at its prompt); rank 1 waited for it in an
    all_reduce until gloo's timeout at 8 s; the teardown stopped rank 0 after."""
    return [
        RankFacts(0, False, -15, T0 + 9 * S, "", "teardown", _act(0, 5.0, line="> job.py(7)")),
        RankFacts(1, True, 1, T0 + 8 * S, GLOO, None, _act(1, 5.1), said=GLOO),
    ]


def test_a_rank_at_a_prompt_is_the_suspect_as_paused_not_silent() -> None:
    pause = Pause(0, T0 + 5 * S, "prompt", "(Pdb) ", "job.py:7 in <module>")
    s = find_suspect(_gloo_run(), pauses=[pause])
    assert s is not None and (s.rank, s.kind, s.ranks) == (0, "paused", (0,)), s
    assert s.reason.startswith(
        'rank 0: paused by a person at job.py:7 in <module> (waiting at "(Pdb)" since '
    )
    assert s.reason.endswith("); the others failed after")
    # Without the pause, the same facts read as rank 0 outliving rank 1's timeout.
    assert find_suspect(_gloo_run()).kind in ("silence", "outlived")  # type: ignore[union-attr]


def test_a_paused_rank_s_silence_and_its_waiting_peers_are_never_silence() -> None:
    """Three ranks: rank 0 at a prompt since 5 s, rank 2 silent after it (it waits in a
    collective), rank 1's timeout at 20 s. Without the pause, ranks 0 and 2 read as the ones that
    outlived it; with it, rank 0 alone is named."""
    facts = [
        RankFacts(0, False, -15, T0 + 21 * S, "", "teardown", _act(0, 5.0)),
        RankFacts(1, True, 1, T0 + 20 * S, GLOO, None, _act(1, 19.9)),
        RankFacts(2, False, -15, T0 + 21 * S, "", "teardown", _act(2, 5.5)),
    ]
    assert find_suspect(facts).kind in ("silence", "outlived")  # type: ignore[union-attr]
    pause = Pause(0, T0 + 5 * S, "prompt")
    s = find_suspect(facts, pauses=[pause])
    assert s is not None and (s.rank, s.kind, s.ranks) == (0, "paused", (0,)), s
    assert "(waiting for input since " in s.reason
    # A rank that fell silent well before the pause is still silent, and earlier.
    early = [*facts[:2], RankFacts(2, False, -15, T0 + 21 * S, "", "teardown", _act(2, 2.0))]
    s = find_suspect(early, pauses=[pause])
    assert s is not None and s.rank == 2 and s.kind == "silence", s


def test_a_person_s_sigstop_stays_a_signal_and_hides_the_peers_silence() -> None:
    facts = _gloo_run()
    stop = SignalRecord((0,), "SIGSTOP", "person", "signal", T0 + 5 * S)
    pause = Pause(0, T0 + 5 * S, "SIGSTOP")
    s = find_suspect(facts, [stop], pauses=[pause])
    assert s is not None and (s.rank, s.kind) == (0, "signal"), s
    assert s.reason.startswith("rank 0: stopped by your SIGSTOP at ")


def test_a_rank_held_at_its_post_mortem_prompt_is_told_by_its_own_failure() -> None:
    """Rank 1 raised at 5 s and sat at its post-mortem prompt; rank 0's collective timed out
    at 8 s; rank 1 ended (exit 1) once the person continued at 20 s."""
    facts = [
        RankFacts(0, True, 1, T0 + 8 * S, GLOO, None, _act(0, 4.9), said=GLOO),
        RankFacts(1, True, 1, T0 + 20 * S, "ZeroDivisionError: division by zero", None,
                  _act(1, 5.0), said="ZeroDivisionError: division by zero"),
    ]
    pause = Pause(1, T0 + 5 * S, "prompt", "(Pdb) ", "job.py:3 in divide")
    s = find_suspect(facts, pauses=[pause])
    assert s is not None and (s.rank, s.kind, s.ranks) == (1, "failure", (1,)), s
    assert s.reason.startswith("rank 1: failed on its own first, held at a prompt from ")
    assert s.reason.endswith("until it ended (exit code 1): ZeroDivisionError: division by zero")


def test_a_failure_before_the_pause_stays_the_suspect() -> None:
    facts = [
        RankFacts(0, False, -15, T0 + 9 * S, "", "teardown", _act(0, 5.0)),
        RankFacts(1, True, 1, T0 + 3 * S, "ValueError: loss is NaN", None, _act(1, 2.9),
                  said="ValueError: loss is NaN"),
    ]
    s = find_suspect(facts, pauses=[Pause(0, T0 + 5 * S, "prompt")])
    assert s is not None and (s.rank, s.kind) == (1, "failure"), s


def _running_view(nprocs: int) -> RunView:
    run = RunView(scripted_info(nprocs))
    for view in run.ranks:
        view.state = RankState.RUNNING
    return run


def _talk(run: RunView, ranks: range, until: int) -> None:
    for t in range(until):
        for r in ranks:
            run.add_output(RankOutput(r, "stdout", (f"step {t}",)))
            run.ranks[r].saw_output(float(t))


def test_the_view_never_flags_a_paused_rank_and_says_what_its_peers_wait_for() -> None:
    run = _running_view(3)
    _talk(run, range(3), 10)  # every rank writes once a second up to 9 s
    run.apply(RankInputWait(0, _wait(9.5)))
    run.update_progress(30.0)  # 20 s of silence all round
    views = run.ranks
    assert views[0].straggler == "" and views[0].paused == "at a prompt"
    assert views[0].quiet_for(30.0) is None
    for peer in views[1:]:
        assert peer.straggler == ""
        assert peer.waiting_for == "waiting for rank 0 (at a prompt)"
        assert straggler_mark(peer, 30.0) == "⏸ waiting for rank 0 (at a prompt)"
    # The person answers: the ranks went on, so nobody is silent yet; from then on the
    # silence is the ranks' own again.
    run.apply(RankInputWait(0, None))
    run.update_progress(31.0)
    assert views[0].paused == "" and {v.straggler for v in views} == {""}
    assert {v.waiting_for for v in views} == {""}
    run.update_progress(33.0)
    assert {v.straggler for v in views} == {""}
    run.update_progress(34.5)
    assert {v.straggler for v in views} == {"silent"}


def test_the_view_never_flags_a_rank_waiting_for_a_debugger() -> None:
    run = _running_view(3)
    _talk(run, range(1, 3), 10)  # rank 0 waits for its debugger from the start
    run.apply(RankDebuggerWait(0, 0.5))
    run.update_progress(45.0)  # past the quiet start's threshold, silent all round
    views = run.ranks
    assert views[0].straggler == "" and views[0].paused == "waiting for a debugger"
    for peer in views[1:]:
        assert peer.straggler == ""
        assert peer.waiting_for == "waiting for rank 0 (waiting for a debugger)"


def test_a_rank_stopped_by_a_person_s_sigstop_is_paused_until_sigcont() -> None:
    run = _running_view(4)
    _talk(run, range(4), 10)
    _talk(run, range(1, 4), 10)
    run.apply(RanksSignalled((0,), "SIGSTOP", "person", "signal", 9.0))
    for t in range(10, 30):  # ranks 2 and 3 go on; rank 1 waits for rank 0
        for r in (2, 3):
            run.ranks[r].saw_output(float(t))
    run.update_progress(30.0)
    views = run.ranks
    assert views[0].straggler == "" and views[0].paused == "stopped by SIGSTOP"
    assert views[1].waiting_for == "waiting for rank 0 (stopped by SIGSTOP)"
    run.apply(RanksSignalled((0,), "SIGCONT", "person", "signal", 30.0))
    run.update_progress(30.5)
    # Continued: nobody is silent the moment it goes on; a rank that stays so, is.
    assert {v.straggler for v in views} == {""}
    for t in range(30, 35):
        for r in (2, 3):
            run.ranks[r].saw_output(float(t))
    run.update_progress(34.0)
    assert views[0].straggler == "silent" and views[1].straggler == "silent"
    assert views[2].straggler == views[3].straggler == ""


def test_a_late_viewer_reads_the_wait_from_the_snapshot() -> None:
    info = scripted_info(2)
    first = info.ranks[0]
    waiting = type(first)(**{**{f: getattr(first, f) for f in first.__dataclass_fields__},
                             "input_wait": _wait(1.0)})
    run = RunView(type(info)(**{**{f: getattr(info, f) for f in info.__dataclass_fields__},
                                "ranks": (waiting, *info.ranks[1:])}))
    assert run.pauses.paused()[0].where == "job.py:7 in <module>"


def test_a_dropped_live_suspect_leaves_the_view() -> None:
    run = _running_view(2)
    run.apply(SupervisorNotice(f"{LIVE_SUSPECT_PREFIX}rank 0: never entered all_reduce #7 "
                               "(live, still hanging)", "warning"))
    assert run.live_suspect.startswith("rank 0: never entered")
    run.apply(SupervisorNotice(f"{LIVE_SUSPECT_DROPPED_PREFIX}rank 0: the ranks went on"))
    assert run.live_suspect == ""
