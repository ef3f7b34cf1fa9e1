"""Names every room shares: signal names and numbers (``signals``).

A leaf: the standard library only, so the errors, the process layer, the events, the CLI and
the UI may all import it without pulling in anything else of the engine.
"""
