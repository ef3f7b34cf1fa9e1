"""Raise ValueError from a main decorated with torch's own ``record`` (imports torch: slow).

Usage: raise_torch_recorded.py [MESSAGE]
"""

import sys

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    raise ValueError(sys.argv[1] if len(sys.argv) > 1 else "boom from torch binary")


if __name__ == "__main__":
    main()
