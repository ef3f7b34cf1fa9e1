"""What a person reads after letting go of a run that goes on: how to come back to it.

Printed by the app after a detach and by ``rankvisor run -D``: plain words, no Textual.
"""

from __future__ import annotations

__all__ = ["attach_hint"]


def attach_hint(run_dir: str) -> str:
    """What a person reads after a detach: the run goes on, and how to come back to it."""
    where = run_dir or "the run"
    return (
        f"rankvisor: detached; the run goes on in {where}\n"
        f"  attach again:  rankvisor attach {run_dir}\n"
        f"  end it:        rankvisor stop {run_dir}\n"
    )
