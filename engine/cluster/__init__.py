"""Multi-node runs: torch's elastic agent and rendezvous, with the engine as the process layer.

``agent``: ``RankvisorAgent``, torch's ``SimpleElasticAgent`` whose workers are a driven
``Supervisor`` (torch decides membership, ranks and rounds; the engine starts, watches and
stops this node's ranks); ``board``: ``StatusBoard``, each node's small status record in the
rendezvous store and the cluster view read back from it (every rank of every node, one
root cause; ``liveness``: the nodes' beats, so a silent node is seen); ``scheduler_env``:
the flags Slurm's or SkyPilot's environment implies; ``door``: each node's supervisor served
over TCP to the other nodes' viewers, behind the run's secret (``requests``: what it answers
besides the control protocol); ``viewer``: ``ClusterHandle``, every rank of every node
behind one handle. Only ``agent`` imports torch. The flags a run carries (``ClusterOptions``)
live beside the run's configuration in ``engine.supervisor``; a whole multi-node run on this
node (``run_cluster``) is a front end, in ``engine.entry``.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "ClusterDoor": "door",
    "ClusterHandle": "viewer",
    "RankvisorAgent": "agent",
    "StatusBoard": "board",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
