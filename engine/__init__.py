"""rankvisor's engine: a drop-in for ``torch.distributed.elastic.multiprocessing``.

Every name in torch's ``__all__`` is importable from here with the same signature. Importing
this package starts nothing, installs nothing and never imports torch, textual or rich;
``MultiprocessContext`` is loaded on first use.
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
    "start_processes",
    "to_map",
]


def __getattr__(name: str) -> Any:
    # Function ranks pull in multiprocessing machinery: load them only when asked for.
    if name == "MultiprocessContext":
        from engine.multiprocess_context import MultiprocessContext

        return MultiprocessContext
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
