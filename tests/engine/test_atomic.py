"""engine.rundir.atomic: a replaced file is the old one or the new one, and nothing is left."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest
from rankvisor.engine.rundir.atomic import SwapWriter, atomic_file, write_atomic


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


def test_a_swap_writer_trades_two_inodes_and_leaves_one_name(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    writer = SwapWriter(str(path))
    inodes = set()
    for i, body in enumerate([b"first", b"a much longer second body", b"3rd", b"", b"fifth"]):
        writer.write(body)
        assert path.read_bytes() == body, i
        inodes.add(path.stat().st_ino)
    assert writer.swaps == 5 and len(inodes) == 2
    assert stat.S_IMODE(path.stat().st_mode) & 0o644 == 0o644
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]
    assert path.read_bytes() == b"fifth"


def test_a_swap_never_rewrites_a_file_a_reader_still_has_open(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    write_atomic(str(path), b"written by an event")
    writer = SwapWriter(str(path))
    writer.write(b"tick 1")
    with open(path, "rb") as reader:  # opened while "tick 1" is the file
        writer.write(b"tick 2")  # trades with the event's inode: the reader's is the spare
        writer.write(b"tick 3")  # the spare is open: a new file, the reader's left alone
        assert reader.read() == b"tick 1"
        assert path.read_bytes() == b"tick 3"
    assert writer.swaps == 2
    writer.write(b"tick 4")
    assert path.read_bytes() == b"tick 4" and writer.swaps == 3
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_without_an_exchange_a_swap_writer_replaces_as_write_atomic(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    writer = SwapWriter(str(path))

    def no_exchange(_a: str, _b: str) -> None:  # NFS, an old kernel
        raise OSError(errno.EINVAL, "Invalid argument")

    writer._exchange = no_exchange  # noqa: SLF001 - the file system's answer
    for body in (b"one", b"two", b"three"):
        writer.write(body)
        assert path.read_bytes() == body
    assert writer.swaps == 0 and writer._exchange is None  # noqa: SLF001 - asked once
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]
