"""``rankvisor input`` and ``rankvisor debug``: typing to a rank from a plain shell.

``input [RUN] RANKS TEXT`` sends one line to the stdin of some ranks (``--eof`` closes it
instead); ``debug [RUN] [--rank N]`` is a line-mode console on one rank, like ``kubectl
attach -it``: the rank's output live, each line typed (readline editing and history) sent
to it. Both go through the run's control socket, so they work from any shell of the run's
user and the supervisor refuses them as it refuses any command (a read-only viewer, a run
without ``--stdin pipe``, a rank that is not running).

The console keeps the terminal tidy while the rank writes: output lines are printed above
the line being typed, which is then drawn again; the prompt is the rank's own unfinished
line ("(Pdb) ", "continue? "), and when it changes while a person types, the input is
interrupted (a signal to the main thread) and offered again with the new prompt and the
text typed so far. Ctrl-C asks before it sends SIGINT to the rank; Ctrl-D leaves without
touching it; ``q``/``quit``/``exit`` at a pdb prompt asks first (it ends the rank).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections import deque
from typing import Any, Final, TextIO

from ...engine.control import registry
from ...engine.events import (
    Event,
    RankInput,
    RankInputWait,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from ...engine.logfile.stdin_log import TYPED_MARK
from .command import EXIT_OK, EXIT_REFUSED, Subcommand, on_a_run, say
from .ranks import local_ranks, ranks_arg, targets
from .supervisor_call import connect_and_run

__all__ = ["DebugConsole", "debug_main", "input_main"]

HISTORY_LINES: Final = 20
"""Lines of the rank's output shown when the console opens."""
QUIT_WORDS: Final = frozenset({"q", "quit", "exit"})
QUIT_WARNING: Final = (
    "'{word}' ends pdb and so rank {rank} (bdb.BdbQuit); in a torch.distributed job its "
    "peers may then fail or hang in their next collective. Send it? [y/N] "
)


# -- rankvisor input --------------------------------------------------------------------


@on_a_run
def input_main(sub: Subcommand, argv: list[str]) -> int:
    """``rankvisor input [RUN] RANKS TEXT`` / ``rankvisor input [RUN] RANKS --eof``."""
    from ...engine.handle import CloseInput, SendInput

    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("ranks", metavar="RANKS",
                   help="global ranks: 0, 0,2, 0-3 or all (every running rank)")
    p.add_argument("text", nargs="?", metavar="TEXT", help="the line to send (one line)")
    p.add_argument("--eof", action="store_true",
                   help="close the ranks' stdin instead (they read end of file)")
    args = p.parse_args(argv)
    run, ranks_text, text = args.run, args.ranks, args.text
    if not args.eof and text is None:
        if run is None:
            p.error("give RANKS and TEXT (or --eof)")
        run, ranks_text, text = None, run, ranks_text  # `input RANKS TEXT`: no RUN
    if args.eof and text is not None:
        p.error(f"--eof sends no text: leave out {text!r}")
    ranks = ranks_arg(ranks_text, p)
    entry, _status, ranks = targets(run, ranks)
    outcome = {"code": EXIT_OK}

    def show(result: Any) -> None:
        if result.message:
            print(result.message, file=sys.stdout if result.ok else sys.stderr)
        refused = (result.data or {}).get("refused") or {}
        if ranks is not None and refused:
            outcome["code"] = EXIT_REFUSED  # a rank named was not reached

    command = CloseInput(ranks) if args.eof else SendInput(ranks, str(text))
    code = connect_and_run(sub.name, entry, lambda _h: command, show=show)
    return code if code != EXIT_OK else outcome["code"]


# -- rankvisor debug --------------------------------------------------------------------


class _Reprompt(Exception):
    """Raised in the main thread (by a signal) to offer the input line again."""


@on_a_run
def debug_main(sub: Subcommand, argv: list[str]) -> int:
    """``rankvisor debug [RUN] [--rank N]``."""
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: your newest running run)")
    p.add_argument("--rank", type=int, default=None, metavar="N",
                   help="the global rank (default: the first rank waiting for input, else 0)")
    args = p.parse_args(argv)
    entry = registry.resolve(args.run, running_only=True)
    _, status = registry.entry_state(entry)
    rank = args.rank if args.rank is not None else _first_waiting(status)
    if rank < 0:
        p.error(f"--rank must be 0 or more, not {rank}")
    (local,) = local_ranks((rank,), status)
    from ...engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle

    try:
        handle = RemoteHandle.connect(entry.socket, name="rankvisor debug")
    except (OSError, ProtocolMismatch, NoAnswer) as e:
        say(sub.name, f"cannot reach the run's supervisor at {entry.socket}: {e}")
        return EXIT_REFUSED
    try:
        return DebugConsole(handle, local, shown_rank=rank).run()
    finally:
        handle.detach()


def _first_waiting(status: dict[str, Any] | None) -> int:
    for r in (status or {}).get("ranks", []):
        if r.get("input_wait"):
            return int(r["rank"])
    return 0


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
        self._ended = ""
        self._own: deque[str] = deque()
        """Lines sent from here whose RankInput has not come back yet (not shown twice)."""
        self._counts = [0, 0]
        """Lines of (stdout, stderr) already shown, by their number in the files."""
        self._keep = ""
        """Text typed when the prompt changed under it: offered again with the new one."""
        self._main = threading.main_thread().ident
        self._readline: Any = None

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
        self._setup_readline()
        old = signal.signal(signal.SIGUSR2, self._on_signal)
        try:
            self._say_header()
            self._show_history()
            self._handle.subscribe(self._sink)
            return self._loop()
        finally:
            signal.signal(signal.SIGUSR2, old)

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
                self._out.write("\n")
                self._ask_sigint()
                continue
            if done:
                return EXIT_OK

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
        self._in_input = True
        try:
            return input(prompt)
        finally:
            self._in_input = False
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
        try:
            answer = input(question)
        except (EOFError, KeyboardInterrupt, _Reprompt):
            self._out.write("\n")
            return False
        finally:
            with self._lock:
                self._reading = False
                self._prompt = shown
        rl = self._readline
        if answer and rl is not None and rl.get_current_history_length():
            rl.remove_history_item(rl.get_current_history_length() - 1)  # not a line for it
        return answer.strip().lower() in ("y", "yes")



