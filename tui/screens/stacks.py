"""StacksScreen (S): every running rank's Python stack, merged, the odd ranks first.

The dump is the engine's (``DumpStacks``: py-spy on each rank, in parallel, bounded); it runs
on a worker thread, so the screen says "dumping..." meanwhile and the UI never waits. Ranks
whose main threads have the same stack are one group ("ranks 0, 2, 3: all_reduce <- ...");
the smallest group, the ranks that are not where the others are, comes first and is
highlighted, open. Every group opens to its full stack. The file the dump was saved to is
named at the bottom (it also holds every thread of every rank). A read-only viewer asks for a
nonblocking dump, the one kind it may take: it never pauses a rank.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Collapsible, Static

from ...engine.forensics.stacks import StackDump, StackGroup
from ...engine.handle import CommandResult, DumpStacks
from ..model import RunView
from ..widgets.key_footer import KeyFooter

__all__ = ["StacksScreen", "group_title"]


class _Dumped(Message):
    """The dump's answer came back on the worker thread."""

    def __init__(self, result: CommandResult) -> None:
        super().__init__()
        self.result = result


def group_title(group: StackGroup) -> str:
    """The one line a group shows closed (its summary, marked when it stands out)."""
    return ("odd · " if group.odd else "") + group.summary()


class StacksScreen(Screen[None]):
    """The merged stacks of one dump; ``S`` (or ``r``) dumps again."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("S,shift+s,r", "dump", "Dump again"),
        Binding("j,down", "scroll(1)", "Scroll", show=False),
        Binding("k,up", "scroll(-1)", "Scroll", show=False),
    ]

    def __init__(self, run: RunView, *, nonblocking: bool = False) -> None:
        super().__init__()
        self.run = run
        self.nonblocking = nonblocking
        self.dump: StackDump | None = None
        """The last dump shown (None while the first is under way or failed)."""
        self.busy = False

    def compose(self) -> ComposeResult:
        yield Static(id="stacks-head")
        yield VerticalScroll(id="stacks")
        yield Static(id="stacks-path")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.action_dump()

    def action_scroll(self, lines: int) -> None:
        self.query_one("#stacks").scroll_relative(y=lines, animate=False)

    def action_dump(self) -> None:
        if self.busy:
            return
        self.busy = True
        alive = len(self.run.alive)
        self.query_one("#stacks-head", Static).update(Text(
            f"dumping the stacks of {alive} running rank(s) with py-spy"
            + (" (nonblocking)" if self.nonblocking else "") + "...", "italic"))
        self._dump_worker()

    @work(thread=True, group="stacks", exclusive=True, exit_on_error=False,
          description="stack dump")
    def _dump_worker(self) -> None:
        handle = self.app.handle  # type: ignore[attr-defined]
        try:
            result = handle.execute(DumpStacks(None, nonblocking=self.nonblocking))
        except Exception as error:  # a bug in a handle must not take the UI down
            result = CommandResult(False, f"{type(error).__name__}: {error}")
        self.post_message(_Dumped(result))

    def on__dumped(self, message: _Dumped) -> None:
        self.busy = False
        self.show_result(message.result)

    def show_result(self, result: CommandResult) -> None:
        """Show a dump's answer: its groups, or why there is none."""
        head = self.query_one("#stacks-head", Static)
        box = self.query_one("#stacks", VerticalScroll)
        path = self.query_one("#stacks-path", Static)
        box.remove_children()
        data: dict[str, Any] | None = result.data
        dump = StackDump.from_dict(data) if data is not None else None
        if not result.ok or dump is None:
            head.update(Text(result.message or "no stack dumped", "bold red"))
            path.update("")
            return
        self.dump = dump
        mode = "nonblocking" if dump.nonblocking else ("native" if dump.native else "blocking")
        ranks = len(dump.ranks)
        head.update(Text.assemble(
            (f"{ranks} rank(s), {len([g for g in dump.groups if g.frames])} stack(s)", "bold"),
            (f" · py-spy {mode} · odd first · enter opens a group", "dim"),
        ))
        opened = False
        for group in dump.groups:
            if not group.frames:
                box.mount(Static(Text(group.summary(), "dim"), classes="stack-error"))
                continue
            frames = Text("\n".join(group.frame_lines()))
            section = Collapsible(
                Static(frames, classes="stack-frames"),
                title=group_title(group),
                collapsed=not (group.odd and not opened),
                classes="stack-group",
            )
            opened = opened or group.odd
            section.set_class(group.odd, "-odd")
            box.mount(section)
        path.update(Text.assemble(("saved to ", "dim"), dump.path or "(not saved)"))
        if result.message:
            self.notify(result.message, timeout=3)
