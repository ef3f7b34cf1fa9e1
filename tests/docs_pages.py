"""Reading the documentation's Markdown as a reader's browser would: its pages, the headings
an ``#anchor`` may name, the links of its prose, and the ``sh`` blocks marked runnable.

Shared by tests/test_docs.py (links, anchors, the door's length) and
tests/test_docs_runnable.py (the blocks run as written).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = "<!-- runnable -->"
"""The marker: the next fenced block, a ```sh one, is run as written by the tests."""

_FENCE = re.compile(r"^(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    """README.md, every page of docs/, and the package documents beside the code."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found += [ROOT / "engine" / "README.md", *sorted((ROOT / "engine" / "control").glob("*.md"))]
    return found


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of everything outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line.lstrip())
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = ""
            continue
        if m:
            fence = m.group(1)
            continue
        out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = _CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every ``#anchor`` the page's headings give (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose_lines(text):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link and image in the prose, code spans left out (a
    link's text may run over a line break)."""
    numbers = []
    kept = []
    for number, line in prose_lines(text):
        numbers.append(number)
        kept.append(line)
    prose = "\n".join(kept)
    # A code span keeps its newlines, so offsets still count lines.
    prose = _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    return [(numbers[prose.count("\n", 0, m.start())], m.group(1))
            for m in _LINK.finditer(prose)]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The line of the block's opening fence."""
    source: str


def runnable_blocks(page: Path) -> list[Block]:
    """The ```sh blocks the marker names, in page order. A marker followed by anything but a
    ```sh block raises: a block that silently stopped running would prove nothing."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    for i, line in enumerate(lines):
        if line.strip() != RUNNABLE:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or lines[j].strip() != "```sh":
            raise ValueError(f"{page.name}:{i + 1}: {RUNNABLE} is not followed by a ```sh block")
        end = next((k for k in range(j + 1, len(lines)) if lines[k].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{page.name}:{j + 1}: the runnable block is never closed")
        blocks.append(Block(page, j + 1, "\n".join(lines[j + 1:end]) + "\n"))
    return blocks
