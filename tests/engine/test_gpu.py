"""GPU columns from NVML, on recorded NVML answers: no GPU here.

A fake ``pynvml`` (the module nvidia-ml-py installs) answers as the real one does on a
two-GPU machine: processes with their memory per device, per-process utilisation samples,
NVMLError_NotFound when no sample is newer than asked, NotSupported on a device without
them. The mapping to ranks runs on real processes (a rank and its child) through the stats
sampler. ``tests/bench/gpu_check.py`` does the same against a real GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from rankvisor.engine.forensics.gpu import GpuProbe, GpuReading
from rankvisor.engine.states import RankState
from rankvisor.engine.supervisor.stats import StatsSampler, descendants
from rankvisor.tui.model import RankView
from rankvisor.tui.widgets.rank_pane import gpu_text

from tests.conftest import wait_until

pytestmark = pytest.mark.processes

GIB = 1 << 30


class NVMLError(Exception):
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801 - pynvml's own name
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    pass


def fake_pynvml(
    procs: dict[int, list[tuple[int, int | None]]],
    samples: dict[int, list[tuple[int, int, int]] | type[Exception]],
    *,
    init_error: type[Exception] | None = None,
) -> Any:
    """A pynvml module: ``procs`` gpu -> [(pid, usedGpuMemory)], ``samples`` gpu ->
    [(pid, timeStamp us, smUtil)] or the error class the call raises."""
    m = types.ModuleType("pynvml")
    m.calls = []  # type: ignore[attr-defined]

    def init() -> None:
        if init_error is not None:
            raise init_error("Driver Not Loaded")

    def utilisation(handle: int, last_seen: int) -> list[Any]:
        m.calls.append(("util", handle, last_seen))  # type: ignore[attr-defined]
        answer = samples.get(handle, [])
        if isinstance(answer, type):
            raise answer("Not Found" if answer is NVMLError_NotFound else "Not Supported")
        newer = [SimpleNamespace(pid=p, timeStamp=t, smUtil=u, memUtil=0, encUtil=0, decUtil=0)
                 for p, t, u in answer if t > last_seen]
        if not newer:
            raise NVMLError_NotFound("Not Found")
        return newer

    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: m.calls.append(("shutdown",))  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(procs)  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [  # type: ignore[attr-defined]
        SimpleNamespace(pid=p, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF) for p, used in procs[h]]
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []  # type: ignore[attr-defined]
    m.nvmlDeviceGetProcessUtilization = utilisation  # type: ignore[attr-defined]
    return m


def test_a_ranks_tree_is_summed_over_gpus_and_others_are_left_out() -> None:
    nvml = fake_pynvml(
        {0: [(100, 2 * GIB), (999, 5 * GIB)], 1: [(101, GIB)]},
        {0: [(100, 10, 40), (100, 20, 55), (999, 20, 90)], 1: [(101, 15, 30)]},
    )
    probe = GpuProbe(nvml)
    snap = probe.snapshot()
    assert probe.available and snap is not None
    # The latest sample of pid 100 counts (55 %), added to its child's 30 % on GPU 1.
    assert snap.for_pids([100, 101]) == GpuReading(3 * GIB, 85.0, (0, 1))
    assert snap.for_pids([999]) == GpuReading(5 * GIB, 90.0, (0,))
    assert snap.for_pids([7, 8]) is None
    # The next pass asks only for samples newer than those read: none, so 0 %.
    snap = probe.snapshot()
    assert ("util", 0, 20) in nvml.calls and ("util", 1, 15) in nvml.calls
    assert snap is not None and snap.for_pids([100]) == GpuReading(2 * GIB, 0.0, (0,))
    probe.close()
    assert nvml.calls[-1] == ("shutdown",)


def test_memory_the_driver_cannot_tell_and_no_per_process_utilisation() -> None:
    nvml = fake_pynvml({0: [(100, None)]}, {0: NVMLError_NotSupported})
    snap = GpuProbe(nvml).snapshot()
    assert snap is not None and snap.for_pids([100]) == GpuReading(0, None, (0,))


def test_without_nvml_there_is_nothing_and_it_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "import pynvml" raises ImportError
    probe = GpuProbe()
    assert probe.snapshot() is None and probe.snapshot() is None and not probe.available
    broken = fake_pynvml({0: []}, {}, init_error=NVMLError_DriverNotLoaded)
    probe = GpuProbe(broken)
    assert probe.snapshot() is None and not probe.available
    assert GpuProbe(fake_pynvml({}, {})).snapshot() is None  # NVML, but no device


@pytest.fixture
def rank_with_child() -> Iterator[subprocess.Popen[bytes]]:
    """A real "rank" (a shell) whose child (sleep) is the process on the GPU."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        wait_until(lambda: descendants(proc.pid), timeout=10)
        yield proc
    finally:
        for kid in descendants(proc.pid):
            os.kill(kid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_the_stats_sampler_puts_a_ranks_gpu_use_in_its_stats(
    rank_with_child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    (child,) = descendants(rank_with_child.pid)
    nvml = fake_pynvml({0: [(child, 3 * GIB), (1, GIB)]}, {0: [(child, 5, 70)]})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # what "import pynvml" finds
    sampler = StatsSampler()
    sampler.track(0, rank_with_child.pid)
    (stats,) = sampler.sample_once()
    assert (stats.gpu_memory_bytes, stats.gpu_util_percent, stats.gpus) == (3 * GIB, 70.0, (0,))

    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = StatsSampler()
    sampler.track(0, rank_with_child.pid)
    (stats,) = sampler.sample_once()
    assert (stats.gpu_memory_bytes, stats.gpu_util_percent, stats.gpus) == (None, None, ())


def test_the_pane_header_shows_the_gpu_only_when_there_is_one() -> None:
    view = RankView(rank=0, state=RankState.RUNNING, pid=5)
    assert gpu_text(view, compact=False) == ""
    view.gpu_memory_bytes, view.gpu_util_percent, view.gpus = 3 * GIB, 87.4, (0, 1)
    assert gpu_text(view, compact=False) == "  gpu0,1 3.0G 87%"
    assert gpu_text(view, compact=True) == " g3.0G 87%"
    view.gpu_util_percent = None
    assert gpu_text(view, compact=False) == "  gpu0,1 3.0G"
