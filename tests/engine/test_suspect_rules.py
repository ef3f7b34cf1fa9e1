"""The suspect's rules on made-up facts: knock-on messages, silence relative to peers,
a person's signals, failures together, the fallbacks (the real jobs: test_suspect_gloo)."""

from __future__ import annotations

from rankvisor.engine.events import RankOutput
from rankvisor.engine.forensics.activity import OutputActivity, RankActivity
from rankvisor.engine.forensics.collectives import Verdict
from rankvisor.engine.forensics.knockon import knock_on_reason
from rankvisor.engine.forensics.suspect import RankFacts, SignalRecord, find_suspect

from .test_torch_texts import _mismatch

S = 1_000_000_000
T0 = 1_700_000_000 * S


def _act(
    rank: int, last_s: float | None, gap: float | None = 0.1, line: str = "step"
) -> RankActivity:
    last = None if last_s is None else T0 + int(last_s * S)
    return RankActivity(rank, last, gap, 50 if gap else 0, last_line=line)


def _facts(**kw: object) -> RankFacts:
    base: dict[str, object] = dict(failed=False, exitcode=None, exit_time_ns=None, message="",
                                   stopped_by="teardown")
    base.update(kw)
    return RankFacts(**base)  # type: ignore[arg-type]


def test_knock_on_messages_are_recognised() -> None:
    gloo = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [1.2.3.4]:5"
    assert knock_on_reason(gloo) == "a peer closed its connection"
    assert knock_on_reason("Timed out waiting 3000ms for recv operation to complete")
    assert knock_on_reason("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL")
    assert knock_on_reason("torch.distributed.DistBackendError: NCCL error")
    assert knock_on_reason("ConnectionResetError: Connection reset by peer")
    assert knock_on_reason("RuntimeError: CUDA out of memory") is None
    assert knock_on_reason("ValueError: loss is NaN") is None


def test_silence_names_the_rank_that_stopped_while_its_peers_went_on() -> None:
    facts = [
        _facts(rank=0, activity=_act(0, 9.9)),
        _facts(rank=1, failed=True, exitcode=1, exit_time_ns=T0 + 10 * S, stopped_by=None,
               message="RuntimeError: my own watchdog gave up", activity=_act(1, 9.95)),
        _facts(rank=2, activity=_act(2, 4.0, line="last words")),
    ]
    s = find_suspect(facts)
    assert s is not None and (s.rank, s.kind, s.ranks) == (2, "silence", (2,))
    assert s.reason == "rank 2: silent 6.0 s before the first failure; last line: last words"
    # Below the minimum, or under the factor times the peers' gap, it is not silence.
    assert find_suspect(facts, silence_min_s=7).kind == "failure"  # type: ignore[union-attr]
    slow = [_facts(rank=f.rank, failed=f.failed, exitcode=f.exitcode,
                   exit_time_ns=f.exit_time_ns, stopped_by=f.stopped_by, message=f.message,
                   activity=_act(f.rank, (f.activity.last_ns - T0) / S, gap=2.5))
            for f in facts]  # type: ignore[operator]
    assert find_suspect(slow).rank == 1  # type: ignore[union-attr]


def test_everyone_silent_together_sets_nobody_apart() -> None:
    facts = [
        _facts(rank=r, failed=r != 1, exitcode=1 if r != 1 else -15,
               exit_time_ns=T0 + 10 * S + r, stopped_by=None if r != 1 else "teardown",
               message="Timed out waiting 3000ms for recv" if r != 1 else "",
               activity=_act(r, 4.0))
        for r in range(3)
    ]
    s = find_suspect(facts)
    assert s is not None and (s.rank, s.kind) == (1, "outlived")


def test_a_person_signal_before_the_first_failure_is_evidence_after_it_is_not() -> None:
    facts = [
        _facts(rank=0, failed=True, exitcode=1, exit_time_ns=T0 + 10 * S, stopped_by=None,
               message="Connection closed by peer", activity=_act(0, 9.9)),
        _facts(rank=1, exitcode=-10, exit_time_ns=T0 + 9 * S, stopped_by="signal",
               activity=_act(1, 8.9)),
    ]
    sig = SignalRecord((1,), "SIGUSR1", "person", "signal", T0 + 9 * S)
    s = find_suspect(facts, [sig])
    assert s is not None and (s.rank, s.kind) == (1, "signal")
    assert "killed by your SIGUSR1 at " in s.reason and s.reason.endswith("failed after")
    teardown = SignalRecord((1,), "SIGTERM", "rankvisor", "teardown", T0 + 9 * S)
    assert find_suspect(facts, [teardown]).kind != "signal"  # type: ignore[union-attr]
    late = SignalRecord((1,), "SIGUSR1", "person", "signal", T0 + 11 * S)
    assert find_suspect(facts, [late]).kind != "signal"  # type: ignore[union-attr]


def test_no_failure_on_its_own_means_no_suspect() -> None:
    facts = [_facts(rank=r, exitcode=-15, exit_time_ns=T0, activity=_act(r, 1)) for r in range(2)]
    assert find_suspect(facts) is None


def test_silence_is_measured_to_where_the_first_failure_began_not_to_its_exit() -> None:
    # Ranks 0 and 2 recorded their collective's timeout (their error files) at 10 s and, on
    # a loaded machine, exited 3 s later; their last redraws came just before 10 s. Rank 1
    # hung at 5 s. Measured to the exits every rank looks silent for 3 s or more, and 8 s is
    # not three times that: the hang was "outlived".
    timeout = "RuntimeError: Timed out waiting 5000ms for recv operation to complete"

    def facts(recorded: bool) -> list[RankFacts]:
        return [
            _facts(rank=r, failed=True, exitcode=1, exit_time_ns=T0 + 13 * S + r,
                   stopped_by=None, message=timeout, activity=_act(r, 9.9),
                   error_ns=T0 + 10 * S if recorded else None)
            for r in (0, 2)
        ] + [_facts(rank=1, activity=_act(1, 5.0, line="step 4"))]

    s = find_suspect(facts(recorded=True))
    assert s is not None and (s.rank, s.kind) == (1, "silence"), s
    assert s.reason == "rank 1: silent 5.0 s before the first failure; last line: step 4"
    assert s.first_failure_ns == T0 + 13 * S  # torch's first failure is still the exit
    s = find_suspect(facts(recorded=False))
    assert s is not None and (s.rank, s.kind) == (1, "outlived"), s


def test_activity_keeps_what_came_before_the_cutoff() -> None:
    act = OutputActivity()
    for i in range(5):
        act.note(RankOutput(0, "stdout", (f"step {i}",), first_line=i), T0 + i * S)
    act.note(RankOutput(0, "stdout", (), partial="50%|###"), T0 + 5 * S)
    act.cutoff(T0 + 5 * S)
    act.note(RankOutput(0, "stderr", ("Traceback",), first_line=0), T0 + 6 * S)
    r = act.reading(0)
    assert (r.last_ns, r.median_gap_s, r.last_line, r.last_line_no) == (
        T0 + 5 * S, 1.0, "50%|###", -1)
    assert act.reading(0, until_ns=T0 + 3 * S).last_line == "step 3"
    # The status refresh's short form agrees with a whole reading at every moment.
    for until in (T0 - 1, T0, T0 + 2 * S + 1, T0 + 5 * S, T0 + 9 * S):
        assert act.last_ns(0, until) == act.reading(0, until_ns=until).last_ns, until
    assert act.last_ns(1, T0 + 9 * S) is None  # a rank that wrote nothing
    act.new_attempt(1)
    assert act.reading(0).last_ns is None
    assert act.last_ns(0, T0 + 9 * S) is None


def test_a_batch_written_before_the_cutoff_and_read_after_it_counts() -> None:
    # On a loaded machine the pump reads a peer's last "waiting" redraws a second after the
    # first failure; they are what it was doing before it, and its silence is not longer
    # for the late read (a silent hang was called "outlived" when they were left out).
    act = OutputActivity()
    act.note(RankOutput(0, "stdout", ("step 4",), written_ns=T0 + 2 * S))
    act.cutoff(T0 + 5 * S)
    act.note(RankOutput(0, "stdout", (), partial="waiting", written_ns=T0 + 5 * S - 1))
    act.note(RankOutput(0, "stderr", ("Traceback",), written_ns=T0 + 5 * S + 1))
    r = act.reading(0)
    assert (r.last_ns, r.last_line, r.gaps) == (T0 + 5 * S - 1, "waiting", 1)
    # A batch with no write time is timed as it is noted: after the cutoff, left out.
    act.note(RankOutput(0, "stdout", ("late",)))
    assert act.reading(0).last_line == "waiting"


def test_torch_s_mismatch_check_outweighs_a_rank_asked_on_its_way_in() -> None:
    # Every rank fails at once on torch's DETAIL check (rank 1 ran broadcast #4, ranks 0 and
    # 2 all_reduce #4). On a loaded machine the Flight Recorder was asked of ranks 1 and 2
    # before they had entered #4: "never entered" for both, though rank 2's own error shows
    # it ran all_reduce #4 (a CI run's verdict named ranks 1 and 2).
    texts = {0: _mismatch(0, "ALLREDUCE", 1, "BROADCAST"),
             1: _mismatch(1, "BROADCAST", 0, "ALLREDUCE"),
             2: _mismatch(2, "ALLREDUCE", 1, "BROADCAST")}
    facts = [_facts(rank=r, failed=True, exitcode=1, exit_time_ns=T0 + r * 1000,
                    stopped_by=None, message=texts[r], activity=_act(r, 0.5))
             for r in range(3)]
    missing = Verdict("0", "default_pg", "all_reduce", 4, (0,), (1, 2), {1: 3, 2: 3})
    s = find_suspect(facts, collectives=[missing])
    assert s is not None and (s.rank, s.ranks) == (1, (1,)), s
    assert "ran BROADCAST where ranks 0 and 2 ran ALLREDUCE" in s.reason
    # Without torch's texts the Flight Recorder's reading stands.
    plain = [_facts(rank=r, failed=True, exitcode=1, exit_time_ns=T0 + r * 1000,
                    stopped_by=None, message="RuntimeError: boom", activity=_act(r, 0.5))
             for r in range(3)]
    s = find_suspect(plain, collectives=[missing])
    assert s is not None and s.ranks == (1, 2), s
    # A Flight Recorder desync (another op under the same number: what a rank ran, as
    # torch's check is) still comes first; here it names another rank, to show the order.
    desync = Verdict("0", "default_pg", "all_reduce", 4, (1, 2), (0,), {0: 4}, kind="desync",
                     odd_of={0: "barrier"})
    s = find_suspect(facts, collectives=[desync])
    assert s is not None and s.ranks == (0,), s


def test_a_person_s_restart_of_one_rank_is_the_first_domino() -> None:
    # Rank 1 restarted alone (its new incarnation runs, without an error); its old peers'
    # collective broke: "Connection closed by peer" on ranks 2 and 3, rank 0 still running.
    closed = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer"
    facts = [
        _facts(rank=0, stopped_by=None, activity=_act(0, 9.0)),
        _facts(rank=1, stopped_by=None, activity=_act(1, 9.5)),
        _facts(rank=2, failed=True, exitcode=1, exit_time_ns=T0 + 10 * S, stopped_by=None,
               message=closed, activity=_act(2, 9.9)),
        _facts(rank=3, failed=True, exitcode=1, exit_time_ns=T0 + 10 * S + 1000,
               stopped_by=None, message=closed, activity=_act(3, 9.9)),
    ]
    restart = SignalRecord((1,), "SIGTERM", "person", "restart", T0 + 8 * S)
    s = find_suspect(facts, [restart])
    assert s is not None and (s.rank, s.kind, s.ranks) == (1, "signal", (1,)), s
    assert s.reason.startswith("rank 1: restarted by your SIGTERM at ")
    assert s.reason.endswith("; the others failed after")


def test_a_terminate_through_an_attached_torchrun_is_the_first_domino() -> None:
    import signal

    from rankvisor.engine.attach.first_domino import first_domino
    from rankvisor.engine.errors import ProcessFailure

    ours = {1: ProcessFailure(1, 11, -signal.SIGTERM, "", exit_time_ns=T0, caused_by_us=True)}
    torchrun_s = {0: ProcessFailure(0, 10, -signal.SIGTERM, "", exit_time_ns=T0 + S)}
    s = first_domino(ours, torchrun_s, {1: signal.SIGTERM})
    assert s is not None and (s.rank, s.kind) == (1, "signal")
    assert s.reason.startswith("rank 1: terminated by your SIGTERM (it ended at ")
    assert s.reason.endswith("torchrun then stopped rank(s) 0")
    # A failure of its own (exit 1), or one before ours, is not torchrun's teardown.
    own = {0: ProcessFailure(0, 10, 1, "", exit_time_ns=T0 + S)}
    assert first_domino(ours, own, {1: signal.SIGTERM}) is None
    early = {0: ProcessFailure(0, 10, -signal.SIGTERM, "", exit_time_ns=T0 - S)}
    assert first_domino(ours, early, {1: signal.SIGTERM}) is None
    # Both exits seen in one wake-up of the watcher share its moment (a loaded run polled
    # both pidfds ready at once, torchrun's worker listed first): still ours first.
    together = {0: ProcessFailure(0, 10, -signal.SIGTERM, "", exit_time_ns=T0)}
    s = first_domino(ours, together, {1: signal.SIGTERM})
    assert s is not None and s.rank == 1


def test_a_rank_s_last_step_outlives_its_heartbeat_lines() -> None:
    from rankvisor.engine.forensics.progress import ProgressReader

    act = OutputActivity()
    reader = ProgressReader()
    act.step_of = lambda line: (p.step if (p := reader.read(line)) else None)
    act.note(RankOutput(0, "stdout", ("step 3", "step 4", "loss 0.1")), T0)
    for i in range(40):  # more than the lines it keeps
        act.note(RankOutput(0, "stdout", ("heartbeat",), first_line=3 + i), T0 + i * S)
    assert act.last_step(0) == 4 and act.last_step(1) is None


def test_a_rank_rankvisor_s_sigterm_ended_after_it_raised_is_no_first_domino() -> None:
    # Rank 0 raised first; rank 1 had printed a traceback of its own when the teardown's
    # SIGTERM ended its exit (torch counts its failure; the signal is ours). It is named
    # only for an error of its own that is not a knock-on, and never for the SIGTERM.
    closed = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer"

    def run(message: str) -> object:
        facts = [
            _facts(rank=0, failed=True, exitcode=1, exit_time_ns=T0 + 10 * S, stopped_by=None,
                   message="RuntimeError: bad batch", said="RuntimeError: bad batch",
                   activity=_act(0, 9.9)),
            _facts(rank=1, failed=True, exitcode=-15, exit_time_ns=T0 + 10 * S + 3_000_000,
                   stopped_by=None, message=message, said=message, ended_by="SIGTERM",
                   activity=_act(1, 9.9)),
            _facts(rank=2, exitcode=-15, exit_time_ns=T0 + 10 * S + 4_000_000,
                   activity=_act(2, 9.9)),
        ]
        return find_suspect(facts)

    for message in (closed, ""):  # a knock-on; a traceback the signal cut short
        s = run(message)
        assert s is not None and (s.rank, s.ranks) == (0, (0,)), s  # type: ignore[attr-defined]
        assert "SIGTERM" not in s.reason  # type: ignore[attr-defined]
    s = run("ValueError: its own")
    assert s is not None and s.ranks == (0, 1), s  # type: ignore[attr-defined]
    assert "also rank 1: failed on its own first (it raised before rankvisor's SIGTERM " \
           "ended it): ValueError: its own" in s.reason  # type: ignore[attr-defined]
