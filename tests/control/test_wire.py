"""Every type of the control protocol survives a trip over the wire, as its own type."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rankvisor.engine.control import wire
from rankvisor.engine.errors import ProcessFailure
from rankvisor.engine.events import (
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    RankOutput,
    RankRestarted,
    RanksSignalled,
    RankStateChanged,
    RankStats,
    RunFinished,
    SupervisorNotice,
    Suspect,
    TimerExpired,
)
from rankvisor.engine.forensics.exit_cause import ExitCause
from rankvisor.engine.handle import (
    CommandResult,
    DumpStacks,
    KillRanks,
    RankInfo,
    ReadCollectives,
    RestartAll,
    RestartRank,
    RunInfo,
    SignalRanks,
    TerminateRanks,
)
from rankvisor.engine.result import RunProcsResult
from rankvisor.engine.states import RankState

ints = st.integers(-(2**40), 2**40)
small = st.integers(0, 4096)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=40)
floats = st.floats(allow_nan=False)
opt_int = st.none() | ints
ranks = st.tuples() | st.lists(small, max_size=5).map(tuple)
states = st.sampled_from(RankState)
streams = st.sampled_from(["stdout", "stderr", "filtered_stdout", "filtered_stderr"])
json_values = st.recursive(
    st.none() | st.booleans() | ints | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def failures(draw: Any) -> ProcessFailure:
    failure = ProcessFailure(
        draw(small), draw(ints), draw(ints), "", exit_time_ns=draw(st.integers(0, 2**62)),
        caused_by_us=draw(st.booleans()),
    )
    # The fields its error file would have set, as the supervisor saw them.
    failure.error_file = draw(text)
    failure.message = draw(text | st.dictionaries(text, json_values, max_size=3))
    failure.error_file_data = draw(st.dictionaries(text, json_values, max_size=3))
    failure.timestamp = draw(ints)
    failure.error_file_problem = draw(st.none() | text)
    failure._file_timestamp = draw(opt_int)
    return failure


results = st.builds(
    RunProcsResult,
    return_values=st.dictionaries(small, st.none() | text, max_size=3),
    failures=st.dictionaries(small, failures(), max_size=3),
    stdouts=st.dictionaries(small, text, max_size=3),
    stderrs=st.dictionaries(small, text, max_size=3),
    stopped=st.dictionaries(small, failures(), max_size=3),
)
exit_causes = st.none() | st.builds(ExitCause, text, text, text)
rank_infos = st.builds(
    RankInfo, small, states, opt_int, small, small, text, text, text, opt_int,
    st.none() | text, opt_int, st.booleans(), exit_causes,
)
run_infos = st.builds(
    RunInfo, text, small, text, text, small, floats, st.lists(text, max_size=3).map(tuple),
    text, text, st.lists(text, max_size=2).map(tuple), st.lists(text, max_size=2).map(tuple),
    st.dictionaries(small, text, max_size=3), st.lists(rank_infos, max_size=3).map(tuple),
    st.booleans(), text, text, progress_regex=text,
)
events = st.one_of(
    st.builds(RankOutput, small, streams, st.lists(line, max_size=6).map(tuple), line, small,
              small),
    st.builds(RankStateChanged, small, states, states, opt_int, opt_int, st.none() | text,
              small, small, st.none() | failures(), st.booleans(), floats, exit_causes),
    st.builds(RankStats, small, ints, text, floats, ints, small, small,
              st.lists(small, max_size=4).map(tuple), opt_int, opt_int, floats, floats,
              opt_int, opt_int, opt_int, st.none() | floats,
              st.lists(small, max_size=4).map(tuple)),
    st.builds(EscalationScheduled, ranks, text, floats, floats),
    st.builds(EscalationFinished, ranks, ranks),
    st.builds(RankRestarted, small, ints, small, small, st.booleans(), text, text, text),
    st.builds(AttemptStarted, small, text, ranks),
    st.builds(TimerExpired, small, ints, text),
    st.builds(RunFinished, results, small, opt_int),
    st.builds(RunFinished, results, small, opt_int, st.none() | st.builds(
        Suspect, small, text, ranks, st.lists(text, max_size=3).map(tuple), text,
        st.integers(0, 2**62), text, st.sampled_from(["", "stdout", "stderr"]),
        st.integers(-1, 2**40), st.integers(0, 2**62),
    )),
    st.builds(RanksSignalled, ranks, text, st.sampled_from(["person", "rankvisor"]), text,
              floats),
    st.builds(SupervisorNotice, text, st.sampled_from(["information", "warning", "error"])),
)
commands = st.one_of(
    st.builds(SignalRanks, ranks, st.integers(1, 64)),
    st.builds(TerminateRanks, st.none() | ranks, st.integers(1, 64), st.none() | floats),
    st.builds(KillRanks, st.none() | ranks),
    st.builds(RestartRank, small),
    st.builds(RestartAll),
    st.builds(DumpStacks, st.none() | ranks, st.booleans(), st.booleans()),
    st.builds(ReadCollectives),
)


def _failure_fields(f: ProcessFailure) -> dict[str, Any]:
    return {x.name: getattr(f, x.name) for x in dataclasses.fields(f)}


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    assert a == b
    # ProcessFailure's equality leaves out a field or two: compare every one.
    if isinstance(a, RunFinished):
        for table in ("failures", "stopped"):
            for k, f in getattr(a.result, table).items():
                assert _failure_fields(getattr(b.result, table)[k]) == _failure_fields(f)
    if isinstance(a, RankStateChanged) and a.failure is not None:
        assert _failure_fields(b.failure) == _failure_fields(a.failure)


@settings(max_examples=300, deadline=None)
@given(events)
def test_every_event_round_trips(event: Any) -> None:
    line_ = wire.encode_event(event)
    assert line_.endswith(b"\n") and line_.count(b"\n") == 1
    back = wire.event_from_wire(wire.decode_message(line_))
    # The generic form of an output batch reads back the same as the compact one.
    generic = wire.encode_message(wire.event_to_wire(event))
    assert wire.event_from_wire(wire.decode_message(generic)) == back
    if isinstance(event, RunFinished):
        # Return values are objects: only their repr() travels.
        rv = {k: None if v is None else repr(v) for k, v in event.result.return_values.items()}
        assert back.result.return_values == rv  # type: ignore[union-attr]
        back.result.return_values = event.result.return_values  # type: ignore[union-attr]
    _same(event, back)


@settings(max_examples=200, deadline=None)
@given(commands, st.integers(0, 2**31))
def test_every_command_round_trips(command: Any, request_id: int) -> None:
    message = wire.decode_message(wire.encode_command(request_id, command))
    assert message["t"] == "command" and message["id"] == request_id
    _same(command, wire.command_from_wire(message["command"]))


@given(st.booleans(), text, st.integers(0, 99))
def test_command_results_round_trip(ok: bool, message: str, request_id: int) -> None:
    back = wire.decode_message(wire.encode_result(request_id, CommandResult(ok, message)))
    assert back["id"] == request_id
    assert wire.result_from_wire(back) == CommandResult(ok, message)


def test_a_stack_dump_travels_in_the_result_and_an_old_result_has_none() -> None:
    from rankvisor.engine.forensics.stacks import Frame, RankStack, StackDump, ThreadStack, merge

    ranks = tuple(
        RankStack(r, 100 + r, (ThreadStack(100 + r, "MainThread", (
            Frame("all_reduce" if r != 1 else "stuck_in_data_loader", "/x/train.py", 10 + r),
            Frame("main", "/x/train.py", 40)), main=True),))
        for r in range(4)
    )
    dump = StackDump(1.5, ranks, merge(ranks), path="/logs/r/stacks/x.txt")
    result = CommandResult(True, "", dump.to_dict())
    back = wire.result_from_wire(wire.decode_message(wire.encode_result(7, result)))
    assert back == result
    assert back.data is not None and StackDump.from_dict(back.data) == dump
    assert [g.ranks for g in dump.groups] == [(1,), (0, 2, 3)] and dump.groups[0].odd
    # A result from a peer that knows no data: none, not an error.
    old = wire.decode_message(b'{"t":"result","id":1,"ok":true,"message":""}')
    assert wire.result_from_wire(old) == CommandResult(True)


@settings(max_examples=150, deadline=None)
@given(run_infos)
def test_run_info_round_trips_with_int_keys_tuples_and_states(info: RunInfo) -> None:
    back = wire.run_info_from_wire(json.loads(json.dumps(wire.run_info_to_wire(info))))
    _same(info, back)
    assert all(isinstance(k, int) for k in back.log_line_prefixes)


def test_a_failure_is_rebuilt_without_reading_its_error_file(tmp_path: Any) -> None:
    error_file = tmp_path / "error.json"
    error_file.write_text('{"message": "from the file"}')
    failure = ProcessFailure(0, 123, 1, str(error_file), exit_time_ns=5 * 10**9)
    error_file.write_text("{}")  # rewritten (a restart): the viewer must see the old words
    back = wire.failure_from_wire(json.loads(json.dumps(wire.failure_to_wire(failure))))
    assert _failure_fields(back) == _failure_fields(failure)
    error_file.unlink()
    back = wire.failure_from_wire(wire.failure_to_wire(failure))
    assert back.error_file == str(error_file) and back.message == failure.message


def test_a_newer_peer_does_not_crash_a_reader() -> None:
    # An unknown message type is the caller's to ignore; an unknown event type is None.
    assert wire.decode_message(b'{"t":"teleport","x":1}\n')["t"] == "teleport"
    assert wire.event_from_wire({"t": "ev", "type": "RankTeleported", "rank": 1}) is None
    # Fields we do not know are left out; fields we lack take their defaults.
    ev = wire.event_from_wire({"t": "ev", "type": "SupervisorNotice",
                               "e": {"message": "hi", "colour": "mauve"}})
    assert ev == SupervisorNotice("hi")
    out = wire.event_from_wire({"t": "o", "r": 1, "s": 0, "f": 3, "l": "a\nb", "z": [1]})
    assert out == RankOutput(1, "stdout", ("a", "b"), first_line=3)
    for bad in (b"not json\n", b"[1]\n", b'{"x":1}\n'):
        try:
            wire.decode_message(bad)
        except wire.WireError:
            pass
        else:
            raise AssertionError(bad)


def test_output_lines_keep_empty_lines_and_lone_surrogates() -> None:
    for lines in ((), ("",), ("", ""), ("a", "", "b"), ("\udcff x",)):
        event = RankOutput(0, "stderr", lines, partial="50%\r", attempt=2, first_line=9)
        assert wire.event_from_wire(wire.decode_message(wire.encode_event(event))) == event
