"""The order of the packages, as pyproject.toml's import-linter contracts write it down.

The contracts (``[tool.importlinter]``): the UI above the engine; the engine's rooms in one
order from the leaves up, every module directly in ``engine/`` placed; no circle among the
modules of any package; the engine never imports textual or rich; the UI never imports
subprocess or psutil itself. Imports inside functions and under ``TYPE_CHECKING`` count as
much as those at the top (import-linter's default): a circle that only closes lazily still
ties two rooms together. Run here with import-linter's own command-line entry, so a broken
contract fails with its report (the offending chains, with line numbers).
"""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: import-linter itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def _contracts() -> list[dict]:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]


def test_the_contracts_are_kept(capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    cli = pytest.importorskip("importlinter.cli")
    monkeypatch.chdir(ROOT)  # the contracts name the installed packages; the config is here
    code = cli.lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report


def test_the_engine_rooms_contract_places_every_room_in_order() -> None:
    """Exhaustive (a new module or sub-package of engine/ must be given a layer), the front
    ends at the top, the leaves and then the clock at the bottom, the rooms between in the
    order docs/development.md gives."""
    (rooms,) = [c for c in _contracts() if c.get("containers") == ["rankvisor.engine"]]
    assert rooms["type"] == "layers" and rooms["exhaustive"] is True
    layers = rooms["layers"]
    assert layers[0] == "entry"
    assert {"names", "rundir"} <= {n.strip() for n in layers[-2].split("|")}
    assert layers[-1] == "clock"  # the one clock: every room may read it, it imports none
    order = [layers.index(next(x for x in layers if room in x.split(" ")))
             for room in ("entry", "control", "supervisor", "forensics", "logfile", "output",
                          "process", "events", "errors")]
    assert order == sorted(order)
