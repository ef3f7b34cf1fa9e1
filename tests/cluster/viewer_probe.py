"""A viewer of every node's ranks, run on one host by the two-host tests and benchmark:
``python -m tests.cluster.viewer_probe RUN_DIR SECONDS [--stack RANK | --terminate RANK]
[--release HOLD_FILE]`` connects to the run's supervisor on this host, watches the whole job
through ``ClusterHandle`` and prints one JSON line per thing seen (a remote rank's line with
its latency, a state change, a notice, the command's answer, the connections and bytes), then
a summary line with each remote rank's state and pid as the viewer shows them. With
``--release`` it then creates HOLD_FILE (the job's ranks end when it exists) and watches the
end too: a line with the remote ranks' states once every other node finished (60 s at most)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
import time

from rankvisor.engine.cluster.viewer import ClusterHandle
from rankvisor.engine.control import registry
from rankvisor.engine.control.client import NoAnswer, RemoteHandle
from rankvisor.engine.events import Event, RankOutput, RankStateChanged, SupervisorNotice
from rankvisor.engine.handle import DumpStacks, TerminateRanks

TICK = re.compile(r"t=(\d+\.\d+)")
MIRROR_WAIT_S = 30.0


def _mirrored(viewer: ClusterHandle, ranks: set[int]) -> bool:
    """Whether each of ``ranks`` has some bytes of its files mirrored on this host; True
    once this host's supervisor has closed (a run a command ended: nothing more comes)."""
    try:
        files = {r.rank: (r.stdout_path, r.stderr_path) for r in viewer.snapshot().ranks}
    except NoAnswer:
        return True

    def has_bytes(path: str) -> bool:
        return bool(path) and os.path.isfile(path) and os.path.getsize(path) > 0

    return all(any(has_bytes(p) for p in files.get(rank, ())) for rank in ranks)


def main() -> None:
    argv = sys.argv[1:]
    release = ""
    if "--release" in argv:
        at = argv.index("--release")
        release = argv[at + 1]
        del argv[at:at + 2]
    run_dir, seconds = argv[0], float(argv[1])
    command = argv[2] if len(argv) > 3 else ""
    target = int(argv[3]) if len(argv) > 3 else None
    entry = registry.resolve(run_dir, running_only=True)
    local = RemoteHandle.connect(entry.socket, name="viewer probe")
    viewer = ClusterHandle(local, tempfile.mkdtemp(prefix="rv-probe-"))
    lock = threading.Lock()
    out = sys.stdout
    local_ranks = {r.rank + local.snapshot().rank_base for r in local.snapshot().ranks}
    latencies: list[float] = []
    seen_ranks: set[int] = set()
    last: dict[str, list[object]] = {}
    """Each remote rank's state and pid as the viewer's events last told them."""
    notices: list[str] = []

    def say(**what: object) -> None:
        with lock:
            out.write(json.dumps(what) + "\n")
            out.flush()

    def sink(event: Event) -> None:
        now = time.time()
        if isinstance(event, RankOutput) and event.rank not in local_ranks:
            for line in event.lines:
                m = TICK.search(line)
                lag = now - float(m.group(1)) if m else None
                if lag is not None:
                    latencies.append(lag)
                say(kind="line", rank=event.rank, line=line, lag=lag, first=event.first_line,
                    t=now)
            if event.lines:
                seen_ranks.add(event.rank)
        elif isinstance(event, RankStateChanged) and event.rank not in local_ranks:
            last[str(event.rank)] = [event.new.value, event.pid]
            say(kind="state", rank=event.rank, new=event.new.value, pid=event.pid, t=now)
        elif isinstance(event, SupervisorNotice):
            say(kind="notice", message=event.message, t=now)
            notices.append(event.message)

    info, _unsub = viewer.watch(sink)
    # What a view starts from: the remote ranks' states and pids at the watch, which the
    # state events then change (the viewer may have connected to their node before).
    say(kind="info", nprocs=info.nprocs, places=info.rank_places,
        remote={str(r.rank): [r.state.value, r.pid] for r in info.ranks
                if r.rank not in local_ranks})
    start = time.monotonic()
    if target is not None:
        time.sleep(1.0)
        if command == "--stack":
            result = viewer.execute(DumpStacks((target,), nonblocking=True))
        else:
            result = viewer.execute(TerminateRanks((target,), timeout_s=5))
        say(kind="answer", ok=result.ok, message=result.message,
            path=(result.data or {}).get("path") if result.data else None)
    bytes0 = viewer.bytes_in + sum(n.handle.bytes_read for n in viewer.nodes.values()
                                   if n.handle is not None)
    while time.monotonic() - start < seconds:
        time.sleep(1.0)
        say(kind="tick", connections=viewer.connections,
            reachable={n: node.reachable for n, node in viewer.nodes.items()})
    # A stack dump holds the link's other answers (the mirror's reads among them) until
    # py-spy is done: wait, bounded, for the files of every remote rank that wrote.
    deadline = time.monotonic() + MIRROR_WAIT_S
    while time.monotonic() < deadline and not _mirrored(viewer, seen_ranks):
        time.sleep(0.2)
    got = viewer.bytes_in + sum(n.handle.bytes_read for n in viewer.nodes.values()
                                if n.handle is not None)
    lat = sorted(latencies)
    say(kind="summary", connections=viewer.connections, lines=len(lat),
        bytes_per_s=(got - bytes0) / max(1e-9, time.monotonic() - start),
        p50=lat[len(lat) // 2] if lat else None,
        p99=lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
        mirror=viewer.mirror_dir, remote=_remote(viewer, local_ranks))
    if release:
        open(release, "a").close()
        deadline = time.monotonic() + 60.0
        # Each remote node's end, and the viewer's word on it (said once its RunFinished
        # came or its link went after it), printed above.
        while time.monotonic() < deadline and not all(
                n.finished and any(f"node {n.number} (" in m and "finished its part" in m
                                   for m in list(notices))
                for n in viewer.nodes.values()):
            time.sleep(0.2)
        say(kind="end", remote=last,
            finished={n: node.finished for n, node in viewer.nodes.items()})
    viewer.detach()


def _remote(viewer: ClusterHandle, local_ranks: set[int]) -> dict[str, list[object]]:
    """Each remote rank's state and pid as the viewer shows them now ({} once this host's
    supervisor has closed)."""
    try:
        ranks = viewer.snapshot().ranks
    except NoAnswer:
        return {}
    return {str(r.rank): [r.state.value, r.pid] for r in ranks if r.rank not in local_ranks}


if __name__ == "__main__":
    main()
