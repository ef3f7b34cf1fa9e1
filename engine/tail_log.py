"""torch-compatible ``TailLog``: tee rank log files to one console stream, line by line.

Interim version (one polling thread over all files); the event-driven pump replaces the
reader soon without changing this API.

Contract (torch's ``torch.distributed.elastic.multiprocessing.tail_log.TailLog``):
``TailLog(name, log_files, dst, log_line_prefixes=None, interval_sec=0.1,
log_line_filter=lambda _: True)``, ``start() -> TailLog``, ``stop()``, ``stopped()``. Each
line is written as ``f"[{name}{rank}]:{line}"`` (or ``log_line_prefixes[rank] + line``).
Fixed here: lines are written whole (never as fragments), a last line without newline gets
one at ``stop()``, writes go through one lock, and a file that never appears does not block
``stop()``.
"""

from __future__ import annotations

import codecs
import os
import threading
from typing import Callable, TextIO

__all__ = ["TailLog"]


def _accept_all(_: str) -> bool:
    return True


class TailLog:
    """Tail ``log_files`` (rank -> path) into ``dst`` with a per-rank header."""

    def __init__(
        self,
        name: str,
        log_files: dict[int, str],
        dst: TextIO,
        log_line_prefixes: dict[int, str] | None = None,
        interval_sec: float = 0.1,
        log_line_filter: Callable[[str], bool] = _accept_all,
    ) -> None:
        self._name = name
        self._log_files = dict(log_files)
        self._dst = dst
        self._prefixes = log_line_prefixes or {}
        self._interval = interval_sec
        self._filter = log_line_filter
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> TailLog:
        """Start tailing; a no-op without files or without ``dst`` (as in torch)."""
        if not self._log_files or not self._dst:
            return self
        self._thread = threading.Thread(target=self._run, name=f"TailLog_{self._name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        state = {r: [None, codecs.getincrementaldecoder("utf-8")("replace"), ""] for r in self._log_files}
        while True:
            final = self._stop.is_set()
            for rank, path in self._log_files.items():
                st = state[rank]
                if st[0] is None:
                    try:
                        st[0] = os.open(path, os.O_RDONLY)
                    except OSError:
                        continue
                while True:
                    data = os.read(st[0], 1 << 18)
                    if not data:
                        break
                    text = st[2] + st[1].decode(data)
                    *lines, st[2] = text.split("\n")
                    self._write(rank, lines)
                if final:
                    tail = st[2] + st[1].decode(b"", True)
                    if tail:
                        self._write(rank, [tail])
                    os.close(st[0])
            if final:
                return
            self._stop.wait(self._interval)

    def _write(self, rank: int, lines: list[str]) -> None:
        header = self._prefixes.get(rank, f"[{self._name}{rank}]:")
        out = "".join(f"{header}{line}\n" for line in lines if self._filter(line + "\n"))
        if out:
            with self._lock:
                self._dst.write(out)
                self._dst.flush()

    def stop(self) -> None:
        """Deliver everything written so far, then stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._stopped = True

    def stopped(self) -> bool:
        """True once ``stop()`` has returned."""
        return self._stopped
