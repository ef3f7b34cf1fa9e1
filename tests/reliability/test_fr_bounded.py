"""Flight Recorder answers are read as bounded data (issue 36.5).

``rankvisor collectives`` printed a group's ``group_desc`` raw (ESC and BEL reached the
terminal); a rank's own FR dump, a 2 KB pickle, took the supervisor from 32 MB to 1.6 GB
(C's unpickler grows its memo to any index the file names); a FIFO in a dump's place
blocked the reader (the live-suspect thread) for the rest of the run. Real files, a real
FIFO, the reader in a process of its own where memory is measured.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rankvisor.engine.forensics.collectives import parse_fr, snapshot_json
from rankvisor.engine.forensics.fr_dump import NotFlightRecorder, read_fr_pickle
from rankvisor.engine.forensics.nccl_dumps import DUMP_STEM, read_dumps
from rankvisor.engine.forensics.worker_server import MAX_ANSWER_BYTES, ask

from tests.control.runs import Supervisors, make_run, state_dir, supervisors
from tests.reliability.cli_runs import ROOT, cli, private_state_dir
from tests.reliability.fake_worker import answer_once

pytestmark = pytest.mark.processes

__all__ = ["private_state_dir", "state_dir", "supervisors"]  # fixtures, used by name

MEMO_INDEX = 10_000_000
"""C's unpickler makes room for twice this many memo slots (160 MB) for a 14-byte file."""


def _memo_bomb() -> bytes:
    return b"\x80\x02}" + b"r" + struct.pack("<I", MEMO_INDEX) + b"."  # {} put at 10M


def _fanout(width: int = 40, depth: int = 5) -> bytes:
    """A small pickle whose tree, shared parts counted, holds width**depth values."""
    x: object = [1]
    for _ in range(depth):
        x = [x] * width
    return pickle.dumps({"entries": x}, protocol=2)


def test_a_memo_bomb_costs_the_reader_nothing(tmp_path: Path) -> None:
    d = tmp_path / "inc"
    d.mkdir()
    (d / f"{DUMP_STEM}0").write_bytes(_memo_bomb())
    probe = (
        "import resource, sys\n"
        "from rankvisor.engine.forensics.nccl_dumps import read_dumps\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "got = read_dumps(sys.argv[1])\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(len(got), (after - before) // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(d)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    dumps, grew_mb = map(int, done.stdout.split())
    assert grew_mb < 40, f"the reader grew {grew_mb} MB for a {len(_memo_bomb())}-byte dump"
    assert dumps == 1  # {} is plain data: read, at no cost


def test_a_fifo_in_a_dumps_place_never_blocks(tmp_path: Path) -> None:
    d = tmp_path / "inc"
    d.mkdir()
    fifo = d / f"{DUMP_STEM}0"
    os.mkfifo(fifo)
    (d / f"{DUMP_STEM}1").write_bytes(pickle.dumps({"entries": []}))
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(read_dumps(str(d))), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # set the stuck reader free before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("read_dumps blocked on a FIFO")
    assert [data for data, _ in got[0]] == [{"entries": []}]  # type: ignore[index]


@pytest.mark.parametrize("case", ["global", "fan-out", "not a dict", "cut", "too big"])
def test_what_a_dump_may_not_be(tmp_path: Path, case: str) -> None:
    path = tmp_path / "dump"
    data = {
        "global": b"\x80\x02cos\nsystem\n(S'touch /tmp/owned'\ntR.",
        "fan-out": _fanout(),
        "not a dict": pickle.dumps([1, 2]),
        "cut": pickle.dumps({"entries": [1, 2, 3]})[:-3],
        "too big": pickle.dumps({"entries": "x" * (17 << 20)}),
    }[case]
    path.write_bytes(data)
    with pytest.raises((NotFlightRecorder, ValueError)):
        read_fr_pickle(str(path))


def test_a_real_shaped_dump_is_read(tmp_path: Path) -> None:
    """What torch's gloo rank writes (its shape, from torch 2.13's dump) still reads."""
    dump = {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}},
            "pg_status": {}, "entries": [{
                "frames": [{"name": "all_reduce", "filename": "c10d.py", "line": 3245}],
                "record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
                "collective_seq_id": 1, "profiling_name": "gloo:all_reduce",
                "input_sizes": [[3]], "state": "scheduled", "retired": True,
                "time_discovered_started_ns": None, "timeout_ms": 1800000, "is_p2p": False}]}
    path = tmp_path / "dump"
    path.write_bytes(pickle.dumps(dump))
    assert read_fr_pickle(str(path)) == dump


def test_an_answer_over_the_cap_is_not_read(tmp_path: Path) -> None:
    path = str(tmp_path / "w.sock")
    size = MAX_ANSWER_BYTES + (1 << 20)

    def flood(c: socket.socket) -> None:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size >> 20):
            c.sendall(b"x" * (1 << 20))

    server, thread = answer_once(path, flood)
    answer = ask(path, "fr_trace_json", timeout_s=20)
    thread.join(20)
    server.server_close()
    assert not answer.ok and "over 32 MiB" in answer.error, answer.error
    assert answer.body == b""


def test_collectives_never_print_a_ranks_escapes(supervisors: Supervisors,
                                                  tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    entry = make_run(tmp_path, "job", pid=pid, start=start)
    desc = "evil\x1b]0;pwned\x07\x1b[2J\x9b31m" + "d" * 100_000
    readings = [parse_fr(r, {"entries": [{
        "process_group": ["1", desc], "collective_seq_id": 3 + r,
        "profiling_name": "gloo:all_reduce\x1b[5m", "input_sizes": [[4]]}]}) for r in (0, 1)]
    saved = Path(entry.run_dir) / "collectives"
    saved.mkdir()
    (saved / "latest.json").write_text(json.dumps(snapshot_json(readings)))
    shown = cli("collectives", entry.run_dir)
    assert shown.returncode == 0, shown.stderr
    assert "evil" in shown.stdout and "rank 0" in shown.stdout
    bad = [c for c in ("\x1b", "\x07", "\x9b") if c in shown.stdout]
    assert bad == [], shown.stdout[:300]
    assert max(len(line) for line in shown.stdout.splitlines()) <= 2000
    # --json keeps the desc whole, escaped as JSON does.
    raw = cli("collectives", entry.run_dir, "--json")
    assert "\x1b" not in raw.stdout
    assert json.loads(raw.stdout)["ranks"][0]["groups"][0]["desc"] == desc
