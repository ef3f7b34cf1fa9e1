"""What status.json adds while a run lasts: the live suspect and each rank's progress.

A hang before any timeout has no failure, so ``suspect`` would stay null; the Supervisor's
live suspect (``engine.supervisor.live_suspect``) fills it, marked ``"live": true`` with the
dumps it rests on. Each rank gets its ``step`` and ``last_output_age_s``, so that a cron
check can see a stall without a viewer. A handle without these (a torchrun attached, a
replay) leaves the record as it is.
"""

from __future__ import annotations

from typing import Any

__all__ = ["add_live"]


def add_live(record: dict[str, Any], sup: object) -> dict[str, Any]:
    """``record`` with the live fields of ``sup`` (a Supervisor) added."""
    progress = getattr(sup, "progress_now", None)
    if callable(progress):
        try:
            now = progress()
        except Exception:  # noqa: BLE001 - the status is written whatever happens
            now = {}
        for r in record.get("ranks", []):
            r.update(now.get(r.get("rank"), {}))
    live = getattr(sup, "live_suspect", None)
    if record.get("suspect") is None and live is not None and live.suspect is not None:
        s = live.suspect
        record["suspect"] = {"rank": s.rank, "reason": s.reason,
                             "ranks": list(s.ranks or (s.rank,)), "kind": s.kind,
                             "live": True, "dumps": list(live.dumps)}
    return record
