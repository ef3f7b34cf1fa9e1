"""What the import contracts do not say about the engine's shape.

The order of the packages, circles and the bans are import-linter contracts in
pyproject.toml, checked by ``tests/test_package_order.py``. What stays here: the engine's top
keeps torch's import paths and the UI contract, not a growing pile of modules (a new concern
gets a room of its own, placed in the contract).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_at_most_sixteen_modules_directly_in_engine() -> None:
    top = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert len(top) <= 16, top
