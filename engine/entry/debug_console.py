"""``rankvisor debug``'s console on one rank, for a plain terminal: a front end like the
headless console, over any ``SupervisorHandle``.

It keeps the terminal tidy while the rank writes: output lines are printed above the line
being typed, which is then drawn again; the prompt is the rank's own unfinished line
("(Pdb) ", "continue? "), and when it changes while a person types, the input is
interrupted (a signal to this process's own main thread, never to a rank) and offered again
with the new prompt and the text typed so far. Ctrl-C asks before it sends SIGINT to the
rank (a ``SignalRanks`` command); Ctrl-D leaves without touching it; ``q``/``quit``/``exit``
at a pdb prompt asks first (it ends the rank).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Final, TextIO

from ..events import (
    Event,
    RankInput,
    RankInputWait,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from ..logfile.stdin_log import TYPED_MARK

__all__ = ["DebugConsole", "QUIT_WARNING", "QUIT_WORDS"]

HISTORY_LINES: Final = 20
"""Lines of the rank's output shown when the console opens."""
QUIT_WORDS: Final = frozenset({"q", "quit", "exit"})
QUIT_WARNING: Final = (
    "'{word}' ends pdb and so rank {rank} (bdb.BdbQuit); in a torch.distributed job its "
    "peers may then fail or hang in their next collective. Send it? [y/N] "
)


_NUDGE: Final = signal.SIGURG
"""Interrupts the main thread's wait for a key (ignored by default, so no other process's)."""
NUDGE_EVERY_S: Final = 0.05
NUDGE_FOR_S: Final = 10.0
"""How often, and how long at most, a Ctrl-C not yet raised nudges the main thread."""


class _Reprompt(Exception):
    """Raised in the main thread (by a signal) to offer the input line again."""


class DebugConsole:
    """The console on one rank; ``run`` returns the exit status once the person leaves."""

    def __init__(self, handle: Any, rank: int, *, shown_rank: int | None = None,
                 out: TextIO | None = None) -> None:
        self._handle = handle
        self._rank = rank
        self._shown = rank if shown_rank is None else shown_rank
        self._out = out or sys.stdout
        self._lock = threading.RLock()
        self._partial = ""
        """The rank's unfinished last line, as the latest batch said."""
        self._prompt = ""
        """What the current input line shows as its prompt."""
        self._consumed = ""
        """A prompt shown and answered: the rank's next line starts with it (not again)."""
        self._reading = False
        """The input line is drawn (readline's pre-input hook ran): output goes above it."""
        self._in_input = False
        """The main thread is inside ``input()``: only then may the signal interrupt it."""
        self._at_keys = False
        """The main thread is inside either ``input()`` (the line's or a question's)."""
        self._ended = ""
        self._own: deque[str] = deque()
        """Lines sent from here whose RankInput has not come back yet (not shown twice)."""
        self._counts = [0, 0]
        """Lines of (stdout, stderr) already shown, by their number in the files."""
        self._keep = ""
        """Text typed when the prompt changed under it: offered again with the new one."""
        self._main = threading.main_thread().ident
        self._readline: Any = None
        self._sigints = [0, 0]
        """Ctrl-Cs (seen by the nudger, caught by the main thread): nudged while unequal."""

    # -- the event sink (the handle's reader thread) ---------------------------------------

    def _sink(self, event: Event) -> None:
        if isinstance(event, RankOutput) and event.rank == self._rank:
            if event.stream in ("stdout", "stderr"):
                self._output(event)
        elif isinstance(event, RankInput) and event.rank == self._rank:
            with self._lock:
                if self._own and not event.eof and self._own[0] == event.text:
                    self._own.popleft()
                    return
            self._print("(stdin closed)" if event.eof else f"{TYPED_MARK}{event.text}")
        elif isinstance(event, RankRestarted) and event.rank == self._rank:
            with self._lock:
                self._counts = [0, 0]
            self._print(f"[rankvisor] rank {self._shown} restarted (pid {event.pid})")
        elif isinstance(event, RankStateChanged) and event.rank == self._rank:
            if event.new.is_final:
                how = (f"exit code {event.exitcode}" if event.signal_name is None
                       else event.signal_name)
                self._end(f"rank {self._shown} {event.new.value} ({how})")
        elif isinstance(event, RunFinished):
            self._end("the run finished")
        elif isinstance(event, SupervisorNotice) and "went away" in event.message:
            self._end(event.message)
        elif isinstance(event, RankInputWait) and event.rank == self._rank:
            if event.wait is not None and event.wait.prompt:
                self._set_partial(event.wait.prompt)

    def _output(self, event: RankOutput) -> None:
        s = 0 if event.stream == "stdout" else 1
        with self._lock:
            skip = max(0, self._counts[s] - event.first_line)
            lines = list(event.lines[skip:])
            self._counts[s] = max(self._counts[s], event.first_line + len(event.lines))
            if lines and self._consumed and lines[0].startswith(self._consumed):
                lines[0] = lines[0][len(self._consumed):]
                if not lines[0]:
                    lines.pop(0)
            if event.lines:
                self._consumed = ""
        if lines:
            self._print("\n".join(lines))
        if s == 0 or event.partial:
            self._set_partial(event.partial)

    def _set_partial(self, text: str) -> None:
        with self._lock:
            self._partial = text
            if self._reading and text != self._prompt:
                self._interrupt()

    def _end(self, why: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = why
            if self._reading:
                self._interrupt()

    def _interrupt(self) -> None:
        if self._main is not None:
            signal.pthread_kill(self._main, signal.SIGUSR2)

    def _print(self, text: str) -> None:
        with self._lock:
            if self._reading and self._readline is not None:
                typed = self._readline.get_line_buffer()
                self._out.write(f"\r\x1b[K{text}\n{self._prompt}{typed}")
            else:
                self._out.write(text + "\n")
            self._out.flush()

    # -- the main thread ---------------------------------------------------------------------

    def run(self) -> int:
        """The console until the person leaves (Ctrl-D) or the rank ends; exit status 0."""
        self._setup_readline()
        old = signal.signal(signal.SIGUSR2, self._on_signal)
        old_nudge = signal.signal(_NUDGE, self._on_nudge)
        woken, wake = os.pipe()
        os.set_blocking(wake, False)
        old_fd = signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
        threading.Thread(target=self._nudge_on_sigint, args=(woken,), daemon=True,
                         name="rankvisor-debug-sigint").start()
        try:
            self._say_header()
            self._show_history()
            self._handle.subscribe(self._sink)
            return self._loop()
        finally:
            signal.set_wakeup_fd(old_fd)
            os.close(wake)  # the nudger reads the end of the pipe and stops
            signal.signal(_NUDGE, old_nudge)
            signal.signal(signal.SIGUSR2, old)

    def _nudge_on_sigint(self, woken: int) -> None:
        """A Ctrl-C can be lost inside ``input()``: one that lands just before readline
        waits for a key is only looked at after the next key, and the KeyboardInterrupt of
        one that lands in a readline hook is dropped. So on each SIGINT, until the main
        thread has caught its KeyboardInterrupt, interrupt its wait with a signal whose
        handler raises one (inside ``input()`` only)."""
        try:
            while data := os.read(woken, 64):
                if signal.SIGINT not in data or self._main is None:
                    continue
                self._sigints[0] += data.count(signal.SIGINT)
                for _ in range(int(NUDGE_FOR_S / NUDGE_EVERY_S)):
                    time.sleep(NUDGE_EVERY_S)
                    if self._sigints[1] >= self._sigints[0]:
                        break
                    signal.pthread_kill(self._main, _NUDGE)
                else:  # two Ctrl-Cs caught as one: count them even
                    self._sigints[1] = self._sigints[0]
        except OSError:
            pass
        finally:
            os.close(woken)

    def _on_nudge(self, _sig: int, _frame: object) -> None:
        if self._at_keys and self._sigints[1] < self._sigints[0]:
            raise KeyboardInterrupt

    def _on_signal(self, _sig: int, _frame: object) -> None:
        if self._in_input:
            raise _Reprompt

    def _setup_readline(self) -> None:
        try:
            import readline
        except ImportError:
            return
        self._readline = readline
        readline.set_pre_input_hook(self._reading_now)

    def _reading_now(self) -> None:
        with self._lock:
            self._reading = True

    def _say_header(self) -> None:
        info = self._handle.snapshot()
        ranks = {r.rank: r for r in info.ranks}
        me = ranks.get(self._rank)
        if me is None:
            self._end(f"the run has no rank {self._shown}")
            return
        pid = f"pid {me.pid}, " if me.pid else ""
        self._print(f"[rankvisor] rank {self._shown} of run {info.run_id} ({pid}{me.state.value}):"
                    " lines you type go to its stdin; Ctrl-D leaves, Ctrl-C asks before "
                    "SIGINT")
        if not me.state.is_alive:
            self._end(f"rank {self._shown} is not running ({me.state.value})")
        elif info.stdin != "pipe":
            self._end(f"the run's ranks do not read a pipe (--stdin {info.stdin}): start it "
                      "with --stdin pipe to type to them")
        elif me.input_wait is not None:
            self._set_partial(me.input_wait.prompt)

    def _show_history(self) -> None:
        from ...engine.logfile.merged import MergedSource
        from ...engine.rundir.arrival import arrival_path

        info = self._handle.snapshot()
        me = next((r for r in info.ranks if r.rank == self._rank), None)
        if me is None or not me.stdout_path:
            return
        source = MergedSource(me.stdout_path, me.stderr_path,
                              arrival_path(me.stdout_path, me.stderr_path))
        try:
            rows = source.refresh()
            with self._lock:
                self._counts = [store.line_count for store in source.stores]
            for line in source.get_lines(max(0, rows - HISTORY_LINES), rows):
                self._print(line)
            partials = dict(source.partials())
            self._partial = partials.get("stdout") or partials.get("stderr", "")
        finally:
            source.close()

    def _loop(self) -> int:
        while True:
            try:
                done = self._step()
            except KeyboardInterrupt:  # Ctrl-C, at the prompt or while a line was sent
                self._sigints[1] += 1
                self._out.write("\n")
                try:
                    self._ask_sigint()
                except KeyboardInterrupt:  # again, while the SIGINT was sent: not a crash
                    self._sigints[1] += 1
                continue
            if done:
                return 0

    def _step(self) -> bool:
        """One input line, sent; True when the console is over."""
        with self._lock:
            if self._ended:
                self._out.write(f"\r\x1b[K[rankvisor] {self._ended}: leaving the console\n")
                self._out.flush()
                return True
            self._prompt = self._partial
        before = self._history_length()
        try:
            line = self._read(self._prompt, self._keep)
            self._keep = ""
        except _Reprompt:
            self._keep = ""
            if self._history_length() > before:
                # The line was taken just before the signal landed: it is the newest
                # history entry (readline adds it before input() returns). Send it.
                line = self._readline.get_history_item(before + 1)
            else:
                if self._readline is not None:
                    self._keep = self._readline.get_line_buffer()
                self._out.write("\r\x1b[K")
                return False
        except EOFError:
            self._out.write(f"\n[rankvisor] left the console; rank {self._shown} goes on\n")
            return True
        self._send(line)
        return False

    def _history_length(self) -> int:
        return self._readline.get_current_history_length() if self._readline is not None else 0

    def _read(self, prompt: str, keep: str) -> str:
        rl = self._readline
        if rl is not None:
            rl.set_startup_hook((lambda: rl.insert_text(keep)) if keep else None)
        self._in_input = self._at_keys = True
        try:
            return input(prompt)
        finally:
            self._in_input = self._at_keys = False
            with self._lock:
                self._reading = False

    def _send(self, line: str) -> None:
        from ...engine.handle import SendInput

        if line.strip() in QUIT_WORDS and "pdb" in self._prompt.lower():
            if not self._confirm(QUIT_WARNING.format(word=line.strip(), rank=self._shown)):
                return
        with self._lock:
            self._own.append(line)
            self._consumed = self._prompt
            self._partial = ""
        result = self._handle.execute(SendInput((self._rank,), line))
        if not result.ok:
            with self._lock:
                if self._own and self._own[-1] == line:
                    self._own.pop()
            self._print(f"[rankvisor] not sent: {result.message}")

    def _ask_sigint(self) -> None:
        from ...engine.handle import SignalRanks

        if self._confirm(f"send SIGINT to rank {self._shown}? [y/N] "):
            result = self._handle.execute(SignalRanks((self._rank,), signal.SIGINT))
            self._print(f"[rankvisor] {'SIGINT sent' if result.ok else result.message}")

    def _confirm(self, question: str) -> bool:
        with self._lock:
            shown, self._prompt = self._prompt, question  # output goes above the question
        self._at_keys = True
        try:
            answer = input(question)
        except (EOFError, KeyboardInterrupt, _Reprompt) as e:
            if isinstance(e, KeyboardInterrupt):
                self._sigints[1] += 1
            self._out.write("\n")
            return False
        finally:
            self._at_keys = False
            with self._lock:
                self._reading = False
                self._prompt = shown
        rl = self._readline
        if answer and rl is not None and rl.get_current_history_length():
            rl.remove_history_item(rl.get_current_history_length() - 1)  # not a line for it
        return answer.strip().lower() in ("y", "yes")



