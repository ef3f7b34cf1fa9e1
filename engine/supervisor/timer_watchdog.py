"""torch's file-timer watchdog and health-check server, run the way LocalElasticAgent runs them.

Ranks that use ``torch.distributed.elastic.timer`` expiry timers (``FileTimerClient``) write
"I expect to be done with scope X by time T" requests into a named pipe; a
``FileTimerServer`` in the launcher reads them and kills the rank whose scope overran. We run
torch's own server, not a copy, so the wire format and its semantics stay torch's:

* enabled by ``TORCHELASTIC_ENABLE_FILE_TIMER=1``; the pipe is ``TORCHELASTIC_TIMER_FILE``,
  generated in the temp dir when unset, and that variable is passed to every rank;
* each expiry becomes a ``TimerExpired`` event (rank, pid, scope) through a callback;
* two departures from torch's agent, both through overrides of the server's reaping hook:
  the rank is signalled through the supervisor (pidfd, whole process group) when the pid is
  one of our ranks, and the server never signals *our* process: torch's agent kills itself
  after an expiry because it expects its own launcher to restart it, while rankvisor is the
  thing a person is looking at and stays up to report what happened.

With ``TORCHELASTIC_HEALTH_CHECK_PORT`` set, torch's health-check server is started with a
liveness callback that reports the watchdog's last progress time (or "now" without one).

torch is imported only when one of these is enabled: it costs seconds and hundreds of MiB.
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .. import clock

__all__ = [
    "ENABLE_ENV",
    "HEALTH_PORT_ENV",
    "TIMER_FILE_ENV",
    "HealthCheck",
    "Watchdog",
]

log = logging.getLogger(__name__)

ENABLE_ENV = "TORCHELASTIC_ENABLE_FILE_TIMER"
TIMER_FILE_ENV = "TORCHELASTIC_TIMER_FILE"
HEALTH_PORT_ENV = "TORCHELASTIC_HEALTH_CHECK_PORT"

ExpiredCallback = Callable[[int, str], None]
"""(worker pid, scope id) for each expired timer."""
ReapCallback = Callable[[int, int], bool | None]
"""(pid, signal) -> True if handled, False on failure, None when the pid is not a rank."""


class Watchdog:
    """torch's ``FileTimerServer`` with rankvisor's reaping and event hooks.

    Args:
        run_id: Passed to the server (it tags its debug logs with it).
        file_path: The named pipe; generated when None.
        on_expired: Called for every expired timer.
        reap: Signals a pid the supervisor's way; see ``ReapCallback``.
        max_interval: How often (s) the server checks for expiry; torch's agent uses 0.1.
    """

    def __init__(
        self,
        run_id: str,
        file_path: str | None = None,
        *,
        on_expired: ExpiredCallback | None = None,
        reap: ReapCallback | None = None,
        max_interval: float = 0.1,
    ) -> None:
        self.file_path = file_path or os.path.join(
            tempfile.gettempdir(), f"watchdog_timer_{uuid.uuid4()}"
        )
        self._run_id = run_id
        self._on_expired = on_expired
        self._reap = reap
        self._max_interval = max_interval
        self._server: Any = None

    @classmethod
    def from_env(
        cls,
        run_id: str,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Watchdog | None:
        """A Watchdog when ``TORCHELASTIC_ENABLE_FILE_TIMER`` is "1" (torch's test), else None."""
        env = os.environ if env is None else env
        if env.get(ENABLE_ENV) != "1":
            return None
        return cls(run_id, env.get(TIMER_FILE_ENV), **kwargs)

    @property
    def rank_env(self) -> dict[str, str]:
        """What each rank needs to find the pipe."""
        return {TIMER_FILE_ENV: self.file_path}

    def start(self) -> None:
        """Create the pipe and start torch's server thread."""
        server_cls = _server_class()
        self._server = server_cls(
            file_path=self.file_path,
            run_id=self._run_id,
            max_interval=self._max_interval,
            daemon=True,
            log_event=self._log_event,
        )
        self._server._rankvisor_reap = self._reap
        self._server.start()

    def stop(self) -> None:
        """Stop the server thread (waits up to ``max_interval``) and remove the pipe."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def last_progress_time(self) -> int:
        """Seconds since the epoch of the last timer request seen (torch's liveness signal)."""
        if self._server is None:
            return int(clock.wall())
        return int(self._server.get_last_progress_time())

    def _log_event(self, name: str, request: Any) -> None:
        # torch calls this from its watchdog thread; "timer expired" once per expired scope.
        if name == "timer expired" and request is not None and self._on_expired is not None:
            self._on_expired(int(request.worker_pid), str(request.scope_id))


def _server_class() -> type:
    """Subclass torch's FileTimerServer (imported here, lazily) with our reaping rules."""
    # torch re-exports it from timer/__init__ without __all__ (mypy strict: no implicit re-export)
    from torch.distributed.elastic.timer import FileTimerServer  # type: ignore[attr-defined]

    class _RankvisorTimerServer(FileTimerServer):
        _rankvisor_reap: ReapCallback | None = None

        def _reap_worker(self, worker_pid: int, signal: int) -> bool:
            # torch's server ends by reaping its own process after an expiry (its agent is
            # meant to be restarted from outside); a supervisor UI must stay up.
            if worker_pid == os.getpid():
                return True
            if self._rankvisor_reap is not None:
                handled = self._rankvisor_reap(worker_pid, signal)
                if handled is not None:
                    return handled
            # Not one of our ranks (a rank's own child registered the timer): torch's way.
            return super()._reap_worker(worker_pid, signal)

    return _RankvisorTimerServer


class HealthCheck:
    """torch's health-check server, fed by a liveness callback.

    Args:
        port: ``TORCHELASTIC_HEALTH_CHECK_PORT``.
        alive: Returns the last progress time (s since epoch).
        timeout: Seconds after which the server may consider us dead (torch's agent: 60).
    """

    def __init__(self, port: int, alive: Callable[[], int], timeout: int = 60) -> None:
        self.port = port
        self._alive = alive
        self._timeout = timeout
        self._server: Any = None

    @classmethod
    def from_env(
        cls, alive: Callable[[], int], env: Mapping[str, str] | None = None
    ) -> HealthCheck | None:
        """A HealthCheck when the port variable holds an integer (torch ignores other values)."""
        env = os.environ if env is None else env
        raw = env.get(HEALTH_PORT_ENV)
        if raw is None:
            return None
        try:
            port = int(raw)
        except ValueError:
            log.info("invalid %s=%r, expecting an integer: no health check", HEALTH_PORT_ENV, raw)
            return None
        return cls(port, alive)

    @property
    def server(self) -> Any:
        """torch's server object (None before start)."""
        return self._server

    def start(self) -> None:
        """Create and start torch's server."""
        from torch.distributed.elastic.agent.server.health_check_server import (
            create_healthcheck_server,
        )

        self._server = create_healthcheck_server(
            alive_callback=self._alive, port=self.port, timeout=self._timeout
        )
        self._server.start()

    def stop(self) -> None:
        """Stop the server."""
        if self._server is not None:
            self._server.stop()
            self._server = None
