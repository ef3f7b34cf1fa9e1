"""``StatusBoard``: each node's small status record in the rendezvous store, and the cluster.

Every node's supervisor publishes one record (its ranks' states, exit codes, restart counts,
last-output ages, its round, host and node rank, its own root-cause candidate and suspect)
under ``rankvisor/node/<node_rank>`` in the round's store, and reads the others' back. The
costs are bounded by design (docs/clusters.md, "On paper: 1,000 nodes"):

* a record is written only when something a reader shows changed (a state, an exit), at
  most once per ``publish_interval``, plus a heartbeat every ``HEARTBEAT_S`` (last-output
  ages alone do not count as a change); a write that changed something adds 1 to the
  ``rankvisor/gen`` counter;
* a reader asks the counter first (one small request) and reads every record (one
  ``multi_get``) only when it moved, at most once per ``read_interval``, which grows with
  the number of nodes (1 s up to 100 nodes, 10 s at 1,000);
* a record is one node's summary: about 60 bytes per rank plus the root cause's message,
  capped at ``MESSAGE_CAP`` characters.

Each node also publishes its ranks' Flight Recorder summary (``rankvisor/fr/<node_rank>``,
``engine.forensics.fr_merge``: a few hundred bytes a rank) at most once per
``read_interval`` while it changes, and reads the others' (one ``multi_get``, at most once
per ``read_interval``) only while one of its ranks waits in a collective, or when a person
asks for the collectives: its verdicts then name a rank of any node.

A store that stops answering (the node hosting it died) is given up for good: a notice says
so, and the view keeps the local ranks and the last records read.

The cluster's root cause is the earliest failure among the nodes' candidates that is not a
knock-on (a rank that died because a peer's connection closed: ``KNOCK_ON``); only when every
failure is a knock-on is the earliest of those named.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import clock
from ..control.status import failure_message
from ..errors import root_cause_rank
from ..events import Event, RankOutput, RankStateChanged
from ..forensics.collectives import RankCollectives
from ..forensics.fr_merge import readings_of
from ..forensics.own_traceback import raised_line
from ..logfile.tail import last_lines
from ..names.signals import exit_signal_name
from .liveness import Liveness
from .record_check import BadRecord, check_record

__all__ = ["HEARTBEAT_S", "KNOCK_ON", "MESSAGE_CAP", "StatusBoard", "cluster_root_cause"]

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
"""A node writes its record at least this often, changed or not (ages, liveness)."""

MESSAGE_CAP = 300
"""Characters of a root cause's message kept in a record (status.json keeps 2000 locally)."""

KNOCK_ON = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|"
    r"NCCL communicator was aborted|remote process exited or there was a network error",
    re.IGNORECASE,
)
"""Messages of a rank that failed because another rank (here or on another node) went away."""

_NAMED = 4
"""Failed ranks named in one notice; the others are counted."""

_PREFIX = "rankvisor/"
_GEN = _PREFIX + "gen"
_RESTART = _PREFIX + "restart"


class Store(Protocol):
    """The part of ``torch.distributed.Store`` the board uses."""

    def set(self, key: str, value: bytes | str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def add(self, key: str, value: int) -> int: ...
    def check(self, keys: list[str]) -> bool: ...
    def multi_get(self, keys: list[str]) -> list[bytes]: ...
    def compare_set(self, key: str, expected: str, desired: str) -> bytes: ...


def _knock_on(message: str) -> bool:
    return bool(KNOCK_ON.search(message or ""))


def cluster_root_cause(records: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The failure that came first across nodes, knock-ons demoted; None when none failed.

    Args:
        records: node rank -> that node's record (its ``rc`` is its own candidate).
    """
    found = [r["rc"] for r in records.values() if isinstance(r.get("rc"), dict)]
    if not found:
        return None
    real = [c for c in found if not c.get("knock_on")]
    pool = real or found
    first: dict[str, Any] = min(
        pool, key=lambda c: (float(c.get("t") or 0.0), int(c.get("rank", 0)))
    )
    return dict(first)


class StatusBoard:
    """This node's record in the store, the others' read back, and the cluster view.

    Args:
        host: This node's host name, as shown.
        on_change: Called (on the board's thread) when the cluster view changed.
        notice: Says a line to a person (``Supervisor.notice``).
        publish_interval: Least seconds between two writes of this node's record.
        stderr_paths: Each local rank's current stderr.log (a failure's last line).
        fr_summary: This node's Flight Recorder summary (``fr_merge.summary_of``), None
            when its ranks serve none.
    """

    def __init__(
        self,
        *,
        host: str | None = None,
        on_change: Callable[[], None] | None = None,
        notice: Callable[[str, str], None] | None = None,
        publish_interval: float = 0.3,
        stderr_paths: Callable[[], dict[int, str]] | None = None,
        fr_summary: Callable[[], dict[str, Any] | None] | None = None,
    ) -> None:
        self.host = host or socket.gethostname()
        self._stderr_paths = stderr_paths or dict
        self._on_change = on_change or (lambda: None)
        self._notice = notice or (lambda _m, _s: None)
        self.publish_interval = max(0.05, publish_interval)
        self._lock = threading.Lock()
        self._store: Store | None = None
        self.store_lost = False
        self.node_rank = 0
        self.nnodes = 1
        self.round = 0
        self.base_rank = 0
        self._local_status: dict[str, Any] | None = None
        self._failures: dict[int, tuple[Any, bool]] = {}
        self._last_output: dict[int, float] = {}
        self._remote: dict[int, dict[str, Any]] = {}
        self.world_size: int | None = None
        self._bad_told: set[int] = set()
        self._published_key: str | None = None
        self._published_at = 0.0
        self._gen_seen: int | None = None
        self._read_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.liveness = Liveness()
        self.door: str | None = None
        """Where this node's supervisor serves viewers of other nodes (``HOST:PORT``)."""
        self._fr_summary = fr_summary
        self._fr_sent: str | None = None
        self._fr_sent_at = 0.0
        self._fr_read_at = 0.0
        self._fr_waiting = False
        self._fr_remote: tuple[list[RankCollectives], dict[int, str]] = ([], {})
        self._fr_lock = threading.Lock()
        self._fr_busy = threading.Lock()
        """One exchange at a time (the board's thread, a person's question)."""
        self.over = False
        """This node's round is over (the agent's loop returned): its record is final, and
        says so before the node waits for the others (``wait_for_others``)."""

    # -- the round -------------------------------------------------------------------------

    def attach(self, store: Store, *, node_rank: int, nnodes: int, round_: int,
               base_rank: int, world_size: int | None = None) -> None:
        """Use ``store`` (this round's) from now on; the previous round's view is dropped.

        ``world_size`` bounds the ranks a remote record may carry (``record_check``)."""
        with self._lock:
            self._store = None if self.store_lost else store
            self.node_rank, self.nnodes, self.round = node_rank, nnodes, round_
            self.over = False
            self.base_rank = base_rank
            self.world_size = world_size
            self._bad_told = set()
            self._remote = {}
            self._failures = {}
            self._published_key = None
            self._gen_seen = None
            self._read_at = 0.0
            self._fr_sent = None
            self._fr_sent_at = self._fr_read_at = 0.0
            self._fr_remote = ([], {})
            self.liveness.reset()
        self.publish_now()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rankvisor-board",
                                            daemon=True)
            self._thread.start()

    @property
    def read_interval(self) -> float:
        """Seconds between two reads of the others' records: grows with the node count."""
        return max(1.0, self.nnodes / 100.0)

    # -- what the engine tells it ---------------------------------------------------------------

    def sink(self, event: Event) -> None:
        """The Supervisor's events (engine threads: records and returns)."""
        if isinstance(event, RankOutput):
            self._last_output[event.rank] = clock.wall()
        elif isinstance(event, RankStateChanged):
            if event.failure is not None:
                self._failures[event.rank] = (event.failure, event.caused_by_us)
            elif not event.new.is_final:
                self._failures.pop(event.rank, None)
            self._wake.set()

    def decorate(self, record: dict[str, Any]) -> dict[str, Any]:
        """The status.json record with every node's ranks and the cluster's root cause."""
        with self._lock:
            self._local_status = dict(record)
        self._wake.set()
        return self.cluster_status(record)

    # -- restart requests (a person's restart-all, for every node) -------------------------------

    def ask_restart(self) -> None:
        """Tell every node a person asked for a new round (this round's key)."""
        self._call(lambda s: s.set(_RESTART, str(self.node_rank)))

    def mark_failed(self) -> None:
        """Tell every node this one failed in this round, before it joins the next: a node
        whose ranks have not failed yet then counts the new round as a failure restart too,
        so that every node gives its ranks the same TORCHELASTIC_RESTART_COUNT."""
        self.publish_now()
        self._call(lambda s: s.set(_PREFIX + "failed", str(self.node_rank)))

    def failed_elsewhere(self) -> bool:
        """Whether a node marked this round failed (``mark_failed``)."""
        return bool(self._call(lambda s: s.check([_PREFIX + "failed"]), default=False))

    def restart_asked(self) -> bool:
        """Whether any node's person asked for a new round in this round."""
        return bool(self._call(lambda s: s.check([_RESTART]), default=False))

    # -- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.publish_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.publish_now(force=False)
                self._beat()
                if clock.monotonic() - self._read_at >= self.read_interval:
                    self.read_now()
                self.exchange_fr()
            except Exception:  # noqa: BLE001 - the board must never take the run down
                log.exception("cluster status board step failed")
            # At most one write per interval, whatever wakes us.
            self._stop.wait(self.publish_interval)

    def close(self) -> None:
        """Stop the thread (the last record stays in the store)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _call(self, fn: Callable[[Store], Any], default: Any = None) -> Any:
        store = self._store
        if store is None:
            return default
        try:
            return fn(store)
        except Exception as e:  # noqa: BLE001 - torch raises DistStoreError, RuntimeError...
            with self._lock:
                lost = not self.store_lost
                self.store_lost = True
                self._store = None
            if lost:
                self._notice(
                    f"the rendezvous store stopped answering ({type(e).__name__}: "
                    f"{str(e)[:120]}): the other nodes are no longer seen; showing this "
                    "node's ranks", "warning",
                )
                self._on_change()
            return default

    def local_record(self) -> dict[str, Any]:
        """This node's record as it would be published now."""
        with self._lock:
            status = self._local_status
        ranks = []
        now = clock.wall()
        for r in (status or {}).get("ranks", []):
            local = int(r.get("local_rank", r.get("rank", 0)))
            seen = self._last_output.get(local)
            ranks.append([local, self.base_rank + local, r.get("state"), r.get("exitcode"),
                          r.get("restart_count", 0),
                          None if seen is None else round(now - seen, 1)])
        record: dict[str, Any] = {
            "node_rank": self.node_rank, "host": self.host, "round": self.round,
            "attempt": (status or {}).get("attempt", 0),
            "finished": bool((status or {}).get("finished")),
            "over": self.over,
            "ranks": ranks, "rc": self._candidate(status),
            "suspect": (status or {}).get("suspect"),
        }
        if self.door:
            record["door"] = self.door
        return record

    def _candidate(self, status: dict[str, Any] | None) -> dict[str, Any] | None:
        """This node's earliest failure (ours not counted), for the cluster's choice."""
        real = {r: f for r, (f, ours) in list(self._failures.items()) if not ours}
        if not real:
            return None
        paths = self._stderr_paths()
        knock = {r: _knock_on(failure_message(f, paths.get(r, "")))
                 or (f.exitcode < 0 and not raised_line(paths.get(r, ""))
                     and _knock_on(" ".join(last_lines(paths.get(r, ""), 5))))
                 for r, f in real.items()}
        # A rank that died of a signal after its peer closed the connection (gloo's
        # IoException, then SIGABRT) may exit before the rank that raised: knock-ons are
        # demoted here as the cluster's choice demotes them across nodes. A rank that
        # raised first and was then aborted on its way out by that same closed connection
        # (its peers went down with it) is told by its own exception, not a knock-on.
        own = {r: f for r, f in real.items() if not knock[r]}
        local = root_cause_rank(own or real)
        assert local is not None
        failure = real[local]
        message = failure_message(failure, paths.get(local, ""))
        return {
            "rank": self.base_rank + local, "local_rank": local, "node_rank": self.node_rank,
            "host": self.host, "exitcode": failure.exitcode,
            "signal": exit_signal_name(failure.exitcode),
            "message": message[:MESSAGE_CAP], "t": failure.failure_time_ns / 1e9,
            "knock_on": knock[local],
        }

    def publish_now(self, *, force: bool = True) -> None:
        """Write this node's record when it changed (or ``force``), within the rate."""
        if self._store is None:
            return
        record = self.local_record()
        # What a reader shows, less the ages: only a change of that bumps the counter.
        key = json.dumps({k: v for k, v in record.items() if k != "ranks"}, sort_keys=True)
        key += json.dumps([r[:5] for r in record["ranks"]])
        changed = key != self._published_key
        now = clock.monotonic()
        if not force and not changed and now - self._published_at < HEARTBEAT_S:
            return
        data = json.dumps(record, separators=(",", ":"))
        node = self.node_rank
        if self._call(lambda s: s.set(f"{_PREFIX}node/{node}", data), default=False) is False:
            return
        self._published_key, self._published_at = key, now
        if changed:
            self._call(lambda s: s.add(_GEN, 1))

    def read_now(self) -> bool:
        """Read the others' records if the counter moved; whether the view changed."""
        self._read_at = clock.monotonic()
        self._read_beats()
        gen = self._call(lambda s: s.add(_GEN, 0))
        if gen is None or gen == self._gen_seen:
            return False
        nodes = [n for n in range(self.nnodes) if n != self.node_rank]
        keys = [f"{_PREFIX}node/{n}" for n in nodes]
        if not keys:
            return False
        values = self._read_keys(keys)
        if values is None:
            return False
        remote: dict[int, dict[str, Any]] = {}
        for node, value in zip(nodes, values, strict=False):
            if not value:
                continue
            try:
                remote[node] = check_record(value, node=node, this_node=self.node_rank,
                                            world_size=self.world_size)
            except BadRecord as e:
                if node not in self._bad_told:  # one notice a node a round, not one a read
                    self._bad_told.add(node)
                    self._notice(f"node {node}'s record in the rendezvous store was "
                                 f"ignored: {e}", "warning")
        with self._lock:
            old = self._remote
            self._remote = remote
            self._gen_seen = gen
        if remote != old:
            self._tell_changes(old, remote)
            self._on_change()
            return True
        return False

    def _tell_changes(self, old: dict[int, dict[str, Any]],
                      new: dict[int, dict[str, Any]]) -> None:
        """One line per node whose ranks failed since the last read (the TUI's notices):
        the first few named, the rest counted, however many there are."""
        for node, rec in sorted(new.items()):
            before = {r[0]: r[2] for r in old.get(node, {}).get("ranks", [])}
            failed = [(glob, code) for local, glob, state, code, _count, _age in rec["ranks"]
                      if state == "failed" and before.get(local) != "failed"]
            if not failed:
                continue
            shown = ", ".join(f"{g} (exit code {c})" for g, c in failed[:_NAMED])
            more = f" and {len(failed) - _NAMED} more" if len(failed) > _NAMED else ""
            self._notice(f"node {node} ({rec['host']}): rank{'s' if len(failed) > 1 else ''} "
                         f"{shown}{more} failed", "warning")

    # -- the Flight Recorder of every node ------------------------------------------------------

    def exchange_fr(self, *, read: bool = False) -> None:
        """This node's FR summary written when it changed (at most once per
        ``read_interval``); the others' read when one of this node's ranks waits in a
        collective, or ``read`` (at most once per ``read_interval`` either way)."""
        if self._store is None or self._fr_summary is None or self.nnodes <= 1:
            return
        with self._fr_busy:
            self._exchange_fr(read)

    def _exchange_fr(self, read: bool) -> None:
        now = clock.monotonic()
        if now - self._fr_sent_at >= self.read_interval:
            summary = self._fr_summary()
            if summary is not None:
                self._fr_waiting = bool(summary.get("waiting"))
                data = json.dumps(summary, separators=(",", ":"))
                if data != self._fr_sent:
                    node = self.node_rank
                    if self._call(lambda s: s.set(f"{_PREFIX}fr/{node}", data),
                                  default=False) is not False:
                        self._fr_sent, self._fr_sent_at = data, now
        if (read or self._fr_waiting) and now - self._fr_read_at >= self.read_interval:
            self._fr_read_at = now
            self._read_fr()

    def _read_fr(self) -> None:
        keys = [f"{_PREFIX}fr/{n}" for n in range(self.nnodes) if n != self.node_rank]
        values = self._read_keys(keys)
        if values is None:
            return
        readings: list[RankCollectives] = []
        held: dict[int, str] = {}
        for value in values:
            if not value:
                continue
            try:
                summary = json.loads(bytes(value))
            except (ValueError, UnicodeDecodeError, RecursionError):
                continue
            mine, how = readings_of(summary, world_size=self.world_size)
            readings += mine
            held.update(how)
        with self._fr_lock:
            self._fr_remote = (readings, held)

    def remote_fr(self, fresh: bool = False) -> tuple[list[RankCollectives], dict[int, str]]:
        """The other nodes' FR readings (global ranks) and their held ranks, as last read
        (``fresh``: read now, within the rate: a person asked)."""
        if fresh:
            try:
                self.exchange_fr(read=True)
            except Exception:  # noqa: BLE001 - a person's question is answered anyway
                log.exception("reading the other nodes' collectives failed")
        with self._fr_lock:
            return self._fr_remote

    def _beat(self) -> None:
        """This node's beat, when due (``liveness``)."""
        if self._store is not None and self.liveness.due(self.nnodes):
            count = self.liveness.count
            self._call(lambda s: s.set(Liveness.key(self.node_rank), str(count)))

    def _read_beats(self) -> None:
        """The others' beats; a node that stopped (not one that finished) said once."""
        keys = self.liveness.keys(self.nnodes, self.node_rank)
        if not keys or self._store is None:
            return
        values = self._read_keys(keys)
        if values is None:
            return
        nodes = [n for n in range(self.nnodes) if n != self.node_rank]
        before = self.unreachable()
        if not self.liveness.note(nodes, values, self.nnodes, self.read_interval):
            return
        now = self.unreachable()
        remote = self.remote_records()
        for node in sorted(now - before):
            self._notice(f"node {node} ({remote.get(node, {}).get('host', '?')}) is unreachable "
                         "(no beat in the store): its ranks show their last known state",
                         "warning")
        for node in sorted(before - now):
            self._notice(f"node {node} ({remote.get(node, {}).get('host', '?')}) answers again",
                         "information")
        if now != before:
            self._on_change()

    def doors(self) -> dict[str, str]:
        """Every node's door (``HOST:PORT``) as its record says, by node rank (a string)."""
        every = {**self.remote_records(), self.node_rank: {"door": self.door}}
        return {str(n): r["door"] for n, r in sorted(every.items())
                if isinstance(r.get("door"), str)}

    def layout(self) -> dict[str, dict[str, Any]]:
        """Every node as a viewer of the whole job needs it: host, door, and its ranks as
        ``[local, global, state]``, by node rank (a string); this node's included."""
        every = {**self.remote_records(), self.node_rank: self.local_record()}
        gone = self.unreachable()
        return {str(n): {"host": r.get("host"), "door": r.get("door"),
                         "unreachable": n in gone, "over": _over(r),
                         "ranks": [list(x[:3]) for x in r.get("ranks", [])]}
                for n, r in sorted(every.items())}

    def agree(self, key: str, offer: str) -> str | None:
        """The value every node of this round takes for ``key``: the first node's offer
        (the store's compare-and-set); None without a store."""
        value = self._call(lambda s: s.compare_set(_PREFIX + key, "", offer))
        return None if value is None else bytes(value).decode()

    def unreachable(self) -> frozenset[int]:
        """Nodes whose beat stopped before their run finished."""
        remote = self.remote_records()
        return frozenset(n for n in self.liveness.unreachable
                         if not _over(remote.get(n, {})))

    def _read_keys(self, keys: list[str]) -> list[bytes | None] | None:
        """``keys`` in one ``multi_get`` when all are there, else each one that is (a
        round's first second); None when the store did not answer."""
        if self._call(lambda s: s.check(keys), default=False):
            values: list[bytes | None] | None = self._call(lambda s: s.multi_get(keys),
                                                           default=None)
            return values
        return [self._get_if_there(k) for k in keys]

    def _get_if_there(self, key: str) -> bytes | None:
        def get(store: Store) -> bytes | None:
            return store.get(key) if store.check([key]) else None

        value: bytes | None = self._call(get)
        return value

    def remote_records(self) -> dict[int, dict[str, Any]]:
        with self._lock:
            return dict(self._remote)

    def wait_for_others(self, timeout_s: float, *, finished: bool = True) -> bool:
        """Read until every node's record of this round says it is over (or ``timeout_s``).

        Over, not finished: a node's run finishes only after this wait, so a wait for the
        others' "finished" was a wait for each node's timeout on every node."""
        deadline = clock.monotonic() + timeout_s
        while True:
            self._gen_seen = None  # read even if the counter did not move
            self.read_now()
            recs = self.remote_records()
            done = len(recs) == self.nnodes - 1 and all(
                _over(r) or not finished for r in recs.values()
            )
            if done or self.store_lost or self.nnodes <= 1:
                return done
            if clock.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def final_barrier(self, timeout_s: float) -> bool:
        """Count this node as done reading, then wait (bounded) until every node is: the
        node hosting the store must not take it away while another still reads."""
        if self._call(lambda s: s.add(_PREFIX + "read", 1)) is None:
            return False
        deadline = clock.monotonic() + timeout_s
        while clock.monotonic() < deadline:
            count = self._call(lambda s: s.add(_PREFIX + "read", 0))
            if count is None or count >= self.nnodes:
                return count is not None
            time.sleep(0.05)
        return False

    # -- the view --------------------------------------------------------------------------------

    def root_cause(self) -> dict[str, Any] | None:
        """The cluster's root cause (this node's own candidate included)."""
        records = self.remote_records()
        records[self.node_rank] = self.local_record()
        return cluster_root_cause(records)

    def cluster_status(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` (this node's status.json) with every node's ranks and the cluster's
        root cause and suspect, each naming its node and host."""
        out = dict(record)
        ranks = []
        for r in record.get("ranks", []):
            local = int(r.get("local_rank", r.get("rank", 0)))
            ranks.append({**r, "rank": self.base_rank + local, "local_rank": local,
                          "node_rank": self.node_rank, "host": self.host})
        remote = self.remote_records()
        gone = self.unreachable()
        for node, rec in sorted(remote.items()):
            for local, glob, state, code, count, age in rec.get("ranks", []):
                shown = "unknown" if self.store_lost else state
                if node in gone and state in ("running", "starting"):
                    shown = "unreachable"
                ranks.append({
                    "rank": glob, "local_rank": local, "node_rank": node,
                    "host": rec.get("host"), "pid": None,
                    # With the store gone (or their node silent) nothing says what became
                    # of them since.
                    "state": shown, "last_state": state,
                    "exitcode": code, "signal": exit_signal_name(code),
                    "restart_count": count, "last_output_age_s": age,
                })
        ranks.sort(key=lambda r: (r["rank"], r["node_rank"]))
        out["ranks"] = ranks
        out["node_rank"] = self.node_rank
        out["host"] = self.host
        out["nnodes"] = self.nnodes
        out["cluster"] = {
            "round": self.round,
            "nodes_seen": 1 + len(remote),
            "store": "gone" if self.store_lost else "ok",
            "unreachable": sorted(gone),
            "doors": self.doors(),
        }
        records = dict(remote)
        records[self.node_rank] = self.local_record()
        rc = cluster_root_cause(records)
        if rc is not None:
            out["root_cause"] = {k: v for k, v in rc.items() if k not in ("t",)}
        elif isinstance(out.get("root_cause"), dict):
            out["root_cause"] = {**out["root_cause"], "node_rank": self.node_rank,
                                 "host": self.host}
        suspect = record.get("suspect")
        if isinstance(suspect, dict):
            out["suspect"] = {**suspect, "node_rank": self.node_rank, "host": self.host}
        else:
            for node, rec in sorted(remote.items()):
                if isinstance(rec.get("suspect"), dict):
                    out["suspect"] = {**rec["suspect"], "node_rank": node,
                                      "host": rec.get("host")}
                    break
        return out


def _over(record: dict[str, Any]) -> bool:
    """A node's record says its round is over (its run may not have finished yet)."""
    return bool(record.get("over") or record.get("finished"))
