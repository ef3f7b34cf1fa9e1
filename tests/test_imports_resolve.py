"""Every import of our own modules names one that exists, lazy imports inside functions too.

A module moved to another room leaves behind the imports that only run when a function is
called (``from .arrival import ...`` in a reader nobody imports at start): import-linter
draws the graph from the names and does not import them, and the suite would find the
broken one only where a test calls that function. Here each such import is resolved.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"engine": "rankvisor.engine", "tui": "rankvisor.tui"}


def _own_imports() -> list[tuple[str, int, str, tuple[str, ...]]]:
    """(file, line, module, names) of every ``from X import ...`` of ours, anywhere."""
    found = []
    for folder, package_name in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            module = ".".join((package_name, *parts)).removesuffix(".__init__")
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").startswith("rankvisor."):
                    target = node.module or ""
                else:
                    continue
                rel = str(path.relative_to(ROOT))
                found.append((rel, node.lineno, target, tuple(a.name for a in node.names)))
    return found


def test_every_import_of_ours_resolves() -> None:
    broken = []
    for where, line, target, names in _own_imports():
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            broken.append(f"{where}:{line}: {target}: {e}")
            continue
        for name in names:
            if name == "*" or hasattr(module, name):
                continue
            try:
                importlib.import_module(f"{target}.{name}")
            except ImportError:
                broken.append(f"{where}:{line}: {target} has no {name}")
    if broken:
        pytest.fail("imports that name nothing:\n" + "\n".join(broken))
