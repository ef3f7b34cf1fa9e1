"""What ``pip install rankvisor`` puts on a machine: one top-level name, every package and
data file of the source tree, and code that never reaches for the generic names.

The wheel is built from a copy of the packaging inputs (nothing is written into the
checkout) and read as a zip. The import check walks every module's syntax tree: an absolute
``engine`` or ``tui`` would find a research repository's own ``engine.py`` first (the case
tests/test_user_project.py runs for real). README.md's set-up commands and ``.ci/run`` are
checked to say the same thing.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"engine": "rankvisor.engine", "tui": "rankvisor.tui"}
"""The repository's top-level folders -> the installed package each one becomes."""
DATA_SUFFIXES = (".tcss", ".md")
GENERIC = frozenset(PACKAGES)


def _source_files() -> Iterator[Path]:
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path


def _installed_name(path: Path) -> str:
    """engine/control/STATUS.md -> rankvisor/engine/control/STATUS.md."""
    rel = path.relative_to(ROOT)
    return "/".join(["rankvisor", *rel.parts])


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The names in a wheel built from the packaging inputs as they are in this checkout."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for top in PACKAGES:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    if importlib.util.find_spec("setuptools") is not None:
        argv.insert(4, "--no-build-isolation")  # setuptools is here: no index needed
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (wheel,) = out.glob("rankvisor-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_the_wheel_installs_one_top_level_name(wheel_names: list[str]) -> None:
    tops = {name.split("/", 1)[0] for name in wheel_names}
    (dist_info,) = [t for t in tops if t.endswith(".dist-info")]
    assert tops - {dist_info} == {"rankvisor"}
    record = [n for n in wheel_names if n == f"{dist_info}/RECORD"]
    assert record, "a wheel without RECORD"


def test_every_package_and_data_file_of_the_source_tree_is_in_the_wheel(
    wheel_names: list[str],
) -> None:
    """A package missing from pyproject's explicit list (or a data file from package-data)
    would install without it: the editable install hides that, the wheel does not."""
    shipped = set(wheel_names)
    wanted = [p for p in _source_files() if p.suffix == ".py" or p.suffix in DATA_SUFFIXES]
    missing = [_installed_name(p) for p in wanted if _installed_name(p) not in shipped]
    assert not missing, f"not in the wheel (pyproject's packages / package-data): {missing}"
    # Each folder holding a module is a package of its own (its __init__.py shipped).
    folders = {p.parent for p in wanted if p.suffix == ".py"}
    for folder in folders:
        assert _installed_name(folder / "__init__.py") in shipped, folder
    assert any(n.endswith(".tcss") for n in shipped)
    assert "rankvisor/engine/control/PROTOCOL.md" in shipped


# -- no module reaches for the generic names -------------------------------------------------


def _is_generic(module: str | None) -> bool:
    return bool(module) and module.split(".", 1)[0] in GENERIC  # type: ignore[union-attr]


def _code_imports(code: str) -> Iterator[str]:
    """The absolute imports (and run_module / import_module names) of some Python code."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Call) and _called_name(node).endswith(
            ("run_module", "import_module", "module_argv")
        ):
            if node.args and isinstance(node.args[0], ast.Constant):
                yield str(node.args[0].value)


def _called_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def generic_names_used(code: str) -> list[str]:
    """Every use of ``engine`` / ``tui`` as an absolute module in ``code``: its imports, the
    module after a ``"-m"`` and the code after a ``"-c"`` in an argv, and the imports of any
    string that is itself Python code (a ``-c`` program built elsewhere)."""
    found = [name for name in _code_imports(code) if _is_generic(name)]
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
            for flag, value in zip(items, items[1:], strict=False):
                if not (isinstance(flag, ast.Constant) and isinstance(value, ast.Constant)):
                    continue
                if flag.value == "-m" and _is_generic(str(value.value)):
                    found.append(f"-m {value.value}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"-c: {n}" for n in _code_imports(node.value) if _is_generic(n)]
    return found


def test_the_check_finds_each_way_of_naming_them() -> None:
    bad = (
        "import engine\n"
        "from tui.cli import main\n"
        "argv = [sys.executable, '-m', 'tui.serve']\n"
        "code = 'import sys; from engine.control.daemon import _entry; _entry()'\n"
        "runpy.run_module('tui', run_name='__main__')\n"
    )
    assert generic_names_used(bad) == [
        "engine", "tui.cli", "tui", "-m tui.serve", "-c: engine.control.daemon",
    ]
    good = (
        "from ..engine.events import RankOutput\n"
        "from . import tui_helpers\n"
        "argv = [sys.executable, '-P', '-m', 'rankvisor.tui.cli.serve']\n"
        "code = 'from rankvisor.engine.entry.daemon import _entry; _entry()'\n"
        "text = 'the engine and the tui'\n"
    )
    assert generic_names_used(good) == []


def test_no_module_imports_or_runs_engine_or_tui_by_their_generic_names() -> None:
    offenders = {
        str(path.relative_to(ROOT)): used
        for path in _source_files() if path.suffix == ".py"
        if (used := generic_names_used(path.read_text()))
    }
    assert not offenders, f"absolute engine/tui (use relative imports, rankvisor.*): {offenders}"


# -- README.md and .ci/run --------------------------------------------------------------------


def readme_setup_lines() -> list[str]:
    """The commands of README.md's first code block."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```", 2)[1]
    lines = block.splitlines()[1:]  # past the fence's language word
    return [line.strip() for line in lines if line.strip()]


def test_ci_runs_the_readmes_set_up_commands_as_written() -> None:
    setup = readme_setup_lines()
    assert len(setup) == 2, setup
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for command in setup:
        assert command in ci, f".ci/run does not run README.md's {command!r}"
    assert "python -m pytest" in setup[1]
    # In a venv of its own, without the machine's packages.
    assert any("-m venv" in line for line in ci)
    assert not any("system-site-packages" in line for line in ci)
