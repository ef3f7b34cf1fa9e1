"""One line to some ranks' stdin, and what each printed until it asked again.

``rankvisor debug --all --eval``, the TUI's ``=`` and the MCP server's ``send_to_rank`` all
need the answer to a line, not only its delivery: "p x" -> "41". The line goes as any typed
line does (``SendInput``: the ``RankInput`` event, the incarnation's ``stdin.log``); each
rank's answer is then read from its log files, the record, between their sizes when the line
went and the moment the supervisor saw the rank waiting again (its ``RankInputWait``, which it
publishes only once the new prompt is in the files). Works over any ``SupervisorHandle``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from .. import clock
from ..events import Event, RankInput, RankInputWait, RankStateChanged, RunFinished

__all__ = ["Answer", "MAX_ANSWER_BYTES", "ask"]

MAX_ANSWER_BYTES: Final = 64 << 10
"""Of each stream, what an answer keeps (its start: the value comes first)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What one rank did with the line."""

    rank: int
    text: str = ""
    """What it printed after the line (stdout, then stderr), its new prompt left out; raw:
    the caller sanitises it for where it goes."""
    prompt: str = ""
    """The prompt it came back to ("" when it did not)."""
    back: bool = False
    """It is waiting for input again: ``text`` is the whole answer."""
    refused: str = ""
    """Why the line did not go to it ("" when it went)."""
    ended: str = ""
    """It ended (or the run did) before asking again."""
    cut: bool = False
    """``text`` was longer than ``MAX_ANSWER_BYTES`` and was cut."""

    @property
    def timed_out(self) -> bool:
        return not self.refused and not self.back and not self.ended


class _Watch:
    """The events that say when each rank has answered (on the handle's thread)."""

    def __init__(self, ranks: Sequence[int], line: str) -> None:
        self.line = line
        self.cond = threading.Condition()
        self.armed: set[int] = set()
        self.back: dict[int, str] = {}
        self.ended: dict[int, str] = {}
        self.waiting = set(ranks)

    def __call__(self, event: Event) -> None:
        with self.cond:
            if isinstance(event, RankInput) and event.rank in self.waiting:
                if not event.eof and event.text == self.line:
                    self.armed.add(event.rank)  # the line went: a prompt after it is new
            elif isinstance(event, RankInputWait) and event.rank in self.armed:
                if event.wait is not None and event.rank not in self.back:
                    self.back[event.rank] = event.wait.prompt
            elif isinstance(event, RankStateChanged) and event.new.is_final:
                self.ended.setdefault(event.rank, f"rank ended ({event.new.value})")
            elif isinstance(event, RunFinished):
                for rank in self.waiting:
                    self.ended.setdefault(rank, "the run finished")
            else:
                return
            self.cond.notify_all()

    def done(self, ranks: set[int]) -> bool:
        return all(r in self.back or r in self.ended for r in ranks)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def _read(path: str, offset: int) -> tuple[str, bool]:
    """What ``path`` holds from ``offset`` (at most ``MAX_ANSWER_BYTES``), and whether cut."""
    if not path:
        return "", False
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(MAX_ANSWER_BYTES + 1)
    except OSError:
        return "", False
    cut = len(data) > MAX_ANSWER_BYTES
    return data[:MAX_ANSWER_BYTES].decode("utf-8", "replace"), cut


def ask(handle: Any, ranks: Sequence[int], line: str, timeout_s: float = 10.0) -> dict[int, Answer]:
    """Send ``line`` to the stdin of each of ``ranks`` (local ranks) in one ``SendInput``,
    wait until each is waiting for input again (at most ``timeout_s``), and return what each
    printed meanwhile. A rank that was not reached says why in ``refused``."""
    from ..handle import SendInput

    wanted = tuple(dict.fromkeys(int(r) for r in ranks))
    info = {r.rank: r for r in handle.snapshot().ranks}
    offsets = {r: (_size(info[r].stdout_path), _size(info[r].stderr_path))
               for r in wanted if r in info}
    watch = _Watch(wanted, line)
    unsubscribe = handle.subscribe(watch)
    try:
        result = handle.execute(SendInput(wanted, line))
        refused = {int(k): str(v) for k, v in ((result.data or {}).get("refused") or {}).items()}
        if not result.ok and not refused:  # refused as a whole (read-only, no pipe)
            refused = {r: result.message or "refused" for r in wanted}
        sent = {r for r in wanted if r not in refused}
        deadline = clock.monotonic() + max(0.0, timeout_s)
        with watch.cond:
            while not watch.done(sent):
                left = deadline - clock.monotonic()
                if left <= 0:
                    break
                watch.cond.wait(left)
            back, ended = dict(watch.back), dict(watch.ended)
    finally:
        unsubscribe()
    answers: dict[int, Answer] = {}
    for rank in wanted:
        if rank in refused:
            answers[rank] = Answer(rank, refused=refused[rank])
            continue
        me = info.get(rank)
        out_at, err_at = offsets.get(rank, (0, 0))
        out, out_cut = _read(me.stdout_path, out_at) if me else ("", False)
        err, err_cut = _read(me.stderr_path, err_at) if me else ("", False)
        prompt = back.get(rank, "")
        if prompt and out.endswith(prompt):
            out = out[: -len(prompt)]
        elif prompt and err.endswith(prompt):
            err = err[: -len(prompt)]
        text = out + (err if not out or out.endswith("\n") or not err else "\n" + err)
        answers[rank] = Answer(rank, text.rstrip("\n"), prompt, rank in back,
                               ended="" if rank in back else ended.get(rank, ""),
                               cut=out_cut or err_cut)
    return answers
