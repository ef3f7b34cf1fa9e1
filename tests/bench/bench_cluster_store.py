"""What the multi-node status records cost a real TCPStore, on loopback.

``python tests/bench/bench_cluster_store.py [NODES] [RANKS] [SECONDS]`` (default 1000 8 5):
NODES simulated nodes publish the record a ``StatusBoard`` writes for RANKS ranks each, as
fast as the board would let them in a bad moment (every node changing at its maximum rate,
``publish_interval`` 0.3 s), from 8 processes that share the nodes; then one reader reads
every record the way a board does (the counter, then one ``multi_get``). It prints the record
size, the writes per second the store took, and what a full read costs (bytes, seconds).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from datetime import timedelta


def _record(node: int, ranks: int) -> str:
    rec = {
        "node_rank": node, "host": f"node-{node:04d}.cluster.example", "round": 0,
        "attempt": 0, "finished": False,
        "ranks": [[r, node * ranks + r, "running", None, 0, 0.4] for r in range(ranks)],
        "rc": None, "suspect": None,
    }
    return json.dumps(rec, separators=(",", ":"))


def _publisher(port: int, nodes: list[int], ranks: int, seconds: float, interval: float,
               counts: mp.Queue) -> None:  # type: ignore[type-arg]
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    writes = 0
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < end:
        for n in nodes:
            store.set(f"rankvisor/node/{n}", _record(n, ranks))
            store.add("rankvisor/gen", 1)
            writes += 1
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    counts.put(writes)


def main() -> None:
    from torch.distributed import TCPStore

    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    ranks = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    interval = 0.3
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    port = server.port
    ctx = mp.get_context("spawn")  # not fork: the store server runs threads of its own
    counts: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_publisher,
                        args=(port, list(range(i, nodes, 8)), ranks, seconds, interval, counts))
             for i in range(8)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    writes = sum(counts.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    took = time.monotonic() - t0
    size = len(_record(nodes - 1, ranks))
    keys = [f"rankvisor/node/{n}" for n in range(nodes)]
    t1 = time.perf_counter()
    reads = 5
    for _ in range(reads):
        server.add("rankvisor/gen", 0)
        values = server.multi_get(keys)
    read_s = (time.perf_counter() - t1) / reads
    read_bytes = sum(len(v) for v in values)
    asked = nodes / interval
    print(f"{nodes} nodes x {ranks} ranks: record {size} bytes")
    print(f"writes: {writes / took:,.0f}/s taken by the store (asked {asked:,.0f}/s at the "
          f"most, {asked * size / 1e6:.2f} MB/s)")
    print(f"full read: {read_bytes / 1e3:,.0f} kB in {read_s * 1e3:.1f} ms "
          f"(one reader; every node reading every {max(1.0, nodes / 100):g} s: "
          f"{nodes / max(1.0, nodes / 100) * read_bytes / 1e6:.1f} MB/s from the store)")


if __name__ == "__main__":
    main()
