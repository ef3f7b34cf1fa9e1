"""``python -m tui``: the same as the ``rankvisor`` command."""

from __future__ import annotations

import sys

from tui.cli import main

if __name__ == "__main__":
    sys.exit(main())
