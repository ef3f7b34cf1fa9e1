"""engine's public surface: torch's names, torch's signatures (httpx-style export test)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest
import rankvisor.engine.errors  # noqa: F401
from rankvisor import engine

from tests.conftest import TORCH_IMPORT

# Names whose callables add keyword-only parameters (with defaults) after torch's own.
EXTENDED = {"ProcessFailure", "RunProcsResult", "SubprocessHandler"}


def test_all_is_sorted_and_importable() -> None:
    assert engine.__all__ == sorted(engine.__all__)
    for name in engine.__all__:
        assert getattr(engine, name) is not None
    assert engine.errors.__all__ == sorted(engine.errors.__all__)


def _params(obj: Any) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(obj)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def _assert_same_signature(name: str, ours: Any, theirs: Any) -> None:
    mine, torchs = _params(ours), _params(theirs)
    if name in EXTENDED:
        assert mine[: len(torchs)] == torchs, name
        for pname, kind, default in mine[len(torchs):]:
            assert kind is inspect.Parameter.KEYWORD_ONLY, (name, pname)
            assert default is not inspect.Parameter.empty, (name, pname)
    else:
        assert mine == torchs, name


@pytest.mark.torch
@TORCH_IMPORT
def test_same_names_and_signatures_as_torch() -> None:
    tm = importlib.import_module("torch.distributed.elastic.multiprocessing")
    te = importlib.import_module("torch.distributed.elastic.multiprocessing.errors")
    tsh = importlib.import_module("torch.distributed.elastic.multiprocessing.subprocess_handler")
    import rankvisor.engine.subprocess_handler as esh

    assert set(tm.__all__) <= set(engine.__all__)
    pairs: list[tuple[str, Any, Any]] = []
    for name in tm.__all__:
        pairs.append((name, getattr(engine, name), getattr(tm, name)))
    for name in te.__all__:
        pairs.append((name, getattr(engine.errors, name), getattr(te, name)))
    for name in tsh.__all__:
        pairs.append((name, getattr(esh, name), getattr(tsh, name)))
    for name, ours, theirs in pairs:
        if inspect.isclass(theirs) and issubclass(theirs, int):
            continue  # Std: an IntFlag, compared by value below
        _assert_same_signature(name, ours, theirs)

    methods = [
        ("PContext", ["start", "wait", "close", "pids"]),
        ("DefaultLogsSpecs", ["reify"]),
        ("LogsSpecs", ["reify"]),
    ]
    for cls, names in methods:
        for m in names:
            _assert_same_signature(f"{cls}.{m}", getattr(getattr(engine, cls), m),
                                   getattr(getattr(tm, cls), m))
    for m in ["get_first_failure", "format_msg"]:
        _assert_same_signature(m, getattr(engine.errors.ChildFailedError, m),
                               getattr(te.ChildFailedError, m))
    for m in ["signal_name", "timestamp_isoformat"]:
        _assert_same_signature(m, getattr(engine.errors.ProcessFailure, m),
                               getattr(te.ProcessFailure, m))
    for m in ["initialize", "record_exception", "dump_error_file",
              "override_error_code_in_rootcause_data", "_get_error_file_path",
              "_write_error_file", "_rm"]:
        _assert_same_signature(m, getattr(engine.errors.ErrorHandler, m),
                               getattr(te.ErrorHandler, m))
    _assert_same_signature("Std.from_str", engine.Std.from_str, tm.Std.from_str)
    assert {s.name: int(s) for s in engine.Std} == {s.name: int(s) for s in tm.Std}


def test_supervisor_and_its_config_are_exported() -> None:
    import rankvisor.engine.supervisor.core  # noqa: F401
    import rankvisor.engine.supervisor.run_config  # noqa: F401

    assert {"Supervisor", "SupervisorConfig"} <= set(engine.__all__)
    assert engine.Supervisor is engine.supervisor.core.Supervisor
    assert engine.SupervisorConfig is engine.supervisor.run_config.SupervisorConfig
    assert {"Supervisor", "SupervisorConfig"} <= set(dir(engine))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        engine.Nope  # noqa: B018
