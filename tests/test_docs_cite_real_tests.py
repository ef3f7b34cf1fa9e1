"""The READMEs name the tests that show each behaviour: every one they name must exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")


@pytest.mark.parametrize("doc", ["README.md", "engine/README.md"])
def test_every_cited_test_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    cited = CITED.findall(text)
    assert cited or doc == "README.md"
    missing = []
    for path, name in cited:
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []
