"""A viewer in its own process, for the slow-client tests: subscribe, record, report.

Usage: remote_viewer.py SOCKET OUT.json

Connects a RemoteHandle, records every output line it is given as (rank, stream, line
number), counts the skipped markers, waits for the run's end and writes what it saw to
OUT.json. Prints "ready" once subscribed.
"""

from __future__ import annotations

import json
import sys
import threading

from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.events import Event, RankOutput

sock_path, out_path = sys.argv[1], sys.argv[2]
handle = RemoteHandle.connect(sock_path, name="slow", recent_lines=10**7,
                               reread_lines=10**7)
seen: dict[str, list[int]] = {}
lock = threading.Lock()
skipped = [0]
original = handle._skipped


def count_skips(message: dict) -> None:
    skipped[0] += 1
    original(message)


handle._skipped = count_skips  # type: ignore[method-assign]


def sink(event: Event) -> None:
    if isinstance(event, RankOutput):
        with lock:
            key = f"{event.rank}/{event.stream}"
            seen.setdefault(key, []).extend(
                range(event.first_line, event.first_line + len(event.lines))
            )


handle.subscribe(sink)
print("ready", flush=True)
finished = handle.wait(600)
with open(out_path, "w") as f:
    json.dump({"seen": seen, "skipped": skipped[0], "finished": finished is not None}, f)
handle.detach()
