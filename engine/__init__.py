"""rankvisor's engine: a drop-in for ``torch.distributed.elastic.multiprocessing``.

Every name in torch's ``__all__`` is importable from here with the same signature. Importing
this package starts nothing, installs nothing and never imports torch, textual or rich;
``MultiprocessContext``, ``Supervisor`` and ``SupervisorConfig`` are loaded on first use.
"""

from __future__ import annotations

from ._lazy import face
from .errors import ProcessFailure
from .logs_specs import DefaultLogsSpecs, LogsDest, LogsSpecs
from .pcontext import PContext, RunProcsResult, SignalException
from .start import start_processes
from .std import Std, to_map
from .subprocess_context import SubprocessContext

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


# Loaded on first use, so ``import engine`` stays light: function ranks pull in
# multiprocessing machinery, the Supervisor its threads' modules (pump, stats, guard, ...).
__getattr__, _dir = face(
    __name__,
    {
        "MultiprocessContext": "multiprocess_context",
        "Supervisor": "supervisor",
        "SupervisorConfig": "supervisor",
    },
)


def __dir__() -> list[str]:
    return sorted(set(_dir()) | set(__all__))
