"""What ``rankvisor mcp`` answers a coding agent: the tools, as plain functions over the
registry, the runs' files and their control sockets (no MCP here: ``mcp_server`` binds them).

Each tool returns a JSON-able dict built by the code paths the commands use (``status``'s
record, ``stack``'s merged text, ``collectives``' verdicts, ``bundle``), with every string
passed through the sanitiser of the commands' output (``engine.output.safe_text``) and the
whole answer bounded (``MAX_ANSWER_BYTES``: a long string or list is cut, and the answer says
so). The socket is reached read-only unless the server was started with ``--allow-control``;
the tools that act on ranks are refused without it, and each needs ``confirm: true``.
Nothing here prints: the server's stdout is the protocol.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Final

from ...engine import clock
from ...engine.control import registry
from ...engine.output.safe_text import safe_tree
from ...engine.output.sanitize import sanitize, strip_sgr
from .run_args import PROG

__all__ = ["MAX_ANSWER_BYTES", "MUTATING", "ToolRefused", "Tools", "bounded", "clean"]

MAX_ANSWER_BYTES: Final = 64 << 10
MUTATING: Final = ("send_to_rank", "signal", "terminate", "restart")
"""The tools that act on a rank: off without ``--allow-control``, each needs ``confirm``."""
EVENTS: Final = ("prompt", "failure", "suspect", "end")
MAX_WAIT_S: Final = 600.0
SEARCH_MATCHES: Final = 200
SEARCH_TAIL_BYTES: Final = 32 << 20
"""Of each log file, what ``search_logs`` reads (its end: a GB log is not read whole)."""
READ_BYTES: Final = 48 << 10
_FAILED: Final = frozenset({"failed", "signalled"})


class ToolRefused(Exception):
    """A tool call that is not carried out; the text says why and what to do."""


def _text(s: str) -> str:
    """A string an agent reads: escapes neutralised, colours dropped, lines kept."""
    return strip_sgr(sanitize(s))


def clean(value: Any) -> Any:
    """``value`` with every string through the commands' sanitiser."""
    return safe_tree(value, _text)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def _cut_largest(value: Any) -> bool:
    """Halve the largest string or list inside ``value`` in place; False if none is left."""
    best: tuple[int, Any, Any] | None = None
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for key, child in items:
            if isinstance(child, (str, list)) and len(child) > 1:
                weight = _size(child)
                if best is None or weight > best[0]:
                    best = (weight, node, key)
            if isinstance(child, (dict, list)):
                stack.append(child)
    if best is None:
        return False
    _, node, key = best
    child = node[key]
    half = len(child) // 2
    if isinstance(child, str):
        node[key] = child[:half] + f"…[cut {len(child) - half} characters]"
    else:
        node[key] = child[:half] + [f"…[cut {len(child) - half} items]"]
    return True


def bounded(answer: dict[str, Any], cap: int = MAX_ANSWER_BYTES) -> dict[str, Any]:
    """``answer`` cut to at most ``cap`` bytes of JSON, ``"truncated": true`` when it was."""
    if _size(answer) <= cap:
        return answer
    answer = json.loads(json.dumps(answer))  # a copy, to cut in place
    answer["truncated"] = True
    while _size(answer) > cap and _cut_largest(answer):
        pass
    return answer


class Tools:
    """The tools over one run (``run``, else each call's, else the newest run)."""

    def __init__(self, run: str | None = None, *, allow_control: bool = False) -> None:
        self.run = run
        self.allow_control = allow_control

    # -- the run, its status, its socket ----------------------------------------------------

    def _entry(self, run: str | None, *, running: bool = False) -> registry.RunEntry:
        try:
            return registry.resolve(run or self.run, running_only=running)
        except registry.NoSuchRun as e:
            raise ToolRefused(str(e)) from None

    def _status(self, run: str | None) -> tuple[registry.RunEntry, str, dict[str, Any]]:
        from .listing import status_json

        entry = self._entry(run)
        state, status = registry.entry_state(entry)
        return entry, state, status_json(entry, state, status)

    def _connect(self, entry: registry.RunEntry, *, control: bool = False) -> Any:
        from ...engine.control.client import NoAnswer, ProtocolMismatch, RemoteHandle

        try:
            return RemoteHandle.connect(entry.socket, read_only=not control,
                                        name=f"{PROG} mcp")
        except (OSError, ProtocolMismatch, NoAnswer) as e:
            state, _ = registry.entry_state(entry)
            raise ToolRefused(f"cannot reach the supervisor of run {entry.run_id} ({state}) "
                              f"at {entry.socket or '(no socket)'}: {e}") from None

    def _local(self, ranks: tuple[int, ...], status: dict[str, Any]) -> tuple[int, ...]:
        from .command import Refused, Usage
        from .ranks import check_ranks, local_ranks, world

        try:
            check_ranks(ranks, world(status))
            return local_ranks(ranks, status)
        except (Refused, Usage) as e:
            raise ToolRefused(str(e)) from None

    def _guard(self, tool: str, confirm: bool) -> None:
        if not self.allow_control:
            raise ToolRefused(f"{tool} acts on the run's ranks, and this server is read-only: "
                              f"start it with `{PROG} mcp --allow-control` to allow it")
        if confirm is not True:
            raise ToolRefused(f"{tool} acts on the run's ranks: call it again with confirm: "
                              "true once the person agrees")

    # -- reading ---------------------------------------------------------------------------

    def list_runs(self) -> dict[str, Any]:
        from .listing import run_row

        return {"runs": [run_row(e) for e in registry.entries()]}

    def run_status(self, run: str | None = None) -> dict[str, Any]:
        _, _, status = self._status(run)
        keep = ("run_id", "run_dir", "state", "attempt", "finished", "exitcode", "root_cause",
                "suspect", "started", "updated", "command", "node_rank", "nnodes", "host")
        out = {k: status.get(k) for k in keep if k in status}
        out["ranks"] = [
            {k: r.get(k) for k in ("rank", "local_rank", "pid", "state", "exitcode", "signal",
                                   "restart_count", "exit_cause", "input_wait", "step",
                                   "last_output_age_s", "node_rank", "host") if k in r}
            for r in status.get("ranks") or [] if isinstance(r, dict)
        ]
        return out

    def ranks_at_prompt(self, run: str | None = None) -> dict[str, Any]:
        _, _, status = self._status(run)
        waiting = [{"rank": r.get("rank"), **r["input_wait"]}
                   for r in status.get("ranks") or []
                   if isinstance(r, dict) and isinstance(r.get("input_wait"), dict)]
        return {"state": status.get("state"), "ranks": waiting}

    def _log_path(self, run: str | None, rank: int, stream: str) -> tuple[str, str]:
        from .logs import current_log

        if stream not in ("stdout", "stderr"):
            raise ToolRefused(f"stream {stream!r}: say stdout or stderr")
        entry, _, status = self._status(run)
        (local,) = self._local((int(rank),), status)
        return entry.run_dir, current_log(entry.run_dir, status, local, stream)

    def read_logs(self, rank: int = 0, stream: str = "stdout", cursor: int | None = None,
                  max_lines: int = 200, run: str | None = None) -> dict[str, Any]:
        """Lines of a rank's current log from byte ``cursor`` (None: its last ``max_lines``);
        ``next_cursor`` reads on from where this answer ends."""
        _, path = self._log_path(run, rank, stream)
        max_lines = max(1, min(int(max_lines), 5000))
        try:
            size = os.path.getsize(path)
        except OSError:
            return {"path": path, "lines": [], "next_cursor": 0, "size": 0,
                    "note": "no such file yet (the rank may not have written)"}
        tail = cursor is None
        start = max(0, size - READ_BYTES) if tail else max(0, min(int(cursor), size))
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(READ_BYTES)
        if tail and start > 0:
            data = data[data.find(b"\n") + 1:]  # from a line's start
            start = size - len(data)
        end = data.rfind(b"\n") + 1 if len(data) == READ_BYTES else len(data)
        body = data[:end] if end > 0 else data
        raw = body.split(b"\n")
        if raw and not raw[-1]:
            raw.pop()  # the end of the last line, not a line
        if tail:
            raw = raw[-max_lines:]
            next_cursor = start + len(body)
        else:
            raw = raw[:max_lines]
            next_cursor = min(start + sum(len(x) + 1 for x in raw), start + len(body))
        lines = [x.decode("utf-8", "replace").rstrip("\r") for x in raw]
        return {"path": path, "lines": lines, "next_cursor": next_cursor, "size": size,
                "eof": next_cursor >= size}

    def search_logs(self, pattern: str, ranks: list[int] | None = None,
                    run: str | None = None) -> dict[str, Any]:
        from .logs import current_log

        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise ToolRefused(f"pattern {pattern!r} is not a regular expression: {e}") from None
        entry, _, status = self._status(run)
        every = [int(r["rank"]) for r in status.get("ranks") or [] if isinstance(r, dict)]
        chosen = tuple(every if ranks is None else ranks)
        local = self._local(chosen, status)
        matches: list[dict[str, Any]] = []
        more = False
        for rank, here in zip(chosen, local, strict=True):
            for stream in ("stdout", "stderr"):
                path = current_log(entry.run_dir, status, here, stream)
                for number, line in _lines_of(path):
                    if rx.search(line):
                        if len(matches) >= SEARCH_MATCHES:
                            more = True
                            break
                        matches.append({"rank": rank, "stream": stream, "line": number,
                                        "text": line})
        return {"matches": matches, "more": more}

    def stacks(self, ranks: list[int] | None = None, run: str | None = None) -> dict[str, Any]:
        from ...engine.handle import DumpStacks
        from .forensics import _stack_text

        entry, _, status = self._status(run)
        local = self._local(tuple(ranks), status) if ranks is not None else None
        handle = self._connect(self._entry(run, running=True))
        try:
            result = handle.execute(DumpStacks(local, native=False, nonblocking=True))
        finally:
            handle.detach()
        if not result.ok or result.data is None:
            raise ToolRefused(result.message or "no stack dump")
        data = result.data
        groups = [{k: g.get(k) for k in ("ranks", "odd", "summary", "error", "lines")}
                  for g in data.get("groups") or []]
        return {"merged": _stack_text(data), "groups": groups, "path": data.get("path"),
                "problem": data.get("problem")}

    def collectives(self, run: str | None = None) -> dict[str, Any]:
        from ...engine.control.status import current_attempt
        from ...engine.forensics.collectives_run import read_run, text_of

        entry = self._entry(run)
        status = registry.entry_state(entry)[1]
        data, source = read_run(entry.run_dir, current_attempt(entry.run_dir, status) or 0)
        return {"text": text_of(data), "source": source, **data}

    def bundle(self, run: str | None = None, output: str | None = None) -> dict[str, Any]:
        from ...engine.entry.bundle import make_bundle

        entry = self._entry(run)
        try:
            made = make_bundle(entry.run_dir, output)
        except OSError as e:
            raise ToolRefused(f"cannot write the bundle of {entry.run_dir}: "
                              f"{e.strerror or e}") from None
        return {"path": made.path, "bytes": os.path.getsize(made.path), "files": made.entries,
                "truncated_files": list(made.truncated)}

    def wait_for(self, event: str, timeout: float = 30.0,
                 run: str | None = None) -> dict[str, Any]:
        """Until ``event`` happens (read from status.json, which the supervisor rewrites on
        every change) or ``timeout`` seconds pass."""
        if event not in EVENTS:
            raise ToolRefused(f"event {event!r}: one of {', '.join(EVENTS)}")
        entry = self._entry(run)
        deadline = clock.monotonic() + max(0.0, min(float(timeout), MAX_WAIT_S))
        while True:
            state, status = registry.entry_state(entry)
            found = _happened(event, state, status or {})
            if found is not None:
                return {"event": event, "happened": True, **found, "state": state}
            if state != "running" or clock.monotonic() >= deadline:
                return {"event": event, "happened": False, "state": state,
                        "exitcode": (status or {}).get("exitcode")}
            time.sleep(0.1)

    # -- acting (--allow-control, confirm) -------------------------------------------------

    def send_to_rank(self, rank: int, line: str, confirm: bool = False, timeout: float = 10.0,
                     run: str | None = None) -> dict[str, Any]:
        """``line`` to the rank's stdin; what it printed until its next prompt."""
        from ...engine.entry.ask import ask

        self._guard("send_to_rank", confirm)
        if "\n" in line or "\r" in line:
            raise ToolRefused("one line at a time: the line holds a newline")
        entry, _, status = self._status(run)
        (local,) = self._local((int(rank),), status)
        handle = self._connect(self._entry(run, running=True), control=True)
        try:
            answer = ask(handle, (local,), line, min(float(timeout), MAX_WAIT_S))[local]
        finally:
            handle.detach()
        if answer.refused:
            raise ToolRefused(f"rank {rank}: not sent: {answer.refused}")
        return {"rank": rank, "output": answer.text, "prompt": answer.prompt,
                "at_prompt": answer.back, "timed_out": answer.timed_out,
                "ended": answer.ended, "cut": answer.cut}

    def _act(self, tool: str, confirm: bool, run: str | None, build: Any) -> dict[str, Any]:
        self._guard(tool, confirm)
        entry, _, status = self._status(run)
        handle = self._connect(self._entry(run, running=True), control=True)
        try:
            result = handle.execute(build(status))
        finally:
            handle.detach()
        if not result.ok:
            raise ToolRefused(result.message or f"{tool} refused")
        return {"ok": True, "message": result.message}

    def signal(self, ranks: list[int], signal: str, confirm: bool = False,
               run: str | None = None) -> dict[str, Any]:
        from ...engine.handle import SignalRanks
        from ...engine.names.signals import parse_signal

        try:
            sig = parse_signal(signal)
        except ValueError as e:
            raise ToolRefused(str(e)) from None
        return self._act("signal", confirm, run,
                         lambda st: SignalRanks(self._local(tuple(ranks), st), sig))

    def terminate(self, ranks: list[int] | None = None, confirm: bool = False,
                  timeout_s: float | None = None, run: str | None = None) -> dict[str, Any]:
        from ...engine.handle import TerminateRanks

        return self._act("terminate", confirm, run, lambda st: TerminateRanks(
            None if ranks is None else self._local(tuple(ranks), st), timeout_s=timeout_s))

    def restart(self, rank: int | None = None, confirm: bool = False,
                run: str | None = None) -> dict[str, Any]:
        from ...engine.handle import RestartAll, RestartRank

        return self._act("restart", confirm, run, lambda st: RestartAll() if rank is None
                         else RestartRank(self._local((int(rank),), st)[0]))


def _happened(event: str, state: str, status: dict[str, Any]) -> dict[str, Any] | None:
    ranks = [r for r in status.get("ranks") or [] if isinstance(r, dict)]
    if event == "prompt":
        waiting = [{"rank": r.get("rank"), **r["input_wait"]} for r in ranks
                   if isinstance(r.get("input_wait"), dict)]
        return {"ranks": waiting} if waiting else None
    if event == "failure":
        failed = [{"rank": r.get("rank"), "state": r.get("state"), "exitcode": r.get("exitcode"),
                   "exit_cause": r.get("exit_cause")} for r in ranks
                  if r.get("state") in _FAILED
                  and (r.get("exit_cause") or {}).get("code") != "stopped"]
        if failed or status.get("root_cause"):
            return {"ranks": failed, "root_cause": status.get("root_cause")}
        return None
    if event == "suspect":
        return {"suspect": status["suspect"]} if status.get("suspect") else None
    if state != "running":  # end
        return {"exitcode": status.get("exitcode"), "root_cause": status.get("root_cause"),
                "suspect": status.get("suspect")}
    return None


def _lines_of(path: str) -> Any:
    """(line number from 1, line) of the last ``SEARCH_TAIL_BYTES`` of ``path``."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, a generator's life
    except OSError:
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - SEARCH_TAIL_BYTES)
        number = 0
        if start:
            f.seek(start)
            f.readline()  # from a line's start; numbers count from the cut
        for number, raw in enumerate(f, 1):
            yield number, raw.decode("utf-8", "replace").rstrip("\r\n")
