"""torch's own texts read as evidence: the DETAIL collective mismatch, monitored_barrier and
NCCL's watchdog name a rank (the messages as torch 2.13 prints them; the gloo jobs in
tests/test_collectives_gloo.py)."""

from __future__ import annotations

from rankvisor.engine.forensics.torch_texts import torch_named

FP = ("CollectiveFingerPrint(SequenceNumber=4, OpType={op}, TensorShape=[4], TensorDtypes=Float, "
      "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu))")


def _mismatch(me: int, my_op: str, other: int, other_op: str) -> str:
    return ("RuntimeError: Detected mismatch between collectives on ranks. "
            f"Rank {me} is running collective: {FP.format(op=my_op)}, but Rank {other} is "
            f"running collective: {FP.format(op=other_op)}.Collectives differ in the "
            f"following aspects:   Op type: {my_op}vs {other_op}")


def test_the_rank_whose_op_differs_from_the_others_is_named() -> None:
    messages = {0: _mismatch(0, "ALLREDUCE", 1, "BROADCAST"),
                1: _mismatch(1, "BROADCAST", 0, "ALLREDUCE"),
                2: _mismatch(2, "ALLREDUCE", 1, "BROADCAST")}
    assert torch_named(messages) == {1: (
        "rank 1: ran BROADCAST where ranks 0 and 2 ran ALLREDUCE (collective #4; torch's "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL check)")}
    # Two ranks, two ops: neither is the odd one.
    assert torch_named({0: messages[0], 1: messages[1]}) == {}


def test_monitored_barrier_and_nccl_watchdog_texts_name_ranks() -> None:
    barrier = {0: "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 4000 ms",
               2: "RuntimeError: Rank 2 successfully reached monitoredBarrier, but received "
                  "errors while waiting for send/recv from rank 0."}
    assert list(torch_named(barrier)) == [1]
    many = {0: "Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms"}
    assert list(torch_named(many)) == [1, 3]
    nccl = {r: f"[PG ID 0 PG GUID 0(default_pg) Rank {r}] Timeout at NCCL work: {n}, last "
               f"enqueued NCCL work: {n}, last completed NCCL work: {n - 1}."
            for r, n in ((0, 5), (1, 4), (2, 5))}
    assert torch_named(nccl) == {1: "rank 1: its last enqueued NCCL work was #4, where ranks "
                                    "0 and 2 enqueued #5 (NCCL's watchdog)"}
    assert torch_named({0: "ValueError: loss is NaN"}) == {}
