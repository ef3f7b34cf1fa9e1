"""Print each argument as a line: "out:TEXT" to stdout, "err:TEXT" to stderr, in order.

Usage: say.py out:first err:second out:third ...
"""

import sys

for arg in sys.argv[1:]:
    stream, _, text = arg.partition(":")
    print(text, file=sys.stderr if stream == "err" else sys.stdout, flush=True)
