"""README.md is the door and docs/ the house: the door stays short, and every relative link
and ``#anchor`` of README.md, docs/ and the package documents resolves (images included: a
screenshot named is a screenshot there). Files only: no process starts here."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from .docs_pages import ROOT, anchors, links, pages, runnable_blocks, slug

README_MAX_LINES = 200


def test_the_readme_is_a_door_of_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move text to docs/"


def test_every_docs_page_is_listed_in_the_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    named = {target for _, target in links(index)}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
               if p.name != "README.md" and p.name not in named]
    assert missing == [], f"docs/README.md does not list {missing}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    text = page.read_text()
    broken = []
    for line, target in links(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.name}:{line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(f"{page.name}:{line}: {target} (no heading gives #{anchor})")
        elif not str(dest).startswith(str(ROOT)):
            broken.append(f"{page.name}:{line}: {target} (outside the repository)")
    assert broken == []


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Quick start", "quick-start"),
    ("In a browser: `rankvisor serve`", "in-a-browser-rankvisor-serve"),
    ("On paper: 1,000 nodes", "on-paper-1000-nodes"),
    ("torchrun's flags, and rankvisor's own", "torchruns-flags-and-rankvisors-own"),
    ("The engine: a drop-in for torch.distributed.elastic.multiprocessing",
     "the-engine-a-drop-in-for-torchdistributedelasticmultiprocessing"),
    ("`rankvisor run`", "rankvisor-run"),
    ("A rank's `stdin_log`", "a-ranks-stdin_log"),
])
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor() -> None:
    assert anchors("# A\n## B\n## B\n```sh\n# C\n```\n") == {"a", "b", "b-1"}


def test_links_in_code_are_not_links_and_a_link_may_span_lines() -> None:
    text = ("[one](a.md) `[two](b.md)`\n```\n[three](c.md)\n```\n![four](d.svg) [five\n"
            "six](e.md#x)\n")
    assert links(text) == [(1, "a.md"), (5, "d.svg"), (5, "e.md#x")]


def test_a_marker_without_its_sh_block_is_an_error(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("<!-- runnable -->\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="not followed by a ```sh block"):
        runnable_blocks(page)
    page.write_text("<!-- runnable -->\n\n```sh\necho hi\n```\n")
    (block,) = runnable_blocks(page)
    assert (block.line, block.source) == (3, "echo hi\n")


def test_every_screenshot_is_shown_somewhere() -> None:
    """make_screenshots.py draws each scene for a reader: one nobody shows is stale."""
    shown = {(page.parent / target).resolve() for page in pages()
             for _, target in links(page.read_text()) if target.endswith(".svg")}
    unshown = [p.name for p in sorted((ROOT / "screenshots").glob("*.svg")) if p not in shown]
    assert unshown == []
