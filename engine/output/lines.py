"""Turn the bytes of one rank stream into display lines: whole, decoded, collapsed, capped.

``LineAssembler`` is fed the raw chunks read from one (rank, stream) file, in order, and
returns the complete lines they finish. It never returns a fragment of a line: the text after
the last newline is held as the current line and shown through ``partial`` until its newline
arrives (or ``close()`` ends the stream).

What a line becomes (the file itself is never touched):
- decoded as UTF-8 with an incremental decoder, so a character split across two reads is
  decoded whole; invalid bytes become U+FFFD;
- ``\\r`` redraws (tqdm progress bars) keep only the last frame: ``"a\\rb\\rc\\n"`` gives
  ``"c"``, while ``"\\r\\n"`` is a plain line end;
- longer than ``max_line_chars`` (default 64 Ki characters): cut at the cap, followed by a
  visible marker that counts what was left out (``"…[+N chars]"``). One display line per file
  line, so display line numbers match the file's (and ``engine.logfile.store``'s) line numbers;
- sanitised (``engine.output.sanitize``) unless ``sanitize=False``: SGR colours kept, every other
  control or escape sequence neutralised.

Memory is bounded whatever a rank writes: at most ``max_line_chars`` characters of the current
line are kept (a 100 MB line without a newline costs 64 Ki characters plus a counter), and the
current frame of a progress bar replaces the previous one instead of growing.

Speed: the per-chunk work is C-speed string operations (decode, split, a C-loop safety check);
Python code runs per chunk, not per line, except for the one line that straddles two chunks.

Not thread-safe: one assembler belongs to one reader (the pump thread).
"""

from __future__ import annotations

import codecs
import re
from typing import Final

from .sanitize import bytes_look_safe, safe_line_count, sanitize

__all__ = ["DEFAULT_MAX_LINE_CHARS", "LineAssembler", "cut_marker", "join_blocks"]

DEFAULT_MAX_LINE_CHARS: Final = 65536

_CR_BEFORE_NL: Final = re.compile(r"\r+\n")
_UP_TO_LAST_CR: Final = re.compile(r"(?m)^[^\n]*\r")


def join_blocks(parts: list[bytes | memoryview]) -> bytes:
    """The pieces ``LineAssembler.feed_into`` gave, as one block: no copy for one read that
    ended on a line's end."""
    if len(parts) == 1 and type(parts[0]) is bytes:
        return parts[0]
    return b"".join(parts)


def cut_marker(cut: int) -> str:
    """The visible end of a line cut at the display cap; ``cut`` characters were left out."""
    return f"…[+{cut} chars]"


def collapse_cr(text: str) -> str:
    """Keep the last ``\\r`` frame of every ``\\n``-separated line of ``text``."""
    if "\r" not in text:
        return text
    text = _CR_BEFORE_NL.sub("\n", text)
    if text.endswith("\r"):
        text = text.rstrip("\r")
    if "\r" not in text:
        return text
    return _UP_TO_LAST_CR.sub("", text)


class LineAssembler:
    """Assemble the display lines of one (rank, stream) from the raw chunks of its file.

    Args:
        max_line_chars: display cap of one line (characters); longer lines are cut with a
            marker. Also bounds the memory held for an unterminated line.
        sanitize: neutralise escape sequences (SGR kept). ``False`` passes them raw.
    """

    __slots__ = ("_cap", "_cr", "_cut", "_decoder", "_frame", "_sanitize", "lines_done")

    def __init__(
        self, *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS, sanitize: bool = True
    ) -> None:
        if max_line_chars < 1:
            raise ValueError("max_line_chars must be positive")
        self._cap = max_line_chars
        self._sanitize = sanitize
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._frame = ""
        """Raw text of the current line's current frame, at most ``_cap`` characters."""
        self._cut = 0
        """Characters of the current frame dropped beyond the cap."""
        self._cr = False
        """A ``\\r`` ended the input so far: the next text starts a new frame, or a ``\\n``
        ends the line with the current frame (``\\r\\n``)."""
        self.lines_done = 0
        """Complete lines returned so far: the file line index of the next line."""

    @property
    def partial(self) -> str:
        """The current unterminated line for display ("" if none), as a line would show."""
        if not self._frame and not self._cut:
            return ""
        return self._display(self._frame, self._cut)

    def feed(self, data: bytes) -> list[str]:
        """Take the next chunk of the file; return the lines it completes, in order."""
        block = self._take(data)
        if not block:
            return []
        lines = block.split("\n")
        lines.pop()
        self.lines_done += len(lines)
        return lines

    def feed_bytes(self, data: bytes) -> bytes:
        """Like ``feed``, but the completed lines as one block of UTF-8 bytes, each ending in
        ``\n`` (for a console, which writes bytes anyway); ``lines_done`` tells how many."""
        parts: list[bytes | memoryview] = []
        self.feed_into(data, parts)
        return join_blocks(parts)

    def feed_into(self, data: bytes, parts: list[bytes | memoryview]) -> None:
        """``feed_bytes`` for a reader that joins the blocks of several reads: the completed
        lines are appended to ``parts`` as pieces (the finished straddling line, then a view
        of the chunk), so that the reader's one join is the only copy of the chunk.

        The common chunk (valid UTF-8, nothing to sanitise, no ``\r``, no line over the
        cap) is passed through as the bytes it came as: no decode/encode round trip for the
        lines, only a decode to validate it and to keep the unterminated tail. An ASCII
        chunk (``bytes.isascii``, a word at a time) is valid as it is: the decoder is not fed
        (it holds nothing between whole characters) and only the straddling line and the
        unterminated tail are decoded.
        """
        # Bytes held by the decoder (a character cut by the previous read) would make the
        # chunk's bytes and its text disagree: those chunks take the text path.
        pending = bool(self._decoder.getstate()[0])
        lines = None if pending else safe_line_count(data)
        safe = lines is not None or (not pending and not self._sanitize)
        # A safe chunk holds no \r (a control); an unsanitised one is looked at.
        ascii_ = (
            safe and not self._cr and not self._cut and data.isascii()
            and (lines is not None or b"\r" not in data)
        )
        text = ""
        if not ascii_:
            text = self._decoder.decode(data)
            if not safe or self._cr or self._cut or b"\r" in data or "\ufffd" in text:
                block = self._take_text(text, data, safe)
                if block:
                    self.lines_done += block.count("\n")
                    parts.append(block.encode("utf-8", "surrogatepass"))
                return
        last = data.rfind(b"\n")
        if last < 0:
            self._absorb(data.decode("ascii") if ascii_ else text)
            return
        start = 0
        if self._frame:  # the first line straddles the previous chunk
            start = data.find(b"\n") + 1
            self._absorb(data[: start - 1].decode("ascii") if ascii_ else text[: text.find("\n")])
            parts.append((self._finish() + "\n").encode("utf-8", "surrogatepass"))
        end = last + 1
        self._body(data, start, end, parts)
        self._absorb(data[end:].decode("ascii") if ascii_ else text[text.rfind("\n") + 1 :])
        # The chunk's newlines are its lines (a straddling first line is finished by the
        # first one); counted with the safety check when there was one.
        self.lines_done += lines if lines is not None else data.count(b"\n")

    def _body(self, data: bytes, start: int, end: int, parts: list[bytes | memoryview]) -> None:
        """The chunk's whole lines after the straddling one, ``data[start:end]``, as they came
        (a view: no copy) unless a line is over the cap."""
        if start == end:
            return
        if end - start > self._cap and not self._short_lines(data, end):
            parts.append(self._cap_lines(data[start:end].decode("utf-8")).encode("utf-8"))
        elif start == 0 and end == len(data):
            parts.append(data)
        else:
            parts.append(memoryview(data)[start:end])

    def _take(self, data: bytes) -> str:
        safe = self._sanitize and not self._decoder.getstate()[0] and bytes_look_safe(data)
        return self._take_text(self._decoder.decode(data), data, safe)

    def _take_text(self, text: str, data: bytes, safe: bool) -> str:
        last_nl = text.rfind("\n")
        if last_nl < 0:
            if text:
                self._absorb(text)
            return ""
        head = ""
        start = 0
        if self._frame or self._cr or self._cut:
            # The first line straddles the previous chunk: finish it through the state.
            start = text.find("\n") + 1
            self._absorb(text[: start - 1])
            head = self._finish() + "\n"
        body = text[start : last_nl + 1]
        if body:
            if "\r" in body:
                body = collapse_cr(body)
            if self._sanitize and not safe:
                body = sanitize(body)
            if len(body) > self._cap and not self._short_lines(data, data.rfind(b"\n") + 1):
                body = self._cap_lines(body)
        self._absorb(text[last_nl + 1 :])
        return head + body if head else body

    def _short_lines(self, data: bytes, end: int) -> bool:
        """True if no complete line of ``data[:end]`` can reach the cap (a C-speed test on
        the bytes; ``end`` is just past the chunk's last newline).

        A run of ``cap`` characters without newline spans at least one aligned window of
        ``(cap - 4) // 2`` bytes (UTF-8 needs one byte a character or more; 3 bytes may come
        from the chunk before), so a newline in every window proves every line is shorter.
        The unterminated rest after ``end`` is not looked at: it is the current line, capped
        as it grows (``_absorb``); counting it made every chunk that ends mid-line (nearly
        every read of a busy file) take the slow path that splits the chunk into lines.
        """
        half = (self._cap - 4) // 2
        if half < 1 or end > 64 * half:
            return False
        find = data.find
        return all(find(b"\n", i, min(i + half, end)) >= 0 for i in range(0, end, half))

    def _cap_lines(self, body: str) -> str:
        cap = self._cap
        lines = body.split("\n")
        if max(map(len, lines)) <= cap:
            return body
        return "\n".join(
            [x if len(x) <= cap else x[:cap] + cut_marker(len(x) - cap) for x in lines]
        )

    def close(self) -> list[str]:
        """End of stream: return the unterminated last line as a complete line, if any."""
        self._absorb(self._decoder.decode(b"", True))
        self._decoder.reset()
        if not self._frame and not self._cut:
            self._cr = False
            return []
        self.lines_done += 1
        return [self._finish()]

    def _display(self, frame: str, cut: int) -> str:
        if self._sanitize:
            frame = sanitize(frame)
        return frame + cut_marker(cut) if cut else frame

    def _finish(self) -> str:
        line = self._display(self._frame, self._cut)
        self._frame = ""
        self._cut = 0
        self._cr = False
        return line

    def _absorb(self, seg: str) -> None:
        """Add ``seg`` (text without ``\\n``) to the current line, applying ``\\r`` redraws."""
        if not seg:
            return
        if "\r" not in seg:
            if self._cr:  # text after a lone \r: a new frame
                self._frame, self._cut, self._cr = seg, 0, False
            elif self._cut:
                self._cut += len(seg)
                return
            else:
                self._frame += seg
        else:
            parts = seg.split("\r")
            last = j = len(parts) - 1
            while j >= 0 and not parts[j]:
                j -= 1
            if j < 0:  # only \r: the current frame stays until text or \n follows
                self._cr = True
                return
            if j > 0 or self._cr:
                self._frame, self._cut = parts[j], 0
            elif self._cut:
                self._cut += len(parts[0])
            else:
                self._frame += parts[0]
            self._cr = j < last
        if len(self._frame) > self._cap:
            self._cut += len(self._frame) - self._cap
            self._frame = self._frame[: self._cap]
