"""Forensics: what a failed or hung run leaves to read, and what it means.

Why a rank ended, in words (``exit_cause``: the OOM killer, CUDA out of memory, a
collective's timeout, a crash signal with its Python stack, a signal from outside), each
rank's GPU memory and utilisation (``gpu``, through NVML where it is installed), and one
archive of a run for a bug report (``bundle``). Imports the standard library and the
engine's process, log-file and control packages; nothing imports it but the supervisor,
the status writer and the front ends.
"""

from __future__ import annotations

from engine._lazy import face

__all__ = [
    "ExitCause",
    "GpuProbe",
    "classify",
    "diagnose",
    "make_bundle",
]

__getattr__, __dir__ = face(
    __name__,
    {
        "ExitCause": "exit_cause",
        "GpuProbe": "gpu",
        "classify": "exit_cause",
        "diagnose": "exit_cause",
        "make_bundle": "bundle",
    },
)
