"""torch's duplicate filters for the output pump: matching lines copied to filtered_*.log.

``DuplicateFilter`` holds one stream's needles, its output file (opened for appending, never
truncated) and the rank prefixes. The pump gives it the complete lines it read from one rank
in one wake-up; lines that contain any needle (plain, case-sensitive substring, as torch's
``duplicate_stdout_filters``) are appended to the file with the rank's prefix in one
``os.write`` (so whole lines only, never fragments), and returned as a batch of the
``filtered_stdout`` / ``filtered_stderr`` stream.

Called on the pump's threads under the pump's lock only.
"""

from __future__ import annotations

import logging
import os
from typing import Collection, Sequence, cast

from ..events import RankOutput, Stream
from .text_batch import Batch, Prefixes, TextBatch, prefix_for

__all__ = ["DuplicateFilter"]

logger = logging.getLogger(__name__)


class DuplicateFilter:
    """One stream's duplicate filter; see the module docstring.

    Args:
        stream: "stdout" or "stderr", the stream whose lines are matched.
        needles: substrings; a line matches if it contains any (``""`` matches every line).
        path: the filtered file, created if missing, appended to.
        prefixes: per-rank prefixes; missing ranks get ``f"[{name}{rank}]:"``.
        name: the default prefix's name.
        ranks: only lines of these ranks (None: every rank).
    """

    def __init__(
        self,
        stream: str,
        needles: Sequence[str],
        path: str,
        prefixes: Prefixes,
        name: str,
        ranks: Collection[int] | None,
    ) -> None:
        self.stream = cast(Stream, "filtered_" + stream)
        self.needles = [n for n in needles if "\n" not in n]
        self.every_line = "" in self.needles
        self.path = path
        self.ranks = None if ranks is None else frozenset(ranks)
        self._prefixes = prefixes
        self._name = name
        self.count = 0
        """Lines written to the file so far (``first_line`` of the next batch)."""
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def applies_to(self, rank: int) -> bool:
        """Whether lines of ``rank`` are filtered."""
        return self.ranks is None or rank in self.ranks

    def match(self, text: str) -> list[str]:
        """Lines of ``text`` (lines ending in ``\\n``) containing a needle, in order.

        One ``str.find`` scan per needle (C speed), not a Python loop over the lines.
        """
        if self.every_line:
            return text.split("\n")[:-1]
        starts: set[int] = set()
        find, rfind = text.find, text.rfind
        for needle in self.needles:
            i = find(needle)
            while i >= 0:
                starts.add(rfind("\n", 0, i) + 1)
                i = find(needle, find("\n", i) + 1)
        return [text[s : find("\n", s)] for s in sorted(starts)]

    def apply(self, rank: int, attempt: int, text: str, as_bytes: bool) -> Batch | None:
        """Write the matching lines of ``text`` to the file; return them as a batch."""
        matched = self.match(text)
        if not matched:
            return None
        prefix = prefix_for(self._prefixes, self._name, rank)
        out = prefix + ("\n" + prefix).join(matched) + "\n"
        data = out.encode("utf-8", "replace")
        try:
            while data:  # complete lines only: the whole batch goes out, retried if short
                data = data[os.write(self.fd, data) :]
        except OSError as e:  # a full disk must not stop the rank streams
            logger.warning("writing %s failed: %s", self.path, e)
        first = self.count
        self.count += len(matched)
        if as_bytes:
            encoded = out.encode("utf-8", "surrogatepass")
            return TextBatch(rank, self.stream, encoded, len(matched), "", attempt, first)
        lines = tuple(prefix + line for line in matched)
        return RankOutput(rank, self.stream, lines, "", attempt, first)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
