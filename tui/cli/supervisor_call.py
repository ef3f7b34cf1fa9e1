"""One command to a running run's supervisor, through its control socket, and its answer.

Nothing here starts, signals or inspects a process: the registry tells whether the
supervisor lives, and the supervisor carries the command out.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...engine.control import registry
from ...engine.control.registry import RunEntry
from ...engine.names import refusals
from .command import EXIT_OK, EXIT_REFUSED, EXIT_STALE, say, stale_line
from .run_args import PROG

if TYPE_CHECKING:
    from ...engine.handle import Command, CommandResult

__all__ = ["connect_and_run"]


def _finished(command: str, entry: RunEntry, status: dict[str, Any] | None,
              *, supervisor_gone: bool = True) -> int:
    """A finished run: nothing to stop, no rank to act on (said the same way whether its
    supervisor has exited or still serves a viewer)."""
    code = status.get("exitcode") if status else None
    if command == "stop":
        print(f"run {entry.run_id} has already finished (exit code {code})")
        return EXIT_OK
    gone = " and its supervisor has exited" if supervisor_gone else ""
    say(command, f"run {entry.run_id} has finished (exit code {code}){gone}: there is no "
                 "rank to act on")
    return EXIT_REFUSED


def connect_and_run(
    command: str, entry: RunEntry, build: Callable[[Any], Command], *, wait: bool = False,
    show: Callable[[CommandResult], None] | None = None,
) -> int:
    """Send one command to the run's supervisor and print its answer (``show`` prints it
    instead of the message, for a command that hands back data)."""
    state, status = registry.entry_state(entry)
    if state == "stale":
        say(command, stale_line(entry))
        return EXIT_STALE
    if state == "finished" and (command == "stop" or not entry.supervisor_alive()):
        return _finished(command, entry, status)
    from ...engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle

    try:
        handle = RemoteHandle.connect(entry.socket, name=f"{PROG} {command}")
    except (ProtocolMismatch, NoAnswer, OSError) as e:
        if not isinstance(e, ProtocolMismatch):
            state, status = registry.entry_state(entry)
            if state == "finished":
                # It ended between our look and the connect (or the handshake): its final
                # status is written before its socket closes, so the status now says so.
                return _finished(command, entry, status)
        if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
            if not entry.supervisor_alive():
                say(command, stale_line(entry))
                return EXIT_STALE
            say(command, f"the supervisor (pid {entry.supervisor_pid}) does not answer at "
                         f"{entry.socket or '(no socket)'}: {e.strerror or e}")
        elif isinstance(e, (ProtocolMismatch, NoAnswer)):
            say(command, str(e))
        else:
            say(command, f"cannot reach the supervisor at {entry.socket}: {e.strerror or e}")
        return EXIT_REFUSED
    from ...engine.events import EscalationFinished

    ended: list[tuple[int, ...]] = []  # filled on the reader thread, read on ours
    unsubscribe = handle.subscribe(
        lambda e: ended.append(e.ranks) if isinstance(e, EscalationFinished) else None
    ) if wait else (lambda: None)
    try:
        cmd = build(handle)  # Usage and Refused are said by ``on_a_run``, as for every command
        result: CommandResult = handle.execute(cmd)
        if not result.ok and result.message == refusals.OVER:
            # It finished since we looked (its supervisor stays while a viewer is there).
            now, final = registry.entry_state(entry)
            if now == "finished":
                return _finished(command, entry, final, supervisor_gone=False)
        # A stop while the run already stops (it ended by itself, or its supervisor got a
        # signal): what was asked is under way, so it is no refusal; a waiting stop waits
        # for that end. (A stop after a stop is simply accepted.)
        stopping = (command == "stop" and not result.ok
                    and result.message == refusals.SHUTTING_DOWN)
        if stopping:
            print(f"run {entry.run_id} is already stopping")
        elif show is not None:
            show(result)
        elif result.message:
            from ...engine.output.safe_text import one_line

            print(one_line(result.message, 4000), file=sys.stdout if result.ok else sys.stderr)
        if not result.ok and not stopping:
            return EXIT_REFUSED
        if wait:
            finished, stuck = _the_end(handle, ended)
            if stuck:
                say(command, f"rank(s) {', '.join(map(str, stuck))} did not exit after SIGKILL "
                             "(uninterruptible sleep, D state?): the supervisor waits no "
                             "longer and the run is not over")
                return EXIT_REFUSED
            if finished is None:  # the connection ended first: the file says how it ended
                now, st = registry.entry_state(entry)
                if now == "stale":
                    say(command, stale_line(entry))
                    return EXIT_STALE
                print(f"run {entry.run_id} {now}"
                      + (f" (exit code {st.get('exitcode')})" if st else ""))
            else:
                print(f"run {entry.run_id} finished; every rank is gone")
        return EXIT_OK
    finally:
        unsubscribe()
        handle.detach()


def _the_end(handle: Any, ended: list[tuple[int, ...]]) -> tuple[Any, list[int]]:
    """Wait for the run's end, or for an escalation that ended with ranks still alive
    (SIGKILL did not end them: a rank in D state): (RunFinished or None, those ranks).

    torch's ``close()`` bounds its wait after SIGKILL; so does this: the supervisor gives up
    on such a rank ``kill_wait_s`` after its SIGKILL and ends the escalation, and so we go."""
    while True:
        finished = handle.wait(0.2)
        if finished is not None or not handle.connected:
            return finished, []
        while ended:
            ranks = ended.pop(0)
            try:
                alive = [r.rank for r in handle.snapshot().ranks
                         if r.rank in ranks and r.state.is_alive]
            except ConnectionError:  # NoAnswer: the end of the link is the end of the wait
                return None, []
            if alive:
                return None, alive
