"""A whole multi-node run on this node: torch's agent loop over a driven Supervisor.

Used by ``rankvisor run --headless`` and by the supervisor process when ``--nnodes`` is
not 1. The run has its socket, registry entry, status.json and events.ndjson as any other
(``RunHost``); its status.json lists every rank of every node (``StatusBoard``).

The end, on every node: this node's last record is written, then it waits (at most
``final_wait_s``) until every node's record says its round is over, reads them, and waits
(as long again at most) until every node has read: only then may the node hosting the store
leave, so that every node names the same root cause.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from .. import clock
from ..cluster.agent import RankvisorAgent, make_spec
from ..cluster.board import StatusBoard
from ..cluster.door import ClusterDoor, new_secret, reach_address
from ..cluster.door_key import NoClusterKey, cluster_key, door_secret
from ..cluster.renumber import finished_globally as _global
from ..cluster.requests import cluster_request, read_request
from ..events import RunFinished
from ..forensics.fr_merge import summary_of
from ..result import RunProcsResult
from ..supervisor.core import Supervisor
from ..supervisor.run_config import SupervisorConfig
from .headless import (
    _entry_name,
    _HeadlessPrinter,
    exit_status,
    format_report,
    report_forensics,
)

if TYPE_CHECKING:
    from ..control.host import RunHost

__all__ = ["cluster_line", "run_cluster"]

log = logging.getLogger(__name__)


def cluster_line(rc: dict[str, Any] | None) -> str:
    """The one line naming the cluster's root cause, for a person."""
    if rc is None:
        return ""
    how = f"signal {rc['signal']}" if rc.get("signal") else f"exit code {rc.get('exitcode')}"
    line = (f"rankvisor: cluster root cause: rank {rc.get('rank')} on node "
            f"{rc.get('node_rank')} ({rc.get('host')}) failed first ({how})")
    message = str(rc.get("message") or "").strip().splitlines()
    return line + (f": {message[-1]}" if message else "")


def run_cluster(
    config: SupervisorConfig,
    *,
    mode: str = "headless",
    on_failure: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    print_output: bool = True,
    on_started: Callable[[str, RunHost | None], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> tuple[int, Supervisor, RunHost | None]:
    """Run this node's part of a multi-node job to its end; the exit status.

    Args:
        config: the run, with ``config.cluster`` set.
        mode: "headless" or "supervisor" (for ``ls``).
        on_failure: ``--on-failure``'s command.
        out, err: the console (headless).
        print_output: print the ranks' output and the report (headless).
        on_started: called once the first round's ranks run, with the run's directory.
        on_error: called with the line that says why the agent failed, if it did.

    Returns:
        The exit status, the Supervisor (shut down) and the RunHost (closed), for a caller
        that goes on serving viewers of the record.
    """
    from ..control.host import RunHost

    opts = config.cluster
    assert opts is not None, "run_cluster needs config.cluster"
    out = out or sys.stdout
    err = err or sys.stderr
    if mode != "headless" and config.stdin == "inherit":
        config.stdin = "null"  # a supervisor process has no terminal to hand on
    sup = Supervisor(config, driven=True)
    host: RunHost | None = None
    board = StatusBoard(
        on_change=lambda: host.refresh() if host is not None else None,
        notice=lambda m, s: sup.notice(m, s),
        publish_interval=opts.publish_interval,
        stderr_paths=lambda: {r.rank: r.stderr_path for r in sup.snapshot().ranks},
        fr_summary=_fr_summary(sup),
    )
    sup.subscribe(board.sink)
    if sup.collectives is not None:
        sup.collectives.remote = board.remote_fr
    try:
        host = RunHost(
            sup, mode=mode,
            exit_status=lambda: exit_status(sup.finished, sup.received_signal),
            on_failure=on_failure, status_hook=board.decorate,  # type: ignore[arg-type]
        )
    except (OSError, ValueError) as e:
        err.write(f"[rankvisor] warning: this run cannot be reached by `rankvisor status`/"
                  f"`attach` ({e}); it runs anyway\n")
    printer: list[_HeadlessPrinter] = []
    key = _door_key(err) if host is not None else None
    door = _open_door(host, sup, board, config, err) if host is not None and key else None
    nonce: list[str] = []

    def on_round(number: int, prefixes: dict[int, str]) -> None:
        if door is not None and key is not None:
            # The store holds the run's nonce (the first node's offer, kept by every node);
            # the secret is derived from it under a key the store never sees (door_key).
            agreed = board.agree("door_nonce", nonce[0] if nonce else new_secret())
            if agreed:
                nonce[:] = [agreed]
                door.secret = door_secret(key, agreed)
        if number == 0:
            if print_output:
                printer.append(_HeadlessPrinter(config, prefixes, out, err))
                sup.subscribe(printer[0])
            run_dir = host.started() if host is not None else sup.snapshot().log_dir
            if on_started is not None:
                on_started(run_dir, host)
            if printer:
                printer[0].line(f"{sup.node_label}; process tracking: "
                                f"{sup.snapshot().tracking_detail}")
        else:
            sup.notice(f"round {number} started ({sup.node_label})", "warning")

    # The ranks' own store: a fresh one per round, hosted by global rank 0 (torch's
    # non-shared mode). The rendezvous's store, shared, keeps the previous round's keys, and
    # the ranks of a restarted round then read their peers' old addresses (seen here as
    # "Connection refused" in init_process_group of round 1).
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    spec = make_spec(sup, opts)
    agent = RankvisorAgent(spec, sup, board, on_round=on_round,
                           exit_barrier_timeout=opts.exit_barrier_timeout)
    restore = sup.install_signal_handlers()
    restore_rdzv = _interrupt_rendezvous(agent, config.signals_to_handle)
    signalled = False
    sigval = 0
    error = ""
    try:
        try:
            agent.run()
        except Exception as e:  # noqa: BLE001 - a rendezvous that failed, a signal: said below
            if sup.received_signal is not None or type(e).__name__ == "SignalException":
                signalled = True
                sigval = int(getattr(e, "sigval", 0) or 0)
            elif type(e).__name__ == "RendezvousTimeoutError":
                error = _timed_out(config)
                log.debug("the rendezvous timed out", exc_info=True)
            elif _store_gone(e) or board.store_lost:
                # The node hosting the store died: torch's agent (its monitor asks the store
                # each interval) ends the run here too, as under torchrun. The board's notice
                # said it once already, or does in publish_now below: no traceback.
                error = (f"the rendezvous store at {opts.rdzv_endpoint} is gone (the node "
                         "hosting it stopped?): torch's agent ended this node's run "
                         f"({type(e).__name__})")
                log.debug("the agent lost the store", exc_info=True)
            else:
                error = f"{type(e).__name__}: {e}"
                log.exception("the agent failed")
        # The end: our last record (final: it says so), the others' (bounded), then the end
        # published.
        if host is not None:
            host.current_status()  # the board sees this node's last state
        board.over = True
        board.publish_now()
        if error:
            sup.notice(f"the multi-node agent failed: {error}", "error")
            if on_error is not None:
                on_error(error)
        if sup.snapshot().ranks and board.nnodes > 1 and not board.store_lost:
            board.wait_for_others(opts.final_wait_s)
            board.final_barrier(opts.final_wait_s)
        finished = sup.round_result() or RunFinished(
            RunProcsResult(return_values={}, failures={}), sup.snapshot().attempt, None
        )
        sup.finish_run(finished)
        if not signalled and not board.store_lost:
            try:
                spec.rdzv_handler.shutdown()  # as torchrun: closes the rendezvous (not on a signal)
            except Exception:  # noqa: BLE001 - the store may be gone already
                log.debug("rendezvous shutdown failed", exc_info=True)
    finally:
        board.close()
        if door is not None:
            door.close()
        if printer and sup.received_signal is not None:
            printer[0].shutting_down()
        sup.shutdown()
        if host is not None:
            host.refresh()
        restore_rdzv()
        restore()
    status = exit_status(sup.finished, sup.received_signal)
    if signalled and sup.received_signal is None and sigval:
        # Stopped in the rendezvous, before the monitor read the signal: 128 + N still.
        status = 128 + sigval
        if print_output and agent.rounds == 0:
            err.write("rankvisor: stopped while waiting for the other nodes; no rank had "
                      "started\n")
    if error and status == 0:
        status = 1
    if print_output and sup.received_signal is None:
        rc = board.root_cause()
        text = ""
        if rc is not None:
            text += cluster_line(rc) + "\n"
        fin = sup.finished
        if fin is not None and fin.result.failures:
            causes, dumps = report_forensics(sup)
            base = board.base_rank
            text += format_report(_entry_name(config), _global(fin, base),
                                  {base + r: c for r, c in causes.items()}, dumps)
        if error:
            text += f"rankvisor: the multi-node agent failed: {error}\n"
        if text:
            try:
                err.write(text)
                err.flush()
            except (OSError, ValueError):
                pass
    return status, sup, host


def _door_key(err: TextIO) -> bytes | None:
    """The cluster key the door's secret is derived from; None (no door, said once) when
    none can be had safely."""
    try:
        return cluster_key()
    except NoClusterKey as e:
        err.write(f"[rankvisor] warning: the other nodes' viewers cannot reach this node's "
                  f"ranks (no TCP door: {e}); the run goes on\n")
        return None


def _open_door(host: RunHost, sup: Supervisor, board: StatusBoard, config: SupervisorConfig,
               err: TextIO) -> ClusterDoor | None:
    """This node's supervisor served to the other nodes' viewers (``door``), on the
    address this node reaches the rendezvous from, and its two cluster requests."""
    opts = config.cluster
    assert opts is not None
    endpoint = opts.rdzv_endpoint or config.master_addr
    door = ClusterDoor(host.server)
    try:
        board.door = door.start(reach_address(endpoint.rpartition(":")[0] or endpoint,
                                              opts.local_addr))
    except OSError as e:
        err.write(f"[rankvisor] warning: the other nodes' viewers cannot reach this node's "
                  f"ranks (no TCP door: {e}); the run goes on\n")
        return None
    host.server.add_request("cluster?", cluster_request(board, lambda: door.secret))
    host.server.add_request("read?", read_request(sup))
    return door


def _fr_summary(sup: Supervisor) -> Callable[[], dict[str, Any] | None] | None:
    """This node's Flight Recorder summary for the other nodes (None: no rank serves one)."""
    watch = sup.collectives
    if watch is None:
        return None

    def summary() -> dict[str, Any] | None:
        readings = watch.readings()
        if not readings:
            return None
        return summary_of(readings, sup.rank_base, sup.held_now(), clock.wall_ns())

    return summary


def _timed_out(config: SupervisorConfig) -> str:
    """The rendezvous gave up waiting for the other nodes: how long, for whom, and why."""
    opts = config.cluster
    assert opts is not None
    where = opts.rdzv_endpoint or f"{config.master_addr}:{config.master_port or 29500}"
    line = (f"no rendezvous within {opts.join_timeout_s:g} s: {opts.min_nodes} nodes were "
            f"expected at {where}")
    return f"{line}; {opts.wait_hint}" if opts.wait_hint else line


def _store_gone(e: BaseException) -> bool:
    """Whether the agent failed because the rendezvous store stopped answering."""
    seen: BaseException | None = e
    while seen is not None:
        if type(seen).__name__ in ("RendezvousConnectionError", "DistNetworkError"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _interrupt_rendezvous(agent: RankvisorAgent, signals: tuple[int, ...]) -> Callable[[], None]:
    """A handled signal that comes while the agent waits in a rendezvous ends that wait.

    The Supervisor's handler only records the signal and wakes its monitor; a rendezvous
    (up to ``join_timeout``) never looks at it, so this one also raises torch's
    ``SignalException`` there, as torchrun's own handler does.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException

    previous: dict[int, Any] = {}
    for sig in signals:
        before = signal.getsignal(sig)

        def handler(signum: int, frame: FrameType | None, before: Any = before) -> None:
            if callable(before):
                before(signum, frame)
            if agent.in_rendezvous:
                raise SignalException(f"got signal {signum} in the rendezvous",
                                      sigval=signal.Signals(signum))

        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
