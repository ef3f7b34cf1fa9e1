"""Every rank asks for a line on its stdin (``input()``); with stdin at its end, each raises
its own EOFError at once and exits 1."""

print("ready", flush=True)
input("name? ")
