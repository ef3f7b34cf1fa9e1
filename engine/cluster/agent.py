"""``RankvisorAgent``: torch's elastic agent, with a driven Supervisor as its process layer.

torch's ``SimpleElasticAgent`` keeps what makes a multi-node job behave as under torchrun:
the rendezvous (membership, group rank, the store), the assignment of global and role ranks,
the monitor loop and its policy (a failure restarts the group while ``--max-restarts``
lasts; a node waiting to join restarts it without using one up), the exit barrier. This
class fills in the four methods torch leaves to an agent: ``_start_workers`` builds each
local rank's variables as torch's ``LocalElasticAgent`` does and hands them to the
Supervisor (``start_round``); ``_stop_workers`` ends the round with escalation;
``_monitor_workers`` turns the round's end into torch's ``RunResult`` (failures keyed by
global rank); ``_shutdown`` stops the ranks (the caller closes the Supervisor).

A person's restart-all is a new round on every node: the request is written to the round's
store first (so that the other nodes, whose ranks may die of it, restart instead of
failing), then the loop is told the group is unhealthy with one restart given back, so that
it does not use up ``--max-restarts``. ``TORCHELASTIC_RESTART_COUNT`` keeps torch's meaning;
the run's ``attempt_<n>`` directories count every round this node started.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from string import Template
from typing import Any

from torch.distributed.elastic.agent.server.api import (
    RunResult,
    SimpleElasticAgent,
    WorkerGroup,
    WorkerSpec,
    WorkerState,
)
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous import registry as rdzv_registry

from ..supervisor.agent_env import virtual_local_rank_env
from ..supervisor.cluster_options import ClusterOptions
from ..supervisor.core import Supervisor
from .board import StatusBoard

__all__ = ["RankvisorAgent", "make_spec"]


def make_spec(sup: Supervisor, opts: ClusterOptions) -> WorkerSpec:
    """torch's WorkerSpec for ``sup``'s ranks, with the rendezvous handler torchrun builds."""
    config = sup.config
    conf: dict[str, Any] = dict(opts.rdzv_conf)
    conf.setdefault("timeout", 900)  # torch's launcher default
    endpoint = opts.rdzv_endpoint
    master_addr: str | None = None
    master_port: int | None = None
    if opts.rdzv_backend == "static":
        conf["rank"] = opts.node_rank
        if not endpoint:
            endpoint = f"{config.master_addr}:{config.master_port or 29500}"
        host, _, port = endpoint.rpartition(":")
        master_addr, master_port = host, int(port)
    params = RendezvousParameters(
        backend=opts.rdzv_backend,
        endpoint=endpoint,
        run_id=str(config.run_id),
        min_nodes=opts.min_nodes,
        max_nodes=opts.max_nodes,
        local_addr=opts.local_addr,
        **conf,
    )
    return WorkerSpec(
        role=config.role,
        local_world_size=config.nprocs,
        entrypoint=config.entrypoint,
        args=tuple(config.args),
        rdzv_handler=rdzv_registry.get_rendezvous_handler(params),
        max_restarts=config.max_restarts,
        monitor_interval=opts.monitor_interval,
        master_addr=master_addr,
        master_port=master_port,
        local_addr=opts.local_addr,
    )


class RankvisorAgent(SimpleElasticAgent):
    """torch's agent loop over a driven Supervisor (see the module docstring).

    Args:
        spec: from ``make_spec``.
        sup: the run's Supervisor, constructed with ``driven=True``.
        board: the cluster status board (attached to each round's store).
        on_round: called after each round's ranks started, with the round number (0 first)
            and each local rank's log line prefix.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        sup: Supervisor,
        board: StatusBoard,
        *,
        on_round: Callable[[int, dict[int, str]], None] | None = None,
        exit_barrier_timeout: float = 300.0,
    ) -> None:
        super().__init__(spec, exit_barrier_timeout=exit_barrier_timeout)
        self._sup = sup
        self._board = board
        self._on_round = on_round
        self.rounds = 0
        self.in_rendezvous = False

    # torch calls this from _initialize_workers; flagged so a signal can interrupt it.
    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        self.in_rendezvous = True
        try:
            super()._rendezvous(worker_group)
        finally:
            self.in_rendezvous = False

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        spec = worker_group.spec
        restart_count = spec.max_restarts - self._remaining_restarts
        config = self._sup.config
        envs: dict[int, dict[str, str]] = {}
        prefixes: dict[int, str] = {}
        for worker in worker_group.workers:
            local = worker.local_rank
            envs[local] = {
                "LOCAL_RANK": str(local),
                "RANK": str(worker.global_rank),
                "GROUP_RANK": str(worker_group.group_rank),
                "ROLE_RANK": str(worker.role_rank),
                "ROLE_NAME": spec.role,
                "LOCAL_WORLD_SIZE": str(spec.local_world_size),
                "WORLD_SIZE": str(worker.world_size),
                "GROUP_WORLD_SIZE": str(worker_group.group_world_size),
                "ROLE_WORLD_SIZE": str(worker.role_world_size),
                "MASTER_ADDR": str(worker_group.master_addr),
                "MASTER_PORT": str(worker_group.master_port),
                "TORCHELASTIC_RESTART_COUNT": str(restart_count),
                "TORCHELASTIC_MAX_RESTARTS": str(spec.max_restarts),
                "TORCHELASTIC_RUN_ID": spec.rdzv_handler.get_run_id(),
                "TORCHELASTIC_USE_AGENT_STORE": str(spec.rdzv_handler.use_agent_store),
            }
            if config.virtual_local_rank:
                envs[local].update(virtual_local_rank_env(
                    local, os.environ.get("CUDA_VISIBLE_DEVICES")))
            template = config.log_line_prefix_template
            prefixes[local] = (
                Template(template).safe_substitute(
                    role_name=spec.role, rank=worker.global_rank, local_rank=local
                )
                if template else f"[{spec.role}{worker.global_rank}]:"
            )
        base = worker_group.workers[0].global_rank if worker_group.workers else 0
        node = int(worker_group.group_rank or 0)
        nnodes = int(worker_group.group_world_size or 1)
        store: Any = worker_group.store
        world = worker_group.workers[0].world_size if worker_group.workers else None
        self._board.attach(store, node_rank=node, nnodes=nnodes, round_=self.rounds,
                           base_rank=base, world_size=world)
        self._sup.node_label = f"node {node} of {nnodes} ({self._board.host})"
        self._sup.rank_base = base
        self._sup.set_prefixes(prefixes)
        self._sup.start_round(envs)
        if self._on_round is not None:
            self._on_round(self.rounds, prefixes)
        self.rounds += 1
        return {r.rank: r.pid for r in self._sup.snapshot().ranks}

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        self._sup.stop_round()

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        sup = self._sup
        sig = sup.received_signal
        if sig is not None:
            # As torch's agent on a handled signal: the ranks got it already (the
            # Supervisor forwarded it, SIGKILL at the term timeout); the loop ends.
            raise SignalException(f"Process {os.getpid()} got signal: {sig}",
                                  sigval=signal.Signals(sig))
        if sup.take_restart_request():
            return self._restart_by_person("a person asked for it on this node")
        if sup.unhealthy is not None:
            # torch's D-state rule (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT): the group is
            # unhealthy and is not restarted, as in torch's LocalElasticAgent.
            self._remaining_restarts = 0
            return RunResult(state=WorkerState.UNHEALTHY)
        base = self._board.base_rank
        failed = sup.failures_now()
        finished = sup.round_result()
        if finished is None and not failed:
            if worker_group.spec.rdzv_handler.num_nodes_waiting() > 0:
                # A node joins the next round: torch's loop restarts without using up a
                # restart. When that node failed, this round is a failure here too (the
                # ranks of every node must agree on TORCHELASTIC_RESTART_COUNT).
                if self._board.restart_asked():
                    return self._restart_by_person("a person asked for it on another node")
                if self._board.failed_elsewhere():
                    return RunResult(state=WorkerState.FAILED)
            return RunResult(state=WorkerState.HEALTHY)
        if failed:
            # As torch's agent: the first failure ends the round (the others are being
            # stopped); waiting for the last exit would let a node that rejoined first
            # pass for a membership change.
            if self._board.restart_asked():
                # Our ranks died of another node's restart-all: a new round, not a failure.
                return self._restart_by_person("a person asked for it on another node")
            self._board.mark_failed()
            return RunResult(
                state=WorkerState.FAILED,
                failures={base + r: f for r, f in failed.items()},  # type: ignore[misc]
            )
        assert finished is not None
        result = finished.result
        if result.failures:
            if self._board.restart_asked():
                # Our ranks died of another node's restart-all: a new round, not a failure.
                return self._restart_by_person("a person asked for it on another node")
            return RunResult(
                state=WorkerState.FAILED,
                failures={base + r: f for r, f in result.failures.items()},  # type: ignore[misc]
            )
        if result.stopped:
            if self._board.restart_asked():
                return self._restart_by_person("a person asked for it on another node")
            # A person stopped this node's ranks: this node's run ends (no restart).
            self._remaining_restarts = 0
            return RunResult(
                state=WorkerState.FAILED,
                failures={base + r: f for r, f in result.stopped.items()},  # type: ignore[misc]
            )
        return RunResult(
            state=WorkerState.SUCCEEDED,
            return_values={base + r: None for r in range(worker_group.spec.local_world_size)},
        )

    def _restart_by_person(self, why: str) -> RunResult:
        """A new round that does not use up ``--max-restarts``: torch's loop takes one
        restart off for an unhealthy group, so one is given back first."""
        self._board.ask_restart()
        self._remaining_restarts += 1
        self._sup.notice(f"a new round on every node: {why} (not counted in --max-restarts)",
                         "warning")
        return RunResult(state=WorkerState.UNHEALTHY)

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        # The ranks only: the caller publishes the end and closes the Supervisor.
        self._sup.stop_round(float(timeout))
