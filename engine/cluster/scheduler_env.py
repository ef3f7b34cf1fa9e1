"""What a scheduler already knows about a multi-node job, as torchrun's flags.

Inside an ``sbatch`` script people write ``srun torchrun --nnodes $SLURM_NNODES --rdzv-id
$SLURM_JOB_ID --rdzv-endpoint $(scontrol show hostnames ... | head -n1):29500 ...`` by hand.
Under ``srun`` (one task per node) or SkyPilot, ``rankvisor run`` reads the same facts from
the environment instead: this module turns an environment into the flags it implies, with
the line that says so, or the one reason it cannot be one job. Standard library only, no
I/O: the command line decides which of these flags a person's own flags leave to fill.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_PORT",
    "HostlistError",
    "SchedulerFlags",
    "expand_hostlist",
    "from_environment",
]

DEFAULT_PORT = 29500
"""torchrun's default rendezvous port, on the first host of the job."""

MAX_HOSTS = 1_000_000
"""A hostlist that expands to more names than this is refused, not expanded."""


class HostlistError(ValueError):
    """A Slurm hostlist that is not one; the message quotes the part that is wrong."""


@dataclass(frozen=True)
class SchedulerFlags:
    """The flags one scheduler's environment implies (``dest`` -> value, as argparse names
    them), where they came from, and why they cannot be used, if they cannot."""

    source: str
    """"Slurm" or "SkyPilot"."""
    flags: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    """One line for a person (with the fix) when this environment cannot be one job."""
    in_step: bool = True
    """Whether this process looks started by the scheduler for the job (Slurm: a job step,
    ``SLURM_STEP_ID``), not a shell that kept the job's variables (``salloc``, tmux)."""

    def describe(self, dests: tuple[str, ...] | None = None) -> str:
        """``from Slurm: --nnodes 2 --rdzv-endpoint node01:29500`` for ``dests`` (default all)."""
        shown = [d for d in self.flags if dests is None or d in dests]
        words = " ".join(f"--{d.replace('_', '-')} {self.flags[d]}" for d in shown)
        return f"from {self.source}: {words}" if words else ""


_TOP_COMMA = re.compile(r",(?![^\[]*\])")
_GROUP = re.compile(r"\[([^\[\]]*)\]")


def _expand_range(text: str, whole: str) -> list[str]:
    out: list[str] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"{whole!r}: {part!r} is not a number or a range N-M")
        if not sep:
            out.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            raise HostlistError(f"{whole!r}: the range {part!r} goes down")
        if last - first >= MAX_HOSTS:
            raise HostlistError(f"{whole!r}: the range {part!r} names too many hosts")
        width = len(lo) if lo.startswith("0") else 0  # node[01-10]: keep the padding
        out.extend(str(n).zfill(width) for n in range(first, last + 1))
    return out


def expand_hostlist(hostlist: str) -> list[str]:
    """Every host of a Slurm hostlist, in its order (``node[01-03,07],gpu-b3``).

    Several bracket groups in one name multiply (``r[1-2]n[1-2]`` is four hosts), as in
    Slurm; zero padding follows the lower bound (``[08-10]`` -> 08, 09, 10).

    Raises:
        HostlistError: an unbalanced bracket, a bound that is no number, a range that goes
            down, or more than ``MAX_HOSTS`` names.
    """
    hosts: list[str] = []
    for item in _TOP_COMMA.split(hostlist.strip()):
        item = item.strip()
        if not item:
            continue
        if item.count("[") != item.count("]"):
            raise HostlistError(f"{hostlist!r}: unbalanced brackets in {item!r}")
        names = [""]
        pos = 0
        for m in _GROUP.finditer(item):
            literal = item[pos:m.start()]
            choices = _expand_range(m.group(1), hostlist)
            names = [n + literal + c for n in names for c in choices]
            if len(names) > MAX_HOSTS:
                raise HostlistError(f"{hostlist!r} names too many hosts")
            pos = m.end()
        tail = item[pos:]
        if "[" in tail or "]" in tail:
            raise HostlistError(f"{hostlist!r}: unbalanced brackets in {item!r}")
        hosts.extend(n + tail for n in names)
    return hosts


def _tasks_on_this_node(env: Mapping[str, str]) -> int | None:
    """Tasks srun started on this node (``SLURM_TASKS_PER_NODE`` looks like ``4(x2),1``)."""
    value = env.get("SLURM_NTASKS_PER_NODE")
    if value and value.isdigit():
        return int(value)
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    node = env.get("SLURM_NODEID", "0")
    if not per_node or not node.isdigit():
        return None
    counts: list[int] = []
    for part in per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            return None
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    index = int(node)
    return counts[index] if index < len(counts) else None


def _place(flags: dict[str, str], hosts: list[str], node: str | None,
           gpus: str | None) -> None:
    """The rendezvous on the first host, this node's rank and its ranks (one per GPU)."""
    if hosts:
        flags["rdzv_backend"] = "c10d"
        flags["rdzv_endpoint"] = f"{hosts[0]}:{DEFAULT_PORT}"
    if node and node.isdigit():
        flags["node_rank"] = node
    if gpus and gpus.isdigit() and int(gpus) > 0:
        flags["nproc_per_node"] = gpus


def _slurm(env: Mapping[str, str]) -> SchedulerFlags:
    flags: dict[str, str] = {}
    nnodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or env.get(
        "SLURM_JOB_NUM_NODES")
    if nnodes and nnodes.isdigit():
        flags["nnodes"] = nnodes
    job = env["SLURM_JOB_ID"]
    step = env.get("SLURM_STEP_ID")
    flags["rdzv_id"] = f"{job}.{step}" if step and step.isdigit() else job
    hostlist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get(
        "SLURM_NODELIST")
    try:
        hosts = expand_hostlist(hostlist) if hostlist else []
    except HostlistError as e:
        return SchedulerFlags("Slurm", flags, f"SLURM_JOB_NODELIST is no hostlist: {e}")
    _place(flags, hosts, env.get("SLURM_NODEID"), env.get("SLURM_GPUS_ON_NODE"))
    tasks = _tasks_on_this_node(env)
    if tasks is not None and tasks > 1:
        return SchedulerFlags("Slurm", flags, (
            f"srun started {tasks} tasks on this node (SLURM_TASKS_PER_NODE), and each would "
            "start every rank of the node: run rankvisor once per node, with "
            "`srun --ntasks-per-node=1 rankvisor run ...` (or --no-scheduler-env)"))
    return SchedulerFlags("Slurm", flags, in_step=bool(step))


def _skypilot(env: Mapping[str, str]) -> SchedulerFlags:
    flags: dict[str, str] = {}
    ips = [ip.strip() for ip in env["SKYPILOT_NODE_IPS"].splitlines() if ip.strip()]
    nnodes = env.get("SKYPILOT_NUM_NODES") or (str(len(ips)) if ips else "")
    if nnodes.isdigit():
        flags["nnodes"] = nnodes
    task = env.get("SKYPILOT_TASK_ID")
    if task:
        flags["rdzv_id"] = task
    _place(flags, ips, env.get("SKYPILOT_NODE_RANK"), env.get("SKYPILOT_NUM_GPUS_PER_NODE"))
    return SchedulerFlags("SkyPilot", flags)


def from_environment(env: Mapping[str, str]) -> SchedulerFlags | None:
    """The flags a Slurm (``SLURM_JOB_ID``) or SkyPilot (``SKYPILOT_NODE_IPS``) environment
    implies; None outside both. Slurm wins where both are set (SkyPilot on Slurm)."""
    if env.get("SLURM_JOB_ID"):
        return _slurm(env)
    if env.get("SKYPILOT_NODE_IPS"):
        return _skypilot(env)
    return None
