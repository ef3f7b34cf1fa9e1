"""The app's keys for ranks at a prompt: ``i`` (the input line; ``=EXPR`` in it asks every
rank at a pdb prompt for one value) and ``p`` (the list of them).

A mixin of ``RankvisorApp``, kept apart so that the app module stays the composition of its
parts. What a person types becomes ``SendInput`` / ``CloseInput`` through the handle, never a
write to a process: refusals (a read-only viewer, a rank that is not running, a run whose
ranks' stdin rankvisor does not hold) come back as every refusal does, on the notice line.
A line that would end a debugger (``q``, ``quit``, ``exit`` to a pdb prompt) and EOF ask
first, and say what they do: that rank ends, and its torch.distributed peers then fail or
hang (their next collective never completes).
"""

from __future__ import annotations

from typing import Any, Final, Sequence

from textual import work
from textual.screen import ModalScreen
from textual.widgets import Footer

from ..engine.control.server import READ_ONLY_REFUSAL
from ..engine.handle import CloseInput, Command, SendInput
from .screens.prompts import PromptsScreen
from .widgets.ansi import plain_text
from .widgets.input_bar import InputBar
from .widgets.notice_bar import NoticeBar

__all__ = ["ENDS_DEBUGGER", "DebugKeys", "is_debugger_prompt"]

ENDS_DEBUGGER: Final = frozenset({"q", "quit", "exit"})
"""pdb commands that leave the debugger by raising BdbQuit: the rank's program ends."""


def is_debugger_prompt(prompt: str) -> bool:
    """pdb's ``(Pdb)`` (and ipdb's ``ipdb>``): a prompt where ``q`` ends the program."""
    words = plain_text(prompt).strip()
    return words.startswith("(Pdb") or words.startswith("ipdb>")


def _ranks_words(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


class DebugKeys:
    """``action_input``, ``action_prompts`` and the input line's messages (see the module)."""

    # -- the input line (i) ----------------------------------------------------------------

    async def action_input(self, rank: int | None = None) -> None:
        """Open the input line on the selected (or zoomed) rank, or on ``rank``."""
        screen = self.screen
        if isinstance(screen, ModalScreen):
            return
        target = self._target() if rank is None else rank
        bars = list(screen.query(InputBar))
        if bars:
            bar = bars[0]
        else:
            bar = InputBar(
                target,
                lambda r: list(self.run_view.ranks[r].typed),
                waiting=lambda: len(self.run_view.waiting()),
            )
            anchors = [*screen.query(NoticeBar), *screen.query(Footer)]
            await screen.mount(bar, before=anchors[0] if anchors else None)
        bar.bind_to(target, refusal=self.input_refusal())
        bar.open()

    def input_refusal(self) -> str:
        """Why this viewer may not type to the ranks ("" when it may)."""
        if getattr(self.handle, "read_only", False):
            return READ_ONLY_REFUSAL
        mode = self.run_view.stdin
        if mode != "pipe":
            return (f"the ranks' stdin is not held by rankvisor (stdin: {mode}): a run "
                    "started by `rankvisor run --stdin pipe` takes typed lines")
        return ""

    def on_input_bar_send(self, message: InputBar.Send) -> None:
        if message.text.startswith("=") and message.text[1:].strip():
            self._eval_all(message.text[1:])  # =EXPR: one value from every rank at pdb
            return
        ranks = self._input_targets(message.rank, message.to_all)
        if ranks is None:
            return
        text = message.text
        ending = [
            r for r in ranks
            if text.strip() in ENDS_DEBUGGER
            and (wait := self.run_view.ranks[r].input_wait) is not None
            and is_debugger_prompt(wait.prompt)
        ]
        command = SendInput(tuple(ranks), text)
        if not ending:
            self.run_command(command)
            return
        who = _ranks_words(ending)
        self._ask_before(
            f"Send {text.strip()!r} to {who}?",
            f"{text.strip()!r} quits pdb: it ends {who}; in a torch.distributed job its "
            "peers then fail or hang. To go on running, send c (continue) instead.",
            command,
        )

    @work(thread=True, group="eval", exit_on_error=False, description="eval on every rank")
    def _eval_all(self, expr: str) -> None:
        """``=EXPR``: evaluate it at every rank's pdb prompt (``engine.entry.rank_eval``, each
        line in the rank's stdin.log as a typed one); the values on the notice line, the
        ranks that differ from the majority marked."""
        from ..engine.entry.rank_eval import eval_ranks

        try:
            result = eval_ranks(self.handle, expr, rank_base=self.run_view.rank_base)
        except Exception as error:  # noqa: BLE001 - a bad expression or a handle's bug
            self.call_from_thread(self.notify, f"={expr}: {error}", severity="warning")
            return
        self.call_from_thread(self.notify, f"={expr.strip()} → {result.summary()}",
                              severity="warning" if result.odd or not result.values
                              else "information")

    def on_input_bar_eof(self, message: InputBar.Eof) -> None:
        ranks = self._input_targets(message.rank, message.to_all)
        if ranks is None:
            return
        who = _ranks_words(ranks)
        self._ask_before(
            f"Close the stdin of {who}?",
            f"EOF: pdb quits and input() raises EOFError, which ends {who}; in a "
            "torch.distributed job its peers then fail or hang. A closed stdin stays closed "
            "until the rank restarts.",
            CloseInput(tuple(ranks)),
        )

    def _input_targets(self, rank: int, to_all: bool) -> list[int] | None:
        """The bound rank, or every rank at a prompt; None (and a notice) when there is none."""
        if not to_all:
            return [rank]
        waiting = [view.rank for view in self.run_view.waiting()]
        if not waiting:
            self.notify(
                f"no rank is at a prompt: nothing sent (ctrl+t: to rank {rank} alone)",
                severity="warning",
            )
            return None
        return sorted(waiting)

    def _ask_before(self, title: str, question: str, command: Command) -> None:
        def then() -> None:
            self.run_command(command)
            self._refocus_input()

        self._confirm(title, question, then)

    def close_input_of_ended(self, rank: int | None) -> None:
        """``rank`` ended (None: the run did): close each input line bound to it, so that
        the next key (``q``) is the app's again, not a character for a rank that is gone."""
        for screen in self.screen_stack:
            for bar in screen.query(InputBar):
                if not bar.display or (rank is not None and (bar.rank != rank or bar.to_all)):
                    continue
                who = "the run" if rank is None else f"rank {rank}"
                bar.close()
                self.notify(f"{who} ended: the input line closed (keys go to the app)")

    def _refocus_input(self) -> None:
        for bar in self.screen.query(InputBar):
            if bar.display:
                self.call_after_refresh(bar.open)

    # -- the list of ranks at a prompt (p) -------------------------------------------------

    def action_prompts(self) -> None:
        """List the ranks at a prompt; enter jumps to one and opens its input line."""
        if isinstance(self.screen, PromptsScreen):
            return

        async def picked(rank: int | None) -> None:
            if rank is None:
                return
            if getattr(self.screen, "rank", None) != rank:
                while len(self.screen_stack) > 1 and not isinstance(self.screen, ModalScreen):
                    self.pop_screen()  # back to the grid, where the rank is selected
                self.main_screen.selected = rank
            self.selected = rank
            await self.action_input(rank)

        self.push_screen(PromptsScreen(self.run_view, self.time_zone), picked)

    def debug_commands(self) -> list[tuple[str, str, Any]]:
        """The command palette's entries for these keys."""
        return [
            ("Type to the selected rank (i)",
             "An input line to its stdin: a pdb prompt, input(); history, EOF, all ranks",
             self.action_input),
            ("Ranks at a prompt (p)",
             "Every rank waiting for input: where, its prompt, since when; enter answers it",
             self.action_prompts),
        ]
