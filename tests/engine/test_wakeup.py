"""engine.process.wakeup: the self-pipe every sleeping thread of the engine is woken by."""

from __future__ import annotations

import fcntl
import os
import select

import pytest
from rankvisor.engine.process.wakeup import Wakeup


def test_wake_ends_a_poll_and_drain_empties_the_pipe() -> None:
    w = Wakeup()
    try:
        poller = select.poll()
        poller.register(w.fd, select.POLLIN)
        assert poller.poll(0) == []
        w.wake()
        assert poller.poll(1000) == [(w.fd, select.POLLIN)]
        w.drain()
        assert poller.poll(0) == []
    finally:
        w.close()


def test_wake_never_blocks_on_a_full_pipe_and_a_rank_never_inherits_it() -> None:
    w = Wakeup()
    try:
        for _ in range(200_000):  # far more than a pipe's buffer: the pipe fills up
            w.wake()
        w.drain()
        for fd in (w.fd, w._write_fd):
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
            assert not os.get_inheritable(fd)
    finally:
        w.close()


def test_after_close_wake_is_harmless_and_drain_says_closed() -> None:
    w = Wakeup()
    w.close()
    w.close()  # idempotent
    w.wake()
    assert w.fd == -1
    with pytest.raises(OSError):
        w.drain()
