"""Variables the supervisor reads from its own environment that its ranks must never get.

A rank runs whatever code the job brings (and a debugger lets a person run more): the key a
node's cluster door derives its secret from would let that code drive every rank of the job
on every host. The ranks' environment is ours minus these names (a value the command line sets
for the ranks on purpose still goes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["CLUSTER_KEY_ENV", "NOT_FOR_RANKS", "inherited"]

CLUSTER_KEY_ENV: Final = "RANKVISOR_CLUSTER_KEY"
"""The cluster key (``engine.cluster.door_key``)."""

NOT_FOR_RANKS: Final = frozenset({CLUSTER_KEY_ENV})


def inherited(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as a rank inherits it: without the supervisor's own secrets."""
    return {k: v for k, v in environ.items() if k not in NOT_FOR_RANKS}
