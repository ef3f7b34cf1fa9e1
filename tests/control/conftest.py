"""Every control test gets its own state directory (RANKVISOR_STATE_DIR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.control.live import daemons  # noqa: F401  (fixture)
from tests.control.runs import state_dir, supervisors  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _private_state_dir(state_dir: Path) -> Path:  # noqa: F811
    return state_dir
