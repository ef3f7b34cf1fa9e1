"""rankvisor's engine: a drop-in for ``torch.distributed.elastic.multiprocessing``.

Every name in torch's ``__all__`` is importable from here with the same signature. Importing
this package starts nothing, installs nothing and never imports torch, textual or rich;
``MultiprocessContext``, ``Supervisor`` and ``SupervisorConfig`` are loaded on first use.
"""

from __future__ import annotations

from typing import Any

from engine.errors import ProcessFailure
from engine.logs_specs import DefaultLogsSpecs, LogsDest, LogsSpecs
from engine.pcontext import PContext, RunProcsResult, SignalException
from engine.start import start_processes
from engine.std import Std, to_map
from engine.subprocess_context import SubprocessContext

__all__ = [
    "DefaultLogsSpecs",
    "LogsDest",
    "LogsSpecs",
    "MultiprocessContext",
    "PContext",
    "ProcessFailure",
    "RunProcsResult",
    "SignalException",
    "Std",
    "SubprocessContext",
    "Supervisor",
    "SupervisorConfig",
    "start_processes",
    "to_map",
]


# name -> module: loaded on first use, so ``import engine`` stays light.
_LAZY = {
    # Function ranks pull in multiprocessing machinery.
    "MultiprocessContext": "engine.multiprocess_context",
    # The Supervisor pulls in its threads' modules (pump, stats, guard, watchdog, ...).
    "Supervisor": "engine.supervisor",
    "SupervisorConfig": "engine.run_config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
