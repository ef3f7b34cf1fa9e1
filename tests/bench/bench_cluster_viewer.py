"""A viewer of every node's ranks on one host, its lines from the other: what it costs.

``python tests/bench/bench_cluster_viewer.py [SECONDS] [TICK_S]`` (default 20 0.05; root,
for the two hosts of tests/cluster/hosts.py): a 2 x 2 gloo job whose ranks each write a
line every TICK_S with their wall time in it, and on node01 the viewer probe
(tests/cluster/viewer_probe.py, a ``ClusterHandle``) for SECONDS. It prints, as JSON and as
a table: the latency of node02's lines to the viewer on node01 (the rank's write to the
viewer's sink, one clock: the two hosts share the kernel), p50 and p99; the viewer's TCP
connections to other nodes; and the bytes a second it received from them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT))

from tests.cluster.hosts import TwoHosts  # noqa: E402
from tests.cluster.test_two_hosts import Job  # noqa: E402


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    tick = sys.argv[2] if len(sys.argv) > 2 else "0.05"
    problem = TwoHosts.problem()
    if problem is not None:
        sys.exit(f"two hosts cannot be made here: {problem}")
    tmp = Path(tempfile.mkdtemp(prefix="rv-bench-viewer-"))
    hold = tmp / "hold"
    with TwoHosts() as hosts:
        job = Job(hosts, tmp, env={"HOLD_FILE": str(hold), "TICK_S": tick},
                  script=str(ROOT / "tests" / "bin" / "mn_ticker_job.py"))
        deadline = time.monotonic() + 120
        run_dir = None
        while time.monotonic() < deadline and run_dir is None:
            for status in tmp.glob("h0/*/status.json"):
                data = json.loads(status.read_text() or "{}")
                ranks = data.get("ranks") or []
                if len(ranks) == 4 and all(r["state"] == "running" for r in ranks):
                    run_dir = str(status.parent)
            time.sleep(0.2)
        if run_dir is None:
            sys.exit("the job did not start")
        probe = hosts.run(0, [sys.executable, "-m", "tests.cluster.viewer_probe", run_dir,
                              str(seconds)], cwd=ROOT, timeout=seconds + 60)
        hold.touch()
        job.wait()
    rows = [json.loads(line) for line in probe.stdout.splitlines() if line.startswith("{")]
    summary = rows[-1]
    out = {"seconds": seconds, "tick_s": float(tick), "remote_ranks": 2,
           "lines": summary["lines"], "p50_ms": round(summary["p50"] * 1000, 2),
           "p99_ms": round(summary["p99"] * 1000, 2), "connections": summary["connections"],
           "bytes_per_s": round(summary["bytes_per_s"])}
    print(json.dumps(out))
    print("| lines | p50 | p99 | connections | bytes/s |")
    print("|---|---|---|---|---|")
    print(f"| {out['lines']} | {out['p50_ms']} ms | {out['p99_ms']} ms | "
          f"{out['connections']} | {out['bytes_per_s']} |")


if __name__ == "__main__":
    main()
