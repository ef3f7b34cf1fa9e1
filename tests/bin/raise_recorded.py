"""Raise ValueError from a main decorated with rankvisor's ``record`` (writes error.json).

Usage: raise_recorded.py [MESSAGE]
"""

import sys

from rankvisor.engine.errors import record


@record
def main() -> None:
    print("about to raise", flush=True)
    raise ValueError(sys.argv[1] if len(sys.argv) > 1 else "boom from binary")


if __name__ == "__main__":
    main()
