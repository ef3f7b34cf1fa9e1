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

    Args:
        name: role name; tee'd lines are prefixed ``[{name}{local_rank}]:``.
        entrypoint: program path or function.
        args: arguments per local rank; keys exactly ``0..n-1``.
        envs: environment per local rank; same keys.
        logs_specs: where logs go (``DefaultLogsSpecs``).
        log_line_prefixes: per-rank prefixes for tee'd lines.
        start_method: "spawn", "fork" or "forkserver" (functions only).
        numa_options: bind each rank to its NUMA node's CPUs (``engine.process.numa.NumaOptions`` or
            torch's).
        duplicate_stdout_filters: tee'd stdout lines containing any of these also go to
            ``filtered_stdout.log``.
        duplicate_stderr_filters: the same for stderr.

    Returns:
        The started context.

    Raises:
        RuntimeError: ``args``/``envs`` keys are not exactly ``0..n-1`` (nothing started).
        FileNotFoundError, PermissionError: a rank's program cannot be run (nothing left
            running).
    """
    nprocs = len(args)
    _validate_full_rank(args, nprocs, "args")
    _validate_full_rank(envs, nprocs, "envs")

    context: PContext
    if isinstance(entrypoint, str):
        context = SubprocessContext(
            name=name,
            entrypoint=entrypoint,
            args=args,
            envs=envs,
            duplicate_stdout_filters=duplicate_stdout_filters,
            duplicate_stderr_filters=duplicate_stderr_filters,
            logs_specs=logs_specs,
            log_line_prefixes=log_line_prefixes,
            numa_options=numa_options,
        )
    else:
        # Imported here: function ranks are the only path that may need multiprocessing.
        from .multiprocess_context import MultiprocessContext

        context = MultiprocessContext(
            name=name,
            entrypoint=entrypoint,
            args=args,
            envs=envs,
            duplicate_stdout_filters=duplicate_stdout_filters,
            duplicate_stderr_filters=duplicate_stderr_filters,
            log_line_prefixes=log_line_prefixes,
            start_method=start_method,
            logs_specs=logs_specs,
            numa_options=numa_options,
        )
    try:
        context.start()
    except BaseException:
        # Whatever started before the failure (or the interrupting signal) must not outlive it.
        context.close()
        raise
    return context
