"""The documents name the tests that show each behaviour: every one they name must exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")


DOCS = ["README.md", "engine/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_test_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    cited = CITED.findall(text)
    assert cited or doc != "engine/README.md"
    missing = []
    for path, name in cited:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []
