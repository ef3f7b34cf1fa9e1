"""The UI never spawns, signals or inspects a process itself: every action is a command."""

from __future__ import annotations

import ast
from pathlib import Path

TUI = Path(__file__).resolve().parents[2] / "tui"

BANNED_MODULES = {"subprocess", "psutil", "multiprocessing"}
BANNED_CALLS = {
    ("os", "kill"),
    ("os", "killpg"),
    ("os", "fork"),
    ("os", "system"),
    ("os", "popen"),
    ("os", "pidfd_open"),
    ("signal", "pidfd_send_signal"),
    ("signal", "pthread_kill"),
}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in BANNED_MODULES:
                found.append(node.module)
            module = node.module
            found += [f"{module}.{a.name}" for a in node.names if (module, a.name) in BANNED_CALLS]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in BANNED_CALLS:
                found.append(f"{node.value.id}.{node.attr}")
    return [f"{path.relative_to(TUI.parent)}: {name}" for name in found]


def test_tui_never_touches_processes() -> None:
    violations = [v for path in sorted(TUI.rglob("*.py")) for v in _violations(path)]
    assert violations == []
