"""The Flight Recorder of every rank, kept by the Supervisor: read live, and before each kill.

Each Python rank serves torch's worker server (``engine.forensics.worker_server``). A rank
that fails in a collective is gone before anyone can ask it what it was waiting for, so the
watch asks every live rank every ``interval_s`` (the answer comes from the server's own
thread: the rank is never paused) and keeps each rank's last answer; it asks again, bounded,
at the first failure of an attempt (before the teardown's signals) and before an
escalation's SIGKILL. Each capture is saved under ``<run_dir>/collectives/`` (``latest.json``
and one file per capture, the JSON of ``rankvisor collectives --json``) with each rank's FR
dump as torch wrote it (``collectives/fr/<rank>.json``, for the bundle and torchfrtrace).
The suspect reads ``verdicts``: a rank that never entered a collective its peers waited in.

While no rank serves yet (none imported torch.distributed) a look finds nothing to ask, so
the looks back off: one second after the ranks (re)start, then 2 s, then every
``IDLE_LOOK_S``, on the even seconds the status refresh wakes the run for anyway; a rank
that begins to serve is asked from the next look on, every second. A new answer (what a rank
said changed) is passed on to ``on_change``'s listeners: the live suspect looks again then.

On many nodes the watch also holds the other nodes' readings (``remote``, set by the
cluster layer: ``engine.forensics.fr_merge``), and ``job_readings`` / ``job_verdicts`` /
``answer`` cover every node's ranks, numbered as the job numbers them.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Final

from .. import clock
from ..forensics.collectives import RankCollectives, Verdict, parse_answer, snapshot_json, verdicts
from ..forensics.collectives_run import CAPTURES_DIR
from ..forensics.fr_dump import write_for_torchfrtrace
from ..forensics.fr_merge import job_readings
from ..forensics.nccl_dumps import read_dumps
from ..forensics.worker_server import DEFAULT_TIMEOUT_S as ASK_TIMEOUT_S
from ..forensics.worker_server import Answer, ask_all
from ..process.py_bootstrap import ENV_WORKER_SOCKET
from .state import RunState
from .ticker import Beat, Ticker, next_on_grid

__all__ = ["BUFFER_ENV", "DEFAULT_BUFFER", "CollectiveWatch", "recorder_env"]

log = logging.getLogger(__name__)

BUFFER_ENV: Final = "TORCH_FR_BUFFER_SIZE"
DEFAULT_BUFFER: Final = 500
"""Entries torch keeps per rank: enough for a hang's last steps, small to ask for."""
DIR: Final = CAPTURES_DIR
IDLE_LOOK_S: Final = 4.0
"""The longest between two looks while no rank serves (a rank's first answer is asked at
most this long after its server starts; a failure's capture asks at once regardless)."""


def recorder_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that turn torch's Flight Recorder on, unless the job set them."""
    for name in (BUFFER_ENV, "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        if name in env or name in os.environ:
            return {}
    return {BUFFER_ENV: str(DEFAULT_BUFFER)}


class CollectiveWatch:
    """Asks the live ranks' worker servers, keeps their last answers, saves captures."""

    def __init__(self, state: RunState, run_dir: Callable[[], str | None],
                 interval_s: float = 1.0, *, beat: Beat | None = None) -> None:
        self._state = state
        self._run_dir = run_dir
        self._interval = interval_s
        self._lock = threading.Lock()
        self._last: dict[int, tuple[str, Answer]] = {}
        """rank -> (socket path, its last good answer)."""
        self._errors: dict[int, tuple[str, str]] = {}
        self._parsed: dict[int, tuple[Answer | str, RankCollectives]] = {}
        """rank -> (its last answer or error, the reading made of it): each is parsed once,
        however often the live suspect asks for the verdicts (once a second)."""
        self._verdicts: tuple[list[RankCollectives], list[Verdict]] | None = None
        """(the readings they were drawn from, the verdicts)."""
        self._dumps_seen: dict[str, tuple[int, int]] = {}
        """An NCCL dump file -> (mtime, size) when last read: read again only once changed
        (under ``_dumps_lock``: a dump marked read is in ``_last`` before anyone looks)."""
        self._dump_listings: dict[str, tuple[int, int, list[str]]] = {}
        """A rank's directory -> its dumps as last listed (``read_dumps``; same lock)."""
        self._dumps_lock = threading.Lock()
        self.remote: Callable[[bool], tuple[Sequence[RankCollectives], Mapping[int, str]]] \
            | None = None
        """The other nodes' readings, global ranks, and how a person holds each held one
        (``fresh``: read them now, for a person who asked); None on one node."""
        self._job: tuple[list[RankCollectives], list[Verdict]] | None = None
        # On the beat: its look at the ranks is a few stat calls while no rank serves; the
        # asks of ranks that serve wait on their servers (bounded), on a thread of their own.
        self._ticker = Ticker("rankvisor-collectives", interval_s, self._poll, beat=beat)
        self.start = self._ticker.start
        self._asking: threading.Thread | None = None
        """The asks under way off the beat, if any (one at a time)."""
        self._idle: tuple[dict[int, str], float] = ({}, 0.0)
        """The sockets the last look found nobody serving, and the wait after that look."""
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (no arguments, on whichever thread asked; it must not block)
        whenever a rank's answer changes."""
        self._listeners.append(listener)

    def live_paths(self, only: Container[int] | None = None) -> dict[int, str]:
        """The live ranks' sockets (rank -> path), of ``only`` if given; the caller holds
        the state lock."""
        return {s.rank: s.env[ENV_WORKER_SOCKET] for s in self._state.live()
                if s.env.get(ENV_WORKER_SOCKET) and (only is None or s.rank in only)}

    def stop(self) -> None:
        """No poll runs or will run once this returns (nor asks of one)."""
        self._ticker.stop()
        asking = self._asking
        if asking is not None:
            asking.join(self._timeout_s() + 1.0)

    def _timeout_s(self) -> float:
        return min(2.0, self._interval * 2)

    def _poll(self) -> float | None:
        """One look; returns when the next is due (None: in one interval)."""
        with self._state.lock:
            paths = self.live_paths()
        if not paths:
            self._idle = ({}, 0.0)
            return None
        if not any(os.path.lexists(p) for p in paths.values()):
            # No rank serves (yet): each answers at once that it does not, without a wait;
            # asked once for these sockets, the answer stands until one of them appears.
            with self._lock:
                said = all(self._errors.get(r, ("",))[0] == p for r, p in paths.items())
            if not said:
                self.ask(paths, timeout_s=self._timeout_s())
            return self._idle_look(paths)
        self._idle = ({}, 0.0)
        if self._asking is not None and self._asking.is_alive():
            return None  # the last poll's asks are still waiting: they answer for this one too
        self._asking = threading.Thread(target=self._ask_quietly, args=(paths,),
                                        name="rankvisor-collectives", daemon=True)
        self._asking.start()
        return None

    def _idle_look(self, paths: dict[int, str]) -> float | None:
        """When to look again at sockets nobody serves: twice the last wait, up to
        ``IDLE_LOOK_S``, on the grid of that wait (the status refresh's even seconds)."""
        seen, wait = self._idle
        wait = min(IDLE_LOOK_S, wait * 2) if seen == paths else self._interval
        self._idle = (paths, wait)
        if wait <= self._interval:
            return None
        return next_on_grid(clock.monotonic(), wait)

    def _ask_quietly(self, paths: Mapping[int, str]) -> None:
        try:
            self.ask(paths, timeout_s=self._timeout_s())
        except Exception:  # noqa: BLE001 - a reading never touches the run
            log.exception("rankvisor-collectives failed")

    def ask(self, paths: Mapping[int, str], timeout_s: float) -> None:
        """Ask ``paths`` (rank -> socket) now and keep what they said."""
        answers = ask_all(paths, "fr_trace_json", timeout_s=timeout_s)
        changed = False
        with self._lock:
            for rank, a in answers.items():
                if a.ok:
                    last = self._last.get(rank)
                    changed |= last is None or last[1].body != a.body
                    self._last[rank] = (paths[rank], a)
                    self._errors.pop(rank, None)
                else:
                    # What a rank that answered before said last still stands.
                    changed |= (rank not in self._last
                                and self._errors.get(rank) != (paths[rank], a.error))
                    self._errors[rank] = (paths[rank], a.error)
        if changed:
            for listener in self._listeners:
                listener()

    def read_nccl_dumps(self) -> None:
        """Take in the FR dumps NCCL ranks wrote (on a timeout, or asked through their pipe)
        where they are newer than the rank's last answer."""
        with self._state.lock:
            dirs = {s.rank: os.path.dirname(s.error_file) for s in self._state.slots.values()
                    if s.error_file}
        with self._dumps_lock:
            for rank, where in dirs.items():
                for data, mtime in read_dumps(where, self._dumps_seen, self._dump_listings):
                    body = json.dumps(data, default=str).encode()
                    with self._lock:
                        seen = self._last.get(rank)
                        if seen is None or seen[1].at_ns < mtime:
                            self._last[rank] = (where, Answer(body=body, at_ns=mtime))
                            self._errors.pop(rank, None)

    def readings(self) -> list[RankCollectives]:
        """Every rank's last reading (an error for a rank never answered)."""
        self.read_nccl_dumps()
        with self._lock:
            last = dict(self._last)
            errors = dict(self._errors)
        out = []
        for rank in sorted(set(last) | set(errors)):
            said: Answer | str = last[rank][1] if rank in last else errors[rank][1]
            parsed = self._parsed.get(rank)
            if parsed is None or parsed[0] is not said:
                reading = (parse_answer(rank, said) if isinstance(said, Answer)
                           else RankCollectives(rank, error=said))
                parsed = self._parsed[rank] = (said, reading)
            out.append(parsed[1])
        return out

    def verdicts(self) -> list[Verdict]:
        readings = self.readings()
        cached = self._verdicts
        if (cached is None or len(cached[0]) != len(readings)
                or any(a is not b for a, b in zip(cached[0], readings, strict=True))):
            cached = self._verdicts = (readings, verdicts(readings))
        return cached[1]

    def job_readings(self, *, fresh: bool = False) -> list[RankCollectives]:
        """Every node's ranks' readings, by global rank (this node's alone on one node)."""
        local = self.readings()
        remote = self.remote(fresh)[0] if self.remote is not None else ()
        return job_readings(local, self._state.rank_base, remote)

    def remote_now(self) -> tuple[Sequence[RankCollectives], Mapping[int, str]]:
        """The other nodes' readings and holds as last read (nothing on one node)."""
        return self.remote(False) if self.remote is not None else ((), {})

    def job_verdicts(self) -> list[Verdict]:
        """``verdicts`` of ``job_readings``: ranks named as the job numbers them."""
        readings = self.job_readings()
        cached = self._job
        if (cached is None or len(cached[0]) != len(readings)
                or any(a is not b and a != b for a, b in zip(cached[0], readings, strict=True))):
            cached = self._job = (readings, verdicts(readings))
        return cached[1]

    def capture(self, reason: str, timeout_s: float = 0.5,
                paths: Mapping[int, str] | None = None) -> str:
        """Ask the live ranks now (bounded) and save the readings; the saved file's path
        ("" when none). ``paths`` (rank -> socket): taken from the live ranks if None (the
        caller then must not hold the state lock)."""
        if paths is None:
            with self._state.lock:
                paths = self.live_paths()
        if paths:
            self.ask(paths, timeout_s)
        return self.save(reason)

    def capture_later(self, reason: str, paths: Mapping[int, str], timeout_s: float) -> None:
        """``capture`` on a thread of its own (called with the state lock held)."""
        threading.Thread(target=self._capture_quietly, args=(reason, dict(paths), timeout_s),
                         name="rankvisor-collectives-capture", daemon=True).start()

    def _capture_quietly(self, reason: str, paths: dict[int, str], timeout_s: float) -> None:
        try:
            self.capture(reason, timeout_s, paths)
        except Exception:  # noqa: BLE001 - never the run's failure
            log.exception("collectives capture failed")

    def answer(self, reason: str, paths: Mapping[int, str],
               timeout_s: float = ASK_TIMEOUT_S) -> dict[str, object]:
        """``ReadCollectives``' answer: ask ``paths`` (rank -> socket) now, save the capture,
        and hand back its JSON with ``source`` "live" and ``path`` (saved, or "")."""
        if paths:
            self.ask(paths, timeout_s)
        path = self._save(reason, self.readings())
        return {**snapshot_json(self.job_readings(fresh=True)), "source": "live",
                "path": path}

    def save(self, reason: str) -> str:
        return self._save(reason, self.readings())

    def _save(self, reason: str, readings: list[RankCollectives]) -> str:
        run_dir = self._run_dir()
        if not run_dir or all(r.error for r in readings):
            return ""  # no rank answered (none imported torch.distributed): nothing to keep
        record = {"reason": reason, "time": clock.wall(), **snapshot_json(readings)}
        folder = os.path.join(run_dir, DIR)
        try:
            os.makedirs(os.path.join(folder, "fr"), exist_ok=True)
            with self._lock:
                raw = {r: a.body for r, (_, a) in self._last.items()}
            parsed = {}
            for rank, body in raw.items():
                _write(os.path.join(folder, "fr", f"{rank}.json"), body)
                try:
                    parsed[rank] = json.loads(body)
                except ValueError:
                    pass
            if parsed:
                write_for_torchfrtrace(os.path.join(folder, "torchfrtrace"), parsed)
            now_ns = clock.wall_ns()  # one reading: the seconds and their fraction agree
            stamp = clock.local_stamp("%Y%m%d-%H%M%S", now_ns // 10**9) + f"-{now_ns % 10**9:09d}"
            data = json.dumps(record, indent=1).encode() + b"\n"
            path = os.path.join(folder, f"{stamp}.json")
            _write(path, data)
            _write(os.path.join(folder, "latest.json"), data)
        except OSError as e:
            log.warning("collectives not saved under %s: %s", folder, e)
            return ""
        return path


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
