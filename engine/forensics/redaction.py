"""Secrets in a command line and in URLs, redacted before a run's record leaves the machine.

A command line carries secrets as flags (``--api-key sk-...``, ``--hf-token=hf_...``,
``--db-password pw``) and as URLs with a password (``postgres://user:pw@host/db``). The
bundle (``engine.entry.bundle``) packs the command in manifest.json and in the record
(events.ndjson's run lines): each goes through ``redact_argv`` first, and every value of an
environment through ``redact_url`` (``engine.forensics.environ``). Then every file packed,
a rank's own logs included, goes through one ``Redactor``: the secrets learnt from the run's
command lines and environments are replaced wherever they stand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final

__all__ = [
    "HIDDEN", "SECRET_FLAG", "Redactor", "asks_secret", "redact_argv", "redact_record_line",
    "redact_url",
]

REDACTED: Final = "<redacted>"

SECRET_FLAG: Final = re.compile(r"--?[\w.-]*(key|token|secret|password|passwd)$",
                                re.IGNORECASE)
"""A flag whose value is a secret: ``--api-key``, ``--hf_token``, ``--password``..."""

HIDDEN: Final = "<hidden: typed at a password prompt>"
"""What is kept and shown of a line sent to a rank that asked for a secret."""

_SECRET_PROMPT: Final = re.compile(
    r"(password|passphrase|passwd|passcode|secret|token|api[ _-]?key|\bpin)\b[^\n:]*:\s*$",
    re.IGNORECASE)


def asks_secret(prompt: str | None) -> bool:
    """Whether a rank's prompt asks for a secret (``getpass``'s ``Password: ``, ``Enter API
    key: ``): with no terminal, getpass reads the pipe, and the line must not be shown or
    kept as typed."""
    return bool(prompt) and _SECRET_PROMPT.search(prompt.rsplit("\n", 1)[-1]) is not None


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


_MIN_SECRET: Final = 4
"""A known secret shorter than this is not searched for in free text (``pw`` would shred the
logs); the flag and URL rules still catch it where it stands as a flag's value or a URL's
password."""

_TEXT_FLAG: Final = re.compile(
    rb"""(--?[\w.-]*(?:key|token|secret|password|passwd))(?![\w-])(=["']?|",[ \t]*"|[ \t]+["']?)"""
    rb"""([^\s"',;)\]}]+)""", re.IGNORECASE)
"""A secret flag and its value in free text or in JSON: ``--password=pw``, ``--api-key sk``,
``"--api-key", "sk"`` (the value stops at a space, a quote or a closing bracket)."""

_TEXT_URL: Final = re.compile(rb"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@\"']*:)([^@\s/\"']+)(@)")


class Redactor:
    """The secrets known of one run, removed from every file that leaves with it.

    It learns them from the run's command lines (``learn_argv``: each secret flag's value,
    each URL's password) and from the ranks' environments (``learn``: the values of the
    variables whose names say secret); ``text`` then replaces each known value wherever it
    stands (a rank that prints its arguments included), and the value of every secret flag
    and every URL's password it sees.
    """

    def __init__(self) -> None:
        self._values: set[bytes] = set()

    def learn(self, values: Iterable[str]) -> None:
        """Values that are secrets wherever they appear."""
        for value in values:
            for password in _URL_PASSWORD.finditer(value):
                self._add(password.group(2))
            self._add(value)

    def learn_argv(self, argv: list[Any]) -> None:
        """The secrets in a command line: each redacted argument's value."""
        for before, after in zip(argv, redact_argv(argv), strict=True):
            if not isinstance(before, str) or before == after:
                continue
            if after == REDACTED:
                self._add(before)
            elif after.endswith("=" + REDACTED):
                self._add(before.partition("=")[2])
            else:  # a URL's password
                for password in _URL_PASSWORD.finditer(before):
                    self._add(password.group(2))

    def _add(self, value: str) -> None:
        data = value.encode("utf-8", "surrogateescape")
        if len(data) >= _MIN_SECRET and REDACTED.encode() not in data:
            self._values.add(data)

    def text(self, data: bytes) -> bytes:
        """``data`` with every known secret, secret flag value and URL password replaced."""
        for value in sorted(self._values, key=len, reverse=True):  # a secret inside another
            data = data.replace(value, REDACTED.encode())
        data = _TEXT_FLAG.sub(lambda m: m.group(1) + m.group(2) + REDACTED.encode(), data)
        return _TEXT_URL.sub(lambda m: m.group(1) + REDACTED.encode() + m.group(3), data)
