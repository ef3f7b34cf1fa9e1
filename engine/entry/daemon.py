"""The supervisor process: one run, in a session of its own, reachable over its socket.

``engine.entry.spawn`` starts it (``python -c`` calling ``main`` with two pipe fds). It
has no terminal: its stdin is /dev/null and, once the run's directory exists, its stdout and
stderr go to ``supervisor.log`` there. It

1. imports every module of the engine it could need, at once: upgrading or editing the
   installed package while a run goes on must not change or break its supervisor;
2. reads the run's request (a pickled ``Request``) from the request pipe;
3. builds the Supervisor, its ``RunHost`` (socket, registry, status.json), starts the ranks;
4. writes one JSON line on the ready pipe: the socket, the run's directory, its pid (or the
   error, in words, when the run could not start);
5. supervises until the run is finished and no viewer is attached; then it exits with the
   run's exit code.

SIGTERM, SIGINT, SIGHUP, SIGQUIT (``--signals-to-handle``) terminate the ranks with
escalation, as torchrun's agent does; the status is written and the process exits without
waiting for viewers. SIGKILL leaves the ranks to the guard, which kills them: nothing
outlives a supervisor however it ends.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pickle
import pkgutil
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import clock

if TYPE_CHECKING:
    from ..control.host import RunHost
    from ..supervisor.core import Supervisor
    from ..supervisor.run_config import SupervisorConfig

__all__ = ["LOG_FILE", "Request", "main", "preload"]

LOG_FILE = "supervisor.log"

FIRST_VIEWER_WAIT_S = 15.0
"""How long a finished run waits for the viewer that started it to connect (a run can end
before the viewer's process gets to connect; it must still see the end)."""


@dataclass(frozen=True)
class Request:
    """What ``rankvisor run`` asks the supervisor process to run."""

    config: SupervisorConfig
    on_failure: str | None = None
    expect_viewer: bool = True
    """A viewer will connect: a run that ends before it does waits for it a while."""


def preload() -> int:
    """Import every module of the engine now; returns how many.

    What the supervisor runs later (a restart, an escalation, the teardown) then uses the
    code it started with, whatever happens to the files of the installed package.
    """
    package = importlib.import_module(__package__.rpartition(".")[0])  # rankvisor.engine

    count = 0
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        name = module.name
        if (name.endswith(("__main__", ".daemon", ".cluster_run"))
                or ".engine.cluster." in name):
            continue  # the multi-node modules import torch: loaded by a multi-node run only
        try:
            importlib.import_module(name)
            count += 1
        except Exception:  # noqa: BLE001 - an optional module (torch-only) may not import
            logging.getLogger(__name__).debug("not preloaded: %s", name, exc_info=True)
    return count


def _say(fd: int, message: dict[str, object]) -> None:
    try:
        os.write(fd, (json.dumps(message) + "\n").encode())
    except OSError:
        pass  # the launcher is gone: it was told nothing, the registry still has the run
    finally:
        os.close(fd)


def _read_request(fd: int) -> Request:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    request = pickle.loads(b"".join(chunks))
    if not isinstance(request, Request):
        raise TypeError(f"not a run request: {type(request).__name__}")
    return request


def _log_to(run_dir: str) -> None:
    """stdout and stderr (ours, and any C library's) into the run's supervisor.log."""
    path = os.path.join(run_dir, LOG_FILE) if run_dir else os.devnull
    # Owner-only: it names who connected and what they asked (engine.control.audit).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    if run_dir:
        os.fchmod(fd, 0o600)  # one made before us keeps no wider mode
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )


def main(request_fd: int, ready_fd: int) -> int:
    """Run one request to its end; the process's exit status."""
    preload()
    from ..control.host import RunHost
    from ..control.registry import StateDirUnsafe
    from ..supervisor.core import Supervisor
    from .headless import exit_status

    try:
        request = _read_request(request_fd)
        if request.config.cluster is not None:
            return _main_cluster(request, ready_fd)
        if request.config.stdin == "inherit":
            request.config.stdin = "null"  # ours is /dev/null: no terminal to hand on
        sup = Supervisor(request.config)
    except Exception as e:  # noqa: BLE001 - told to the launcher, which prints it
        _say(ready_fd, {"ok": False, "error": f"{type(e).__name__}: {e}"})
        return 2

    viewers_seen = [0]

    def clients_changed(count: int) -> None:
        if count:
            viewers_seen[0] += 1

    restore = sup.install_signal_handlers()
    try:
        host = RunHost(
            sup,
            mode="supervisor",
            exit_status=lambda: exit_status(sup.finished, sup.received_signal),
            on_failure=request.on_failure,
            on_clients_changed=clients_changed,
        )
    except StateDirUnsafe as e:  # its message says what to do; the class name is no help
        restore()
        _say(ready_fd, {"ok": False, "error": str(e)})
        return 2
    try:
        try:
            sup.start()
        except Exception as e:  # noqa: BLE001 - the launcher prints it; nothing runs
            _say(ready_fd, {"ok": False,
                                 "error": f"the ranks could not start: {type(e).__name__}: {e}"})
            raise
        run_dir = host.started()
        _log_to(run_dir)
        logging.getLogger(__name__).info(
            "supervising %s (%d ranks) in %s, socket %s",
            request.config.run_id, request.config.nprocs, run_dir, host.socket_path,
        )
        _say(ready_fd, {
            "ok": True, "socket": host.socket_path, "run_dir": run_dir,
            "pid": os.getpid(), "run_id": str(request.config.run_id),
        })
        _supervise(sup, host, expect_viewer=request.expect_viewer, seen=viewers_seen)
    finally:
        sup.shutdown()
        host.close()
        restore()
    return exit_status(sup.finished, sup.received_signal)


def _main_cluster(request: Request, ready_fd: int) -> int:
    """A multi-node run: torch's agent loop over a driven Supervisor (engine.cluster).

    The launcher hears from us once the first round's ranks run (after the rendezvous);
    a rendezvous that fails is told to it as the run's error.
    """
    from .cluster_run import run_cluster

    told = [False]
    failed: list[str] = []

    def started(run_dir: str, host: RunHost | None) -> None:
        _log_to(run_dir)
        told[0] = True
        _say(ready_fd, {
            "ok": True, "socket": host.socket_path if host is not None else "",
            "run_dir": run_dir, "pid": os.getpid(), "run_id": str(request.config.run_id),
        })

    try:
        status, sup, host = run_cluster(request.config, mode="supervisor",
                                        on_failure=request.on_failure, print_output=False,
                                        on_started=started, on_error=failed.append)
    except Exception as e:  # noqa: BLE001 - told to the launcher when it still waits
        if not told[0]:
            _say(ready_fd, {"ok": False, "error": f"{type(e).__name__}: {e}"})
        raise
    if not told[0]:
        _say(ready_fd, {"ok": False, "error": failed[-1] if failed else (
            "the multi-node run ended before its ranks started (see the rendezvous's error "
            "above)")})
        return status
    try:
        if host is not None and sup.received_signal is None:
            _supervise(sup, host, expect_viewer=request.expect_viewer, seen=[0])
    finally:
        if host is not None:
            host.close()
    return status


def _supervise(sup: Supervisor, host: RunHost, *, expect_viewer: bool, seen: list[int]) -> None:
    """Until the run is finished and nobody watches (or a signal said stop).

    The main thread waits on news, not on a clock: an event of the run's life (a signal's
    notice, its end), a viewer coming or going, or the end of the wait for the first viewer.
    A signal interrupts the wait itself (its handler runs on this thread at once)."""
    from ..events import RankOutput, RankStats

    news = threading.Event()

    def lifecycle(event: object) -> None:
        if not isinstance(event, (RankOutput, RankStats)):
            news.set()

    unsubscribe = sup.subscribe(lifecycle)
    host.listen_clients(lambda _count: news.set())
    try:
        _wait_for_the_end(sup, host, news, expect_viewer=expect_viewer, seen=seen)
    finally:
        unsubscribe()


def _wait_for_the_end(sup: Supervisor, host: RunHost, news: threading.Event, *,
                      expect_viewer: bool, seen: list[int]) -> None:
    finished_at: float | None = None
    while True:
        timeout: float | None = None
        if sup.received_signal is not None:
            sup.wait()
            return
        if sup.finished is None:
            finished_at = None
        elif not host.clients:
            if finished_at is None:
                finished_at = clock.monotonic()
            left = FIRST_VIEWER_WAIT_S - (clock.monotonic() - finished_at)
            if not (expect_viewer and not seen[0]) or left <= 0:
                return
            timeout = left
        elif finished_at is None:
            finished_at = clock.monotonic()
        news.wait(timeout)
        news.clear()


def _entry() -> None:
    """``python -c`` target: ``main(request_fd, ready_fd)`` from argv, then exit."""
    code = main(int(sys.argv[1]), int(sys.argv[2]))
    sys.exit(code)
