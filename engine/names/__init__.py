"""Names and words every room shares: signal names and numbers (``signals``), and the words
of a refused command (``refusals``), one copy for every handle.

A leaf: the standard library only, so the errors, the process layer, the events, the
handles, the CLI and the UI may all import it without pulling in anything else.
"""
