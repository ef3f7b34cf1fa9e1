"""``rankvisor run`` and ``rankvisor demo``: a job from the command line, started.

A torchrun command line works by changing its first word: ``torchrun --nproc-per-node 4
train.py`` becomes ``rankvisor run --nproc-per-node 4 train.py`` (or, since ``run`` is the
default, ``rankvisor --nproc-per-node 4 train.py``). Flags torchrun has for multi-node
rendezvous are accepted when they describe one node and refused with a clear line otherwise.

Everything that can be checked is checked before a process starts: a bad value gets one
line on stderr (``rankvisor: error: ...``) and exit status 2. The run's exit status is
torchrun's: 0 when every rank succeeded, 1 when one failed (after the root-cause report),
128 + N when rankvisor itself was stopped by signal N.

Processes are started, watched and signalled by the engine (``engine.supervisor.core``,
the supervisor process of ``engine.entry.spawn``), never here; the TUI comes through
``app_seam``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ...engine.supervisor.run_config import ConfigError
from ..attach_hint import attach_hint
from .app_seam import app_runner
from .command import Subcommand
from .run_args import PROG, Job, parse_job

__all__ = ["run_job"]


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def run_job(sub: Subcommand, argv: list[str]) -> int:
    """``rankvisor run ARGS`` or ``rankvisor demo ARGS``: parse, check, launch."""
    try:
        job = parse_job(sub.name, argv)
    except ConfigError as e:
        return _fail(str(e))
    return _launch(job)


def _say_wait(job: Job) -> None:
    """Before a wait for nodes the scheduler's variables asked for: how long, and the way out."""
    cluster = job.config.cluster
    if cluster is None or not cluster.wait_hint:
        return
    where = cluster.rdzv_endpoint or f"{job.config.master_addr}:{job.config.master_port}"
    print(f"{PROG}: waiting up to {cluster.join_timeout_s:g} s for {cluster.min_nodes} nodes "
          f"at {where} (Ctrl+C stops)", file=sys.stderr)


def _interrupted(job: Job) -> int:
    # start_supervisor killed the supervisor process it was waiting for: nothing is left.
    what = "the other nodes" if job.config.cluster is not None else "the run to start"
    print(f"{PROG}: stopped while waiting for {what}; nothing is left running",
          file=sys.stderr)
    return 130


def _launch(job: Job) -> int:
    """Run ``job``: by default a supervisor process of its own with the TUI attached to it.

    With no terminal (nohup, sbatch, a pipe) the run is headless, as torchrun is.
    ``--foreground`` keeps the supervisor inside the TUI's process; ``--detach`` starts the
    supervisor process and returns.
    """
    from ...engine.control.registry import state_dir_problem
    from ...engine.entry.headless import run_headless, run_interactive

    problem = state_dir_problem()  # before anything starts: no socket goes where others enter
    if problem:
        return _fail(problem)
    _say_wait(job)
    if job.detach:
        return _start_detached(job)
    if not job.headless and sys.stdout.isatty():
        try:
            runner = app_runner()
        except ImportError:
            print(f"{PROG}: the TUI is not available here; running headless", file=sys.stderr)
        else:
            if job.foreground and job.config.cluster is not None:
                return _fail("--foreground runs one node; a multi-node run has a supervisor "
                             "process (leave out --foreground) or runs --headless")
            if job.foreground:
                return run_interactive(job.config, runner.run_tui, on_failure=job.on_failure)
            return _run_attached(job, runner.run_viewer)
    if job.config.cluster is not None:
        from ...engine.entry.cluster_run import run_cluster

        status, _sup, host = run_cluster(job.config, on_failure=job.on_failure)
        if host is not None:
            host.close()
        return status
    return run_headless(job.config, on_failure=job.on_failure)


def _start_detached(job: Job) -> int:
    from ...engine.entry.daemon import Request
    from ...engine.entry.spawn import SpawnError, start_supervisor

    try:
        started = start_supervisor(
            Request(job.config, on_failure=job.on_failure, expect_viewer=False),
            timeout_s=_ready_timeout(job),
        )
    except SpawnError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted(job)
    print(attach_hint(started.run_dir).replace("detached; ", "started; "), end="")
    say_debugpy(job, started.run_dir)
    return 0


def say_debugpy(job: Job, run_dir: str) -> None:
    """``--debugpy``: the attach lines once on the terminal at start (on stderr), where they
    stay after the app's screen is gone; ``rankvisor status`` shows them again."""
    from ...engine.supervisor.debug_options import LAUNCH_FILE, debugpy_banner

    debug = job.config.debug
    if debug is None or not debug.debugpy:
        return
    for line in debugpy_banner(debug, os.path.join(run_dir, LAUNCH_FILE)).splitlines():
        print(f"{PROG}: {line}", file=sys.stderr)


def _ready_timeout(job: Job) -> float:
    """A multi-node run's ranks start after the rendezvous, which may take its join_timeout."""
    from ...engine.entry.spawn import READY_TIMEOUT_S

    cluster = job.config.cluster
    return READY_TIMEOUT_S + (cluster.join_timeout_s if cluster is not None else 0.0)


def _run_attached(job: Job, run_viewer: Any) -> int:
    from ...engine.control.client import RemoteHandle
    from ...engine.entry.daemon import Request
    from ...engine.entry.spawn import SpawnError, start_supervisor

    try:
        started = start_supervisor(Request(job.config, on_failure=job.on_failure),
                                   timeout_s=_ready_timeout(job))
        handle = RemoteHandle.connect(started.socket, pass_over_skipped=True)
    except (SpawnError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted(job)
    say_debugpy(job, started.run_dir)
    if job.config.cluster is not None:
        from ...engine.cluster.viewer import whole_job

        return int(run_viewer(whole_job(handle)))
    return int(run_viewer(handle))
