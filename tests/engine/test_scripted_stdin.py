"""The scripted engine's stdin: a scripted prompt waits and answers what is typed as a real
rank would (the pipe's bytes, the waits the detector would publish), and input commands are
accepted or refused with the words the real Supervisor uses (tests/test_double_contract.py
holds the two together once the real one carries them out)."""

from __future__ import annotations

from rankvisor.engine.control.server import READ_ONLY_DUMP_REFUSAL, READ_ONLY_REFUSAL
from rankvisor.engine.events import Event, InputWait, RankInput, RankInputWait, RankOutput
from rankvisor.engine.handle import CloseInput, CommandResult, DumpStacks, SendInput
from rankvisor.engine.testing import EPOCH, Prompt, PromptReleased, ScriptedSupervisor, not_piped

from tests.scenarios import PDB_WHERE, pdb_prompt, running_script, scripted_info


def started(*items: object, stdin: str = "pipe", **kwargs: object) -> tuple[
        ScriptedSupervisor, list[Event]]:
    engine = ScriptedSupervisor(
        scripted_info(3, stdin=stdin), [*running_script(3), *items], **kwargs  # type: ignore[arg-type]
    )
    got: list[Event] = []
    engine.subscribe(got.append)
    engine.start()
    got.clear()
    return engine, got


def test_a_prompt_waits_answers_and_asks_again_until_released() -> None:
    engine, got = started()
    engine.emit(pdb_prompt(0))
    wait = InputWait(EPOCH + 30, "(Pdb) ", PDB_WHERE)
    assert got == [RankOutput(0, "stdout", (), partial="(Pdb) "), RankInputWait(0, wait)]
    assert engine.snapshot().ranks[0].input_wait == wait
    got.clear()
    assert engine.execute(SendInput((0,), "p x")) == CommandResult(
        True, "", {"sent": [0], "refused": {}})
    again = InputWait(EPOCH + 60, "(Pdb) ", PDB_WHERE)
    # As a pipe carries it: no echo, so the answer completes the prompt's line.
    assert got == [
        RankInput(0, "p x", EPOCH + 60),
        RankInputWait(0, None),
        RankOutput(0, "stdout", ("(Pdb) 41",), partial="(Pdb) "),
        RankInputWait(0, again),
    ]
    got.clear()
    engine.execute(SendInput((0,), "c"))
    assert got == [RankInput(0, "c", EPOCH + 60), RankInputWait(0, None)]
    assert engine.snapshot().ranks[0].input_wait is None


def test_a_line_to_a_rank_not_waiting_goes_in_and_a_released_or_ended_wait_is_over() -> None:
    engine, got = started(Prompt(1, "continue? "), Prompt(2, "name? "))
    got.clear()
    engine.execute(SendInput((0,), "early"))
    assert got == [RankInput(0, "early", EPOCH + 60)]
    engine.emit(PromptReleased(1))
    assert got[-1] == RankInputWait(1, None)
    engine.rank_exits(2, 0)
    assert RankInputWait(2, None) in got
    assert [r.input_wait for r in engine.snapshot().ranks] == [None, None, None]


def test_eof_ends_the_wait_and_the_stdin_takes_no_more_lines() -> None:
    engine, got = started(Prompt(1, "continue? "))
    got.clear()
    assert engine.execute(CloseInput((1,))).ok
    assert got == [RankInput(1, "", EPOCH + 60, eof=True), RankInputWait(1, None)]
    assert engine.execute(SendInput((1,), "x")) == CommandResult(
        False, "rank 1: not sent: its stdin was closed (EOF was sent)",
        {"sent": [], "refused": {"1": "its stdin was closed (EOF was sent)"}})
    assert engine.execute(CloseInput((1,))).message == (
        "rank 1: not sent: its stdin is closed already")


def test_refusals_in_the_supervisors_words() -> None:
    engine, _ = started()
    engine.rank_exits(2, 0)
    for command, words in (
        (SendInput((2,), "x"), "rank 2 is not running (succeeded): nothing to send input to"),
        (CloseInput((2,)), "rank 2 is not running (succeeded): nothing to close the stdin of"),
        (SendInput((7,), "x"), "no rank 7 (ranks are 0..2)"),
        (SendInput((0,), "a\nb"), "not sent: the input must be one line of text, not 'a\\nb'"),
        (CloseInput(("0",)), "not sent: ranks must be integers, not ('0',)"),  # type: ignore[arg-type]
    ):
        assert engine.execute(command) == CommandResult(False, words), command
    # Ranks named that are not running are skipped, as for every command.
    assert engine.execute(SendInput((1, 2), "x")) == CommandResult(
        True, "skipped rank(s) 2: not running", {"sent": [1], "refused": {"2": "not running"}})
    engine.rank_exits(1, 0)
    engine.rank_exits(0, 0)
    assert engine.execute(SendInput(None, "x")) == CommandResult(
        False, "no running rank to send input to")
    terminal = "the terminal rankvisor was started from"
    for mode, what in (("null", "/dev/null"), ("inherit", terminal)):
        engine, _ = started(stdin=mode)
        words = (f"not sent: the ranks' stdin is {what} (--stdin {mode}); start the run with "
                 "--stdin pipe to type to its ranks")
        assert not_piped(mode) == words
        assert engine.execute(SendInput((0,), "x")) == CommandResult(False, words)
        assert engine.execute(CloseInput()) == CommandResult(False, words)


def test_a_read_only_viewer_is_refused_every_command_but_a_nonblocking_dump() -> None:
    engine, got = started(read_only=True)
    assert engine.execute(SendInput((0,), "x")) == CommandResult(False, READ_ONLY_REFUSAL)
    assert engine.execute(DumpStacks()) == CommandResult(False, READ_ONLY_DUMP_REFUSAL)
    assert engine.execute(DumpStacks(nonblocking=True)).ok
    assert got == []
