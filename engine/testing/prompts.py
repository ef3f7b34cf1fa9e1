"""Scripted ranks at a prompt: what the ``ScriptedSupervisor`` makes of a typed line.

A ``Prompt`` in a script makes a rank wait on its stdin as a real one blocked in ``input()`` or
at pdb's ``(Pdb)`` does: its prompt becomes the rank's unfinished output line, then a
``RankInputWait`` says it waits (as the engine's detector would). A line sent to it
(``SendInput``) is answered from the prompt's ``answers``: the rank prints the answer's lines
and either asks again (pdb after ``p x``) or goes on (pdb after ``c``, ``input()`` after any
line). The output is what a pipe would carry: the prompt stays at the start of the line the
answer completes ("(Pdb) 41"), exactly as the pump reports it from the real file.
``PromptReleased`` ends a wait without a line (the rank was answered some other way).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from ..events import Event, InputWait, RankInputWait, RankOutput

__all__ = ["RELEASE", "Answer", "Prompt", "PromptReleased", "ScriptedStdin"]


@dataclass(frozen=True, slots=True)
class Answer:
    """What a scripted rank at a prompt does with a line it read."""

    lines: tuple[str, ...] = ()
    """What it prints (complete lines) before it asks again or goes on."""
    again: bool = True
    """Prompt again (pdb after ``p x``); False: the rank goes on (pdb's ``c``)."""


RELEASE = Answer(again=False)
"""Read the line and go on, printing nothing (``input()``)."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """Script item: ``rank`` writes ``prompt`` without a newline and waits on its stdin."""

    rank: int
    prompt: str = "(Pdb) "
    where: str = ""
    """pdb's place ("job.py:7 in <module>"), "" for a plain ``input()``."""
    since: float = 0.0
    """When it began waiting (wall clock); the supervisor's script time if 0."""
    answers: Mapping[str, Answer] = field(default_factory=dict)
    """A line (stripped) -> what the rank does with it."""
    otherwise: Answer = RELEASE
    """What it does with any other line."""
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class PromptReleased:
    """Script item: ``rank`` stops waiting without a line from rankvisor."""

    rank: int
    attempt: int = 0


class ScriptedStdin:
    """The ranks waiting at a scripted prompt, and the events their answers make.

    Not thread-safe: the scripted supervisor calls it under its own lock."""

    def __init__(self) -> None:
        self._waiting: dict[int, Prompt] = {}

    def waiting(self, rank: int) -> InputWait | None:
        prompt = self._waiting.get(rank)
        return None if prompt is None else _wait(prompt)

    def begin(self, prompt: Prompt, now: float) -> list[Event]:
        """``prompt`` starts: its text as the unfinished line, then the wait."""
        if not prompt.since:
            prompt = replace(prompt, since=now)
        self._waiting[prompt.rank] = prompt
        return [
            RankOutput(prompt.rank, "stdout", (), partial=prompt.prompt, attempt=prompt.attempt),
            RankInputWait(prompt.rank, _wait(prompt), prompt.attempt),
        ]

    def release(self, rank: int, attempt: int = 0) -> list[Event]:
        """``rank`` stops waiting (answered elsewhere, EOF, or it ended)."""
        if self._waiting.pop(rank, None) is None:
            return []
        return [RankInputWait(rank, None, attempt)]

    def answer(self, rank: int, text: str, now: float) -> list[Event]:
        """``rank`` reads ``text``: the end of its wait (as the supervisor says it once the
        line went), its output, then a new wait if it asks again."""
        prompt = self._waiting.pop(rank, None)
        if prompt is None:
            return []  # it reads no stdin now: the line waits in the pipe
        events: list[Event] = [RankInputWait(rank, None, prompt.attempt)]
        answer = prompt.answers.get(text.strip(), prompt.otherwise)
        # The pipe carries: the prompt, then (the line read is not echoed) the answer's
        # lines, then the prompt again if it asks again.
        written = prompt.prompt + "".join(line + "\n" for line in answer.lines)
        if answer.again:
            written += prompt.prompt
        *lines, partial = written.split("\n")
        if lines:
            events.append(
                RankOutput(rank, "stdout", tuple(lines), partial=partial, attempt=prompt.attempt)
            )
        if answer.again:
            again = replace(prompt, since=now)
            self._waiting[rank] = again
            events.append(RankInputWait(rank, _wait(again), prompt.attempt))
        return events


def _wait(prompt: Prompt) -> InputWait:
    return InputWait(prompt.since, prompt.prompt, prompt.where)
