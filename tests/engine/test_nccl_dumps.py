"""NCCL's side of the Flight Recorder, without a GPU: where each rank is told to dump, the
named pipe that asks it to (a real FIFO, read as torch's DumpPipe reads it), and the dump
read back as plain data only. The dumps are this job's gloo dumps pickled with NCCL's op
names (no NCCL dump is recorded on this machine); tests/bench/gpu_nccl_check.py runs the real
thing on a GPU machine."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from pathlib import Path

import pytest
from rankvisor.engine.forensics.collectives import parse_fr, verdicts
from rankvisor.engine.forensics.nccl_dumps import DUMP_STEM, PIPE_STEM, nccl_env, poke, read_dumps

DATA = Path(__file__).parent / "data" / "fr_gloo"


def test_each_incarnation_dumps_in_its_own_dir_unless_the_job_chose(tmp_path: Path) -> None:
    env = nccl_env(str(tmp_path), {})
    assert env == {"TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / DUMP_STEM),
                   "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / PIPE_STEM)}
    assert nccl_env(str(tmp_path), {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/t",
                                    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/x/p"}) == {}


def test_a_write_to_the_pipe_reaches_the_rank_and_a_gone_rank_is_skipped(tmp_path: Path) -> None:
    pipe = tmp_path / f"{PIPE_STEM}1.pipe"
    os.mkfifo(pipe)
    assert poke(str(tmp_path)) == 0  # nobody reads it: skipped, never blocks
    got: list[bytes] = []
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # as torch's DumpPipe opens it

    def read() -> None:
        got.append(os.read(fd, 16))

    assert poke(str(tmp_path)) == 1
    t = threading.Thread(target=read)
    t.start()
    t.join(5)
    os.close(fd)
    assert got == [b"1\n"]


def test_a_dump_is_read_as_plain_data_and_gives_the_same_verdict(tmp_path: Path) -> None:
    for r in (0, 1, 2):
        d = json.loads((DATA / f"{r}.json").read_text())
        for e in d["entries"]:
            e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")
        (tmp_path / f"r{r}").mkdir()
        (tmp_path / f"r{r}" / f"{DUMP_STEM}{r}").write_bytes(pickle.dumps(d))
    readings = []
    for r in (0, 1, 2):
        [(data, mtime)] = read_dumps(str(tmp_path / f"r{r}"))
        readings.append(parse_fr(r, data, mtime + 10**12))
    [v] = verdicts(readings)
    assert (v.op, v.seq, v.entered, v.missing) == ("all_reduce", 5, (0, 2), (1,))
    # Anything but plain data is refused.
    class Evil:
        def __reduce__(self) -> tuple:
            return (os.getcwd, ())

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / f"{DUMP_STEM}0").write_bytes(pickle.dumps({"x": Evil()}))
    assert read_dumps(str(tmp_path / "bad")) == []


def test_a_dump_read_before_is_read_again_only_once_it_changed(tmp_path: Path) -> None:
    """The watch looks once a second: an unchanged dump (megabytes, at 64 ranks) is not
    unpickled again; a rewritten one is."""
    d = json.loads((DATA / "0.json").read_text())
    dump = tmp_path / f"{DUMP_STEM}0"
    dump.write_bytes(pickle.dumps(d))
    seen: dict[str, tuple[int, int]] = {}
    assert [data for data, _ in read_dumps(str(tmp_path), seen)] == [d]
    assert read_dumps(str(tmp_path), seen) == []
    assert len(read_dumps(str(tmp_path))) == 1  # without a memory: every time
    d["entries"] = d["entries"][:-1]
    dump.write_bytes(pickle.dumps(d))
    os.utime(dump, ns=(1, dump.stat().st_mtime_ns + 10**9))
    assert [data for data, _ in read_dumps(str(tmp_path), seen)] == [d]


def test_a_settled_directory_is_not_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twice a second for every rank: a ``stat`` of its directory, not a ``glob``, while the
    directory is as it was; a dump that comes is found (the directory changed), and one made
    just after a listing (an mtime is coarse) is found as long as the mtime is recent."""
    from rankvisor.engine.forensics import nccl_dumps

    listed: list[str] = []
    real_glob = nccl_dumps.glob.glob

    def counting(pattern: str) -> list[str]:
        listed.append(pattern)
        return real_glob(pattern)

    monkeypatch.setattr(nccl_dumps.glob, "glob", counting)
    seen: dict[str, tuple[int, int]] = {}
    listings: dict[str, tuple[int, int, list[str]]] = {}
    (tmp_path / "stdout.log").write_text("x\n")
    assert read_dumps(str(tmp_path), seen, listings) == []
    assert read_dumps(str(tmp_path), seen, listings) == []
    assert len(listed) == 2  # the directory changed just now: not trusted yet
    old = time.time_ns() - 10 * 10**9
    os.utime(tmp_path, ns=(old, old))
    for _ in range(3):
        assert read_dumps(str(tmp_path), seen, listings) == []
    assert len(listed) == 3  # listed once more (the mtime moved), then trusted
    d = json.loads((DATA / "0.json").read_text())
    (tmp_path / f"{DUMP_STEM}3").write_bytes(pickle.dumps(d))  # the directory's mtime moves
    assert [data for data, _ in read_dumps(str(tmp_path), seen, listings)] == [d]
    # Made in the same mtime as the listing that missed it: the mtime is recent, listed again.
    same = (tmp_path / f"{DUMP_STEM}3").stat().st_mtime_ns
    os.utime(tmp_path, ns=(same, same))
    read_dumps(str(tmp_path), seen, listings)
    (tmp_path / f"{DUMP_STEM}4").write_bytes(pickle.dumps(d))
    os.utime(tmp_path, ns=(same, same))
    assert [data for data, _ in read_dumps(str(tmp_path), seen, listings)] == [d]


@pytest.fixture(autouse=True)
def _no_job_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
              "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
        monkeypatch.delenv(k, raising=False)
