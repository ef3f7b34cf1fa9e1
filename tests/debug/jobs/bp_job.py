"""Rank 0 stops at breakpoint() with x = 41; every rank then says it is done."""

import os

x = 41
if os.environ["RANK"] == "0":
    breakpoint()  # noqa: T100 - the test answers it
print(f"done {os.environ['RANK']}", flush=True)
