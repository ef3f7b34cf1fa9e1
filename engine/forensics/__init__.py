"""Forensics: which rank started a failure, why each rank ended, what the run leaves to read.

Pure readings of what the supervisor and the files already hold: ``knockon`` tells a failure
that only echoes another rank's (a collective timeout, a peer that closed its connection)
from one of a rank's own; ``activity`` keeps, per rank, when its output last moved and how
often it usually does; ``suspect`` combines them with the signals a person sent into the
rank most likely to have started it, with its evidence in words; ``pauses`` the ranks a
person paused (at a prompt, by SIGSTOP), so that their silence is never read as a hang;
``progress`` reads training progress (step, iteration, tqdm's N/M) from output lines;
``timeline`` merges every rank's lines from the files in the order they arrived;
``exit_cause`` says why a rank ended, in words (the OOM killer, CUDA out of memory, a
collective's timeout, a crash signal with its Python stack, a signal from outside); ``gpu``
reads each rank's GPU memory and utilisation through NVML where it is installed; ``environ``
keeps each rank's environment with secrets redacted;
``stacks`` dumps every rank's Python stack with py-spy and merges them
into groups of ranks that share one; ``pdb_attach`` attaches pdb to a running rank (Python
3.14's PEP 768) or says why it cannot. Sits above the process, output and log-file rooms;
never textual.
"""

from __future__ import annotations

from .._lazy import face

_MODULE_OF = {
    "ExitCause": "exit_cause",
    "GpuProbe": "gpu",
    "OutputActivity": "activity",
    "PauseLog": "pauses",
    "ProgressReader": "progress",
    "RankFacts": "suspect",
    "SignalRecord": "suspect",
    "StackDump": "stacks",
    "TimelineLine": "timeline",
    "classify": "exit_cause",
    "diagnose": "exit_cause",
    "dump_stacks": "stacks",
    "find_suspect": "suspect",
    "knock_on_reason": "knockon",
    "list_dumps": "stacks",
    "merge_ranks": "timeline",
    "stragglers": "progress",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = face(__name__, _MODULE_OF)
