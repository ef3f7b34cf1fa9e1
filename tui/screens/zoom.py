"""ZoomScreen (enter): one rank's whole log from disk, searchable, stdout/stderr or both.

It opens on both streams merged into one log in the order their lines arrived (the arrival
index the output pump writes beside the logs), so the root-cause rank's traceback shows
with the lines before it; ``o`` switches to stdout or stderr alone.

Reads the files through the engine's ``LogStore`` (an on-disk line index), so the first and
the last line of a multi-GB log are equally quick and memory stays bounded. ``[`` and ``]``
step through the rank's incarnations: a restarted rank's earlier logs are kept on disk.
Keys that act on a rank (t, K, s, r) act on the zoomed rank here.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from rich.text import Text
from textual.binding import Binding

from ..model import Incarnation, RunView
from ..widgets.rank_pane import GLYPHS, state_label
from .log_files import LogFilesScreen, Streams

__all__ = ["ZoomScreen", "relative_path"]


def relative_path(path: str, run_dir: str) -> str:
    """``path`` relative to the run's directory when inside it (short, and no tmp paths)."""
    base = run_dir.rstrip("/") + "/"
    return path[len(base) :] if run_dir and path.startswith(base) else path


class ZoomScreen(LogFilesScreen):
    """The zoomed view of ``rank``."""

    BINDINGS = [
        Binding("left_square_bracket", "incarnation(-1)", "Earlier", show=False),
        Binding("right_square_bracket", "incarnation(1)", "Later", show=False),
    ]

    def __init__(self, run: RunView, rank: int, streams: Streams = "both") -> None:
        super().__init__(streams)
        self.run = run
        self.rank = rank
        self.incarnation_index = -1
        """Index into ``incarnations()``; -1 follows the current incarnation."""
        self._shown_paths: tuple[str, str] = ("", "")

    def incarnations(self) -> list[Incarnation]:
        view = self.run.ranks[self.rank]
        return [*view.earlier, view.incarnation()]

    def _incarnation(self) -> Incarnation:
        return self.incarnations()[self.incarnation_index]

    def paths(self) -> tuple[tuple[str, str], tuple[str, str]]:
        inc = self._incarnation()
        self._shown_paths = (inc.stdout_path, inc.stderr_path)
        run_dir = self.run.log_dir
        return (
            (
                inc.stdout_path,
                f"stdout · {relative_path(inc.stdout_path, run_dir) or 'not redirected'}",
            ),
            (
                inc.stderr_path,
                f"stderr · {relative_path(inc.stderr_path, run_dir) or 'not redirected'}",
            ),
        )

    def typed_lines(self) -> Callable[[], Sequence[tuple[float, str]]]:
        """What was typed to the incarnation shown, for the merged view (the files keep the
        rank's own bytes only)."""
        inc = self._incarnation()
        view = self.run.ranks[self.rank]

        def lines() -> list[tuple[float, str]]:
            return [(t, text) for attempt, restarts, t, text in list(view.sent)
                    if (attempt, restarts) == (inc.attempt, inc.restart_count)]

        return lines

    def merged_paths(self) -> tuple[str, str, str]:
        inc = self._incarnation()
        where = relative_path(os.path.dirname(inc.stdout_path), self.run.log_dir)
        return inc.stdout_path, inc.stderr_path, f"stdout + stderr by arrival · {where}"

    def title_text(self) -> Text:
        view = self.run.ranks[self.rank]
        root = self.run.root_cause() == self.rank
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f" {GLYPHS[view.state]} rank {self.rank} ", "bold reverse")
        text.append(f" {state_label(view, self.app_now(), root_cause=root)}")
        if view.pid is not None:
            text.append(f" · pid {view.pid}")
        count = len(self.incarnations())
        if count > 1:
            index = self.incarnation_index % count
            inc = self.incarnations()[index]
            text.append(
                f"  │ run {index + 1}/{count} "
                f"(attempt {inc.attempt}, restart {inc.restart_count}) [ ]",
                "bold" if index != count - 1 else "",
            )
        return text

    def app_now(self) -> float:
        clock = getattr(self.app, "clock", None)
        return clock() if callable(clock) else 0.0

    async def action_incarnation(self, step: int) -> None:
        count = len(self.incarnations())
        index = (self.incarnation_index % count) + step
        if not 0 <= index < count:
            # Say so: a key that does nothing silently looks broken.
            which = "earlier" if step < 0 else "later"
            self.notify(f"rank {self.rank} has no {which} run to show ({count} in all)")
            return
        self.incarnation_index = -1 if index == count - 1 else index
        await self.mount_logs()
        self.update_title()

    def on_run_changed(self, changed: set[int] | None) -> None:
        super().on_run_changed(changed)
        if self.incarnation_index == -1 and changed is not None and self.rank in changed:
            inc = self._incarnation()
            if (inc.stdout_path, inc.stderr_path) != self._shown_paths:
                # The rank was restarted: show the new incarnation's files.
                self.run_worker(self.mount_logs(), exclusive=True, group="remount")
