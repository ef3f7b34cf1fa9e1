"""torch-compatible ``TailLog``: tee rank log files to one text stream, with rank prefixes.

Same contract as ``torch.distributed.elastic.multiprocessing.tail_log.TailLog``: every line
is written as ``f"[{name}{rank}]:{line}"`` (no space, like torch) or
``log_line_prefixes[rank] + line``; files need not exist at ``start()``; ``log_line_filter``
keeps the lines it accepts (called, as in torch, with the line including its ``\\n``);
``start()`` returns self and is a no-op without files or without ``dst``.

Built on ``engine.output.pump.OutputPump`` (one thread for all files, woken by inotify; polling
every ``interval_sec`` where notifications are unavailable or ``RANKVISOR_TAIL_POLL=1``) and
``engine.output.console.ConsoleSink`` (one lock per ``dst``). What differs from torch, on purpose:

- a line written in two chunks is printed once, whole, never as two prefixed fragments, and
  filters see whole lines;
- a last line without newline is printed with one at ``stop()``, never glued to the next
  rank's output;
- ``\\r`` progress redraws are collapsed to their last frame instead of one line each;
- a file that never appears does not keep ``stop()`` waiting;
- writes to ``dst`` go through one lock per stream and are flushed: concurrent ranks (and the
  stdout/stderr tailers sharing a terminal) never lose or garble a line;
- output is sanitised (SGR colours kept, terminal-controlling escapes removed) unless
  ``raw=True``; invalid UTF-8 shows as U+FFFD; lines over ``max_line_chars`` are cut with a
  marker. The log files themselves are never touched.
"""

from __future__ import annotations

import logging
from typing import Callable, TextIO

from .output.console import ConsoleSink
from .output.lines import DEFAULT_MAX_LINE_CHARS
from .output.pump import OutputPump

__all__ = ["TailLog"]

logger = logging.getLogger(__name__)


def _accept_all(_: str) -> bool:
    return True


class TailLog:
    """Tail the given log files into ``dst``; see the module docstring.

    Args:
        name: prefix name: lines of rank ``r`` start with ``f"[{name}{r}]:"``.
        log_files: rank -> path of the file to tail (it may not exist yet).
        dst: where to write (``sys.stdout``, an open text file).
        log_line_prefixes: rank -> prefix overriding the default header.
        interval_sec: poll interval when polling (the fallback); with inotify, lines arrive
            as they are written.
        log_line_filter: keep lines for which it returns True (called with ``line + "\\n"``).
        raw: write escape sequences unchanged (default: sanitised).
        use_inotify: False forces polling every ``interval_sec``.
        max_line_chars: display cap of one line.
    """

    def __init__(
        self,
        name: str,
        log_files: dict[int, str],
        dst: TextIO,
        log_line_prefixes: dict[int, str] | None = None,
        interval_sec: float = 0.1,
        log_line_filter: Callable[[str], bool] = _accept_all,
        *,
        raw: bool = False,
        use_inotify: bool = True,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    ) -> None:
        self._name = name
        self._dst = dst
        self._log_files = dict(log_files)
        self._log_line_prefixes = log_line_prefixes
        self._stopped = False
        self._started = False
        self._pump: OutputPump | None = None
        if not self._log_files or not dst:
            return
        self.sink = ConsoleSink(
            dst,
            name=name,
            prefixes=log_line_prefixes,
            raw=raw,
            line_filter=None if log_line_filter is _accept_all else log_line_filter,
            presanitized=True,
        )
        self._pump = OutputPump(
            self.sink,
            use_inotify=use_inotify,
            poll_interval=interval_sec,
            max_line_chars=max_line_chars,
            sanitize=not raw,
            text_batches=True,
            name=f"TailLog_{name}",
        )
        for rank, path in self._log_files.items():
            self._pump.add(rank, "stdout", path)

    def start(self) -> TailLog:
        """Start tailing (returns self, as torch's does)."""
        if self._pump is not None:
            self._pump.start()
            self._started = True
        return self

    def stop(self) -> None:
        """Print everything written to the files before this call, then stop."""
        if self._pump is not None and self._started:
            try:
                self._pump.stop()
            except Exception:
                logger.exception("error in log tailer for %s", self._name)
        self._stopped = True

    def stopped(self) -> bool:
        """True once ``stop()`` has returned."""
        return self._stopped
