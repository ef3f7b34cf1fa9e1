"""Reading and writing error.json: torch's schema, written atomically, read without ever raising.

The two shapes torch reads (and so do we)::

    {"message": {"message": "<Type>: <text>",
                 "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<int seconds>"}}}
    {"message": "<text>", "timestamp": <int seconds>}          # the "new" (MAST) shape

A rank can be killed while writing, and a user can put anything in the file, so reading
returns a reason instead of raising (torch raises), and writing goes to a temporary file in the
same directory that is then renamed over the target: a reader sees the whole file or none.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final, Optional, Union

from ..rundir.atomic import write_atomic
from ..rundir.regular_file import NotRegular, TooBig, read_regular

__all__ = [
    "MAX_ERROR_FILE_BYTES",
    "MAX_TIMESTAMP",
    "ErrorFileContent",
    "read_error_file",
    "usable_timestamp",
    "write_error_file",
]

MAX_ERROR_FILE_BYTES: Final = 8 * 1024 * 1024
"""Larger files are not parsed: a real error.json holds one traceback (kilobytes)."""

MAX_TIMESTAMP: Final = 253_402_300_799
"""9999-12-31 23:59:59 UTC: the last second ``datetime`` can show; later ones are not times."""

JSON = dict[str, Any]


class ErrorFileContent:
    """What could be taken from an error file.

    Attributes:
        data: the decoded JSON object, or None when the file could not be used.
        message: ``data["message"]`` (a ``str`` or a ``dict``, as in torch), or None.
        timestamp: seconds since the epoch from the file, or None when absent or invalid.
        problem: why the file could not be used, in words; None when it could.
    """

    __slots__ = ("data", "message", "timestamp", "problem")

    def __init__(
        self,
        data: Optional[JSON] = None,
        message: Union[str, JSON, None] = None,
        timestamp: Optional[int] = None,
        problem: Optional[str] = None,
    ) -> None:
        self.data = data
        self.message = message
        self.timestamp = timestamp
        self.problem = problem


def read_error_file(path: str, max_bytes: int = MAX_ERROR_FILE_BYTES) -> ErrorFileContent:
    """Read an error.json in either of torch's shapes.

    Never raises for bad content: an empty, truncated, non-JSON, non-object, too large or
    unreadable file gives ``problem`` set and ``data`` None. A valid object without a usable
    timestamp keeps its message and gets ``timestamp`` None (torch would raise, or use 0).

    Args:
        path: the file.
        max_bytes: files larger than this are not parsed.
    """
    try:
        raw = read_regular(path, max_bytes)
    except TooBig:
        return ErrorFileContent(problem=f"is larger than {max_bytes} bytes")
    except NotRegular as e:
        return ErrorFileContent(problem=str(e))
    except OSError as e:
        return ErrorFileContent(problem=f"cannot be read ({type(e).__name__}: {e.strerror})")
    if len(raw) > max_bytes:
        return ErrorFileContent(problem=f"is larger than {max_bytes} bytes")
    if not raw.strip():
        return ErrorFileContent(problem="is empty")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return ErrorFileContent(problem=f"is not valid JSON ({_one_line(e)})")
    if not isinstance(data, dict):
        return ErrorFileContent(problem=f"holds a JSON {type(data).__name__}, not an object")
    if "message" not in data:
        return ErrorFileContent(problem='has no "message" field')
    message = data["message"]
    if isinstance(message, str):
        raw_ts = data.get("timestamp")
    elif isinstance(message, dict):
        extra = message.get("extraInfo")
        raw_ts = extra.get("timestamp") if isinstance(extra, dict) else None
    else:
        return ErrorFileContent(
            problem=f'has a "message" of type {type(message).__name__}, not text or an object'
        )
    return ErrorFileContent(data=data, message=message, timestamp=usable_timestamp(raw_ts))


def write_error_file(path: str, data: JSON) -> None:
    """Write ``data`` as one line of JSON (torch's bytes), atomically.

    Raises:
        OSError: the directory is missing or not writable (the temporary file is removed).
    """
    # 0o666 and the umask give the same mode as torch's open(path, "w").
    write_atomic(path, json.dumps(data).encode(), 0o666)


def usable_timestamp(value: object) -> Optional[int]:
    """Whole seconds from an error file's timestamp, or None when it is not a usable time.

    Accepts an int, a finite float or a decimal string (torch writes a string), inside
    0..MAX_TIMESTAMP. Infinity, NaN, 1e20, negative or 23-digit values give None: the caller
    uses the exit time instead, so no odd value can raise later (formatting, ordering).
    """
    if isinstance(value, bool):
        return None
    seconds: Optional[int] = None
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, float):
        seconds = int(value) if math.isfinite(value) else None
    elif isinstance(value, str):
        text = value.strip()
        if 0 < len(text) <= 20:  # longer is no time, and int() of a huge string is slow
            try:
                seconds = int(text)
            except ValueError:
                seconds = None
    if seconds is None or not 0 <= seconds <= MAX_TIMESTAMP:
        return None
    return seconds


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:200]
