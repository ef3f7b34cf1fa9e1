"""A daemon thread that calls one function every ``interval_s`` until it is stopped: the
Supervisor's background readings (the collectives' poll, the live suspect's check). A call
that raises is logged and the next one comes as usual: a reading never touches the run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Ticker"]

log = logging.getLogger(__name__)


class Ticker:
    def __init__(self, name: str, interval_s: float, tick: Callable[[], None]) -> None:
        self._name = name
        self._interval = interval_s
        self._tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - see the module docstring
                log.exception("%s failed", self._name)
