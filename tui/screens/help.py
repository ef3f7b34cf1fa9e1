"""HelpScreen (?): every key, grouped, plus where the logs are."""

from __future__ import annotations

from typing import Final

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

__all__ = ["KEY_HELP", "HelpScreen"]

KEY_HELP: Final[tuple[tuple[str, tuple[tuple[str, str], ...]], ...]] = (
    (
        "Move",
        (
            ("↑ ↓ ← → / k j h l", "select a rank"),
            ("pgup pgdn home end", "page through many ranks"),
            ("enter", "zoom: the rank's full log from disk"),
            ("escape", "back"),
            ("g", "grid of panes / tiles beside one pane"),
            ("space", "pause / resume following the logs"),
        ),
    ),
    (
        "Act on the selected rank",
        (
            ("t", "SIGTERM, then SIGKILL after the term timeout (countdown on the pane)"),
            ("K", "SIGKILL now"),
            ("s", "send a signal, labelled by what it does to a rank without a handler;"
             " asks before one that ends or pauses it"),
            ("r", "restart it alone, earlier logs kept (several ranks: asks first, "
                  "as torch.distributed peers fail; a restarts all)"),
        ),
    ),
    (
        "Act on all ranks (asks first)",
        (
            ("T", "terminate all, with escalation"),
            ("R", "restart all as a new attempt"),
            ("q", "quit: asks to detach (the run goes on) or to terminate the ranks with"
                  " escalation (--foreground: terminates them)"),
            ("d", "detach at once: the run goes on; `rankvisor attach` comes back"),
        ),
    ),
    (
        "A rank at a prompt (breakpoint(), pdb, input(): ⌨ on its border)",
        (
            ("i", "type to the selected rank's stdin: enter sends (the line stays open),"
             " ↑ ↓ its history, ctrl+t every rank at a prompt, ctrl+d EOF, escape leaves;"
             " q / quit / exit to pdb and EOF ask first (they end the rank);"
             " =EXPR: its value on every rank at pdb, the odd ones marked"),
            ("p", "the ranks at a prompt: where, prompt, since; enter answers one"),
        ),
    ),
    (
        "Views",
        (
            ("e", "errors: the suspect, then tracebacks, root cause first"),
            ("a", "timeline: every rank's lines as they arrived, at the first failure"),
            ("S", "stacks: who never entered a collective (torch's Flight Recorder, a row"
             " per rank), then every rank's Python stack merged, odd ranks first"),
            ("f", "filtered_stdout.log / filtered_stderr.log"),
            ("/  n  N", "search all the zoomed log shows; next / previous match"),
            ("o", "zoomed or filtered view: both (zoom: in arrival order), stdout, stderr"),
            ("w  ← →", "zoomed or filtered view: wrap long lines / scroll sideways"),
            ("[  ]", "zoomed view: earlier / later incarnation of the rank"),
            ("c", "copy: the selection, the rank's visible lines, or (error view) the"
             " root cause's traceback, sent to the terminal's clipboard (OSC 52; in tmux"
             " it needs `set -g set-clipboard on`)"),
            ("m", "recent notices (the newest shows above the footer)"),
            ("ctrl+p", "command palette (every action is there)"),
            ("?", "this help"),
        ),
    ),
)


def help_table() -> Group:
    """The keys, one small table per group, the key column the same width in all."""
    width = max(len(keys) for _, rows in KEY_HELP for keys, _ in rows)
    parts: list[Text | Table] = []
    for group, rows in KEY_HELP:
        parts.append(Text(group, style="bold underline"))
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True, width=width)
        table.add_column()
        for keys, words in rows:
            table.add_row(Text(keys, style="bold cyan"), Text(words))
        parts.append(table)
        parts.append(Text(""))
    parts.append(Text("Mouse", style="bold underline"))
    parts.append(Text("click a pane or tile to select it, double-click to zoom, wheel to scroll"))
    parts.append(Text(""))
    parts.append(Text("Progress and stragglers", style="bold underline"))
    parts.append(Text(MARKS_HELP))
    return Group(*parts)


MARKS_HELP: Final = (
    "Each rank's step is read from its output (step N, iter N, epoch N, tqdm's N/M, or "
    "--progress-regex). The strip above the ranks has a cell per rank: colour for how far "
    "behind the median step (green, yellow half way, red a straggler), height for how fresh "
    "its output is. ⚠ marks a straggler: behind the median by max(2, 5% of it) steps, or "
    "silent 3 times its peers' usual gap between lines (and 2 s at least). \"quiet Ns\" "
    "(silent 10 s or more) shows only while no peer has a usual gap to compare with."
)


class HelpScreen(ModalScreen[None]):
    """Keys and what they do; any of escape, ? or q closes it."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help") as scroll:
            scroll.border_title = Text("rankvisor · keys")
            scroll.border_subtitle = Text("escape close")
            yield Static(help_table())
