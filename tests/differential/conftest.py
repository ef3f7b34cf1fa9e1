"""Fixtures shared by the differential tests (torch's implementation against ours)."""

from __future__ import annotations

import signal
from typing import Any, Iterator

import pytest

_HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


@pytest.fixture(scope="module")
def torch_mp() -> Any:
    """torch.distributed.elastic.multiprocessing, imported once per module (~2.5 s)."""
    import torch.distributed.elastic.multiprocessing as module

    return module


@pytest.fixture(autouse=True)
def _restore_signal_handlers() -> Iterator[None]:
    # torch's start() installs handlers in the test process and never removes them.
    saved = {sig: signal.getsignal(sig) for sig in _HANDLED}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
