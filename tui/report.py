"""The summary printed on the normal terminal after the app closes, so the root cause is not
lost with the alternate screen: the earliest failure first, with its traceback, then the rest,
then the ranks rankvisor stopped (listed apart: they did not fail), and the stack dumps
taken during the run.
"""

from __future__ import annotations

from ..engine.forensics.collectives_run import saved_captures
from ..engine.forensics.stacks import list_dumps
from ..engine.states import RankState
from .model import RunView
from .widgets.ansi import plain_text
from .widgets.failure_report import failure_details, stderr_tail, when_text

__all__ = ["format_summary"]

SHOWN_DUMPS = 5
"""The newest stack dumps the summary names (the error view lists them all)."""


def format_summary(run: RunView, *, stderr_lines: int = 8) -> str:
    """Plain text (no colours, no escapes from the ranks) ending with a newline."""
    out: list[str] = []
    counts = ", ".join(f"{n} {state.value}" for state, n in run.counts().items())
    verdict = "succeeded" if run.exit_code() == 0 else "did not succeed"
    out.append(
        f"rankvisor: {run.name} ({run.nprocs} ranks, attempt {run.attempt}) {verdict}: {counts}"
    )
    for line in run.earlier_attempts:
        out.append(f"  earlier {line}")
    failures = run.failures()
    stopped = run.stopped()
    root = run.root_cause()
    if not failures and stopped:
        # Terminate-all, quit: nobody failed on their own, so nobody is blamed.
        out.append("  no root cause: the run was stopped by rankvisor")
    suspect = run.suspect
    # A suspect named only for failing first is the root cause: said once, below.
    same = suspect is not None and suspect.kind == "failure" and set(suspect.ranks) <= {root}
    if suspect is not None and failures and not same:
        out.append(f"  suspect: {plain_text(suspect.reason)}")
    for view in failures:
        details = failure_details(view)
        head = "root cause" if view.rank == root else "also failed"
        when = ""
        stamp = when_text(details.timestamp)
        if stamp:
            when = " at " + stamp
        how = view.exit_label or view.state.value
        out.append(f"  {head}: rank {view.rank} (pid {view.pid}) {how}{when}")
        cause = view.exit_cause
        if cause is not None and cause.tells_more:
            out.append(f"    {plain_text(cause.text)}")
        if view.rank != root:
            continue
        last_line = details.callstack.strip().splitlines()[-1] if details.callstack.strip() else ""
        if details.message and details.message.strip() != last_line.strip():
            out.append(f"    {plain_text(details.message)}")
        if details.callstack:
            out.extend("    " + plain_text(line) for line in details.callstack.splitlines())
        else:
            tail = stderr_tail(view, stderr_lines)
            if tail:
                out.append("    last stderr lines:")
                out.extend("      " + plain_text(line) for line in tail)
            else:
                out.append("    no error.json, and stderr is empty")
        if details.error_file and details.has_error_file:
            out.append(f"    error file: {details.error_file}")
    for view in stopped:
        # How it ended (SIGTERM, SIGKILL after the grace, or the code its handler chose).
        how = view.exit_label or view.state.value
        out.append(f"  stopped by rankvisor: rank {view.rank} (pid {view.pid}) {how}")
    if any(v.state is RankState.SUCCEEDED for v in run.ranks) and (failures or stopped):
        ok = [str(v.rank) for v in run.ranks if v.state is RankState.SUCCEEDED]
        out.append(f"  succeeded: rank {', '.join(ok)}")
    dumps = list_dumps(run.log_dir) if run.log_dir else []
    for saved in dumps[-SHOWN_DUMPS:]:  # taken during the run: S, before a SIGKILL
        out.append(f"  stacks saved: {saved.path}")
    if len(dumps) > SHOWN_DUMPS:
        out.append(f"  ... and {len(dumps) - SHOWN_DUMPS} older stack dump(s) beside them")
    if run.live_suspect and (run.suspect is None or not failures):
        out.append(f"  live suspect (while it hung): {plain_text(run.live_suspect)}")
    if run.log_dir:
        # The collectives captured for the run (torch's Flight Recorder), newest last.
        for path in saved_captures(run.log_dir)[-SHOWN_DUMPS:]:
            out.append(f"  collectives saved: {path}")
        out.append(f"  logs: {run.log_dir}")
    return "\n".join(out) + "\n"
