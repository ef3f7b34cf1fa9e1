"""Failures of ranks: ``ProcessFailure``, ``ChildFailedError``, ``record`` (torch's schema).

A rank decorated with ``record`` (ours or torch's) writes its uncaught exception to the file
named by TORCHELASTIC_ERROR_FILE; the parent turns each failed rank into a ``ProcessFailure``
and picks the root cause. Both directions interoperate with torch: the JSON is the same.

Exceptions::

    Exception
     └── ChildFailedError      one or more ranks failed; str() is the torch-style report

Fixes over torch (engine/README.md has each with its test): a corrupt, empty, huge or odd
error.json becomes a clear fallback message instead of an exception in the supervisor; each
failure gets its own ``error_file_data`` dict; the real exit time is kept in nanoseconds and
drives the root cause; ``caused_by_us`` marks ranks killed by our own teardown, which are never
the root cause when a real failure exists; ``record`` names the rank when there is no file.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from string import Template
from typing import Any, Callable, Optional, TypeVar

from .. import clock
from ..names.signals import exit_signal_name
from .error_file import ErrorFileContent, read_error_file
from .error_handler import ErrorHandler
from .full_disk import full_disk_note
from .handlers import get_error_handler

__all__ = [
    "ChildFailedError",
    "ErrorHandler",
    "ProcessFailure",
    "get_error_handler",
    "record",
    "root_cause_rank",
]

logger = logging.getLogger(__name__)

JSON = dict[str, Any]
GlobalRank = int

_NOT_AVAILABLE = "<N/A>"
_NO_TRACEBACK_HINT = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
_NS = 1_000_000_000


def _empty_error_data() -> JSON:
    # A new dict every time: torch shares one module-level dict and mutates it.
    return {"message": "<NONE>"}


@dataclass
class ProcessFailure:
    """One failed rank: exit code, pid, and what its error file says.

    ``message`` is a ``str``, or the ``dict`` ``{"message", "extraInfo"}`` when the error file
    uses torch's dict shape (as in torch). ``timestamp`` is in seconds, from the error file
    when it has one, else from the exit time.

    Args:
        local_rank: the rank's local rank.
        pid: its process id.
        exitcode: its exit code (negative: killed by that signal).
        error_file: the path of its error.json (need not exist).
        exit_time_ns: when the exit was observed (``clock.wall_ns()``); now when not given.
        caused_by_us: True when the rank died because we signalled it (teardown).
    """

    local_rank: int
    pid: int
    exitcode: int
    error_file: str
    error_file_data: JSON = field(init=False)
    message: str = field(init=False)
    timestamp: int = field(init=False)
    exit_time_ns: Optional[int] = field(default=None, kw_only=True)
    caused_by_us: bool = field(default=False, kw_only=True)
    error_file_problem: Optional[str] = field(init=False, default=None, repr=False)
    """Why an existing error file could not be used (None when it could, or is absent)."""
    _file_timestamp: Optional[int] = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.exit_time_ns is None:
            self.exit_time_ns = clock.wall_ns()
        self.error_file_data = _empty_error_data()
        self.message = ""
        self.timestamp = self.exit_time_ns // _NS
        # The rank's log directory (no such thing with log_dir=os.devnull).
        log_dir = "" if self.error_file in ("", os.devnull) else os.path.dirname(self.error_file)
        # lexists, not isfile: a symbolic link is there (and refused by the reader, which
        # never follows one), not absent. Whatever the file holds, nothing here may raise:
        # the monitor records this failure, and a rank's bytes must not be able to stop it.
        if self.error_file and os.path.lexists(self.error_file):
            try:
                content = read_error_file(self.error_file)
            except Exception as e:  # noqa: BLE001 - the reader's own bug must not stop us
                content = ErrorFileContent(problem=f"could not be read ({type(e).__name__})")
            if content.data is None:
                self.error_file_problem = content.problem
                logger.warning("error file %s %s", self.error_file, content.problem)
            else:
                self.error_file_data = content.data
                self.message = content.message  # type: ignore[assignment]  # str or dict
                if content.timestamp is not None:
                    self.timestamp = self._file_timestamp = content.timestamp
        else:
            self.error_file = _NOT_AVAILABLE

        if not self.message:
            if self.exitcode < 0:
                self.message = (
                    f"Signal {-self.exitcode} ({self.signal_name()}) received by PID {self.pid}"
                )
            else:
                self.error_file_data["errorTraits"] = {
                    "category": "system_terminated_error",
                    "retryability": "False",
                }
                self.message = _NO_TRACEBACK_HINT
                # A full disk leaves a rank no way to say what went wrong (see full_disk).
                full = full_disk_note(log_dir)
                if full is not None:
                    self.message = full
            if self.error_file_problem:
                self.message += f" (error file {self.error_file} {self.error_file_problem})"

    def signal_name(self) -> str:
        """The name of the signal that killed the rank ("SIGKILL"), or "<N/A>".

        Real-time signals are named too ("SIGRTMIN+6"), where torch says "<N/A>".
        """
        return exit_signal_name(self.exitcode) or _NOT_AVAILABLE

    def timestamp_isoformat(self) -> str:
        """``timestamp`` as local time, "YYYY-MM-DD_HH:MM:SS" ("<N/A>" if it is no time)."""
        try:
            return datetime.fromtimestamp(self.timestamp).isoformat(sep="_")
        except (OverflowError, OSError, ValueError, TypeError):
            return _NOT_AVAILABLE

    @property
    def failure_time_ns(self) -> int:
        """The latest moment the failure can have happened: orders failures for the root cause.

        The exit time, or earlier when the error file's timestamp (whole seconds, written when
        the exception was recorded) proves the failure came before the exit was seen.
        """
        assert self.exit_time_ns is not None
        if self._file_timestamp is None:
            return self.exit_time_ns
        return min(self.exit_time_ns, (self._file_timestamp + 1) * _NS - 1)

    @property
    def text(self) -> str:
        """The most useful text for a person: the traceback if recorded, else the message."""
        if isinstance(self.message, dict):
            extra = self.message.get("extraInfo")
            callstack = extra.get("py_callstack") if isinstance(extra, dict) else None
            if isinstance(callstack, str) and callstack:
                return callstack
            return str(self.message.get("message", _NOT_AVAILABLE))
        return str(self.message)


_FAILURE_FORMAT_TEMPLATE = """[${idx}]:
  time      : ${time}
  host      : ${hostname}
  rank      : ${rank} (local_rank: ${local_rank})
  exitcode  : ${exitcode} (pid: ${pid}) ${signal_name}
  error_file: ${error_file}
  traceback : ${message}"""

# The blank lines before and after are part of torch's format.
_MSG_FORMAT_TEMPLATE = """
${boarder}
${title}
${section}
Failures:
${other_failures}
${section}
Root Cause (first observed failure):
${root_failure}
${boarder}"""


_STOPPED_BY_US = "  <NONE: every failed rank was stopped by rankvisor>"


def root_cause_rank(failures: dict[GlobalRank, ProcessFailure]) -> Optional[GlobalRank]:
    """The rank that failed first on its own, or None when there is none.

    Failures we caused (``caused_by_us``: teardown, terminate-all, quit) are never the root
    cause; among the rest the earliest ``failure_time_ns`` wins. Error files stamp whole
    seconds, so two failures of one second whose exits came later tie there: the earlier exit
    goes first (a rank that raised, then its peers whose connection it closed), and only then
    the first in the dict. None when ``failures`` is empty or every failure was ours: the run
    was stopped, nobody failed.
    """
    real = {r: f for r, f in failures.items() if not f.caused_by_us}
    if not real:
        return None
    return min(real, key=lambda r: (real[r].failure_time_ns, real[r].exit_time_ns or 0))


class ChildFailedError(Exception):
    """One or more ranks failed; raised by launchers, reported by ``record`` in the parent.

    Args:
        name: what failed (the entrypoint or role), used in the title.
        failures: failures by global rank; must not be empty.
    """

    def __init__(self, name: str, failures: dict[GlobalRank, ProcessFailure]) -> None:
        self.name = name
        self.failures = failures
        if not self.failures:
            raise AssertionError("ChildFailedError needs at least one failure")
        super().__init__(self.format_msg())

    def get_first_failure(self) -> tuple[GlobalRank, ProcessFailure]:
        """The root cause: the earliest real failure (``root_cause_rank``).

        torch's contract is a failure, always: when every failure was ours (the run was
        stopped, see ``stopped_by_us``) this falls back to the earliest of them, which
        ``format_msg`` then does not call the root cause.
        """
        rank = root_cause_rank(self.failures)
        if rank is None:
            rank = min(self.failures, key=lambda r: self.failures[r].failure_time_ns)
        return rank, self.failures[rank]

    @property
    def stopped_by_us(self) -> bool:
        """True when every failure was caused by us: there is no root cause to report."""
        return root_cause_rank(self.failures) is None

    def format_msg(self, boarder_delim: str = "=", section_delim: str = "-") -> str:
        """The report torch prints: every failure, then the root cause, at most 60 wide."""
        title = f"{self.name} FAILED"
        # Nobody failed on their own (every rank was stopped by us): no rank is blamed.
        root_rank = root_cause_rank(self.failures)
        root_failure_fmt = _STOPPED_BY_US if root_rank is None else ""
        other_failures_fmt: list[str] = []
        width = len(title)
        for idx, (rank, failure) in enumerate(self.failures.items()):
            fmt, w = self._format_failure(idx, rank, failure)
            width = max(width, w)
            if rank == root_rank:
                root_failure_fmt = fmt
            else:
                other_failures_fmt.append(fmt)
        width = min(width, 60)
        return Template(_MSG_FORMAT_TEMPLATE).substitute(
            boarder=boarder_delim * width,
            title=title,
            section=section_delim * width,
            root_failure=root_failure_fmt,
            other_failures="\n".join(other_failures_fmt or ["  <NO_OTHER_FAILURES>"]),
        )

    def _format_failure(self, idx: int, rank: int, failure: ProcessFailure) -> tuple[str, int]:
        msg = failure.message
        if isinstance(msg, dict):
            # Any shape may come from a rank's file: "extraInfo" null or a list is no dict.
            extra = msg.get("extraInfo")
            callstack = extra.get("py_callstack") if isinstance(extra, dict) else None
            msg = callstack if callstack is not None else msg.get("message", _NOT_AVAILABLE)
            msg = str(msg).replace("\n", "\n  ")  # indent the traceback under its label
        signal_name = failure.signal_name()
        fmt = Template(_FAILURE_FORMAT_TEMPLATE).substitute(
            idx=idx,
            time=failure.timestamp_isoformat(),
            hostname=socket.getfqdn(),
            rank=rank,
            local_rank=failure.local_rank,
            exitcode=failure.exitcode,
            pid=failure.pid,
            signal_name=f" ({signal_name})" if signal_name != _NOT_AVAILABLE else "",
            error_file=failure.error_file,
            message=msg,
        )
        return fmt, max(len(line) for line in fmt.split("\n"))


_R = TypeVar("_R")


def record(
    fn: Callable[..., _R], error_handler: Optional[ErrorHandler] = None
) -> Callable[..., Optional[_R]]:
    """Decorate a rank's main function so its uncaught exception lands in error.json.

    ``SystemExit(0)`` returns None; other ``SystemExit`` codes pass through (no file); a
    ``ChildFailedError`` copies the root-cause child's file to ours; any other ``Exception`` is
    recorded and re-raised. Use it once per process, on the top-level function.

    Args:
        fn: the function.
        error_handler: the handler to use; ``get_error_handler()`` when None.
    """
    handler = error_handler or get_error_handler()

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Optional[_R]:
        handler.initialize()
        try:
            return fn(*args, **kwargs)
        except SystemExit as se:
            # A run_path entrypoint that calls sys.exit(0) is a success, not a failure.
            if se.code == 0:
                return None
            raise
        except ChildFailedError as e:
            rank, failure = e.get_first_failure()
            if failure.error_file != _NOT_AVAILABLE:
                handler.dump_error_file(failure.error_file, failure.exitcode)
            else:
                logger.info(
                    "local_rank %s FAILED with no error file."
                    " Decorate your entrypoint fn with @record for traceback info."
                    " See: https://pytorch.org/docs/stable/elastic/errors.html",
                    rank,
                )
            raise
        except Exception as e:
            handler.record_exception(e)
            raise

    return wrapper
