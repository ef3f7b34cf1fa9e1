"""``PContext``: the start / wait / close contract shared by binary and function ranks.

torch's semantics, with these changes (engine/README.md lists them all):

* ``wait()`` does not sleep a whole ``period`` between polls: subclasses block on the ranks'
  exits (``_wait_for_exit``), so an exit is noticed within milliseconds; ``period`` only
  bounds the time between two polls. Deadlines use ``clock.monotonic()``, not the wall clock.
* Signal handlers from TORCHELASTIC_SIGNALS_TO_HANDLE are installed by ``start()`` on the main
  thread only (as in torch) and **restored by ``close()``** (torch leaves them). Several
  open contexts share one installation; the original handlers come back when the last
  closes. ``close()`` called off the main thread cannot restore them (Python forbids it).
* A context that is never closed is closed at interpreter exit (SIGTERM, a short grace,
  SIGKILL) before Python joins any thread, so a forgotten ``close()`` with tee on cannot
  hang the interpreter (torch's does).
* ``close()`` is idempotent: TailLogs stopped and filtered files closed exactly once.

Threads: ``start``/``wait``/``close`` belong to one owner thread at a time. The signal
handler runs on the main thread; the exit hook runs on the main thread at shutdown.
"""

from __future__ import annotations

import abc
import logging
import os
import signal
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Any, Callable, Final, Optional, TextIO, Union

from . import clock
from .errors import ProcessFailure
from .logs_specs import LogsSpecs
from .result import RunProcsResult

__all__ = ["PContext", "RunProcsResult", "SignalException", "ended_result"]

logger = logging.getLogger(__name__)

DEFAULT_SIGNALS_TO_HANDLE: Final = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
EXIT_CLOSE_TIMEOUT: Final = 5.0
"""Grace (s) between SIGTERM and SIGKILL for contexts still open at interpreter exit."""


class SignalException(Exception):
    """Raised in the main thread when the process receives a handled signal.

    The ranks are not signalled automatically: catch it and ``close(e.sigval)``.
    """

    def __init__(self, msg: str, sigval: signal.Signals) -> None:
        super().__init__(msg)
        self.sigval = sigval


def _terminate_process_handler(signum: int, frame: Optional[FrameType]) -> None:
    """Turn a termination signal into ``SignalException`` (torch's handler, same message)."""
    sigval = signal.Signals(signum)
    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)


def _validate_full_rank(d: dict[int, Any], nprocs: int, what: str) -> None:
    """Raise torch's RuntimeError unless ``d``'s keys are exactly ``0..nprocs-1``."""
    actual_keys = set(d.keys())
    expected_keys = set(range(nprocs))
    if actual_keys != expected_keys:
        raise RuntimeError(
            f"{what}, local rank mapping mismatch, expected: {expected_keys}, actual: {actual_keys}"
        )


class PContext(abc.ABC):
    """A set of ranks started together, waited on together and closed together.

    Args:
        name: the role name; tee'd lines are prefixed ``[{name}{local_rank}]:``.
        entrypoint: a binary path (``str``) or a function.
        args: arguments per local rank, keys exactly ``0..n-1``.
        envs: environment per local rank, same keys (``TORCHELASTIC_ERROR_FILE`` is added).
        logs_specs: where the logs go; reified here (directories made now).
        log_line_prefixes: per-rank prefixes replacing ``[{name}{rank}]:``.
        duplicate_stdout_filters: tee'd stdout lines containing any of these also go,
            prefixed, to ``filtered_stdout.log``.
        duplicate_stderr_filters: the same for stderr.

    Raises:
        RuntimeError: ``args``/``envs`` do not cover exactly ranks ``0..n-1`` (nothing is
            created then).
    """

    def __init__(
        self,
        name: str,
        entrypoint: Union[Callable[..., Any], str],
        args: dict[int, tuple[Any, ...]],
        envs: dict[int, dict[str, str]],
        logs_specs: LogsSpecs,
        log_line_prefixes: Optional[dict[int, str]] = None,
        duplicate_stdout_filters: Optional[list[str]] = None,
        duplicate_stderr_filters: Optional[list[str]] = None,
    ) -> None:
        self.name = name
        nprocs = len(args)
        _validate_full_rank(args, nprocs, "args")
        _validate_full_rank(envs, nprocs, "envs")
        logs_dest = logs_specs.reify(envs)
        _validate_full_rank(logs_dest.stdouts, nprocs, "stdouts")
        _validate_full_rank(logs_dest.stderrs, nprocs, "stderrs")

        self.entrypoint = entrypoint
        self.args = args
        self.envs = envs
        self.stdouts = logs_dest.stdouts
        self.stderrs = logs_dest.stderrs
        self.error_files = logs_dest.error_files
        self.nprocs = nprocs
        self.filtered_stdout: Optional[TextIO] = None
        self.filtered_stderr: Optional[TextIO] = None
        self._tail_logs: list[Any] = []
        self._log_line_prefixes = log_line_prefixes
        self._handled_signals: list[signal.Signals] = []
        self._cleaned_up = False

        if not (logs_dest.tee_stdouts or logs_dest.tee_stderrs or duplicate_stdout_filters
                or duplicate_stderr_filters):
            return  # nothing to tail: no TailLog threads, no import
        from .tail_log import TailLog

        self._tail_logs = [
            TailLog(name, logs_dest.tee_stdouts, sys.stdout, log_line_prefixes),
            TailLog(name, logs_dest.tee_stderrs, sys.stderr, log_line_prefixes),
        ]
        try:
            if duplicate_stdout_filters:
                self.filtered_stdout = self._add_filtered_tail(
                    logs_dest.filtered_stdout, logs_dest.tee_stdouts, duplicate_stdout_filters
                )
            if duplicate_stderr_filters:
                self.filtered_stderr = self._add_filtered_tail(
                    logs_dest.filtered_stderr, logs_dest.tee_stderrs, duplicate_stderr_filters
                )
        except BaseException:
            self._close_filtered_files()
            raise

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Install signal handlers (main thread only), start the ranks, then the TailLogs."""
        if threading.current_thread() is threading.main_thread():
            if not self._handled_signals:
                self._handled_signals = _install_handlers()
        else:
            logger.warning(
                "Failed to register signal handlers since torchelastic is running on a child "
                "thread. This could lead to orphaned worker processes if the torchrun is "
                "terminated."
            )
        _open_contexts.add(self)
        _ensure_exit_hook()
        self._start()
        for tail_log in self._tail_logs:
            tail_log.start()

    @abc.abstractmethod
    def _start(self) -> None:
        """Start the ranks. On failure, ranks already started must be reachable by close()."""

    @abc.abstractmethod
    def _poll(self) -> Optional[RunProcsResult]:
        """All-or-nothing: a result when every rank succeeded or any failed, else None.

        When returning a result, implementations close the context (the others are torn down).
        """

    def _wait_for_exit(self, timeout: float) -> None:
        """Block up to ``timeout`` s, returning early when a rank exits.

        The base version just sleeps (torch's behaviour); subclasses block on their ranks.
        """
        time.sleep(timeout)

    def wait(self, timeout: float = -1, period: float = 1) -> Optional[RunProcsResult]:
        """Wait for the run to finish (all ranks done, or one failed).

        Args:
            timeout: seconds; negative waits for ever, 0 polls once.
            period: the longest time between two polls (exits wake the wait at once).

        Returns:
            The result, or None if the run is still going when ``timeout`` expires.

        Raises:
            SignalException: a handled signal arrived (call ``close(e.sigval)``).
        """
        if timeout == 0:
            return self._poll()
        deadline = None if timeout < 0 else clock.monotonic() + timeout
        while True:
            result = self._poll()
            if result:
                return result
            step = period
            if deadline is not None:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return None
                step = min(period, remaining)
            self._wait_for_exit(max(step, 0.0))

    @abc.abstractmethod
    def pids(self) -> dict[int, int]:
        """The pid of each local rank."""

    def close(self, death_sig: Optional[signal.Signals] = None, timeout: float = 30) -> None:
        """Stop every rank still running, then release what the context holds.

        ``death_sig`` (default SIGTERM) goes to each live rank and its group; after one
        shared deadline of ``timeout`` s survivors get SIGKILL, and the wait after that is
        bounded too, so a rank stuck in the kernel cannot hang us. Idempotent.
        """
        self._close(death_sig or signal.SIGTERM, timeout)
        if self._cleaned_up:
            return
        self._cleaned_up = True
        _open_contexts.discard(self)
        for tail_log in self._tail_logs:
            tail_log.stop()
        self._close_filtered_files()
        if self._handled_signals:
            if threading.current_thread() is threading.main_thread():
                _restore_handlers(self._handled_signals)
                self._handled_signals = []
            else:
                logger.warning("close() off the main thread: signal handlers left installed")

    @abc.abstractmethod
    def _close(self, death_sig: signal.Signals, timeout: float = 30) -> None:
        """Signal, wait, escalate, wait (bounded). Must be idempotent."""

    def _add_filtered_tail(
        self, path: str, tee_files: dict[int, str], filters: list[str]
    ) -> TextIO:
        """Open a filtered_*.log and tail the tee'd files into it, lines with a filter only."""
        from .tail_log import TailLog

        dst = open(path, mode="w", errors="replace", buffering=1)  # noqa: SIM115 - close()
        try:
            tail = TailLog(
                self.name, tee_files, dst, self._log_line_prefixes, log_line_filter=_any_of(filters)
            )
        except BaseException:
            dst.close()
            raise
        self._tail_logs.append(tail)
        return dst

    def _close_filtered_files(self) -> None:
        for f in (self.filtered_stdout, self.filtered_stderr):
            if f is not None and not f.closed:
                f.close()


def ended_result(
    ended: dict[int, ProcessFailure],
    stdouts: dict[int, str],
    stderrs: dict[int, str],
    return_values: Optional[dict[int, Any]] = None,
) -> RunProcsResult:
    """The result of a finished run from the ranks that did not succeed (by local rank).

    Those our own signal ended (``caused_by_us``) go to ``stopped``, the rest to
    ``failures``; ``return_values`` are kept only when neither holds a rank, since a run
    with a rank we stopped did not succeed either.
    """
    failures = {r: f for r, f in sorted(ended.items()) if not f.caused_by_us}
    stopped = {r: f for r, f in sorted(ended.items()) if f.caused_by_us}
    return RunProcsResult(
        return_values={} if ended or return_values is None else return_values,
        failures=failures,
        stdouts=stdouts,
        stderrs=stderrs,
        stopped=stopped,
    )


def _any_of(needles: list[str]) -> Callable[[str], bool]:
    needles = list(needles)
    return lambda line: any(n in line for n in needles)


# -- signal handlers shared by all contexts ------------------------------------------------

_installed: dict[signal.Signals, list[Any]] = {}
"""Signal -> [the handler we replaced, how many open contexts rely on ours]."""


def _install_handlers() -> list[signal.Signals]:
    names = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", DEFAULT_SIGNALS_TO_HANDLE)
    done: list[signal.Signals] = []
    for raw in names.split(","):
        sig_name = raw.strip()
        if not sig_name:
            continue  # "" (or a trailing comma) means: handle nothing more
        try:
            sig = signal.Signals(getattr(signal, sig_name))
            if sig in _installed and signal.getsignal(sig) is _terminate_process_handler:
                _installed[sig][1] += 1
            else:
                previous = signal.signal(sig, _terminate_process_handler)
                _installed[sig] = [previous, 1]
            done.append(sig)
            logger.info("Registered signal handler for %s", sig_name)
        except (AttributeError, ValueError, TypeError, OSError, RuntimeError):
            logger.warning("Failed to register signal handler for %s", sig_name, exc_info=True)
    return done


def _restore_handlers(sigs: list[signal.Signals]) -> None:
    for sig in sigs:
        entry = _installed.get(sig)
        if entry is None:
            continue
        entry[1] -= 1
        if entry[1] > 0:
            continue
        del _installed[sig]
        # Only undo our own installation: someone may have replaced it since.
        if signal.getsignal(sig) is _terminate_process_handler:
            signal.signal(sig, entry[0] if entry[0] is not None else signal.SIG_DFL)


# -- contexts left open at interpreter exit ---------------------------------------------------

_open_contexts: weakref.WeakSet[PContext] = weakref.WeakSet()
_exit_hook_lock = threading.Lock()
_exit_hook_registered = False


def _ensure_exit_hook() -> None:
    global _exit_hook_registered
    with _exit_hook_lock:
        if _exit_hook_registered:
            return
        # threading's exit hooks run before Python joins non-daemon threads and before
        # concurrent.futures joins its workers (and in reverse order of registration), so a
        # TailLog on an executor cannot block exit; plain atexit would run too late.
        register = getattr(threading, "_register_atexit", None)
        try:
            if register is not None:
                register(_close_open_contexts)
            else:  # pragma: no cover - other Pythons
                import atexit

                atexit.register(_close_open_contexts)
        except RuntimeError:  # already shutting down
            return
        _exit_hook_registered = True


def forget_in_forked_child() -> None:
    """In a child forked from this process, drop what it copied of the contexts' bookkeeping.

    The copy of a started context would otherwise be "closed" by the exit hook when the
    child finishes (multiprocessing runs threading's exit hooks in the child), signalling the
    child's siblings and deleting their return values; and the parent's SIGTERM/SIGINT
    handlers would turn the child's own death signal into a ``SignalException``. A function
    rank started under fork calls it first (``MultiprocessContext`` hands it over).
    """
    _open_contexts.clear()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(sig) is _terminate_process_handler:
            # What a fresh interpreter has (spawn): KeyboardInterrupt on SIGINT, else die.
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, default)


def _close_open_contexts() -> None:
    """Close contexts the program forgot: SIGTERM, ``EXIT_CLOSE_TIMEOUT`` s, SIGKILL."""
    for ctx in list(_open_contexts):
        try:
            ctx.close(timeout=EXIT_CLOSE_TIMEOUT)
        except Exception:  # best effort at exit: keep closing the others
            logger.exception("closing %s at interpreter exit failed", ctx.name)
