"""Files in a run directory are hostile input (issue 23, cases 8, 9 and part of 13).

A FIFO at status.json (``mkfifo`` by anyone who can write the run dir) used to hang ``ls``
(for every run), ``status``, ``logs``, ``wait`` and ``bundle``; a FIFO at events.ndjson hung
``bundle`` and ``attach``; events.ndjson linked to /dev/zero grew ``attach`` to GBs. Every
run-dir file is now opened as the registry opens its entries (O_NONBLOCK | O_NOFOLLOW, a
regular file, a size cap: engine/rundir/regular_file.py), the record is read as a capped stream,
and a status.json that cannot be read is named with the reason, not as a missing one.
Each command runs as a process of its own under a timeout, so a hang fails, not stalls.
"""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest
from rankvisor.engine.control import replay, wire
from rankvisor.engine.control.replay import RecordedRun
from rankvisor.engine.events import SupervisorNotice
from rankvisor.engine.states import RankState

from tests.control.runs import Supervisors, make_run, run_info, state_dir, supervisors
from tests.reliability.cli_runs import cli, private_state_dir

pytestmark = pytest.mark.processes

__all__ = ["private_state_dir", "state_dir", "supervisors"]  # fixtures, used by name



def test_a_fifo_at_status_json_hangs_no_command(supervisors: Supervisors,
                                                 tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    good = make_run(tmp_path, "good", pid=pid, start=start)
    bad = make_run(tmp_path, "bad", pid=pid, start=start)
    os.unlink(os.path.join(bad.run_dir, "status.json"))
    os.mkfifo(os.path.join(bad.run_dir, "status.json"))
    done = cli("ls")
    assert done.returncode == 0 and "good" in done.stdout, done.stderr
    for argv in (["status", bad.run_dir], ["logs", bad.run_dir], ["wait", bad.run_dir],
                 ["bundle", bad.run_dir, "-o", str(tmp_path / "b.tar.gz")]):
        done = cli(*argv, cwd=tmp_path)
        assert "Traceback" not in done.stderr, (argv, done.stderr)
        assert done.returncode != 0 or argv[0] == "bundle", (argv, done.stdout)
        if argv[0] != "bundle":
            assert "status.json is not a regular file (a FIFO)" in done.stderr, done.stderr
    assert cli("status", good.run_dir).returncode in (0, 4)


def test_a_fifo_at_events_ndjson_hangs_neither_bundle_nor_the_replay(
        supervisors: Supervisors, tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    entry = make_run(tmp_path, "job", pid=pid, start=start)
    os.mkfifo(os.path.join(entry.run_dir, "events.ndjson"))
    done = cli("bundle", entry.run_dir, "-o", str(tmp_path / "b.tar.gz"), cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    with pytest.raises(LookupError, match="FIFO"):
        RecordedRun.open(entry.run_dir)


def test_a_record_linked_to_dev_zero_is_refused(supervisors: Supervisors,
                                                tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    entry = make_run(tmp_path, "job", pid=pid, start=start)
    os.symlink("/dev/zero", os.path.join(entry.run_dir, "events.ndjson"))
    with pytest.raises(LookupError, match="symbolic link"):
        RecordedRun.open(entry.run_dir)


def test_a_huge_record_is_read_up_to_its_cap_and_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = run_info("job", str(run_dir), [RankState.RUNNING])
    last = run_info("job", str(run_dir), [RankState.SUCCEEDED], exitcodes=[0], finished=True)
    notice = wire.encode_event(SupervisorNotice("x" * 100))
    count = 200_000
    with open(run_dir / "events.ndjson", "wb") as f:
        f.write(wire.encode_message({"t": "run", "run": wire.run_info_to_wire(first)}))
        f.write(notice * count)
        f.write(wire.encode_message({"t": "run", "run": wire.run_info_to_wire(last)}))
    size = os.path.getsize(run_dir / "events.ndjson")
    monkeypatch.setattr(replay, "MAX_RECORD_BYTES", size // 10)
    monkeypatch.setattr(replay, "_TAIL_BYTES", 1 << 16)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    recorded = RecordedRun.open(str(run_dir))
    assert recorded.finished_cleanly and recorded.snapshot().finished
    kept = len(recorded._events)
    assert 0 < kept <= count // 10 + 1
    del recorded
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib * 1024 < size, "the record was read whole"


def test_a_status_json_that_is_invalid_is_named_so(supervisors: Supervisors,
                                                   tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    entry = make_run(tmp_path, "job", pid=pid, start=start)
    path = Path(entry.run_dir) / "status.json"
    for content, words in ((b"{not json", "is not valid JSON"),
                           (json.dumps({"schema": True}).encode(), "not a rankvisor status"),
                           (b"[1]", "not a rankvisor status")):
        path.write_bytes(content)
        done = cli("status", entry.run_dir)
        assert done.returncode != 0 and words in done.stderr, done.stderr
        assert "has no status.json" not in done.stderr
