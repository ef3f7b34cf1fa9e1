"""Print each argument as a line: "out:TEXT" to stdout, "err:TEXT" to stderr, in order.

Usage: say.py out:first err:second out:third ...   (sleep:S waits S seconds between them)
"""

import sys
import time

for arg in sys.argv[1:]:
    stream, _, text = arg.partition(":")
    if stream == "sleep":
        time.sleep(float(text))
        continue
    print(text, file=sys.stderr if stream == "err" else sys.stdout, flush=True)
