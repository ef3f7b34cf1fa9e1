"""``python -m rankvisor.tui``: the same as the ``rankvisor`` command."""

from __future__ import annotations

import sys

from .cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
