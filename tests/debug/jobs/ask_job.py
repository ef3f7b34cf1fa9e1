"""Each rank asks a question on stdin (a prompt without a newline) and prints the answer."""

import os

answer = input(f"continue rank {os.environ['RANK']}? ")
print(f"rank {os.environ['RANK']} got {answer!r}", flush=True)
raise SystemExit(0 if answer == "yes" else 3)
