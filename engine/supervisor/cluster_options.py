"""``ClusterOptions``: torchrun's multi-node flags, as one run carries them.

Standard library only: ``rankvisor run`` builds it before anything starts and pickles it to
the supervisor process inside the run's config; torch is imported only where the agent runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ClusterOptions", "parse_nnodes", "parse_rdzv_conf"]


@dataclass(frozen=True)
class ClusterOptions:
    """How this node finds the others: torchrun's ``--nnodes``, ``--rdzv-*`` and friends.

    Attributes:
        min_nodes: ``--nnodes MIN:MAX``'s MIN (or N).
        max_nodes: Its MAX.
        rdzv_backend: "c10d" (a TCPStore hosted by the node whose address is the
            endpoint's), "static" (``--node-rank`` and ``--master-addr/port``), or any
            backend torch has registered.
        rdzv_endpoint: ``HOST:PORT`` of the rendezvous.
        rdzv_conf: ``--rdzv-conf`` as torch reads it (``join_timeout``, ``last_call_timeout``,
            ``close_timeout``, ``timeout``, ...).
        node_rank: ``--node-rank``: only the static backend reads it.
        local_addr: ``--local-addr``: this node's address as the others reach it.
        monitor_interval: Seconds between two looks of the agent at its ranks.
        exit_barrier_timeout: How long a node whose ranks succeeded waits for the others.
        publish_interval: The least time between two status records of this node in the
            store (a few per second at most).
        final_wait_s: At the end, how long a node waits for the others' last records (so
            that every node names the same root cause) and keeps the store up for them.
        wait_hint: See the attribute.
    """

    min_nodes: int
    max_nodes: int
    rdzv_backend: str = "c10d"
    rdzv_endpoint: str = ""
    rdzv_conf: dict[str, str] = field(default_factory=dict)
    node_rank: int = 0
    local_addr: str | None = None
    monitor_interval: float = 0.1
    exit_barrier_timeout: float = 300.0
    publish_interval: float = 0.3
    final_wait_s: float = 5.0
    wait_hint: str = ""
    """Said when the rendezvous times out: where ``--nnodes`` came from and how to ignore it
    (a scheduler's variables left in a shell), or nothing."""

    @property
    def join_timeout_s(self) -> float:
        """How long a rendezvous may take (torch's default is 600 s)."""
        try:
            return float(self.rdzv_conf.get("join_timeout", 600))
        except ValueError:
            return 600.0


def parse_nnodes(text: str) -> tuple[int, int]:
    """``--nnodes`` ("2" or "1:4") as (min, max).

    Raises:
        ValueError: in words, for a person.
    """
    parts = text.strip().split(":")
    if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--nnodes {text!r}: give N or MIN:MAX (whole numbers)")
    low, high = int(parts[0]), int(parts[-1])
    if not 0 < low <= high:
        raise ValueError(f"--nnodes {text!r}: need 0 < MIN <= MAX")
    return low, high


def parse_rdzv_conf(text: str) -> dict[str, str]:
    """``--rdzv-conf k1=v1,k2=v2`` as torch reads it (values stay strings).

    Raises:
        ValueError: a part without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--rdzv-conf {text!r}: {part!r} is not KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
