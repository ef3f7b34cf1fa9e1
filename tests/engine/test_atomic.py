"""engine.rundir.atomic: a replaced file is the old one or the new one, and nothing is left."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from rankvisor.engine.rundir.atomic import atomic_file, write_atomic


def test_creates_and_replaces_with_the_mode_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_atomic(str(path), b"one")
    assert path.read_bytes() == b"one"
    old_umask = os.umask(0o022)
    try:
        write_atomic(str(path), b"two", 0o666)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # 0o666 less the umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_only_a_durable_write_is_flushed_to_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    path = tmp_path / "status.json"
    write_atomic(str(path), b"the run's state")
    assert len(synced) == 1
    write_atomic(str(path), b"a refresh", durable=False)
    assert len(synced) == 1 and path.read_bytes() == b"a refresh"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_an_error_inside_the_block_keeps_the_old_file_and_leaves_no_temporary(
        tmp_path: Path) -> None:
    path = tmp_path / "entry.json"
    path.write_bytes(b"old")
    with pytest.raises(ValueError), atomic_file(str(path)) as f:
        f.write(b"half of the new")
        raise ValueError("the writer failed")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]


def test_a_missing_directory_is_an_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(str(tmp_path / "gone" / "status.json"), b"x")


def test_a_reader_sees_whole_files_only(tmp_path: Path) -> None:
    """A reader racing the writer reads one of the complete versions every time."""
    path = tmp_path / "status.json"
    versions = [bytes([65 + i]) * (64 << 10) for i in range(4)]
    write_atomic(str(path), versions[0])
    seen: set[bytes] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(path.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(200):
            write_atomic(str(path), versions[n % len(versions)])
    finally:
        done.set()
        reader.join()
    assert seen and seen <= set(versions)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]
