"""The per-rank environment, built the way torch's LocalElasticAgent builds it.

A script written for ``torchrun`` reads its identity (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``...) and its rendezvous address (``MASTER_ADDR``/``MASTER_PORT``) from the
environment, so a launcher that wants such scripts to run unchanged must set exactly those
variables with exactly those meanings. This module does that for a single-node group (one
agent, group rank 0), plus the few things rankvisor adds on top:

* ``PYTHONUNBUFFERED=1`` (unless the user set it) so a Python rank's output reaches its log
  file line by line instead of in 8 KiB blocks (torchrun gets the same effect with ``-u``);
* ``PYTHONFAULTHANDLER=1`` so a rank that segfaults leaves its Python stack in stderr.log;
* ``RANKVISOR_RESTART_COUNT``: how often this rank has been restarted (alone or with its
  attempt), since ``TORCHELASTIC_RESTART_COUNT`` keeps torch's meaning (the attempt number).

Only the stdlib is used: this runs before any rank starts, in the launcher.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from string import Template

__all__ = [
    "RESTART_COUNT_ENV",
    "EnvOptions",
    "build_rank_env",
    "build_rank_envs",
    "check_master_addr",
    "free_port",
    "log_line_prefixes",
    "port_in_use",
    "virtual_local_rank_env",
]

RESTART_COUNT_ENV = "RANKVISOR_RESTART_COUNT"
"""How many times this rank has been restarted (by hand or with its attempt)."""


@dataclass(frozen=True, slots=True)
class EnvOptions:
    """What varies between runs in the rank environment.

    Attributes:
        nprocs: Local world size (ranks on this node). Single node: also the world size.
        role: The role name (torchrun's ``--role``, default "default").
        run_id: ``TORCHELASTIC_RUN_ID``; also the prefix of the run's log directory.
        master_addr: Address of the c10d store rank 0 hosts.
        master_port: Its port; pick one with ``free_port()``.
        max_restarts: ``TORCHELASTIC_MAX_RESTARTS`` (informational for the ranks).
        use_agent_store: ``TORCHELASTIC_USE_AGENT_STORE``. False: rank 0 hosts the store
            itself, which is what a single-node launcher without an agent store needs.
        unbuffered: Set ``PYTHONUNBUFFERED=1`` unless the parent already sets it.
        faulthandler: Set ``PYTHONFAULTHANDLER=1`` unless the parent already sets it.
    """

    nprocs: int
    role: str = "default"
    run_id: str = "none"
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    max_restarts: int = 0
    use_agent_store: bool = False
    unbuffered: bool = True
    faulthandler: bool = True
    virtual_local_rank: bool = False


def virtual_local_rank_env(local_rank: int, parent_visible: str | None) -> dict[str, str]:
    """torchrun's ``--virtual-local-rank``: each rank sees its one device as device 0.

    ``LOCAL_RANK`` is 0 in every rank, and ``CUDA_VISIBLE_DEVICES`` is the rank's entry of
    the launcher's list (entries as written, stripped), or the local rank itself when the
    launcher has no list, as torch's ``LocalElasticAgent`` sets them.

    Raises:
        ValueError: the list has no entry for ``local_rank`` (torch raises the same).
    """
    if parent_visible is None:
        visible = str(local_rank)
    else:
        devices = parent_visible.split(",")
        if local_rank >= len(devices):
            raise ValueError(
                f"local_rank {local_rank} exceeds available GPUs in "
                f"CUDA_VISIBLE_DEVICES={parent_visible}"
            )
        visible = devices[local_rank].strip()
    return {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": visible}


def build_rank_env(
    opts: EnvOptions,
    local_rank: int,
    *,
    restart_count: int = 0,
    rank_restart_count: int = 0,
    parent_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables one rank gets on top of the inherited parent environment.

    Args:
        opts: The run's options.
        local_rank: This rank's index on the node (== global rank on a single node).
        restart_count: The attempt number (``TORCHELASTIC_RESTART_COUNT``).
        rank_restart_count: How many times this rank was restarted, alone or with its
            attempt (``RANKVISOR_RESTART_COUNT``).
        parent_env: The launcher's environment (``os.environ`` when None); read for the
            variables torch copies or defaults from it.

    Returns:
        Only the per-rank additions; the spawner merges them over ``os.environ`` as torch's
        SubprocessHandler does.
    """
    parent = os.environ if parent_env is None else parent_env
    # Single node, one agent: group rank 0 of 1, and role ranks equal global ranks.
    env = {
        "LOCAL_RANK": str(local_rank),
        "RANK": str(local_rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(local_rank),
        "ROLE_NAME": opts.role,
        "LOCAL_WORLD_SIZE": str(opts.nprocs),
        "WORLD_SIZE": str(opts.nprocs),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(opts.nprocs),
        "MASTER_ADDR": opts.master_addr,
        "MASTER_PORT": str(opts.master_port),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(opts.max_restarts),
        "TORCHELASTIC_RUN_ID": opts.run_id,
        # torch writes str(bool): "True"/"False".
        "TORCHELASTIC_USE_AGENT_STORE": str(opts.use_agent_store),
        # NCCL aborts hung collectives instead of hanging for ever, unless the user chose.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": parent.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        RESTART_COUNT_ENV: str(rank_restart_count),
    }
    if "OMP_NUM_THREADS" in parent:
        env["OMP_NUM_THREADS"] = parent["OMP_NUM_THREADS"]
    elif opts.nprocs > 1:
        # torchrun's rule: N ranks each spinning up one OpenMP thread per core would
        # oversubscribe the machine N times over, so default to 1 when the user said nothing.
        env["OMP_NUM_THREADS"] = "1"
    if "CUDA_VISIBLE_DEVICES" in parent:
        env["CUDA_VISIBLE_DEVICES"] = parent["CUDA_VISIBLE_DEVICES"]
    if opts.virtual_local_rank:
        env.update(virtual_local_rank_env(local_rank, parent.get("CUDA_VISIBLE_DEVICES")))
    if opts.unbuffered and "PYTHONUNBUFFERED" not in parent:
        env["PYTHONUNBUFFERED"] = "1"
    if opts.faulthandler and "PYTHONFAULTHANDLER" not in parent:
        env["PYTHONFAULTHANDLER"] = "1"
    return env


def build_rank_envs(
    opts: EnvOptions,
    *,
    restart_count: int = 0,
    parent_env: Mapping[str, str] | None = None,
) -> dict[int, dict[str, str]]:
    """``build_rank_env`` for every local rank of a fresh attempt."""
    return {
        r: build_rank_env(
            opts,
            r,
            restart_count=restart_count,
            rank_restart_count=restart_count,
            parent_env=parent_env,
        )
        for r in range(opts.nprocs)
    }


def log_line_prefixes(
    template: str | None, role: str, nprocs: int
) -> dict[int, str] | None:
    """Prefixes per local rank from a ``string.Template`` like torchrun's.

    ``${role_name}``, ``${rank}`` and ``${local_rank}`` are substituted; anything else is
    left as written (``safe_substitute``, as torch does, so a stray ``$`` is not an error).
    None (no template) means the default ``[{role}{local_rank}]:`` header.
    """
    if not template:
        return None
    t = Template(template)
    return {
        r: t.safe_substitute(role_name=role, rank=r, local_rank=r) for r in range(nprocs)
    }


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for rank 0's c10d store.

    The kernel picks it (bind to port 0); there is a window between closing our socket and
    rank 0 binding it, the same window torch's own ``get_free_port`` has.
    """
    with socket.socket(_family(addr), socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
"""One label of a host name (RFC 1123): letters, digits and inner hyphens, 63 at most."""


def check_master_addr(addr: str) -> None:
    """Refuse a ``MASTER_ADDR`` the ranks could not use on this one node.

    The address is checked the way the run needs it: it must be an IP literal or a host
    name in form (so a typo never reaches the resolver), resolve, and be an address of this
    machine, since rank 0's store listens here and every rank connects to it there (the
    free port is found by binding to it, too).

    Raises:
        ValueError: saying which of the three failed, for a person.
    """
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        name = addr[:-1] if addr.endswith(".") else addr
        if not name or len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
            raise ValueError(
                f"{addr!r} is not a host name or an IP address"
                " (give one of this machine's, e.g. 127.0.0.1 or localhost)"
            ) from None
    try:
        family = _family(addr)
    except (OSError, UnicodeError) as e:
        raise ValueError(f"{addr!r} does not resolve ({e})") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
        except OSError as e:
            raise ValueError(
                f"{addr!r} is not an address of this machine ({e.strerror}): rankvisor runs"
                " one node, so rank 0's store listens here"
            ) from None


def port_in_use(addr: str, port: int) -> bool:
    """Whether binding ``addr:port`` fails because something already holds it.

    SO_REUSEADDR is set as the c10d store sets it, so a port only lingering in TIME_WAIT
    counts as free, while one with a listener counts as taken.
    """
    try:
        family = _family(addr)
    except OSError:
        return False
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError as e:
            return e.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def _family(addr: str) -> socket.AddressFamily:
    info = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    return info[0][0]
