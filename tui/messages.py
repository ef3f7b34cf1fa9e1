"""Textual messages the UI passes around (engine events cross into the UI as these)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ..engine.events import Event
from ..engine.handle import Command, CommandResult

__all__ = ["CommandFinished", "EngineEvent", "RankSelected", "ZoomRequested"]


class EngineEvent(Message):
    """A lifecycle event from the engine (anything but log lines and stats samples).

    Posted by ``EngineBridge`` from an engine thread. ``seq`` orders it against the buffered
    log batches, so the handler can drain exactly the lines that came before it.
    """

    def __init__(self, event: Event, seq: int) -> None:
        super().__init__()
        self.event = event
        self.seq = seq


class CommandFinished(Message):
    """A command ran on a worker thread; ``result`` is the engine's answer."""

    def __init__(self, command: Command | str, result: CommandResult) -> None:
        super().__init__()
        self.command = command
        self.result = result


@dataclass
class RankSelected(Message):
    """A widget asks for ``rank`` to become the selected rank (a click, a key)."""

    rank: int


@dataclass
class ZoomRequested(Message):
    """A widget asks for the zoomed view of ``rank`` (double click)."""

    rank: int
