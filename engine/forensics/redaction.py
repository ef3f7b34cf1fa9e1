"""Secrets in a command line and in URLs, redacted before a run's record leaves the machine.

A command line carries secrets as flags (``--api-key sk-...``, ``--hf-token=hf_...``,
``--db-password pw``) and as URLs with a password (``postgres://user:pw@host/db``). The
bundle (``engine.entry.bundle``) packs the command in manifest.json and in the record
(events.ndjson's run lines): each goes through ``redact_argv`` first, and every value of an
environment through ``redact_url`` (``engine.forensics.environ``). A rank's own log files are
packed as they are: what a rank prints is its own (the README says so).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["SECRET_FLAG", "redact_argv", "redact_record_line", "redact_url"]

REDACTED: Final = "<redacted>"

SECRET_FLAG: Final = re.compile(r"--?[\w.-]*(key|token|secret|password|passwd)$",
                                re.IGNORECASE)
"""A flag whose value is a secret: ``--api-key``, ``--hf_token``, ``--password``..."""

_URL_PASSWORD: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)([^@\s/]+)(@)")


def redact_url(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` replaced."""
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)


def redact_argv(argv: list[Any]) -> list[Any]:
    """``argv`` with the value of each secret flag (``--x-key V``, ``--x-key=V``) and each
    URL's password replaced by ``<redacted>``; anything that is not a string is kept."""
    out: list[Any] = []
    secret_next = False
    for arg in argv:
        if not isinstance(arg, str):
            out.append(arg)
            secret_next = False
            continue
        if secret_next and not arg.startswith("--"):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        name, eq, _value = arg.partition("=")
        if SECRET_FLAG.match(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                secret_next = True
            continue
        out.append(redact_url(arg))
    return out


def redact_record_line(line: bytes) -> bytes:
    """One line of events.ndjson with the command of a ``run`` line redacted (other lines,
    and lines that do not parse, as they are)."""
    if b'"t":"run"' not in line[:32]:
        return line
    try:
        message = json.loads(line)
        run = message["run"]
        run["command"] = redact_argv(list(run["command"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        return line
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()
