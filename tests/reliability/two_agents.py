"""One node of a two-node job for test_torch_agents.py: torch's own LocalElasticAgent, c10d
rendezvous, four function ranks, with the engine's ``start_processes`` as its process layer.

Run as ``python -m tests.reliability.two_agents NODE PORT RUN_ID LOG_DIR`` from the repository
root; prints one ``RESULT {json}`` line (the agent's result) and exits 0 when it succeeded.
The ranks' function lives here so that the spawned ranks can import it.
"""

from __future__ import annotations

import json
import os
import sys


def all_reduce_ranks() -> int:
    """Each rank: join the gloo group, sum the ranks, check the sum, return its rank."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend="gloo")
    total = torch.tensor(rank)
    dist.all_reduce(total)
    if total.item() != world * (world - 1) // 2:
        raise RuntimeError(f"rank {rank}: the sum is {total.item()}")
    return rank


def main(node: int, port: int, run_id: str, log_dir: str) -> int:
    import rankvisor.engine as engine
    import torch.distributed.elastic.rendezvous.registry as rendezvous
    from torch.distributed.elastic.agent.server import local_elastic_agent
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    local_elastic_agent.start_processes = engine.start_processes  # the engine, not torch's
    handler = rendezvous.get_rendezvous_handler(RendezvousParameters(
        backend="c10d", endpoint=f"localhost:{port}", run_id=run_id, min_nodes=2,
        max_nodes=2, is_host=node == 0,
    ))
    spec = WorkerSpec(role="sum", local_world_size=4, entrypoint=all_reduce_ranks, args=(),
                      rdzv_handler=handler, max_restarts=0, monitor_interval=0.01)
    agent = local_elastic_agent.LocalElasticAgent(
        spec, logs_specs=engine.DefaultLogsSpecs(log_dir=log_dir), start_method="spawn",
        exit_barrier_timeout=120,
    )
    try:
        result = agent.run()
    finally:
        # As torchrun's launcher ends every run: the rendezvous (and the store it holds)
        # shut down before the interpreter's end, where a store thread left running may
        # end the agent with SIGABRT ("terminate called without an active exception").
        handler.shutdown()
    print("RESULT " + json.dumps({
        "node": node, "failed": result.is_failed(), "returned": sorted(result.return_values),
        "failures": {str(r): f.exitcode for r, f in result.failures.items()},
    }), flush=True)
    return 1 if result.is_failed() else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]))
