"""Every handle a viewer can hold offers all of ``SupervisorHandle``: the app must not care
which one it got (a missing member would only show when a person pressed the key)."""

from __future__ import annotations

import inspect

import pytest
from rankvisor.engine.attach.handle import TorchrunHandle
from rankvisor.engine.cluster.viewer import ClusterHandle
from rankvisor.engine.control.client import RemoteHandle
from rankvisor.engine.control.replay import RecordedRun
from rankvisor.engine.handle import SupervisorHandle
from rankvisor.engine.supervisor.core import Supervisor
from rankvisor.engine.testing import ScriptedSupervisor

MEMBERS = sorted(
    name for name, _ in inspect.getmembers(SupervisorHandle)
    if not name.startswith("_")
)


def test_the_protocol_has_what_viewers_use() -> None:
    assert {"watch", "detach", "detachable", "execute", "snapshot", "shutdown"} <= set(MEMBERS)


@pytest.mark.parametrize(
    "cls", [Supervisor, ScriptedSupervisor, RemoteHandle, RecordedRun, TorchrunHandle,
            ClusterHandle],
    ids=lambda c: c.__name__,
)
def test_each_handle_has_every_member(cls: type) -> None:
    missing = [name for name in MEMBERS if not hasattr(cls, name)]
    assert missing == []
