"""Rank 0 writes the given text as its error.json (untouched bytes) and exits 1; others wait.

Usage: write_error_json.py TEXT  (the other ranks sleep until they are stopped)
"""

import os
import sys
import time

if os.environ.get("RANK", "0") == "0":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        f.write(sys.argv[1])
    print("rank 0 wrote its error file", flush=True)
    sys.exit(1)
print("waiting", flush=True)
time.sleep(60)
