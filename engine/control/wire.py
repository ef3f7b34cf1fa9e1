"""The control protocol's messages: one JSON object per line, and the codecs of every type.

A supervisor process and its viewers exchange newline-delimited JSON (``PROTOCOL.md`` beside
this file describes each message). JSON because every language and ``jq`` can read it, it is
in the standard library (C-accelerated both ways), and measured below it is fast enough for
the volume, which is rank output.

``encode_*`` return one line as ``bytes`` (with its ``\\n``); ``decode_message`` turns one line
back into a dict, and the ``*_from_wire`` functions turn its parts back into the engine's own
types: tuples stay tuples, ``dict[int, ...]`` keys stay ints, ``RankState`` travels by name.
Decoding ignores fields it does not know (a newer peer may add some) and fills fields it does
not get with their defaults; a message type it does not know is the caller's to ignore.

Two values cannot travel as they are:

- ``RunProcsResult.return_values`` holds arbitrary objects: each travels as its ``repr()``
  string (None stays None), so a viewer reads ``{0: "'ok'", 1: "None"}``-like text, never the
  object itself.
- ``ProcessFailure`` reads the rank's error file when it is built; a viewer must show what the
  supervisor saw, not what the file says now (it may be gone or rewritten by a restart). It is
  rebuilt without running its ``__post_init__``, every field set from the wire.

``RankOutput`` is the volume (64 ranks x 10k lines/s = 640k lines/s): it has a compact form
of its own, built by hand on the hot path, its lines joined with ``\\n`` into one JSON string
(a line never holds a newline). Measured with ``python -m rankvisor.engine.control.wire``
(batches of 100 lines of 60 characters, encode to bytes and decode back to an equal
``RankOutput``; a 2-core machine shared with other jobs): encode 2.4-2.5 M lines/s, decode
2.1-2.3 M lines/s, both together 1.1-1.2 M lines/s, 64 bytes a line on the wire. So at 640k
lines/s the supervisor spends about a quarter of a core encoding for any number of viewers
(each event is encoded once), and each viewer about as much decoding.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import socket
import struct
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any, Final, Literal, Union

from .. import clock
from ..errors import ProcessFailure
from ..events import (
    AttemptStarted,
    EscalationFinished,
    EscalationScheduled,
    Event,
    InputWait,
    RankDebuggerWait,
    RankInput,
    RankInputWait,
    RankOutput,
    RankRestarted,
    RanksSignalled,
    RankStateChanged,
    RankStats,
    RunFinished,
    SupervisorNotice,
    TimerExpired,
)
from ..forensics.exit_cause import ExitCause
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
)
from ..output.text_batch import LineBlock
from ..result import RunProcsResult
from ..states import RankState

__all__ = [
    "EVENT_TYPES",
    "COMMAND_TYPES",
    "PROTOCOL_VERSION",
    "WireError",
    "command_from_wire",
    "command_to_wire",
    "decode_message",
    "encode_command",
    "encode_error",
    "encode_event",
    "encode_message",
    "encode_result",
    "encode_skipped",
    "event_from_wire",
    "event_to_wire",
    "failure_from_wire",
    "failure_to_wire",
    "is_lifecycle",
    "package_version",
    "result_from_wire",
    "run_info_from_wire",
    "run_info_to_wire",
    "run_result_from_wire",
    "run_result_to_wire",
]

PROTOCOL_VERSION: Final = 1
"""Raised whenever a message changes meaning; adding a field or a message type does not."""

EVENT_TYPES: Final[dict[str, type]] = {
    cls.__name__: cls
    for cls in (
        RankOutput, RankStateChanged, RankStats, EscalationScheduled, EscalationFinished,
        RankRestarted, AttemptStarted, TimerExpired, RunFinished, SupervisorNotice,
        RanksSignalled, RankInputWait, RankInput, RankDebuggerWait,
    )
}
COMMAND_TYPES: Final[dict[str, type]] = {
    cls.__name__: cls
    for cls in (
        SignalRanks, TerminateRanks, KillRanks, RestartRank, RestartAll, DumpStacks, SendInput,
        CloseInput, ReadCollectives,
    )
}
STREAMS: Final = ("stdout", "stderr", "filtered_stdout", "filtered_stderr")
_STREAM_NO: Final = {name: i for i, name in enumerate(STREAMS)}

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
_dumps_utf8 = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads


class WireError(ValueError):
    """A line that is no message of this protocol (not JSON, not an object, a bad field)."""


def package_version() -> str:
    """This package's version, told to the peer in hello / welcome (for the mismatch line)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankvisor")
    except PackageNotFoundError:
        return "(not installed)"


def is_lifecycle(event: object) -> bool:
    """Events a late viewer must replay: all but output batches and stats samples."""
    return not isinstance(event, (RankOutput, RankStats))


# -- framing -------------------------------------------------------------------------------


def read_line(
    sock: socket.socket, buf: bytearray, *, max_line: int | None = None, chunk: int = 1 << 20,
    deadline: float | None = None,
) -> bytes | None:
    """The next message line from ``sock`` (``buf`` keeps what follows it).

    None at the end of the stream, on a read timeout, or (with ``max_line``) when more than
    that many bytes came without a newline: no message of ours is that long. ``deadline``
    (``clock.monotonic()``) bounds the whole line, not each read: a peer that sends a byte
    now and then does not stretch it.
    """
    while True:
        end = buf.find(b"\n")
        if end >= 0:
            line = bytes(buf[: end + 1])
            del buf[: end + 1]
            return line
        if max_line is not None and len(buf) > max_line:
            return None
        if deadline is not None:
            left = deadline - clock.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
        try:
            data = sock.recv(chunk)
        except (TimeoutError, socket.timeout):
            return None
        if not data:
            return None
        buf += data


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The pid, uid and gid of the process at the other end of a Unix socket."""
    pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return pid, uid, gid


_PEERCRED: Final = struct.Struct("3i")


def encode_message(message: dict[str, Any]) -> bytes:
    """One message as one line of bytes."""
    return (_dumps(message) + "\n").encode()


def decode_message(line: bytes | str) -> dict[str, Any]:
    """One line back into a message dict with a string ``t`` (its type)."""
    if isinstance(line, (bytes, bytearray)):
        try:
            line = bytes(line).decode("utf-8")
        except UnicodeDecodeError:
            raise WireError("not a JSON line: the bytes are not UTF-8 text") from None
    try:
        message = _loads(line)
    except ValueError as e:
        raise WireError(f"not a JSON line: {e}") from None
    except RecursionError:
        raise WireError("not a JSON line: nested too deep") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise WireError("not a message: a JSON object with a string 't' was expected")
    return message


# -- generic codec, driven by the dataclasses' type hints -----------------------------------

_HINT_NS: Final = {
    "ExitCause": ExitCause,
    "InputWait": InputWait,
    "ProcessFailure": ProcessFailure,
    "RunProcsResult": RunProcsResult,
    "RankState": RankState,
    "RankInfo": RankInfo,
}


def _fields(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, type hint, has a default) of each init field of a dataclass, cached."""
    cached = _FIELDS.get(cls)
    if cached is None:
        module = sys.modules[cls.__module__]
        hints = typing.get_type_hints(cls, {**vars(module), **_HINT_NS})
        cached = [
            (
                f.name,
                hints[f.name],
                f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
            if f.init
        ]
        _FIELDS[cls] = cached
    return cached


_FIELDS: dict[type, list[tuple[str, Any, bool]]] = {}


def _to_wire(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (tuple, list)):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_wire(v) for k, v in value.items()}
    if isinstance(value, ProcessFailure):
        return failure_to_wire(value)
    if isinstance(value, RunProcsResult):
        return run_result_to_wire(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _to_wire(getattr(value, name)) for name, _, _ in _fields(type(value))}
    raise WireError(f"cannot carry a {type(value).__name__}")


def _from_wire(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        if value is None:
            return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _from_wire(args[0], value) if len(args) == 1 else value
    if origin is tuple:
        if not isinstance(value, list):
            raise WireError(f"a list was expected, not {value!r}")
        item_hint = typing.get_args(hint)[0]
        return tuple(_from_wire(item_hint, v) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise WireError(f"an object was expected, not {value!r}")
        key, item = typing.get_args(hint)
        return {_from_wire(key, k): _from_wire(item, v) for k, v in value.items()}
    if origin is Literal:
        return value
    if hint is int:
        if isinstance(value, str):  # a JSON object key
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise WireError(f"an integer was expected, not {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise WireError(f"a number was expected, not {value!r}")
        return float(value)
    if hint is RankState:
        try:
            return RankState[value]
        except KeyError:
            raise WireError(f"unknown rank state {value!r}") from None
    if hint is ProcessFailure:
        return failure_from_wire(value)
    if hint is RunProcsResult:
        return run_result_from_wire(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_from_wire(hint, value)
    return value  # str, bool, Any: as JSON gave it


def _dataclass_from_wire(cls: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise WireError(f"an object was expected for {cls.__name__}, not {data!r}")
    kwargs = {}
    for name, hint, has_default in _fields(cls):
        if name in data:
            try:
                kwargs[name] = _from_wire(hint, data[name])
            except (TypeError, ValueError) as e:
                raise WireError(f"{cls.__name__}.{name}: {e}") from None
        elif not has_default:
            raise WireError(f"{cls.__name__} without its field {name!r}")
    return cls(**kwargs)  # fields the peer added and we do not know are left out


# -- ProcessFailure and RunProcsResult ------------------------------------------------------

_FAILURE_FIELDS: Final = (
    "local_rank", "pid", "exitcode", "error_file", "error_file_data", "message", "timestamp",
    "exit_time_ns", "caused_by_us", "error_file_problem",
)


def failure_to_wire(failure: ProcessFailure) -> dict[str, Any]:
    """Every field of a failure, the error file's content included (as the supervisor saw it)."""
    out = {name: getattr(failure, name) for name in _FAILURE_FIELDS}
    out["file_timestamp"] = failure._file_timestamp
    return out


def failure_from_wire(data: Any) -> ProcessFailure:
    """A ``ProcessFailure`` with the fields given, WITHOUT reading its error file again."""
    if not isinstance(data, dict):
        raise WireError(f"a failure object was expected, not {data!r}")
    failure = object.__new__(ProcessFailure)  # no __post_init__: the file is not read
    for name in ("local_rank", "pid", "exitcode"):
        setattr(failure, name, _from_wire(int, data.get(name, 0)))
    failure.error_file = str(data.get("error_file", ""))
    file_data = data.get("error_file_data")
    failure.error_file_data = file_data if isinstance(file_data, dict) else {}
    message = data.get("message", "")
    # str, or torch's dict shape {"message", "extraInfo"}, as the error file had it
    failure.message = message if isinstance(message, (str, dict)) else str(message)  # type: ignore[assignment]
    failure.timestamp = _from_wire(int, data.get("timestamp", 0))
    failure.exit_time_ns = _from_wire(int | None, data.get("exit_time_ns"))
    failure.caused_by_us = bool(data.get("caused_by_us", False))
    problem = data.get("error_file_problem")
    failure.error_file_problem = None if problem is None else str(problem)
    failure._file_timestamp = _from_wire(int | None, data.get("file_timestamp"))
    return failure


def run_result_to_wire(result: RunProcsResult) -> dict[str, Any]:
    """A run's result; each return value travels as its ``repr()`` (None stays None)."""
    return {
        "return_values": {
            str(k): None if v is None else repr(v) for k, v in result.return_values.items()
        },
        "failures": {str(k): failure_to_wire(v) for k, v in result.failures.items()},
        "stdouts": {str(k): v for k, v in result.stdouts.items()},
        "stderrs": {str(k): v for k, v in result.stderrs.items()},
        "stopped": {str(k): failure_to_wire(v) for k, v in result.stopped.items()},
    }


def run_result_from_wire(data: Any) -> RunProcsResult:
    """A ``RunProcsResult`` whose ``return_values`` are the ``repr()`` strings (or None)."""
    if not isinstance(data, dict):
        raise WireError(f"a result object was expected, not {data!r}")

    def table(key: str, convert: Any) -> dict[int, Any]:
        raw = data.get(key) or {}
        if not isinstance(raw, dict):
            raise WireError(f"RunProcsResult.{key}: an object was expected")
        return {int(k): convert(v) for k, v in raw.items()}

    return RunProcsResult(
        return_values=table("return_values", lambda v: None if v is None else str(v)),
        failures=table("failures", failure_from_wire),
        stdouts=table("stdouts", str),
        stderrs=table("stderrs", str),
        stopped=table("stopped", failure_from_wire),
    )


# -- events --------------------------------------------------------------------------------


def _joined(lines: Sequence[str]) -> str:
    """A batch's lines joined by newlines; a block the pump read is one already."""
    if type(lines) is LineBlock:
        return lines.text[:-1]
    return "\n".join(lines)


def event_to_wire(event: Event) -> dict[str, Any]:
    """An event as a message dict (``t`` "o" for output batches, else "ev" with its type)."""
    if type(event) is RankOutput:
        out: dict[str, Any] = {
            "t": "o", "r": event.rank, "s": _STREAM_NO[event.stream], "f": event.first_line,
        }
        if event.lines:
            out["l"] = _joined(event.lines)
        if event.partial:
            out["p"] = event.partial
        if event.attempt:
            out["a"] = event.attempt
        return out
    name = type(event).__name__
    if name not in EVENT_TYPES:
        raise WireError(f"not an event: {event!r}")
    # The fields apart ("e"): an event's own "t" (its time) must not meet the message's.
    return {"t": "ev", "type": name, "e": _to_wire(event)}


def encode_event(event: Event) -> bytes:
    """One event as one line (output batches take the compact form)."""
    if type(event) is RankOutput:
        # The hot path (every batch of every rank): no dict, one JSON string for the lines.
        parts = ['{"t":"o","r":', str(event.rank), ',"s":', str(_STREAM_NO[event.stream]),
                 ',"f":', str(event.first_line)]
        if event.lines:
            parts += [',"l":', _dumps_utf8(_joined(event.lines))]
        if event.partial:
            parts += [',"p":', _dumps_utf8(event.partial)]
        if event.attempt:
            parts += [',"a":', str(event.attempt)]
        if event.end_byte >= 0:
            parts += [',"b":', str(event.start_byte), ',"e":', str(event.end_byte)]
        parts.append("}\n")
        try:
            return "".join(parts).encode()
        except UnicodeEncodeError:  # a lone surrogate: JSON's \u escapes carry it
            return encode_message(event_to_wire(event))
    return encode_message(event_to_wire(event))


def event_from_wire(message: dict[str, Any]) -> Event | None:
    """The event a message carries; None for an event type this version does not know."""
    if message.get("t") == "o":
        try:
            text = message.get("l")
            return RankOutput(
                rank=int(message["r"]),
                stream=STREAMS[message["s"]],  # type: ignore[arg-type]
                lines=() if text is None else tuple(text.split("\n")),
                partial=message.get("p", ""),
                attempt=int(message.get("a", 0)),
                first_line=int(message["f"]),
                start_byte=int(message.get("b", -1)),
                end_byte=int(message.get("e", -1)),
            )
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise WireError(f"bad output batch: {e!r}") from None
    cls = EVENT_TYPES.get(message.get("type", ""))
    if cls is None:
        return None
    event: Event = _dataclass_from_wire(cls, message.get("e"))
    return event


# -- commands, results, snapshots -----------------------------------------------------------


def command_to_wire(command: Command) -> dict[str, Any]:
    name = type(command).__name__
    if name not in COMMAND_TYPES:
        raise WireError(f"not a command: {command!r}")
    data: dict[str, Any] = _to_wire(command)
    data["type"] = name
    return data


def command_from_wire(data: Any) -> Command:
    """The command of a "command" message; WireError for an unknown or malformed one."""
    if not isinstance(data, dict):
        raise WireError(f"a command object was expected, not {data!r}")
    cls = COMMAND_TYPES.get(data.get("type", ""))
    if cls is None:
        raise WireError(f"unknown command {data.get('type')!r}")
    command: Command = _dataclass_from_wire(cls, data)
    return command


def encode_command(request_id: int, command: Command) -> bytes:
    return encode_message({"t": "command", "id": request_id, "command": command_to_wire(command)})


def encode_result(request_id: Any, result: CommandResult) -> bytes:
    """A "result" line; ``data`` only when the command handed some back (a stack dump)."""
    message: dict[str, Any] = {"t": "result", "id": request_id, "ok": result.ok,
                               "message": result.message}
    if result.data is not None:
        message["data"] = result.data
    return encode_message(message)


def result_from_wire(message: dict[str, Any]) -> CommandResult:
    data = message.get("data")
    return CommandResult(bool(message.get("ok", False)), str(message.get("message", "")),
                         data if isinstance(data, dict) else None)


def run_info_to_wire(info: RunInfo) -> dict[str, Any]:
    data: dict[str, Any] = _to_wire(info)
    return data


def run_info_from_wire(data: Any) -> RunInfo:
    info: RunInfo = _dataclass_from_wire(RunInfo, data)
    return info


def encode_skipped(rank: int, stream: str, attempt: int, first_line: int, count: int) -> bytes:
    """The "skipped" marker: these lines were dropped for this client; read them from the file."""
    return encode_message({"t": "skipped", "rank": rank, "stream": stream, "attempt": attempt,
                           "first_line": first_line, "count": count})


def encode_error(message: str) -> bytes:
    """The one line a server sends before it closes a connection it refuses (frozen shape)."""
    return encode_message({"t": "error", "protocol": PROTOCOL_VERSION,
                           "version": package_version(), "message": message})


def _bench() -> None:
    """Encode + decode rate of output batches (``python -m rankvisor.engine.control.wire``)."""

    batches = [
        RankOutput(r % 64, "stdout", tuple(f"rank {r} step {i} loss=0.123 lr=1e-4 " + "x" * 25
                                           for i in range(100)), first_line=r * 100)
        for r in range(2000)
    ]
    lines = sum(len(b.lines) for b in batches)
    t0 = clock.monotonic()
    encoded = [encode_event(b) for b in batches]
    t1 = clock.monotonic()
    decoded = [event_from_wire(decode_message(x)) for x in encoded]
    t2 = clock.monotonic()
    assert decoded == batches
    print(f"encode {lines / (t1 - t0) / 1e6:.2f} M lines/s, decode {lines / (t2 - t1) / 1e6:.2f} "
          f"M lines/s, both {lines / (t2 - t0) / 1e6:.2f} M lines/s "
          f"({sum(map(len, encoded)) / lines:.0f} bytes a line on the wire)")
    t0 = clock.monotonic()
    per_line = [_dumps({"t": "o", "r": b.rank, "l": list(b.lines)}).encode() for b in batches]
    back = [_loads(x) for x in per_line]
    t1 = clock.monotonic()
    assert len(back) == len(batches)
    print(f"one JSON string per line instead: {lines / (t1 - t0) / 1e6:.2f} M lines/s")


if __name__ == "__main__":
    _bench()
