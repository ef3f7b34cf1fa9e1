"""The load soak, run by hand (not collected): N ranks x R lines/s for S s through the
Supervisor, every line checked against the file and its numbering; prints JSON and a table.

    python tests/bench/bench_reliability.py                      # 16 ranks x 20k lines/s, 15 s
    python tests/bench/bench_reliability.py --ranks 8 --rate 5000 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.reliability.load import run_load  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--rate", type=int, default=20_000, help="lines per second per rank")
    p.add_argument("--seconds", type=float, default=15.0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = run_load(Path(tmp), a.ranks, a.rate, a.seconds)
    print(json.dumps(figures))
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
