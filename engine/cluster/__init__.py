"""Multi-node runs: torch's elastic agent and rendezvous, with the engine as the process layer.

``options``: ``ClusterOptions``, torchrun's multi-node flags as a run carries them (standard
library only: the command line and the supervisor process read it without torch);
``agent``: ``RankvisorAgent``, torch's ``SimpleElasticAgent`` whose workers are a driven
``Supervisor`` (torch decides membership, ranks and rounds; the engine starts, watches and
stops this node's ranks); ``board``: ``StatusBoard``, each node's small status record in the
rendezvous store and the cluster view read back from it (every rank of every node, one
root cause; ``liveness``: the nodes' beats, so a silent node is seen); ``run``: a whole
multi-node run, headless or in the supervisor process; ``scheduler_env``: the flags Slurm's
or SkyPilot's environment implies; ``door``: each node's supervisor served over TCP to the
other nodes' viewers, behind the run's secret (``requests``: what it answers besides the
control protocol); ``viewer``: ``ClusterHandle``, every rank of every node behind one
handle. Only ``agent`` and ``run`` import torch.
"""

from __future__ import annotations

from .._lazy import face

__all__ = ["ClusterDoor", "ClusterHandle", "ClusterOptions", "RankvisorAgent", "StatusBoard",
           "run_cluster"]

__getattr__, __dir__ = face(
    __name__,
    {
        "ClusterDoor": "door",
        "ClusterHandle": "viewer",
        "ClusterOptions": "options",
        "RankvisorAgent": "agent",
        "StatusBoard": "board",
        "run_cluster": "run",
    },
)
