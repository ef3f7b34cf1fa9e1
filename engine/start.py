"""``start_processes``: torch's entry point, choosing binary or function ranks by the entrypoint."""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from .logs_specs import LogsSpecs
from .pcontext import PContext, _validate_full_rank
from .subprocess_context import SubprocessContext

__all__ = ["start_processes"]


def start_processes(
    name: str,
    entrypoint: Union[Callable[..., Any], str],
    args: dict[int, tuple[Any, ...]],
    envs: dict[int, dict[str, str]],
    logs_specs: LogsSpecs,
    log_line_prefixes: Optional[dict[int, str]] = None,
    start_method: str = "spawn",
    numa_options: Any = None,
    duplicate_stdout_filters: Optional[list[str]] = None,
    duplicate_stderr_filters: Optional[list[str]] = None,
) -> PContext:
    """Start ``len(args)`` copies of ``entrypoint`` and return their context, already started.

    A ``str`` entrypoint is a program (``SubprocessContext``; its args are ``str()``-ed and
    ``start_method`` is ignored); anything else is a function (``MultiprocessContext``).

    Args: as the contexts' (``PContext``, ``MultiprocessContext``).

    Raises:
        RuntimeError: ``args``/``envs`` keys are not exactly ``0..n-1`` (nothing started).
        FileNotFoundError, PermissionError: a rank's program cannot be run (nothing left
            running).
    """
    nprocs = len(args)
    _validate_full_rank(args, nprocs, "args")
    _validate_full_rank(envs, nprocs, "envs")

    common: dict[str, Any] = dict(
        name=name,
        entrypoint=entrypoint,
        args=args,
        envs=envs,
        logs_specs=logs_specs,
        log_line_prefixes=log_line_prefixes,
        numa_options=numa_options,
        duplicate_stdout_filters=duplicate_stdout_filters,
        duplicate_stderr_filters=duplicate_stderr_filters,
    )
    context: PContext
    if isinstance(entrypoint, str):
        context = SubprocessContext(**common)
    else:
        # Imported here: function ranks are the only path that may need multiprocessing.
        from .multiprocess_context import MultiprocessContext

        context = MultiprocessContext(start_method=start_method, **common)
    try:
        context.start()
    except BaseException:
        # Whatever started before the failure (or the interrupting signal) must not outlive it.
        context.close()
        raise
    return context
