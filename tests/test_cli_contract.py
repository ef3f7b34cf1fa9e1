"""The command line (``rankvisor.tui.cli``) never loads Textual, Rich or the app, but through
its one seam (``app_seam``) where a TUI is wanted: checked in fresh interpreters, and by the
import-linter contract of pyproject.toml, which counts lazy imports too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rankvisor.engine.states import RankState

from tests.control.runs import Supervisors, failed_finish, make_run, state_dir, supervisors

pytestmark = pytest.mark.processes

__all__ = ["state_dir", "supervisors"]  # fixtures, used by name

ROOT = Path(__file__).resolve().parents[1]

APP = ("textual", "textual_serve", "rich", "rankvisor.tui.app", "rankvisor.tui.screens",
       "rankvisor.tui.widgets", "rankvisor.tui.run", "rankvisor.tui.serve_door")
"""What the command line must not load: the seam's two targets, and all they import."""

_REPORT = f"""
import json, sys
app = [m for m in sys.modules if any(m == a or m.startswith(a + ".") for a in {APP!r})]
print(json.dumps({{"codes": codes, "app": sorted(app)}}))
"""


def _fresh(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``code`` (which sets ``codes``) in a new interpreter; what it loaded of the app."""
    out = subprocess.run([sys.executable, "-c", code + _REPORT], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_status_and_ls_load_no_textual(supervisors: Supervisors, state_dir: Path,
                                       tmp_path: Path) -> None:
    entry = make_run(tmp_path / "logs", "job1", pid=supervisors.live().pid,
                     states=[RankState.SUCCEEDED, RankState.FAILED],
                     finished=failed_finish(1, 3, 2), exitcode=1)
    code = (
        "from rankvisor.tui.cli import main\n"
        f"codes = [main(['status', {entry.run_dir!r}]), main(['status', '--json', 'job1']),"
        " main(['ls']), main(['logs', 'job1']), main(['-h'])]\n"
    )
    result = _fresh(code, env={**os.environ, "RANKVISOR_STATE_DIR": str(state_dir)})
    # status and ls say the run; logs finds no file (1): every one ran to its end
    assert result == {"codes": [0, 0, 0, 1, 0], "app": []}


def test_every_module_of_the_cli_imports_without_the_app() -> None:
    code = (
        "import importlib, pkgutil, rankvisor.tui.cli as cli\n"
        "names = [m.name for m in pkgutil.walk_packages(cli.__path__, cli.__name__ + '.')]\n"
        "codes = [importlib.import_module(n).__name__ for n in names]\n"
    )
    result = _fresh(code)
    assert result["app"] == []
    names = result["codes"]
    assert isinstance(names, list)
    for expected in ("entry", "subcommands", "launch", "app_seam", "listing", "lifecycle"):
        assert f"rankvisor.tui.cli.{expected}" in names


def test_the_seam_is_where_the_app_comes_from() -> None:
    """Asked for, the seam brings the app: the check above is not blind to it."""
    result = _fresh("from rankvisor.tui.cli.app_seam import app_runner\n"
                    "codes = [app_runner().__name__]\n")
    assert result["codes"] == ["rankvisor.tui.run"]
    assert "textual" in result["app"] and "rankvisor.tui.app" in result["app"]


def test_the_import_contract_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """import-linter's ``forbidden`` contract: lazy imports count, the seam's two are the
    only ones let through (``ignore_imports``)."""
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)  # the contract is read from pyproject.toml here
    assert lint_imports(limit_to_contracts=("cli-without-the-app",), no_cache=True,
                             no_logo=True) == 0
