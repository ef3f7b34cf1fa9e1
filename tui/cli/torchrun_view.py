"""``run_torchrun_view``: the app on a torchrun job that rankvisor did not start.

The job goes on when the viewer quits: the handle's ``shutdown`` only detaches (torchrun
owns its workers). Errors before the app starts (no such pid, no workers, not a torchrun
log dir) are one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import sys
from typing import Any

from ...engine.attach import AttachError, TorchrunHandle
from ...engine.control.server import READ_ONLY_DUMP_REFUSAL, READ_ONLY_REFUSAL
from ...engine.handle import CommandResult, DumpStacks, reads_only
from .app_seam import app_runner

__all__ = ["READ_ONLY_REFUSAL", "run_torchrun_view"]


class _ReadOnly(TorchrunHandle):
    """A handle that watches only: every command is refused with the same words as a
    read-only viewer of a supervisor gets, but a nonblocking stack dump and the collectives
    (they pause nobody)."""

    read_only = True

    def execute(self, command: object) -> CommandResult:  # type: ignore[override]
        if reads_only(command):
            return super().execute(command)  # type: ignore[arg-type]
        if isinstance(command, DumpStacks):
            return CommandResult(False, READ_ONLY_DUMP_REFUSAL)
        return CommandResult(False, READ_ONLY_REFUSAL)


def build_handle(target: str, *, read_only: bool = False, **kwargs: Any) -> TorchrunHandle:
    """The handle ``target`` (agent pid, worker pid or log dir) names; raises AttachError."""
    job_cls = _ReadOnly if read_only else TorchrunHandle
    return job_cls.attach(target, **kwargs)


def run_torchrun_view(
    target: str, *, read_only: bool = False, stack_on_kill: bool = True, **app_kwargs: Any
) -> int:
    """Attach the app to the torchrun job ``target`` names; return the exit code.

    Returns 1 (with one line on stderr) when there is nothing to attach to; else the app's
    code once the user quits (the job keeps running).
    """
    try:
        handle = build_handle(target, read_only=read_only, stack_on_kill=stack_on_kill)
    except AttachError as e:
        from ...engine.output.safe_text import one_line  # it quotes the target's cmdline

        sys.stderr.write(f"rankvisor attach --torchrun: {one_line(str(e), 4000)}\n")
        return 1
    message = (
        f"detached from torchrun agent {handle.job.agent_pid} (the job goes on)\n"
        f"  attach again:  rankvisor attach --torchrun {handle.job.agent_pid}\n"
    )
    try:
        return int(app_runner().run_viewer(handle, detach_message=message, **app_kwargs))
    finally:
        handle.detach()
