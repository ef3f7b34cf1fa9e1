"""StacksScreen (S): every running rank's Python stack, merged, the odd ranks first.

The dump is the engine's (``DumpStacks``: py-spy on each rank, in parallel, bounded); it runs
on a worker thread, so the screen says "dumping..." meanwhile and the UI never waits. Ranks
whose main threads have the same stack are one group ("ranks 0, 2, 3: all_reduce <- ...");
the smallest group, the ranks that are not where the others are, comes first and is
highlighted, open. Every group opens to its full stack. The file the dump was saved to is
named at the bottom (it also holds every thread of every rank). A read-only viewer asks for a
nonblocking dump, the one kind it may take: it never pauses a rank.

Above the groups, the collectives: the same worker thread first asks the engine for every
rank's Flight Recorder (``ReadCollectives``), and the verdict ("rank 1 did not enter
all_reduce #5") and the table per rank show as soon as it answers. A handle that cannot ask
says why ("no collectives: ..."). Once no rank runs, both are the last ones saved.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Collapsible, Static
from textual.widgets._collapsible import CollapsibleTitle

from ...engine.forensics.collectives_run import read_run
from ...engine.forensics.stacks import SavedDump, StackDump, StackGroup, latest_dump
from ...engine.handle import Command, CommandResult, DumpStacks, ReadCollectives
from ..model import RunView
from ..widgets.collectives_table import collectives_view
from ..widgets.key_footer import KeyFooter

__all__ = ["StacksScreen", "group_title"]


class _Answer(Message):
    def __init__(self, result: CommandResult) -> None:
        super().__init__()
        self.result = result


class _Dumped(_Answer):
    """The dump's answer came back on the worker thread."""


class _Collected(_Answer):
    """The collectives' answer came back on the worker thread (before the dump's)."""


def group_title(group: StackGroup) -> str:
    """The one line a group shows closed (its summary, marked when it stands out)."""
    return ("odd · " if group.odd else "") + group.summary()


class StacksScreen(Screen[None]):
    """The merged stacks of one dump; ``S`` (or ``r``) dumps again."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("S,shift+s,r", "dump", "Dump again"),
        Binding("j,down", "group(1)", "Next group", show=False),
        Binding("k,up", "group(-1)", "Previous group", show=False),
        # enter on a group's title folds it (the title's own key); space does the same
        # here, and never reaches the grid behind, where it pauses following.
        Binding("enter", "fold", "Open/close"),
        Binding("space", "fold", "Open/close", show=False),
    ]

    def __init__(self, run: RunView, *, nonblocking: bool = False) -> None:
        super().__init__()
        self.run = run
        self.nonblocking = nonblocking
        self.dump: StackDump | None = None
        """The last dump shown (None while the first is under way or failed)."""
        self.collectives: CommandResult | None = None
        """The last collectives answer shown (a saved capture as an ok result; None while
        the first is under way)."""
        self.busy = False

    def compose(self) -> ComposeResult:
        yield Static(id="stacks-head")
        with VerticalScroll(id="stacks"):
            yield Static(id="stacks-collectives")
            yield Vertical(id="stack-groups")
        yield Static(id="stacks-path")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.action_dump()

    def _titles(self) -> list[CollapsibleTitle]:
        return list(self.query(CollapsibleTitle).results(CollapsibleTitle))

    def action_group(self, step: int) -> None:
        """Move the cursor (the focused title) to the next or previous group."""
        titles = self._titles()
        if not titles:
            self.query_one("#stacks").scroll_relative(y=step, animate=False)
            return
        at = titles.index(self.focused) if self.focused in titles else -1
        target = titles[max(0, min(len(titles) - 1, at + step))] if at >= 0 else titles[0]
        target.focus()
        target.scroll_visible(animate=False)

    def action_fold(self) -> None:
        """Open or close the group under the cursor."""
        focused = self.focused
        if isinstance(focused, CollapsibleTitle) and isinstance(focused.parent, Collapsible):
            focused.parent.collapsed = not focused.parent.collapsed

    def action_dump(self) -> None:
        if self.busy:
            return
        if not self.run.alive and self.run.log_dir:
            # Nothing runs to dump: the newest dump saved during the run (before a SIGKILL,
            # a person's S) is what there is to see, and the collectives saved with it.
            self.show_saved(latest_dump(self.run.log_dir))
            self.show_saved_collectives(self.run.log_dir)
            return
        self.busy = True
        alive = len(self.run.alive)
        self.query_one("#stacks-head", Static).update(Text(
            f"dumping the stacks of {alive} running rank(s) with py-spy"
            + (" (nonblocking)" if self.nonblocking else "") + "...", "italic"))
        self.query_one("#stacks-collectives", Static).update(Text(
            "asking each rank's Flight Recorder...", "italic dim"))
        self._dump_worker()

    @work(thread=True, group="stacks", exclusive=True, exit_on_error=False,
          description="stack dump")
    def _dump_worker(self) -> None:
        # The collectives first: they answer within 2 s and show before py-spy is done.
        self.post_message(_Collected(self._ask(ReadCollectives())))
        self.post_message(_Dumped(self._ask(DumpStacks(None, nonblocking=self.nonblocking))))

    def _ask(self, command: Command) -> CommandResult:
        handle = self.app.handle  # type: ignore[attr-defined]
        try:
            result: CommandResult = handle.execute(command)
        except Exception as error:  # a bug in a handle must not take the UI down
            result = CommandResult(False, f"{type(error).__name__}: {error}")
        return result

    def on__collected(self, message: _Collected) -> None:
        self.show_collectives(message.result)

    def on__dumped(self, message: _Dumped) -> None:
        self.busy = False
        self.show_result(message.result)

    def show_collectives(self, result: CommandResult, caption: str = "asked now") -> None:
        """Show the collectives' answer: the verdicts and the table, or why there is none."""
        self.collectives = result
        box = self.query_one("#stacks-collectives", Static)
        if not result.ok or result.data is None:
            message = result.message or "no answer"
            if not message.startswith("no collectives"):
                message = f"no collectives: {message}"
            box.update(Text(message, "dim"))
            return
        box.update(collectives_view(result.data, caption))

    def show_saved_collectives(self, run_dir: str) -> None:
        """No rank runs: the last capture saved during the run, when and why it was taken."""
        data, source = read_run(run_dir, 0, live=False)
        if not source:
            self.show_collectives(CommandResult(
                False, "no collectives: none was saved during the run"))
            return
        when = data.get("time")
        at = (datetime.fromtimestamp(when, self.app_time_zone()).strftime("%H:%M:%S")
              if isinstance(when, (int, float)) else "?")
        why = f", {data['reason']}" if data.get("reason") else ""
        self.show_collectives(CommandResult(True, "", data), f"saved at {at}{why}")

    def show_saved(self, saved: StackDump | SavedDump | None) -> None:
        """No rank runs: show the newest saved dump, saying when and why it was taken."""
        head = self.query_one("#stacks-head", Static)
        box = self.query_one("#stack-groups", Vertical)
        box.remove_children()
        if saved is None:
            head.update(Text("no running rank to dump, and no dump was saved during the run",
                             "bold red"))
            self.query_one("#stacks-path", Static).update("")
            return
        if isinstance(saved, SavedDump):  # saved as text only: its header and merged lines
            head.update(Text.assemble(("no rank runs: the last dump saved ", "bold"),
                                      (saved.first_line, "dim")))
            box.mount(Static(Text("\n".join(saved.merged)), classes="stack-error"))
            self.query_one("#stacks-path", Static).update(
                Text.assemble(("saved to ", "dim"), saved.path))
            return
        when = datetime.fromtimestamp(saved.time, self.app_time_zone()).strftime("%H:%M:%S")
        why = f", {saved.reason}" if saved.reason else ""
        self._show_dump(saved, Text.assemble(
            ("no rank runs: ", "bold"),
            (f"the last dump saved, at {when}{why}: {_ranks_said(saved)}", "bold"),
            (" · odd first · ↑ ↓ move, enter opens", "dim"),
        ))

    def app_time_zone(self) -> tzinfo | None:
        return getattr(self.app, "time_zone", None)

    def show_result(self, result: CommandResult) -> None:
        """Show a dump's answer: its groups, or why there is none."""
        head = self.query_one("#stacks-head", Static)
        box = self.query_one("#stack-groups", Vertical)
        path = self.query_one("#stacks-path", Static)
        data: dict[str, Any] | None = result.data
        dump = StackDump.from_dict(data) if data is not None else None
        if not result.ok or dump is None:
            box.remove_children()
            head.update(Text(result.message or "no stack dumped", "bold red"))
            path.update("")
            return
        mode = "nonblocking" if dump.nonblocking else ("native" if dump.native else "blocking")
        self._show_dump(dump, Text.assemble(
            (f"{_ranks_said(dump)}, {len([g for g in dump.groups if g.frames])} stack(s)",
             "bold"),
            (f" · py-spy {mode} · odd first · ↑ ↓ move, enter opens", "dim"),
        ))
        if result.message:
            self.notify(result.message, timeout=3)

    def _show_dump(self, dump: StackDump, title: Text) -> None:
        box = self.query_one("#stack-groups", Vertical)
        box.remove_children()
        self.dump = dump
        self.query_one("#stacks-head", Static).update(title)
        opened = False
        # The odd group opens; when none stands out (one group: a dump of one rank), the first.
        any_odd = any(g.odd for g in dump.groups if g.frames)
        for group in dump.groups:
            if not group.frames:
                box.mount(Static(Text(group.summary(), "dim"), classes="stack-error"))
                continue
            frames = Text("\n".join(group.frame_lines()))
            section = Collapsible(
                Static(frames, classes="stack-frames"),
                title=group_title(group),
                collapsed=opened or not (group.odd or not any_odd),
                classes="stack-group",
            )
            opened = opened or group.odd or not any_odd
            section.set_class(group.odd, "-odd")
            box.mount(section)
        # The cursor on the first group (the odd one): arrows move it, enter folds.
        self.call_after_refresh(self.action_group, 0)
        self.query_one("#stacks-path", Static).update(
            Text.assemble(("saved to ", "dim"), dump.path or "(not saved)"))


def _ranks_said(dump: StackDump) -> str:
    """``3 rank(s)``, or ``rank 3`` for a dump of one."""
    return f"{len(dump.ranks)} rank(s)" if len(dump.ranks) != 1 else f"rank {dump.ranks[0].rank}"
