"""The run flags a Slurm or SkyPilot environment fills, beneath the person's own.

Which flag wins: one given on the command line, then torchrun's ``PET_<FLAG>`` variable,
then the scheduler's value (``engine.cluster.scheduler_env``), then the parser's default.
The scheduler is read only for a job of more than one node (a one-node allocation stays a
plain run), and never with ``--no-scheduler-env`` (or ``RANKVISOR_NO_SCHEDULER_ENV=1``). What
it filled is said once, in one line with how to ignore it ("from Slurm: --nnodes 2
--rdzv-endpoint node01:29500 --rdzv-id 1234.0 (--no-scheduler-env ...)"); an environment
that cannot be one job (srun with a task per GPU) is refused in one line with the fix.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from ...engine.cluster.scheduler_env import from_environment
from ...engine.supervisor.run_config import ConfigError

__all__ = ["FILLED", "NO_SCHEDULER_ENV", "apply_scheduler_env", "unset_defaults"]

NO_SCHEDULER_ENV = "RANKVISOR_NO_SCHEDULER_ENV"
"""Set to 1: as ``--no-scheduler-env`` (for a shell that keeps a job's variables)."""

FILLED = ("nnodes", "rdzv_id", "rdzv_backend", "rdzv_endpoint", "node_rank", "nproc_per_node")
"""The scheduler's flags, as ``SchedulerFlags`` names them."""

_DEST = {"rdzv_id": "run_id"}
"""Where argparse keeps a scheduler flag, where its name differs."""


class _Unset:
    """The default of a flag the command line did not give (told apart from a value)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Unset()


def unset_defaults(parser: argparse.ArgumentParser) -> dict[str, object]:
    """Make ``parser`` leave ``UNSET`` in every flag the scheduler may fill; the defaults
    those flags had (``PET_*`` already read into them), to put back where nobody filled."""
    dests = [_DEST.get(d, d) for d in FILLED]
    before = {d: parser.get_default(d) for d in dests}
    parser.set_defaults(**dict.fromkeys(dests, UNSET))
    return before


def _pet(dest: str, env: Mapping[str, str]) -> bool:
    return bool(env.get(f"PET_{dest.upper()}"))


def apply_scheduler_env(args: argparse.Namespace, defaults: dict[str, object],
                        env: Mapping[str, str] | None = None) -> str | None:
    """Fill ``args``'s unset flags from the scheduler, then the defaults; the line to say.

    Raises:
        ConfigError: the environment cannot be one job (one line, with the fix).
    """
    env = os.environ if env is None else env
    given = {d for d in defaults if getattr(args, d) is not UNSET}
    for dest, value in defaults.items():
        if getattr(args, dest) is UNSET:
            setattr(args, dest, value)
    if getattr(args, "no_scheduler_env", False) or env.get(NO_SCHEDULER_ENV, "0") not in (
            "", "0"):
        return None
    found = from_environment(env)
    if found is None:
        return None
    nnodes = str(args.nnodes if "nnodes" in given or _pet("nnodes", env)
                 else found.flags.get("nnodes", "1"))
    if nnodes.rpartition(":")[2].strip() in ("", "0", "1"):
        return None  # one node: nothing to rendezvous with
    if found.problem is not None:
        raise ConfigError(found.problem)
    filled: list[str] = []
    for flag in FILLED:
        dest = _DEST.get(flag, flag)
        if flag not in found.flags or dest in given or _pet(flag, env):
            continue
        if flag == "node_rank" and args.rdzv_backend != "static":
            continue  # the c10d rendezvous assigns it
        value: object = found.flags[flag]
        setattr(args, dest, int(value) if flag == "node_rank" else value)  # type: ignore[arg-type]
        filled.append(flag)
    line = found.describe(tuple(filled))
    if not line:
        return None
    if "nnodes" in filled:
        args.scheduler_nodes = found
    return f"{line} (--no-scheduler-env or {NO_SCHEDULER_ENV}=1 ignores {found.source})"
