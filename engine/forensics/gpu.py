"""Each rank's GPU memory and utilisation, through NVML, where NVML is installed.

Why NVML and not ``nvidia-smi``: one library call per device per sample instead of a
process start per sample; ``nvidia-ml-py`` (``pip install rankvisor[gpu]``) is the module
NVIDIA publishes, imported as ``pynvml`` only on first use, so a machine without a GPU or
without the module pays nothing and shows nothing (no column, no message).

One ``GpuProbe.snapshot`` per stats pass asks every device for the processes using it
(``nvmlDeviceGetComputeRunningProcesses`` and ``...GraphicsRunningProcesses``: pid and
memory) and their recent SM utilisation (``nvmlDeviceGetProcessUtilization``, samples since
the previous pass); ``GpuSnapshot.for_pids`` then sums what a rank and its descendants use
(a DataLoader worker or a compile worker may hold a context of its own).

Where NVML's pids are not ours: a container with its own pid namespace sees the host's pids
in NVML's answers (older drivers), so no process matches and nothing is shown. NVML errors
(a device lost, a driver reloaded) make that pass empty; an init that fails turns the probe
off for the run. Standard library only, plus ``pynvml`` when present.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

__all__ = ["GpuProbe", "GpuReading", "GpuSnapshot"]


class GpuReading(NamedTuple):
    """What one rank (and its descendants) uses of the GPUs now."""

    memory_bytes: int
    """Device memory held by its processes, summed over every GPU."""
    util_percent: float | None
    """SM utilisation of its processes summed over GPUs (100.0 is one whole GPU busy), None
    where the driver keeps no per-process samples."""
    gpus: tuple[int, ...]
    """Indices of the GPUs its processes use."""


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One pass over every device: per pid, memory and utilisation on each GPU it uses."""

    memory: dict[int, dict[int, int]] = field(default_factory=dict)
    """pid -> {gpu index: bytes}."""
    util: dict[int, dict[int, float]] = field(default_factory=dict)
    """pid -> {gpu index: SM utilisation %} (only pids NVML sampled)."""
    has_util: bool = False
    """Whether the driver answered for per-process utilisation at all."""

    def for_pids(self, pids: Iterable[int]) -> GpuReading | None:
        """What ``pids`` use together; None when none of them is on a GPU."""
        total = 0
        util = 0.0
        gpus: set[int] = set()
        found = False
        for pid in pids:
            per_gpu = self.memory.get(pid)
            if per_gpu is not None:
                found = True
                total += sum(per_gpu.values())
                gpus.update(per_gpu)
            per_util = self.util.get(pid)
            if per_util is not None:
                found = True
                util += sum(per_util.values())
                gpus.update(per_util)
        if not found:
            return None
        return GpuReading(total, round(util, 1) if self.has_util else None,
                          tuple(sorted(gpus)))


class GpuProbe:
    """NVML, opened on first use; every call is safe without a GPU (it returns None).

    Args:
        module: the ``pynvml`` module to use (tests pass a recorded one); None imports it
            on the first ``snapshot``.
    """

    def __init__(self, module: ModuleType | Any | None = None) -> None:
        self._nvml: Any = module
        self._lock = threading.Lock()
        self._state = "new"  # "new" -> "on" (NVML answered) | "off" (no module, no GPU)
        self._handles: list[tuple[int, Any]] = []
        self._last_seen: dict[int, int] = {}
        """gpu index -> NVML time stamp (microseconds) of the newest utilisation sample
        read: the next call asks only for newer ones."""

    @property
    def available(self) -> bool:
        """Whether NVML answered (False before the first snapshot, and without NVML)."""
        return self._state == "on"

    def _open(self) -> bool:
        if self._state != "new":
            return self._state == "on"
        self._state = "off"
        try:
            if self._nvml is None:
                self._nvml = importlib.import_module("pynvml")
            nvml = self._nvml
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        except Exception:  # noqa: BLE001 - no module, no driver, no device: no columns
            return False
        if not self._handles:
            return False
        self._state = "on"
        return True

    def snapshot(self) -> GpuSnapshot | None:
        """Every process on every GPU now; None without NVML (or when a pass failed)."""
        with self._lock:
            if not self._open():
                return None
            nvml = self._nvml
            memory: dict[int, dict[int, int]] = {}
            util: dict[int, dict[int, float]] = {}
            has_util = False
            try:
                for index, handle in self._handles:
                    for getter in ("nvmlDeviceGetComputeRunningProcesses",
                                   "nvmlDeviceGetGraphicsRunningProcesses"):
                        call = getattr(nvml, getter, None)
                        if call is None:
                            continue
                        for proc in call(handle) or ():
                            used = getattr(proc, "usedGpuMemory", None)
                            per = memory.setdefault(int(proc.pid), {})
                            # None: the driver cannot tell (Windows WDDM, some MIG setups).
                            per[index] = max(per.get(index, 0), int(used or 0))
                    samples = self._utilisation(nvml, index, handle)
                    if samples is not None:
                        has_util = True
                        for pid, sm in samples.items():
                            util.setdefault(pid, {})[index] = sm
            except Exception:  # noqa: BLE001 - NVMLError: a device lost; try the next pass
                return None
            return GpuSnapshot(memory, util, has_util)

    def _utilisation(self, nvml: Any, index: int, handle: Any) -> dict[int, float] | None:
        """pid -> SM % from the samples newer than the last read; None if unsupported."""
        call = getattr(nvml, "nvmlDeviceGetProcessUtilization", None)
        if call is None:
            return None
        try:
            samples = call(handle, self._last_seen.get(index, 0))
        except Exception as e:  # noqa: BLE001 - NVMLError_NotFound: no sample since then
            name = type(e).__name__
            if "NotFound" in name or "NOT_FOUND" in str(e).upper().replace(" ", "_"):
                return {}
            return None  # NotSupported and the like: no utilisation on this device
        latest: dict[int, tuple[int, float]] = {}
        newest = self._last_seen.get(index, 0)
        for s in samples or ():
            stamp = int(getattr(s, "timeStamp", 0) or 0)
            newest = max(newest, stamp)
            pid = int(s.pid)
            # Several samples of one pid in the window: the latest is what "now" means.
            if pid not in latest or stamp >= latest[pid][0]:
                latest[pid] = (stamp, float(getattr(s, "smUtil", 0) or 0))
        self._last_seen[index] = newest
        return {pid: sm for pid, (_, sm) in latest.items()}

    def close(self) -> None:
        """Let go of NVML (``nvmlShutdown``) if it was opened."""
        with self._lock:
            if self._state == "on":
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001 - shutting down: nothing to do about it
                    pass
            self._state = "off"
