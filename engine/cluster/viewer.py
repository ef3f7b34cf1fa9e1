"""``ClusterHandle``: every rank of every node behind one ``SupervisorHandle``, for a viewer.

A viewer on any node holds this node's supervisor (``RemoteHandle`` on its Unix socket) and
asks it where the other nodes' doors are and the run's secret (``cluster?``). Ranks are
global here (the job's ``RANK``): events of a node come renumbered from its ``rank_base``,
commands go to the node that runs each rank, in its local ranks, and are answered there.

Connections are lazy: a node is connected only while some of its ranks are shown (``show``;
at first the first ``eager_nodes`` nodes), and let go ``linger_s`` after its ranks left the
screen. A connected node is asked for its snapshot every ``ping_s``; one that does not
answer within ``dead_s`` is unreachable: said once, its ranks keep their last known state,
nothing else waits on it (each node has a thread of its own), and it is tried again until
it answers, when its panes resume. A remote rank's files are mirrored under ``mirror_dir``
(the same layout, copied through ``read?`` when the rank wrote): zoom, search and the
timeline read them as they read a local rank's.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from .. import clock
from ..control.client import RemoteHandle, recent_output
from ..control.wire import run_info_from_wire
from ..events import (
    Event,
    EventSink,
    RankOutput,
    RankRestarted,
    RankStateChanged,
    RunFinished,
    SupervisorNotice,
)
from ..handle import (
    CloseInput,
    Command,
    CommandResult,
    DumpStacks,
    KillRanks,
    RankInfo,
    ReadCollectives,
    RestartAll,
    RestartRank,
    RunInfo,
    SendInput,
    SignalRanks,
    TerminateRanks,
    command_problem,
)
from ..rundir.arrival import arrival_path
from ..states import RankState
from .door import DoorRefused, connect_door
from .renumber import finished_globally, joined_dumps

__all__ = ["ClusterHandle", "NotACluster", "whole_job"]

log = logging.getLogger(__name__)

PING_S: Final = 1.0
DEAD_S: Final = 3.0
"""A node that has not answered its ping for this long is unreachable."""
LINGER_S: Final = 30.0
LAYOUT_WAIT_S: Final = 10.0
"""How long a new viewer waits for every node's record before it lays out what it has."""
LAYOUT_S: Final = 2.0
"""How often the viewer asks its own node where every node's ranks are now."""
EAGER_NODES: Final = 16
RECENT_LINES: Final = 500
"""Lines of each remote rank's files given to the viewer when its node connects."""
READ_CHUNK: Final = 1 << 20


class NotACluster(ValueError):
    """The run behind the handle is on one node (or its supervisor gives no ``cluster?``)."""


def _state(name: Any) -> RankState:
    try:
        return RankState(str(name))
    except ValueError:
        return RankState.STARTING


class _Node:
    """One other node: its door, its link's thread, its mirror."""

    def __init__(self, viewer: ClusterHandle, number: int, record: dict[str, Any]) -> None:
        self.viewer = viewer
        self.number = number
        self.host = str(record.get("host") or "?")
        self.door = str(record.get("door") or "")
        self.ranks = [int(r[1]) for r in record.get("ranks", [])]
        self.states = {int(r[1]): _state(r[2]) for r in record.get("ranks", [])}
        self.pids: dict[int, int | None] = {}
        """Each rank's pid as the viewer was told it (global rank)."""
        self.finished = bool(record.get("over"))
        """The node's run is over (its record, or its RunFinished): a closed link is its
        end, not a fault."""
        self.said_finished = False
        self.handle: RemoteHandle | None = None
        self.info: RunInfo | None = None
        self.reachable: bool | None = None
        self.wanted_at = 0.0
        self.dirty: set[int] = set()
        """Local ranks that wrote since their files were mirrored."""
        self.offsets: dict[str, int] = {}
        self.delivered: dict[tuple[int, str], tuple[int, int]] = {}
        """(local rank, stream) -> (attempt, the next line the viewer has not had), across
        reconnections: no line twice."""
        self.busy = 0
        """Commands of ours in flight on this link: its answers wait behind them."""
        self.held: list[Event] | None = None
        """Live events while the node's recent lines are read (then given, trimmed)."""
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    @property
    def base(self) -> int:
        return self.info.rank_base if self.info is not None else min(self.ranks, default=0)

    # -- the link (this node's thread) -----------------------------------------------------

    def run(self) -> None:
        v = self.viewer
        while not v._stop.is_set():
            wanted = clock.monotonic() - self.wanted_at < v.linger_s
            if not wanted:
                self._let_go()
                v._stop.wait(v.ping_s)
                continue
            if self.handle is None or not self.handle.connected:
                self._connect()
            else:
                answer = self.handle.request("snapshot?", wait_s=v.dead_s)
                if answer is None and self.busy and self.handle.connected:
                    pass  # behind a command of ours (a stack dump waits for py-spy)
                elif answer is None or "run" not in answer:
                    self._down("no answer within "
                               f"{v.dead_s:g} s" if self.handle.connected else "link closed")
                else:
                    self.info = run_info_from_wire(answer["run"])
                    self._reconcile()
                    self._sync()
            v._stop.wait(v.ping_s)
        self._let_go()

    def _connect(self) -> None:
        v = self.viewer
        if not self.door or not v._secret:
            return
        try:
            handle = connect_door(self.door, v._secret, name="cluster viewer",
                                  read_only=v.read_only, timeout_s=v.dead_s)
        except (OSError, DoorRefused, ValueError) as e:
            self._down(str(e))
            return
        self.handle = handle
        with self.lock:
            self.held = []
        handle.subscribe(self._live)
        try:
            self.info = handle.snapshot()
        except ConnectionError as e:
            self._down(str(e))
            return
        self.dirty = {r.rank for r in self.info.ranks}
        self._sync()
        self._catch_up()
        while True:
            with self.lock:
                held, self.held = self.held, ([] if self.held else None)
            if not held:
                break
            for event in held:
                self._give(event)
        if self.reachable is False:
            v._notice(f"node {self.number} ({self.host}) answers again: its panes resume",
                      "information")
        self.reachable = True

    def _down(self, why: str) -> None:
        if self.finished:
            # Its supervisor ended with its run: that is the end it had, said once.
            self._say_finished()
        elif self.reachable is not False:
            self.viewer._notice(
                f"node {self.number} ({self.host}) is unreachable ({why}): its ranks show "
                "their last known state", "warning")
        self.reachable = False
        handle, self.handle = self.handle, None
        if handle is not None:
            threading.Thread(target=handle.detach, daemon=True).start()

    def _say_finished(self) -> None:
        if not self.said_finished:
            self.said_finished = True
            self.viewer._notice(f"node {self.number} ({self.host}) finished its part of the "
                                "run", "information")

    def _let_go(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.detach()

    # -- events ---------------------------------------------------------------------------

    def _live(self, event: Event) -> None:
        """A live event of this node's supervisor (its reader thread)."""
        with self.lock:
            if isinstance(event, RankOutput):
                self.dirty.add(event.rank)
            if self.held is not None:
                self.held.append(event)
                return
        self._give(event)

    def _trimmed(self, event: RankOutput) -> RankOutput | None:
        """``event`` less the lines the viewer had already; None if it had them all."""
        key = (event.rank, event.stream)
        seen = self.delivered.get(key)
        if seen is not None and seen[0] == event.attempt:
            drop = seen[1] - event.first_line
            if drop >= len(event.lines) and not event.partial:
                return None
            if drop > 0:
                event = dataclasses.replace(event, lines=event.lines[drop:],
                                            first_line=event.first_line + drop)
        if event.lines and event.stream in ("stdout", "stderr"):
            self.delivered[key] = (event.attempt, event.first_line + len(event.lines))
        return event

    def _give(self, event: Event) -> None:
        """A node's event, renumbered, to the viewer."""
        if isinstance(event, RankOutput):
            trimmed = self._trimmed(event)
            if trimmed is None:
                return
            event = trimmed
        if isinstance(event, RunFinished):
            self.finished = True
            self._say_finished()
            return
        if isinstance(event, RankRestarted):
            event = dataclasses.replace(event, stdout_path=self.mirrored(event.stdout_path),
                                        stderr_path=self.mirrored(event.stderr_path),
                                        error_file="")
        self.viewer._deliver(self.viewer._global(event, self.base, self))

    def _catch_up(self) -> None:
        """The last lines of each rank's mirrored files, and its state, for the viewer."""
        info = self.info
        assert info is not None
        v = self.viewer
        self._reconcile()
        for r in info.ranks:
            glob = info.rank_base + r.rank
            out, err = self.mirrored(r.stdout_path), self.mirrored(r.stderr_path)
            if not (out and err):
                continue
            batches, _counts = recent_output(r.rank, r.attempt, out, err, v.recent_lines)
            for batch in batches:
                trimmed = self._trimmed(batch)
                if trimmed is not None:
                    v._deliver(dataclasses.replace(trimmed, rank=glob))

    def _reconcile(self) -> None:
        """Each rank's state and pid as its node reports them now (its snapshot), told to
        the viewer where it was told otherwise: the store's record, read while the node was
        not connected, carries no pid, and a state it gave makes no change at the connect."""
        info = self.info
        if info is None:
            return
        for r in info.ranks:
            glob = info.rank_base + r.rank
            old = self.states.get(glob, RankState.STARTING)
            if old != r.state or (r.pid is not None and self.pids.get(glob) != r.pid):
                self.states[glob] = r.state
                self.pids[glob] = r.pid
                self.viewer._deliver(RankStateChanged(
                    glob, old, r.state, r.pid, exitcode=r.exitcode,
                    signal_name=r.signal_name, restart_count=r.restart_count,
                    attempt=r.attempt))

    # -- the mirror -----------------------------------------------------------------------

    def mirrored(self, path: str) -> str:
        """Where ``path`` (a file of that node) is mirrored here ("" stays ""): the same
        place under the mirror as under that node's run directory."""
        info = self.info
        if not path or info is None:
            return ""
        rel = os.path.relpath(path, info.log_dir) if info.log_dir else path.lstrip("/")
        if rel.startswith(".."):
            rel = path.lstrip("/")
        return os.path.join(self.viewer.mirror_dir, f"node{self.number}", rel)

    def predicted(self, glob: int, attempt: int, stream: str) -> str:
        """Where a rank's file will be mirrored before its node answered (the run
        directory's layout is every node's: ``attempt_<n>/<local rank>/<stream>.log``)."""
        local = glob - min(self.ranks, default=0)
        return os.path.join(self.viewer.mirror_dir, f"node{self.number}",
                            f"attempt_{attempt}", str(local), f"{stream}.log")

    def _sync(self) -> None:
        """Copy what the ranks that wrote since the last sync appended to their files."""
        with self.lock:
            ranks, self.dirty = self.dirty, set()
        info, handle = self.info, self.handle
        if info is None or handle is None:
            return
        by_rank = {r.rank: r for r in info.ranks}
        for local in sorted(ranks):
            r = by_rank.get(local)
            if r is None:
                continue
            for stream, path in (("stdout", r.stdout_path), ("stderr", r.stderr_path),
                                 ("arrival", arrival_path(r.stdout_path, r.stderr_path))):
                if path:
                    self._copy(handle, local, stream, self.mirrored(path))

    def _copy(self, handle: RemoteHandle, local: int, stream: str, target: str) -> None:
        offset = self.offsets.get(target, 0)
        while True:
            answer = handle.request("read?", {"rank": local, "stream": stream,
                                              "offset": offset, "max": READ_CHUNK},
                                    wait_s=self.viewer.dead_s)
            if answer is None or answer.get("t") != "read":
                return
            data = base64.b64decode(answer.get("data") or "")
            if not data:
                break
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "r+b" if os.path.exists(target) else "wb") as f:
                f.seek(offset)
                f.write(data)
            offset += len(data)
            self.viewer.bytes_in += len(data)
        self.offsets[target] = offset


class ClusterHandle:
    """Every rank of a multi-node run, from the viewer's own node (module docstring).

    Args:
        local: this node's supervisor.
        mirror_dir: where the other nodes' files are mirrored (a directory of the viewer's).

    Raises:
        NotACluster: ``local`` runs a one-node run, or gives no secret (read-only).
    """

    def __init__(self, local: RemoteHandle, mirror_dir: str, *, ping_s: float = PING_S,
                 dead_s: float = DEAD_S, linger_s: float = LINGER_S,
                 eager_nodes: int = EAGER_NODES, recent_lines: int = RECENT_LINES,
                 layout_wait_s: float = LAYOUT_WAIT_S) -> None:
        answer = local.request("cluster?")
        if not answer or answer.get("t") != "cluster":
            raise NotACluster(str((answer or {}).get("message")
                                  or "this run's supervisor is not part of a multi-node run"))
        # The run's first seconds: the other nodes' records may not have been read yet, and
        # a viewer's grid is laid out once, for the ranks it knows of.
        deadline = clock.monotonic() + layout_wait_s
        while (len(answer.get("nodes") or {}) < int(answer.get("nnodes") or 0)
               and clock.monotonic() < deadline):
            time.sleep(0.2)
            answer = local.request("cluster?") or answer
        self.local = local
        self.read_only = local.read_only
        self.mirror_dir = mirror_dir
        self.ping_s, self.dead_s, self.linger_s = ping_s, dead_s, linger_s
        self.recent_lines = recent_lines
        self.bytes_in = 0
        """Bytes of the other nodes' files mirrored so far."""
        self.owns_mirror = False
        """Remove ``mirror_dir`` at the detach (``whole_job`` made it)."""
        self._secret = ""
        self.me = int(answer.get("node", 0))
        self._lock = threading.Lock()
        self._sinks: tuple[EventSink, ...] = ()
        self._stop = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self.nodes: dict[int, _Node] = {}
        self._where: dict[int, int] = {}
        self.host = ""
        self.world = 1
        self._take_layout(answer)
        self._pinned = True
        """The first nodes stay connected until a viewer says what it shows."""
        self._want(g for n in sorted(self.nodes)[:eager_nodes] for g in self.nodes[n].ranks)
        threading.Thread(target=self._follow_layout, name="rankvisor-cluster-layout",
                         daemon=True).start()

    def _take_layout(self, answer: dict[str, Any]) -> None:
        """Where every node's ranks are now (a new round may renumber them, a new node join)
        and the round's secret, from this node's ``cluster?``."""
        self._secret = str(answer.get("secret") or self._secret)
        nodes = {int(n): rec for n, rec in (answer.get("nodes") or {}).items()}
        here = nodes.get(self.me, {})
        self.host = str(here.get("host") or self.host)
        for number, rec in sorted(nodes.items()):
            if number == self.me:
                continue
            node = self.nodes.get(number)
            if node is None:
                self.nodes[number] = node = _Node(self, number, rec)
                if getattr(self, "_pinned", False):
                    self._want(node.ranks)
                continue
            node.door = str(rec.get("door") or node.door)
            node.finished = node.finished or bool(rec.get("over"))
            ranks = [int(r[1]) for r in rec.get("ranks", [])]
            if ranks:
                node.ranks = ranks
            if node.handle is None:
                # Not connected (not shown, or unreachable): the store's record is all we
                # know of its ranks.
                for _local, glob, state in (r[:3] for r in rec.get("ranks", [])):
                    new = _state(state)
                    old = node.states.get(int(glob), new)
                    node.states[int(glob)] = new
                    if new != old:
                        self._deliver(RankStateChanged(int(glob), old, new, None))
        where = {g: n.number for n in self.nodes.values() for g in n.ranks}
        local = [int(r[1]) for r in here.get("ranks", [])]
        self._where = where
        self.world = max(self.world, 1 + max([*where, *local, 0]))

    def _follow_layout(self) -> None:
        while not self._stop.wait(LAYOUT_S):
            if not self.local.connected:
                return
            answer = self.local.request("cluster?", wait_s=self.dead_s)
            if answer and answer.get("t") == "cluster":
                self._take_layout(answer)

    # -- which nodes are connected ----------------------------------------------------------

    def show(self, ranks: Iterable[int]) -> None:
        """The viewer shows ``ranks`` now: their nodes are connected (or stay so); a node
        none of whose ranks it shows again within ``linger_s`` is let go. A viewer calls it
        at least once every ``linger_s`` (the TUI: every second)."""
        if self._pinned:
            self._pinned = False
            now = clock.monotonic()
            for node in self.nodes.values():
                node.wanted_at = min(node.wanted_at, now)
        self._want(ranks)

    def _want(self, ranks: Iterable[int]) -> None:
        now = math.inf if self._pinned else clock.monotonic()
        for rank in ranks:
            node = self.nodes.get(self._where.get(rank, self.me))
            if node is None:
                continue
            node.wanted_at = now
            if node.thread is None:
                node.thread = threading.Thread(target=node.run, daemon=True,
                                               name=f"rankvisor-node-{node.number}")
                node.thread.start()

    @property
    def connections(self) -> int:
        """Nodes connected now (this node's own supervisor not counted)."""
        return sum(1 for n in self.nodes.values() if n.handle is not None and n.handle.connected)

    # -- SupervisorHandle ----------------------------------------------------------------------

    @property
    def detachable(self) -> bool:
        return True

    @property
    def connected(self) -> bool:
        return self.local.connected

    def subscribe(self, sink: EventSink) -> Callable[[], None]:
        with self._lock:
            self._sinks = (*self._sinks, sink)
        self._listen()

        def unsubscribe() -> None:
            with self._lock:
                self._sinks = tuple(s for s in self._sinks if s is not sink)

        return unsubscribe

    def watch(self, sink: EventSink) -> tuple[RunInfo, Callable[[], None]]:
        """The whole job as known now; ``sink`` gets this node's history and recent lines,
        then every node's live events (a remote node's recent lines as it connects)."""
        with self._lock:
            self._sinks = (*self._sinks, sink)
        if self._unsubscribe is None:
            base = self.local.snapshot().rank_base
            info, self._unsubscribe = self.local.watch(
                lambda e: self._deliver(self._global(e, base, None)))
        else:
            info = self.local.snapshot()

        def unsubscribe() -> None:
            with self._lock:
                self._sinks = tuple(s for s in self._sinks if s is not sink)

        return self._whole(info), unsubscribe

    def _listen(self) -> None:
        if self._unsubscribe is None:
            base = self.local.snapshot().rank_base
            self._unsubscribe = self.local.subscribe(
                lambda e: self._deliver(self._global(e, base, None)))

    def start(self) -> None:
        """Nothing to start: every node's supervisor started its own ranks."""

    def snapshot(self) -> RunInfo:
        return self._whole(self.local.snapshot())

    def execute(self, command: Command) -> CommandResult:
        """``command`` carried out by the node of each rank it names (every node for
        "all ranks"), answered there; the answers joined."""
        problem = command_problem(command)
        if problem is not None:
            return CommandResult(False, problem)
        if isinstance(command, RestartAll):
            return self.local.execute(command)  # a new round on every node, through the store
        if isinstance(command, ReadCollectives):
            # This node's supervisor answers for every node (the others' readings come
            # through the rendezvous store, by global rank); when no other node's ranks are
            # in its answer (their summaries not read yet), that is said.
            result = self.local.execute(command)
            shown = {r.get("rank") for r in (result.data or {}).get("ranks", ())
                     if isinstance(r, dict)}
            if not result.ok or shown - set(self._local_ranks()) or not self.nodes:
                return result
            note = f"node {self.me}'s ranks only: no other node's collectives were read"
            return dataclasses.replace(result, message="; ".join(
                m for m in (note, result.message) if m))
        if isinstance(command, DumpStacks):
            return self._dump_every_node(command)
        results = self._on_each_node(command)
        if len(results) == 1:
            return results[0][1]
        ok = all(r.ok for _, r in results)
        message = "; ".join(f"node {n}: {r.message}" for n, r in results if r.message)
        data = next((r.data for _, r in results if r.data is not None), None)
        return CommandResult(ok, message, data)

    def _dump_every_node(self, command: DumpStacks) -> CommandResult:
        """``command`` on each node of its ranks; the dumps joined into one of the job (its
        ranks by global rank), fine when some node dumped."""
        results = self._on_each_node(command)
        if len(results) == 1:
            return results[0][1]
        dumps = [r.data for _, r in results if r.data is not None]
        message = "; ".join(f"node {n}: {r.message}" for n, r in results if r.message)
        ok = any(r.ok for _, r in results)
        return CommandResult(ok, message, joined_dumps(dumps) if dumps else None)

    def _on_each_node(self, command: Command) -> list[tuple[int, CommandResult]]:
        """``command`` carried out by the node of each rank it names (every node for "all
        ranks"), in that node's local ranks: each node's answer."""
        ranks = self._ranks_of(command)
        parts: dict[int, tuple[int, ...] | None] = {}
        if ranks is None:
            parts = {n: None for n in [self.me, *self.nodes]}
        else:
            for rank in ranks:
                node = self._where.get(rank, self.me)
                base = self._base(node)
                parts.setdefault(node, ())
                parts[node] = (*parts[node], rank - base)  # type: ignore[misc]
        results: list[tuple[int, CommandResult]] = []
        for node, local in parts.items():
            handle = self.local if node == self.me else self._handle(node)
            if handle is None:
                n = self.nodes[node]
                results.append((node, CommandResult(
                    False, f"node {node} ({n.host}) is not connected now: not carried out")))
                continue
            if node == self.me:
                results.append((node, handle.execute(self._with_ranks(command, local))))
                continue
            remote = self.nodes[node]
            remote.busy += 1
            try:
                results.append((node, handle.execute(self._with_ranks(command, local))))
            finally:
                remote.busy -= 1
        return results

    def shutdown(self, timeout_s: float | None = None) -> None:
        self.execute(TerminateRanks(None, timeout_s=timeout_s))
        self.detach()

    def detach(self) -> None:
        self._stop.set()
        for node in self.nodes.values():
            if node.thread is not None:
                node.thread.join(self.dead_s + 2)
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.local.detach()
        if self.owns_mirror:
            import shutil

            shutil.rmtree(self.mirror_dir, ignore_errors=True)

    def wait(self, timeout_s: float | None = None) -> RunFinished | None:
        return self.local.wait(timeout_s)

    # -- helpers --------------------------------------------------------------------------------

    def _local_ranks(self) -> list[int]:
        """This node's ranks, by global rank."""
        info = self.local.snapshot()
        return [info.rank_base + r.rank for r in info.ranks]

    def _handle(self, node: int) -> RemoteHandle | None:
        n = self.nodes[node]
        self._want(n.ranks)
        handle = n.handle
        return handle if handle is not None and handle.connected else None

    def _base(self, node: int) -> int:
        if node == self.me:
            return self.local.snapshot().rank_base
        return self.nodes[node].base

    @staticmethod
    def _ranks_of(command: Command) -> tuple[int, ...] | None:
        if isinstance(command, RestartRank):
            return (command.rank,)
        ranks: tuple[int, ...] | None = getattr(command, "ranks", None)
        return ranks

    @staticmethod
    def _with_ranks(command: Command, ranks: tuple[int, ...] | None) -> Command:
        if isinstance(command, RestartRank):
            assert ranks
            return RestartRank(ranks[0])
        assert isinstance(command, (SignalRanks, TerminateRanks, KillRanks, DumpStacks,
                                    SendInput, CloseInput))
        if isinstance(command, SignalRanks) and ranks is None:
            return command
        return dataclasses.replace(command, ranks=ranks)  # type: ignore[type-var]

    def _global(self, event: Event, base: int, node: _Node | None) -> Event:
        """``event`` with its ranks as the job numbers them."""
        if node is not None and isinstance(event, RankStateChanged):
            node.states[base + event.rank] = event.new
            if event.pid is not None:
                node.pids[base + event.rank] = event.pid
        if isinstance(event, SupervisorNotice) and node is not None:
            return dataclasses.replace(event, message=f"node {node.number} ({node.host}): "
                                                      f"{event.message}")
        if isinstance(getattr(event, "rank", None), int):
            return dataclasses.replace(event, rank=base + event.rank)  # type: ignore[call-arg]
        ranks = getattr(event, "ranks", None)
        if isinstance(ranks, tuple):
            return dataclasses.replace(event, ranks=tuple(base + r for r in ranks))  # type: ignore[call-arg]
        if isinstance(event, RunFinished):
            return finished_globally(event, base)
        return event

    def _deliver(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - a viewer's bug must not stop the others
                log.exception("a cluster viewer's sink failed")

    def _notice(self, message: str, severity: str) -> None:
        self._deliver(SupervisorNotice(message, severity))  # type: ignore[arg-type]

    def _whole(self, info: RunInfo) -> RunInfo:
        """This node's run with every node's ranks, numbered as the job numbers them."""
        base = info.rank_base
        ranks: dict[int, RankInfo] = {base + r.rank: dataclasses.replace(r, rank=base + r.rank)
                                      for r in info.ranks}
        prefixes = {base + r: p for r, p in info.log_line_prefixes.items()}
        places = {g: f"node {self.me} ({self.host})" for g in ranks}
        for node in self.nodes.values():
            remote = node.info
            for glob in node.ranks:
                places[glob] = f"node {node.number} ({node.host})"
            if remote is not None:
                for r in remote.ranks:
                    glob = remote.rank_base + r.rank
                    ranks[glob] = dataclasses.replace(
                        r, rank=glob, state=node.states.get(glob, r.state),
                        stdout_path=node.mirrored(r.stdout_path),
                        stderr_path=node.mirrored(r.stderr_path), error_file="")
                    places[glob] = f"node {node.number} ({node.host})"
                prefixes.update({remote.rank_base + r: p
                                 for r, p in remote.log_line_prefixes.items()})
            for glob in node.ranks:
                ranks.setdefault(glob, RankInfo(
                    glob, node.states.get(glob, RankState.STARTING), None, 0, info.attempt,
                    node.predicted(glob, info.attempt, "stdout"),
                    node.predicted(glob, info.attempt, "stderr"), ""))
        for glob in range(self.world):
            ranks.setdefault(glob, RankInfo(glob, RankState.STARTING, None, 0, info.attempt,
                                            "", "", ""))
        return dataclasses.replace(
            info, nprocs=self.world, ranks=tuple(ranks[g] for g in range(self.world)),
            log_line_prefixes=prefixes, rank_base=0, rank_places=places,
            node=f"{info.node}, every node's ranks" if info.node else info.node)


def whole_job(handle: RemoteHandle) -> RemoteHandle | ClusterHandle:
    """``handle`` as a viewer of every node's ranks when its run is a node of a multi-node
    run (the other nodes' files mirrored in a directory of its own, removed at the
    detach); ``handle`` itself on one node, or read-only (no secret is given to it)."""
    import shutil
    import tempfile

    if not handle.snapshot().node or handle.read_only:
        return handle
    mirror = tempfile.mkdtemp(prefix="rankvisor-nodes-")
    try:
        viewer = ClusterHandle(handle, mirror)
    except NotACluster:
        shutil.rmtree(mirror, ignore_errors=True)
        return handle
    viewer.owns_mirror = True
    return viewer
