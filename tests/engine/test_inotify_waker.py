"""The inotify waker where a log directory is removed and made again under it.

Two windows in which a directory made again sent no event the pump could hear, each found
by a loaded run of ``test_pump.py::test_a_log_dir_made_again_is_followed_by_events_every_time``;
here each is opened on purpose, with no thread and no wait for a race.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from rankvisor.engine.output import inotify, wakeups
from rankvisor.engine.output.wakeups import InotifyWaker

pytestmark = pytest.mark.skipif(not inotify.available(), reason="needs Linux inotify")


def test_a_directory_made_again_behind_a_spent_watch_is_told_as_new(tmp_path: Path) -> None:
    # The pump's view: it holds the old file open (which keeps the old directory's inode
    # alive), a write fires the one-shot watch, and before the pump reads that event the
    # directory is removed and made again and a new file written in it. Re-armed, the watch
    # is on the new directory, whose file no event announced: the wake-up must say "created"
    # so that the pump looks for a replaced file.
    log_dir = tmp_path / "attempt_0" / "0"
    log_dir.mkdir(parents=True)
    path = log_dir / "stdout.log"
    path.write_text("round 0\n")
    waker = InotifyWaker(debounce=0)
    try:
        waker.watch(str(path))
        waker.poke()  # as the pump's ``add`` does: its first look reads the file
        waker.wait(1.0)
        held = os.open(path, os.O_RDONLY)
        try:
            with open(path, "a") as f:
                f.write("more\n")  # fires the one-shot watch (IN_MODIFY)
            shutil.rmtree(tmp_path / "attempt_0")
            log_dir.mkdir(parents=True)
            path.write_text("round 1\n")
            wake = waker.wait(1.0)
            assert wake.dirs == frozenset({str(log_dir)})
            assert wake.created
            # The same directory re-armed again is not new.
            with open(path, "a") as f:
                f.write("more\n")
            wake = waker.wait(1.0)
            assert wake.dirs == frozenset({str(log_dir)}) and not wake.created
        finally:
            os.close(held)
    finally:
        waker.close()


def test_a_directory_made_between_the_look_and_the_watch_is_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The log directory is removed: the waker watches the nearest directory that still
    # exists until it comes back. Made again right after that look, before the watch was in
    # place, it sent no event: the waker must look again and watch it, or the rank's next
    # lines would wait for the sweep.
    log_dir = tmp_path / "attempt_1" / "0"
    log_dir.mkdir(parents=True)
    path = log_dir / "stdout.log"
    path.write_text("first\n")
    real = wakeups._nearest_existing_dir
    looks: list[str] = []
    armed: list[bool] = []

    def made_right_after_the_look(file_path: str) -> str:
        found = real(file_path)
        looks.append(found)
        if armed:
            armed.clear()
            log_dir.mkdir(parents=True)
            path.write_text("second\n")
        return found

    monkeypatch.setattr(wakeups, "_nearest_existing_dir", made_right_after_the_look)
    waker = InotifyWaker(debounce=0)
    try:
        waker.watch(str(path))
        waker.poke()
        waker.wait(1.0)
        looks.clear()
        armed.append(True)
        shutil.rmtree(tmp_path / "attempt_1")
        wake = waker.wait(1.0)  # the removal
        assert looks[0] == str(tmp_path)  # looked while only tmp_path was there
        assert wake.dirs == frozenset({str(log_dir)}) and wake.created
        with open(path, "a") as f:
            f.write("third\n")
        wake = waker.wait(1.0)
        assert wake.dirs == frozenset({str(log_dir)})  # heard, not a sweep's Wake(None)
    finally:
        waker.close()
