"""``OutputPump``: one thread that tails every rank's log files and hands out batches of lines.

Why one thread for every file: a tail per file (torch's ``TailLog``) costs a thread and a
poll loop per rank and stream; the pump sleeps until inotify says a file changed (a slow
poll where there is no notification, ``output.wakeups``), reads what changed, and delivers
at most one batch per (rank, stream) a wake-up, never one call per line, so a UI or a
console keeps up with thousands of lines a second on one core. Why it writes the arrival
index: only the pump sees in which order a rank's stdout and stderr lines came; it appends
that to ``arrival.idx`` (``engine.rundir.arrival``) before it delivers, so a viewer reading
the files later merges them the same way. The files stay the record: memory is bounded
(``batch_chars``), a lost notification only delays lines (every file is swept each
``sweep_interval``), a file truncated in place is told (``TRUNCATED_NOTICE``), and a rank
restarted into a new attempt is followed after the old file is drained. Where the pump sits
on a line's way from a rank to a pane: engine/README.md, "A line's journey".
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Collection, Final, Iterable, Literal, Sequence

from .. import clock
from ..events import RankOutput, Stream
from ..rundir.arrival import ArrivalWriter
from .dup_filter import DuplicateFilter
from .lines import DEFAULT_MAX_LINE_CHARS, LineAssembler, join_blocks
from .text_batch import Batch, LineBlock, Prefixes, TextBatch
from .wakeups import Wake, Waker, make_waker

# Prefixes and TextBatch are re-exported for callers.
__all__ = ["TRUNCATED_NOTICE", "OutputPump", "Prefixes", "TextBatch"]

logger = logging.getLogger(__name__)

TRUNCATED_NOTICE: Final = (
    "[rankvisor] log truncated by another process (copytruncate?): "
    "lines not shown before this point are lost"
)
"""The line delivered in a stream where its file was truncated under a running rank."""

_HEAD: Final = 64
"""Bytes of a file's content remembered to recognise it (see ``OutputPump._truncated``)."""

StdStream = Literal["stdout", "stderr"]

UNREAD_AFTER_S: Final = 1.0
"""Seconds without a batch's lines read whole after which the pump counts as unread."""


class _Tail:
    __slots__ = (
        "asm",
        "attempt",
        "counted",
        "fd",
        "first_line",
        "head",
        "head_at",
        "hole_from",
        "index",
        "ino",
        "line_end",
        "offset",
        "path",
        "rank",
        "read_ns",
        "sent_end",
        "sent_partial",
        "skip_nul",
        "stream",
    )

    def __init__(self, rank: int, stream: Stream, path: str, attempt: int, asm: LineAssembler):
        self.rank = rank
        self.stream = stream
        self.path = path
        self.attempt = attempt
        self.asm = asm
        self.fd: int | None = None
        self.ino = 0
        self.offset = 0
        self.line_end = 0
        """Byte offset just past the last newline read: where the next line begins."""
        self.sent_end = 0
        """``line_end`` when the last batch was collected (where its first line began)."""
        self.first_line = 0
        self.counted = 0
        """``asm.lines_done`` when the last batch was collected."""
        self.sent_partial = ""
        self.head = b""
        """The first bytes (up to ``_HEAD``) of the content read, as read: if the file no
        longer holds them at ``head_at``, it was truncated (or rewritten) since."""
        self.head_at = 0
        self.skip_nul = False
        """After a truncation: NUL bytes are the writer's hole, not text; skip them."""
        self.hole_from = 0
        """After a truncation: the old read offset. A writer without O_APPEND goes on at
        its own offset, at or past ours, so the hole reaches at least this far."""
        self.index: ArrivalWriter | None = None
        """The arrival index this file's line counts go to (shared with its sibling)."""
        self.read_ns = clock.wall_ns()
        """When the last batch was read (wall): what it held was written after, or it was
        read with it; the earliest time the next batch can be said to be written at."""


class OutputPump:
    """Tail many rank log files from one thread, delivering batches of lines to ``sink``.

    ``sink`` gets a list of ``RankOutput`` (``TextBatch`` with ``text_batches``) per wake-up,
    at most one per (rank, stream); a wake-up that read more than ``batch_chars`` delivers in
    several calls. Lines are in the file's order, and within one wake-up a rank's stdout batch
    comes before its stderr batch (the order the arrival index records). ``lines`` are
    complete lines (decoded, ``\\r``-collapsed, sanitised, cut at ``max_line_chars`` with a
    marker), ``partial`` the unterminated line; a batch may carry only a changed ``partial``.
    A ``RankOutput``'s ``lines`` is a ``LineBlock``: the chunk's lines as bytes, made into
    ``str`` only when read (every chunk is handled whole: no Python object per line here).
    A file truncated in place while its rank writes on (logrotate's ``copytruncate``): its
    last partial line is delivered as final, then ``TRUNCATED_NOTICE`` (not in the file;
    ``first_line`` starts again at 0), then the new content; NUL bytes a writer without
    O_APPEND leaves are never delivered as text.

    Threads: the pump thread reads and calls ``sink``; every method may be called from any
    thread, from inside ``sink`` too (``stop`` excepted). Reading and delivery happen under
    one re-entrant lock, so ``sink`` calls never overlap; ``sink`` must be quick and must not
    wait for another thread that calls into the pump.

    Args:
        sink: receives one list of batches per wake-up (on the pump thread, or on the
            thread calling ``flush``/``remove``/``stop``).
        use_inotify: wake on change notifications; False (or ``RANKVISOR_TAIL_POLL=1`` in
            the environment: NFS written from other hosts) polls every ``poll_interval``.
        poll_interval: seconds between looks at the files when polling.
        max_line_chars: display cap of a line (longer lines are cut with a marker).
        sanitize: neutralise escape sequences but SGR colours (False: pass them raw).
        text_batches: give ``sink`` ``TextBatch`` objects instead of ``RankOutput``.
        chunk_size: bytes per ``os.read``.
        batch_chars: bytes after which a wake-up delivers what it has read so far (keeps
            memory flat and the working set in cache on a big backlog).
        debounce: seconds to wait after a notification before reading (batches bursts).
        sweep_interval: with notifications, look at every file at least this often anyway.
        name: the pump thread's name.
        backend: force "inotify", "watchfiles" or "poll" (tests, benchmarks); None follows
            ``use_inotify``.
        unread_debounce: with ``RankOutput`` batches, the debounce while nobody reads their
            lines whole (none for ``UNREAD_AFTER_S``: a supervisor without a console or a
            viewer): fewer, bigger reads, as torch's 0.1 s poll. 0: always ``debounce``.
    """

    def __init__(
        self,
        sink: Callable[[list[Batch]], None],
        *,
        use_inotify: bool = True,
        poll_interval: float = 0.25,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
        sanitize: bool = True,
        text_batches: bool = False,
        chunk_size: int = 1 << 16,
        batch_chars: int = 1 << 18,
        debounce: float = 0.002,
        sweep_interval: float = 1.0,
        name: str = "OutputPump",
        backend: str | None = None,
        unread_debounce: float = 0.0,
    ) -> None:
        self._sink = sink
        forced_poll = os.environ.get("RANKVISOR_TAIL_POLL", "").lower() in ("1", "true", "yes")
        self._mode = "inotify" if use_inotify and not forced_poll else "poll"
        if backend is not None and not forced_poll:
            self._mode = backend
        self._poll_interval = poll_interval
        self._cap = max_line_chars
        self._sanitize = sanitize
        self._text = text_batches
        self._chunk = chunk_size
        self._batch_chars = batch_chars
        self._debounce = debounce
        self._unread_debounce = 0.0 if text_batches else unread_debounce
        self._reads = [0]
        """Full reads of this pump's line blocks (each block counts into it)."""
        self._reads_seen = -1
        self._read_at = 0.0
        """When a batch's lines were last seen read whole (``lines_read`` moved)."""
        self._sweep = sweep_interval
        self._name = name
        self._lock = threading.RLock()
        self._tails: dict[tuple[int, str], _Tail] = {}
        self._by_path: dict[str, list[_Tail]] = {}
        self._by_dir: dict[str, list[_Tail]] = {}
        self._filters: dict[str, DuplicateFilter] = {}
        self._indexes: dict[str, ArrivalWriter] = {}
        self._index_refused: set[str] = set()
        """Indexes that could not be made (a full disk): said once, not tried again."""
        self._noted: list[ArrivalWriter] = []
        """Arrival indexes with records to write before the next delivery."""
        self._waker: Waker | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stopped = False
        self._read_last = 0
        """Bytes read by the last cycle."""
        self._busy_bytes = 4 * chunk_size
        """A cycle that read this much means the files are busy: wake at once next time."""
        self._rotate = 0
        """Which file the next cycle starts with (turns, so no file is always last)."""
        self.wakeups = 0
        """Wake-ups of the pump thread so far (idle cost is counted in these)."""

    @property
    def mode(self) -> str:
        """How the pump wakes up: "inotify", "watchfiles" or "poll" (final after start)."""
        return self._waker.mode if self._waker is not None else self._mode

    # -- registration ------------------------------------------------------------------

    def add(
        self, rank: int, stream: StdStream, path: str, attempt: int = 0, index: str = ""
    ) -> None:
        """Tail ``path`` as (rank, stream) from its start; it need not exist yet.

        With ``index`` (an ``arrival.idx`` path) each read pass that completed lines appends
        how many lines the file has and when they arrived, before the batch is delivered.
        Adding the same (rank, stream) with another path (a restarted rank) drains the old
        file first (its partial line becomes final), then follows the new one.
        """
        self.add_many(((rank, stream, path, attempt, index),))

    def add_many(self, entries: Iterable[tuple[int, StdStream, str, int, str]]) -> None:
        """``add`` for each ``(rank, stream, path, attempt, index)``, with one wake-up for all.

        Each wake-up makes the pump thread read every file it tails, so a group of N ranks
        added one by one could cost N passes over up to 2N files, each fighting the adding
        thread for the lock: a start of 2000 ranks spent a second here.
        """
        with self._lock:
            if self._stopped:
                raise RuntimeError("the pump is stopped")
            added = False
            for rank, stream, path, attempt, index in entries:
                path = os.path.abspath(path)
                added = self._add_locked(rank, stream, path, attempt, index) or added
            if added and self._waker is not None:
                self._waker.poke()

    def _add_locked(
        self, rank: int, stream: StdStream, path: str, attempt: int, index: str
    ) -> bool:
        old = self._tails.get((rank, stream))
        if old is not None:
            if old.path == path and old.attempt == attempt:
                return False
            self._drop(old, drain=True)
        asm = LineAssembler(max_line_chars=self._cap, sanitize=self._sanitize)
        tail = _Tail(rank, stream, path, attempt, asm)
        if index:
            tail.index = self._open_index(index)
        self._tails[(rank, stream)] = tail
        self._by_path.setdefault(path, []).append(tail)
        self._by_dir.setdefault(os.path.dirname(path), []).append(tail)
        if self._waker is not None:
            self._waker.watch(path)
        return True

    def _open_index(self, path: str) -> ArrivalWriter | None:
        writer = self._indexes.get(path)
        if writer is None:
            if path in self._index_refused:
                return None  # a rank's second stream: said for the first
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                writer = ArrivalWriter(path)
            except OSError as e:  # the logs still work; only the merged view loses its order
                self._index_refused.add(path)
                logger.warning("cannot write the arrival index %s: %s", path, e)
                return None
            self._indexes[path] = writer
        writer.users += 1
        return writer

    def _release_index(self, tail: _Tail) -> None:
        writer, tail.index = tail.index, None
        if writer is None:
            return
        writer.users -= 1
        if writer.users <= 0:
            self._indexes.pop(writer.path, None)
            if writer in self._noted:
                self._noted.remove(writer)
            try:
                writer.close()
            except OSError as e:
                logger.warning("writing the arrival index %s failed: %s", writer.path, e)

    def remove(self, rank: int, stream: StdStream, drain: bool = True) -> None:
        """Stop tailing (rank, stream); with ``drain`` deliver what is left (partial line
        included) first. Unknown keys are ignored."""
        with self._lock:
            tail = self._tails.get((rank, stream))
            if tail is not None:
                self._drop(tail, drain)

    def add_filter(
        self,
        stream: StdStream,
        needles: Sequence[str],
        path: str,
        prefixes: Prefixes = None,
        *,
        name: str = "",
        ranks: Collection[int] | None = None,
    ) -> None:
        """Copy lines of ``stream`` that contain a needle to ``path``, as torch's duplicate
        filters do (plain, case-sensitive substrings), and deliver them as
        ``filtered_stdout`` / ``filtered_stderr`` batches.

        The filtered file gets the display text with the rank's prefix (``prefixes``: a dict
        or ``rank -> prefix``; else ``[{name}{rank}]:``); the rank's own file keeps every raw
        byte. ``ranks`` limits the filter to those ranks (None: all). Calling it again for a
        stream replaces that stream's filter.
        """
        with self._lock:
            old = self._filters.pop(stream, None)
            if old is not None:
                old.close()
            if needles:
                self._filters[stream] = DuplicateFilter(
                    stream, needles, path, prefixes, name, ranks
                )

    # -- life cycle --------------------------------------------------------------------

    def start(self) -> OutputPump:
        """Start the pump thread (idempotent); returns self."""
        with self._lock:
            if self._thread is not None or self._stopped:
                return self
            self._waker = make_waker(
                self._mode, poll_interval=self._poll_interval, debounce=self._debounce
            )
            for path in self._by_path:
                self._waker.watch(path)
            # Daemon: a caller that forgets stop() must not hang the interpreter at exit
            # (torch's TailLog does); the files keep every byte regardless.
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return self

    def flush(self) -> None:
        """Read every file to its current end and deliver, on the calling thread."""
        with self._lock:
            self._cycle(list(self._tails.values()))

    sync = flush

    def stop(self) -> None:
        """Deliver everything written before this call, then release everything.

        Raises:
            RuntimeError: called from inside the sink (on the pump thread).
        """
        if self._thread is threading.current_thread():
            raise RuntimeError("OutputPump.stop() cannot be called from its sink")
        with self._lock:
            if self._stopped:
                return
            self._stopping = True
        if self._waker is not None:
            self._waker.poke()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._cycle(list(self._tails.values()), final=True)
            for tail in self._tails.values():
                self._close_fd(tail)
                self._release_index(tail)
            self._tails.clear()
            self._by_path.clear()
            self._by_dir.clear()
            for f in self._filters.values():
                f.close()
            self._filters.clear()
            if self._waker is not None:
                self._waker.close()

    def stopped(self) -> bool:
        """True once ``stop()`` has run."""
        return self._stopped

    # -- the pump thread ---------------------------------------------------------------

    def _run(self) -> None:
        wake = Wake(None, True)  # first look: files that exist already
        while True:
            with self._lock:
                if self._stopping:
                    return
                self.wakeups += 1
                try:
                    self._handle(wake)
                except Exception:  # never let one bad file or sink call kill the pump
                    logger.exception("output pump cycle failed")
            waker = self._waker
            assert waker is not None
            busy = self._read_last >= self._busy_bytes
            try:
                if self._unread():
                    # Nobody waits for these lines: let them gather, busy or not.
                    wake = waker.wait(self._sweep, False, self._unread_debounce)
                else:
                    wake = waker.wait(self._sweep, busy)
            except Exception:
                # A notification backend that breaks must not silence the ranks: poll.
                logger.exception("waiting for file changes failed; polling from now on")
                with self._lock:
                    self._waker = make_waker(
                        "poll", poll_interval=self._poll_interval, debounce=self._debounce
                    )
                waker.close()
                wake = Wake(None, True)

    def _unread(self) -> bool:
        """Whether no batch's lines were read whole for ``UNREAD_AFTER_S`` (see
        ``unread_debounce``); a read seen now makes the next waits quick again."""
        if not self._unread_debounce:
            return False
        now = clock.monotonic()
        reads = self._reads[0]
        if reads != self._reads_seen:
            self._reads_seen = reads
            self._read_at = now
        return now - self._read_at > UNREAD_AFTER_S

    def _handle(self, wake: Wake) -> None:
        if wake.dirs is None:
            targets = list(self._tails.values())
            if self.mode == "poll" or wake.created:
                for tail in targets:
                    self._check_replaced(tail)
        else:
            targets = []
            for directory in wake.dirs:
                for tail in self._by_dir.get(directory, ()):
                    if wake.created:
                        self._check_replaced(tail)
                    targets.append(tail)
            if wake.created:
                chosen = set(map(id, targets))
                targets += [t for t in self._tails.values() if t.fd is None and id(t) not in chosen]
        self._cycle(targets)

    # -- reading -----------------------------------------------------------------------

    def _open(self, tail: _Tail) -> bool:
        try:
            fd = os.open(tail.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        tail.fd = fd
        tail.ino = os.fstat(fd).st_ino
        tail.offset = tail.line_end = tail.sent_end = 0
        tail.head = b""
        tail.head_at = 0
        tail.skip_nul = False
        return True

    def _close_fd(self, tail: _Tail) -> None:
        if tail.fd is not None:
            os.close(tail.fd)
            tail.fd = None

    def _check_replaced(self, tail: _Tail) -> None:
        """A new file at the tail's path (recreated log dir): finish the old one, follow it.

        A file removed with nothing in its place is finished and let go: kept open, it
        would keep its disk space, and its directory's removal would not be reported
        (inotify tells a directory's removal once nothing holds it), so a log directory
        made again would not be seen until the next sweep.
        """
        if tail.fd is None:
            return
        try:
            ino = os.stat(tail.path).st_ino
        except OSError:
            if os.fstat(tail.fd).st_nlink == 0:
                self._cycle([tail], final=True)
                self._close_fd(tail)
                tail.first_line = 0  # line numbers will be those of a new file
            return
        if ino != tail.ino:
            self._cycle([tail], final=True)
            self._close_fd(tail)
            self._open(tail)
            tail.first_line = 0  # line numbers are those of the new file

    def _drop(self, tail: _Tail, drain: bool) -> None:
        if drain:
            self._cycle([tail], final=True)
        self._close_fd(tail)
        self._release_index(tail)
        del self._tails[(tail.rank, tail.stream)]
        same_dir = self._by_dir.get(os.path.dirname(tail.path), [])
        if tail in same_dir:
            same_dir.remove(tail)
        same_path = self._by_path.get(tail.path, [])
        if tail in same_path:
            same_path.remove(tail)
        if not same_path:
            self._by_path.pop(tail.path, None)
            if self._waker is not None:
                self._waker.unwatch(tail.path)

    def _cycle(self, tails: list[_Tail], final: bool = False) -> None:
        """Read ``tails`` to their end and deliver what they completed.

        Fair under a flood: a pass reads at most ``batch_chars`` bytes of each file (and
        delivers every ``batch_chars``), then files with more to read get another pass
        (starting one file further on each time), so 64 busy files are read round-robin and
        none waits behind another's backlog. Within a file the order is the file's order.
        """
        total = 0
        budget = self._batch_chars
        start = self._rotate
        self._rotate += 1
        todo = tails
        while todo:
            if len(todo) > 1:
                k = start % len(todo)
                todo = todo[k:] + todo[:k]
                # The rotation must not split a rank's pair: its stdout is read and
                # delivered before its stderr in a pass (the order the arrival index records
                # too), so a line printed just before a traceback is not shown after it.
                first: dict[int, int] = {}
                for i, tail in enumerate(todo):
                    first.setdefault(tail.rank, i)
                todo.sort(key=lambda t: (first[t.rank], t.stream != "stdout"))
            batch: list[Batch] = []
            more: list[_Tail] = []
            size = 0
            for tail in todo:
                read, full = self._read_tail(tail, batch, budget, final)
                total += read
                size += read
                if full:
                    more.append(tail)
                if size >= budget and batch:  # memory stays flat on a big backlog
                    self._deliver(batch)
                    batch = []
                    size = 0
            if batch:
                self._deliver(batch)
            todo = more
        self._read_last = total

    def _read_tail(
        self, tail: _Tail, batch: list[Batch], budget: int, final: bool
    ) -> tuple[int, bool]:
        """Read up to ``budget`` bytes of ``tail`` into ``batch``; (bytes read, budget hit)."""
        if self._tails.get((tail.rank, tail.stream)) is not tail:
            return 0, False  # removed meanwhile (by the sink, through remove/add)
        if tail.fd is None and not self._open(tail):
            return 0, False
        fd = tail.fd
        assert fd is not None
        # Blocks of lines (b"a\nb\n"), a chunk at a time: never a Python object per line.
        feed = tail.asm.feed_into
        parts: list[bytes | memoryview] = []
        chunk = self._chunk
        first = True
        read = 0
        full = False
        while True:
            try:
                # One read per file per pass when it fits: every read lets the GIL go, and
                # taking it back behind a busy UI thread costs up to a switch interval.
                data = os.read(fd, max(chunk, budget - read))
                # Once per pass, not per line or per read: has the file been cut under us?
                truncated = (
                    first
                    and (tail.offset > 0 or data[:1] == b"\0")
                    and self._truncated(tail, fd, data)
                )
            except OSError as e:
                logger.warning("reading %s failed: %s", tail.path, e)
                break
            if truncated:
                # The old content is gone (logrotate's copytruncate, ``truncate -s 0``): its
                # last partial line becomes a final line, a notice marks the cut, and reading
                # starts over where the new content is.
                self._collect(batch, tail, parts + self._close_lines(tail))
                parts = []
                self._truncation_notice(batch, tail)
                first = False
                continue
            if not data:
                break
            first = False
            n = len(data)
            read += n
            if tail.skip_nul:
                data = self._skip_hole(tail, fd, data)
                if not data:
                    if read >= budget:
                        full = True
                        break
                    continue
            at = tail.offset
            tail.offset += len(data)
            head = tail.head
            if len(head) < _HEAD and at == tail.head_at + len(head):
                tail.head = head + data[: _HEAD - len(head)]
            feed(data, parts)
            nl = data.rfind(b"\n")  # C speed, from the end: a line ends near it
            if nl >= 0:
                tail.line_end = at + nl + 1
            if read >= budget:
                full = True  # more may wait: another pass, after the other files
                break
            if n < chunk:
                break
        closed = 0
        if final and not full:
            last = self._close_lines(tail)
            closed = len(last)
            parts += last
        self._collect(batch, tail, parts, closed)
        return read, full

    def _truncated(self, tail: _Tail, fd: int, data: bytes) -> bool:
        """Whether the file was truncated since the last read; if so, rewind to its start.

        Two signs, both cheap (at most one syscall a pass): the file is now shorter than what
        we read, or it no longer holds, where they were, the first bytes we read of it. The
        second catches a writer that wrote again before we looked: without O_APPEND (how a
        rank's stdout is opened) it writes at its old offset, so the file is as long as ever
        but starts with a hole of NUL bytes; with O_APPEND it starts with other text.

        A file we have read nothing of yet, that starts with a NUL byte, was cut before we
        looked (no writer of text starts a log with NUL; a hole does). Cut before we looked
        under an O_APPEND writer, it is just a file with that text: nothing to tell.
        """
        if not tail.offset:
            if tail.head or tail.skip_nul or data[:1] != b"\0":
                return False
        elif not data:
            if os.fstat(fd).st_size >= tail.offset:
                return False
        elif not tail.head or os.pread(fd, len(tail.head), tail.head_at) == tail.head:
            return False
        # Where does the new content start? At 0 if the file starts with text (an O_APPEND
        # writer); otherwise after the hole, which ends at or past our old offset: skip NULs.
        start = os.pread(fd, 1, 0)
        tail.skip_nul = start in (b"", b"\0")
        tail.hole_from = tail.offset
        os.lseek(fd, 0, os.SEEK_SET)
        tail.offset = 0
        tail.head = b""
        tail.head_at = 0
        return True

    def _skip_hole(self, tail: _Tail, fd: int, data: bytes) -> bytes:
        """Drop the NUL bytes a writer's hole put before its new content (after a truncation).

        Returns what follows them, or b"" when ``data`` was all hole; then the file offset is
        moved past the rest of the hole (``SEEK_DATA``), so a hole of gigabytes is not read.
        """
        text = data.lstrip(b"\0")
        at = tail.offset + len(data) - len(text)
        if text:
            tail.skip_nul = False
            tail.offset = tail.head_at = at
            tail.line_end = tail.sent_end = at  # the new content's first line begins here
            return text
        size = os.fstat(fd).st_size
        # The hole reaches at least our old offset (see _Tail.hole_from); never past the end.
        target = min(max(at, tail.hole_from), size)
        try:
            target = os.lseek(fd, target, os.SEEK_DATA)
        except OSError:
            target = size  # ENXIO: nothing but hole up to the end; the writer goes on there
        os.lseek(fd, target, os.SEEK_SET)
        tail.offset = target
        return b""

    def _truncation_notice(self, batch: list[Batch], tail: _Tail) -> None:
        """One line, in the stream where the cut happened, that says so; numbered as if it
        ended the old content (line numbers start again at 0 with the new content)."""
        out: Batch
        if self._text:
            data = (TRUNCATED_NOTICE + "\n").encode()
            out = TextBatch(tail.rank, tail.stream, data, 1, "", tail.attempt, tail.first_line)
        else:
            out = RankOutput(
                tail.rank, tail.stream, (TRUNCATED_NOTICE,), "", tail.attempt, tail.first_line
            )
        batch.append(out)
        tail.first_line = 0
        tail.line_end = tail.sent_end = 0
        tail.sent_partial = ""

    def _close_lines(self, tail: _Tail) -> list[bytes]:
        return [(x + "\n").encode("utf-8", "surrogatepass") for x in tail.asm.close()]

    def _collect(
        self, batch: list[Batch], tail: _Tail, parts: list[bytes | memoryview], closed: int = 0
    ) -> None:
        partial = tail.asm.partial
        if not parts and partial == tail.sent_partial:
            return
        tail.sent_partial = partial
        first_line = tail.first_line
        f = self._filters.get(tail.stream)
        if f is not None and not f.applies_to(tail.rank):
            f = None
        data = join_blocks(parts)  # one copy of what the reads gave, at most
        count = tail.asm.lines_done - tail.counted
        out: Batch
        # A partial line closed at the end is a line of ours, not the file's: it ends where
        # the file does.
        end = tail.offset if closed else tail.line_end
        if self._text:
            out = TextBatch(tail.rank, tail.stream, data, count, partial, tail.attempt, first_line)
        else:
            out = RankOutput(
                tail.rank, tail.stream, LineBlock(data, count, self._reads),  # type: ignore[arg-type]
                partial, tail.attempt, first_line, tail.sent_end, end, self._written(tail),
            )
        tail.sent_end = end
        text = data.decode("utf-8", "surrogatepass") if f is not None and data else ""
        batch.append(out)
        tail.counted = tail.asm.lines_done
        tail.first_line += count
        index = tail.index
        if index is not None and count > closed:
            # A last partial line closed at the end is not a line of the file: not noted.
            was_pending = index.pending
            index.note(tail.stream == "stderr", tail.first_line - closed)
            if index.pending and not was_pending:
                self._noted.append(index)
        if text and f is not None:
            filtered = f.apply(tail.rank, tail.attempt, text, self._text)
            if filtered is not None:
                batch.append(filtered)

    def _written(self, tail: _Tail) -> int:
        """When ``tail``'s rank last wrote what this batch holds: the file's mtime, held
        between the previous batch's read and now (a clock on another host, NFS's, cannot
        move a batch out of when it could have been written). One fstat a batch, never a
        line. Under load the pump reads late: a line written before a peer's failure and
        read after it is still before it (``engine.forensics.activity``)."""
        now = clock.wall_ns()
        try:
            mtime = os.fstat(tail.fd).st_mtime_ns if tail.fd is not None else now
        except OSError:
            mtime = now
        written = min(max(mtime, tail.read_ns), now)
        tail.read_ns = now
        return written

    def _deliver(self, batch: list[Batch]) -> None:
        if self._noted:
            # The index first: a viewer that sees these lines can find their order.
            for writer in self._noted:
                try:
                    writer.flush()
                except OSError as e:
                    logger.warning("writing the arrival index %s failed: %s", writer.path, e)
            self._noted.clear()
        try:
            self._sink(batch)
        except Exception:
            logger.exception("output sink failed; %d batches dropped", len(batch))
