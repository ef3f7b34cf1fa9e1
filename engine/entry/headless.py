"""Running one Supervisor to the end from the command line: headless, or under a TUI.

``run_headless`` is ``rankvisor run --headless``: the ranks' output on our stdout/stderr with
``[role<rank>]:`` prefixes, the way ``torchrun --tee 3`` prints it (``-r``/``-t`` and
``--local-ranks-filter`` decide what reaches the console, as under torchrun; the files
always get everything), rankvisor's own notices on stderr as ``[rankvisor] ...`` lines, and
the torch-style root-cause report on stderr when a rank failed (with the failing
incarnation's last stderr lines when it recorded no traceback, each failure's exit cause
where it says more than its exit code, and the stack dumps saved under the run directory).
A progress bar's current frame is printed once a second at most, so a rank that only
redraws one line is seen to move. Its first line of its own says how the ranks' processes
are tracked: ``[rankvisor] process tracking: cgroup (...)`` or ``process-tree (why no cgroup)``.

Exit status, as torchrun's: 0 when every rank succeeded, 1 when not; 128 + N when we were
stopped by signal N (SIGTERM, SIGINT, SIGHUP), after the ranks were terminated with
escalation.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from ..events import Event, RankOutput, RunFinished, SupervisorNotice
from ..logfile.tail import last_lines
from ..logfile.torch_log import rank_said
from ..names.signals import signal_name
from ..output.sanitize import sanitize
from ..supervisor.core import Supervisor
from ..supervisor.run_config import SupervisorConfig

if TYPE_CHECKING:
    from ..control.host import RunHost
    from ..forensics.exit_cause import ExitCause

__all__ = ["exit_status", "format_report", "run_headless", "run_interactive"]

STDERR_LINES = 12
"""Last stderr lines quoted for a root cause without a traceback (as many as the UI shows)."""

REPORTED_DUMPS = 5
"""The newest stack dumps the report names (the error view and ``rankvisor stack`` list
them all)."""


def exit_status(finished: RunFinished | None, received_signal: int | None) -> int:
    """torchrun's status for a finished run, or 128 + N after our own signal N."""
    if received_signal is not None:
        return 128 + int(received_signal)
    if finished is None:
        return 1
    # A run whose ranks were all stopped did not succeed either, though nobody failed.
    return 1 if finished.result.failures or finished.result.stopped else 0


def format_report(
    name: str,
    finished: RunFinished,
    causes: Mapping[int, ExitCause] | None = None,
    dumps: Sequence[str] = (),
) -> str:
    """The root-cause report torch prints, after a line naming the suspect (the rank most
    likely to have started it, with its evidence) and one naming the root cause.

    Ranks that rankvisor stopped (the teardown after the failure, terminate, kill) did not
    fail: they get one line of their own after the root cause; the torch-style block lists
    them after the failures, as torchrun's does (torch records the exit codes of the ranks
    its ``close()`` ended), and never names one the root cause. When every rank that ended
    badly was ours (terminate-all, quit, shutdown) no rank is blamed: the first line says the
    run was stopped, and the torch-style report lists the ranks with no root cause
    (``ChildFailedError`` agrees).

    ``causes`` (rank -> exit cause) adds a line for each failure whose cause says more than
    the report does; ``dumps`` are the paths of stack dumps saved for the run.
    """
    # Messages and tracebacks come from the ranks' error.json files, the name from the
    # command line: the report goes through the sanitiser before it reaches a terminal.
    return sanitize(_report(name, finished, causes or {}, dumps))


def _report(
    name: str, finished: RunFinished, causes: Mapping[int, ExitCause], dumps: Sequence[str]
) -> str:
    from ..errors import ChildFailedError, root_cause_rank

    failures = finished.result.failures
    stopped = finished.result.stopped
    if not failures and not stopped:
        return ""
    if not failures:
        ranks = ", ".join(map(str, sorted(stopped)))
        head = f"rankvisor: no root cause: the run was stopped by rankvisor (rank(s) {ranks})"
        head += _dump_lines(dumps)
        return head + "\n" + ChildFailedError(name, stopped).format_msg() + "\n"
    rank = finished.root_cause_rank
    if rank is None or rank not in failures:
        rank = root_cause_rank(failures)
    assert rank is not None  # failures holds only ranks that failed on their own
    f = failures[rank]
    tail: list[str] = []
    stderr_path = ""
    if _has_traceback(f):
        text = f.text.strip().splitlines()
    else:
        # No traceback recorded (no @record): torch's message only says how to get one.
        # The failing incarnation's own last stderr lines say more, as in the UI's views.
        stderr_path = str(getattr(finished.result, "stderrs", {}).get(rank, "") or "")
        tail = last_lines(stderr_path, STDERR_LINES)
        said = [ln for ln in f.text.strip().splitlines() if "To enable traceback" not in ln]
        # A message of our own about an exit (the log file system is full) says more than
        # any stderr line; one about a signal repeats what the head says already.
        meaningful = rank_said(tail)
        text = said if said and f.exitcode >= 0 else meaningful or tail or said
    last = text[-1] if text else ""
    suspect = getattr(finished, "suspect", None)
    # A suspect named only for failing first is the root cause: its line would say the
    # root cause's again (the rank, the error), so the root cause's line says it once.
    same = suspect is not None and suspect.kind == "failure" and set(suspect.ranks) <= {rank}
    head = f"rankvisor: root cause: rank {rank} failed first ({_how(f)})"
    if last:
        head += f": {last.strip()}"
    if suspect is not None and not same:
        head = f"rankvisor: suspect: {suspect.reason}\n{head}"
    if stopped:
        ranks = ", ".join(f"rank {r} ({_how(s)})" for r, s in sorted(stopped.items()))
        head += f"\nrankvisor: stopped by rankvisor, not failures: {ranks}"
    for r in sorted(failures, key=lambda r: (r != rank, r)):  # the root cause's first
        cause = causes.get(r)
        if cause is not None and cause.tells_more:
            head += f"\nrankvisor: rank {r}: {cause.text}"
    head += _dump_lines(dumps)
    if stderr_path:
        if tail:
            head += f"\nrankvisor: last stderr lines of rank {rank} ({stderr_path}):"
            head += "".join(f"\n  {line}" for line in tail)
        else:
            head += f"\nrankvisor: rank {rank}: no error.json, and stderr is empty ({stderr_path})"
    # torch's block as torchrun prints it for the same run (scripts grep it): torchrun lists
    # the ranks its teardown ended after the failures, as we do; the root cause is a rank
    # that failed on its own, never one we stopped.
    listed = {r: failures[r] for r in sorted(failures)} | {r: stopped[r] for r in sorted(stopped)}
    return head + "\n" + ChildFailedError(name, listed).format_msg() + "\n"


def _dump_lines(dumps: Sequence[str]) -> str:
    shown = list(dumps)[-REPORTED_DUMPS:]
    more = len(dumps) - len(shown)
    text = "".join(
        f"\nrankvisor: {_dump_kind(path)} saved: {path}" for path in shown
    )
    return text + (f"\nrankvisor: ... and {more} older dump(s) beside them" if more else "")


def _dump_kind(path: str) -> str:
    return "collectives" if os.path.basename(os.path.dirname(path)) == "collectives" else "stacks"


def report_forensics(sup: Supervisor) -> tuple[dict[int, ExitCause], list[str]]:
    """What the report adds for ``sup``'s run: each rank's exit cause (local ranks) and
    the paths of the stack dumps saved under its run directory, oldest first."""
    from ..forensics.stacks import list_dumps

    info = sup.snapshot()
    causes = {r.rank: r.exit_cause for r in info.ranks if r.exit_cause is not None}
    dumps = [d.path for d in list_dumps(info.log_dir)] if info.log_dir else []
    if info.log_dir:
        from ..forensics.collectives_run import saved_captures

        dumps = sorted(dumps + saved_captures(info.log_dir), key=os.path.basename)
    return causes, dumps


def _has_traceback(failure: Any) -> bool:
    """Whether the rank's error.json recorded a traceback (torch's ``@record``)."""
    message = failure.message
    if not isinstance(message, dict):
        return False
    extra = message.get("extraInfo")
    return isinstance(extra, dict) and bool(extra.get("py_callstack"))


def _how(failure: Any) -> str:
    """``"signal SIGTERM"`` or ``"exit code 1"``: how a rank ended, in words."""
    if failure.exitcode < 0:
        return f"signal {failure.signal_name()}"
    return f"exit code {failure.exitcode}"


class _HeadlessPrinter:
    """The event sink of a headless run: rank output and notices to the console.

    A console that goes away (``rankvisor ... | head``) or fails is written no more and the
    run goes on, as under torchrun (whose tailer thread dies on the broken pipe while the
    ranks train on): the console is a view, the log files are the record, and a job of hours
    must not die because a pager was closed. It is said once on stderr, if stderr still works.
    """

    def __init__(self, config: SupervisorConfig, prefixes: dict[int, str],
                 out: TextIO, err: TextIO) -> None:
        from ..output.console import ConsoleSink

        self._shown = {r: config.console(r) for r in range(config.nprocs)}
        # A progress bar's current frame is printed once a second at most (torchrun prints
        # every redraw): a rank that only redraws one line must not look frozen.
        self._out = ConsoleSink(out, prefixes=prefixes, presanitized=True, frames_every=1.0)
        self._err = ConsoleSink(err, prefixes=prefixes, presanitized=True, frames_every=1.0)
        self._told = False
        self.news = threading.Event()
        """Set for what the main thread must see: the run's end, or a rank's unfinished line
        (a frame ``tick`` may owe). Everything else is printed on the thread that publishes
        it, and a signal reaches this thread through its handler, not as news."""

    def frames_owed(self) -> bool:
        """Whether a frame already seen may still be owed to the console (``tick``)."""
        return self._out.frames_waiting() or self._err.frames_waiting()

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunFinished) or (
                isinstance(event, RankOutput) and event.partial):
            self.news.set()
        if isinstance(event, RankOutput):
            shown = self._shown.get(event.rank, (False, False))
            if event.stream == "stdout" and shown[0]:
                self._err.wipe_frame()  # a frame drawn in place on a shared terminal
                self._out((event,))
                if self._out.stopped is not None and not self._told:
                    self._told = True
                    self._say_stdout_stopped(self._out.stopped)
            elif event.stream == "stderr" and shown[1]:
                self._out.wipe_frame()
                self._err((event,))
        elif isinstance(event, SupervisorNotice) and event.severity != "information":
            self.line(event.message)

    def tick(self) -> None:
        """Print the progress frames that are due though their rank went quiet since."""
        self._out.flush_frames()
        self._err.flush_frames()

    def line(self, text: str) -> None:
        """Lines of rankvisor's own on stderr (each marked), never inside a rank's line."""
        self.write_err("".join(f"[rankvisor] {part}\n" for part in text.split("\n")))

    def write_err(self, text: str) -> None:
        """Write ``text`` to stderr, quietly giving up a stderr that is gone."""
        self._out.wipe_frame()
        self._err.write_text(text)

    def shutting_down(self) -> None:
        """We were told to stop: a console that takes nothing for a second is given up,
        so that nobody reading it cannot keep the ranks' teardown (and us) waiting."""
        self._out.shutting_down()
        self._err.shutting_down()

    def _say_stdout_stopped(self, why: str) -> None:
        how = {"closed": "was closed", "not read": "is not being read"}.get(why, f"failed ({why})")
        self._err.write_text(
            f"[rankvisor] stdout {how}: rank output is no longer printed there; "
            "the ranks' log files keep every line\n"
        )


def _open_host(
    sup: Supervisor, mode: str, on_failure: str | None, err: TextIO
) -> RunHost | None:
    """The run's socket, registry entry and status.json; a run goes on without them (with
    a warning) where they cannot be made: an unusable state directory must not stop a job."""
    from ..control.host import RunHost

    try:
        return RunHost(
            sup,
            mode=mode,
            exit_status=lambda: exit_status(sup.finished, sup.received_signal),
            on_failure=on_failure,
        )
    except (OSError, ValueError) as e:
        try:
            err.write(f"[rankvisor] warning: this run cannot be reached by `rankvisor "
                      f"status`/`attach` ({e}); it runs anyway\n")
        except OSError:
            pass
        return None


def run_headless(
    config: SupervisorConfig,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    on_failure: str | None = None,
) -> int:
    """Run to the end, printing like ``torchrun --tee``; returns the exit status.

    The run is registered with a control socket as any other (``rankvisor status``,
    ``stop``, ``attach`` work on it); ``on_failure`` is ``--on-failure``'s command."""
    out = out or sys.stdout
    err = err or sys.stderr
    sup = Supervisor(config)
    printer = _HeadlessPrinter(config, sup.snapshot().log_line_prefixes, out, err)
    sup.subscribe(printer)
    # Stopping on a signal: the teardown must not wait for a console nobody reads (a full
    # pipe stalls the output pump, and the monitor, which would bring the signal's notice,
    # behind it). Said from the handler itself and by the monitor as it takes the signal:
    # this thread may be waiting on that notice, or asleep while another thread took it.
    restore = sup.install_signal_handlers(on_signal=lambda _sig: printer.shutting_down())
    host = _open_host(sup, "headless", on_failure, err)
    try:
        sup.start()
        if host is not None:
            host.started()
        printer.line(f"process tracking: {sup.snapshot().tracking_detail}")
        # Wait on the run's news (its end, a frame), not on a clock: a signal's handler runs
        # on this thread and gives the console up at once; a frame owed to the console is
        # looked at in slices until it is printed.
        while sup.finished is None:
            printer.news.wait(FRAME_LOOK_S if printer.frames_owed() else None)
            printer.news.clear()
            printer.tick()
    finally:
        if sup.received_signal is not None:
            printer.shutting_down()
        sup.shutdown()
        if host is not None:
            host.close()
        restore()
    finished = sup.finished
    status = exit_status(finished, sup.received_signal)
    if finished is not None and finished.result.failures and sup.received_signal is None:
        printer.write_err(format_report(_entry_name(config), finished,
                                        *report_forensics(sup)))
    return status


def _interrupt_main() -> None:
    """Run the main thread's SIGINT handler (asyncio's: the app's task is cancelled) now.

    A SIGINT sent to that thread itself interrupts the event loop's wait, where
    ``_thread.interrupt_main`` only marks the handler due and the loop may sleep on. A SIGINT
    that is not Python's to handle (ignored, as in a shell's background job) is not sent: the
    grace period ends the process instead."""
    if callable(signal.getsignal(signal.SIGINT)):
        ident = threading.main_thread().ident
        if ident is not None:
            signal.pthread_kill(ident, signal.SIGINT)


FRAME_LOOK_S = 0.5
"""How often the main thread looks for a progress frame it owes the console, while one is."""

APP_EXIT_GRACE_S = 5.0
"""How long the app may take to end after a signal stopped the run, before we end it."""

SUMMARY_FILE = "summary.txt"
"""Written in the run's directory when the terminal went away: nobody could read it there."""


def run_interactive(
    config: SupervisorConfig, run_tui: Callable[..., int], *, on_failure: str | None = None
) -> int:
    """Run under the TUI (which starts and shuts down the handle itself): ``--foreground``.

    The run is registered with a control socket as any other; ``on_failure`` is
    ``--on-failure``'s command.

    SIGTERM and SIGHUP stop the ranks with escalation, as headless. Once they are gone the
    app must end cleanly (restoring the terminal, stopping its threads), and only its own
    event loop can do that: Python's default SIGINT handling under ``asyncio.run`` cancels
    the app's main task, so we leave SIGINT to it and send ourselves that interrupt. A SIGINT
    from outside (the TUI reads Ctrl-C as a key) takes the same path; the app's exit then
    shuts the Supervisor down, with escalation.

    A terminal that went away (a dropped SSH session, ``tmux kill-session``: SIGHUP) can leave
    the app unable to end: its last writes to the terminal have nowhere to go and Textual's
    writer waits on them for good. Nobody can see the app then, so if it has not ended
    ``APP_EXIT_GRACE_S`` after the ranks are gone, the process ends (the guard, on our pipe's
    EOF, sweeps whatever is left): losing the terminal never leaves a process of ours behind.
    After a SIGHUP the report goes to ``summary.txt`` in the run's directory either way: the
    terminal it would have been printed on is gone.
    """
    if config.stdin == "inherit":
        config.stdin = "pipe"  # the TUI reads the terminal: the ranks cannot share it
    sup = Supervisor(config)
    restore = sup.install_signal_handlers(
        tuple(s for s in config.signals_to_handle if s != signal.SIGINT)
    )
    host = _open_host(sup, "foreground", on_failure, sys.stderr)
    if host is not None:
        # The app starts the ranks; the run's directory exists from then on.
        sup.subscribe(_RegisterOnStart(host))
    app_ended = threading.Event()

    def close_app_after_signal() -> None:
        sup.wait()
        if sup.received_signal is None:
            return
        _interrupt_main()
        if app_ended.wait(APP_EXIT_GRACE_S):
            return
        _write_summary_file(sup, config)
        sup.shutdown()
        os._exit(128 + int(sup.received_signal))

    threading.Thread(target=close_app_after_signal, name="rankvisor-tui-exit", daemon=True).start()
    status: Any = None
    interrupted = False
    try:
        status = run_tui(sup)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        app_ended.set()
        sup.shutdown()
        if host is not None:
            host.close()
        restore()
    if sup.received_signal == signal.SIGHUP:
        # The terminal hung up: whatever the app printed on the way out went nowhere.
        _write_summary_file(sup, config)
    if sup.received_signal is not None:
        return 128 + int(sup.received_signal)
    if interrupted:
        return 128 + signal.SIGINT
    return int(status) if isinstance(status, int) else exit_status(sup.finished, None)


class _RegisterOnStart:
    """A sink that registers the run at its first event (the ranks were just started)."""

    def __init__(self, host: RunHost) -> None:
        self._host = host
        self._done = threading.Lock()

    def __call__(self, event: Event) -> None:
        if self._done.acquire(blocking=False):
            threading.Thread(target=self._host.started, name="rankvisor-register",
                             daemon=True).start()


def _write_summary_file(sup: Supervisor, config: SupervisorConfig) -> None:
    """The report, where a person who lost the terminal will look: the run's directory."""
    finished = sup.finished
    run_dir = sup.snapshot().log_dir
    if finished is None or not run_dir:
        return
    received = sup.received_signal
    head = f"rankvisor: the run was stopped by {signal_name(received)}" if received else ""
    try:
        with open(os.path.join(run_dir, SUMMARY_FILE), "w") as f:
            f.write(head + "\n" + format_report(_entry_name(config), finished,
                                                 *report_forensics(sup)))
    except OSError:
        pass  # nowhere to say it: the logs in the run directory remain the record


def _entry_name(config: SupervisorConfig) -> str:
    # torchrun's title is the script for python entrypoints, else the program.
    args = [a for a in config.args if not a.startswith("-")]
    if config.entrypoint == sys.executable and args:
        return args[0]
    return config.entrypoint
