"""``rankvisor bundle``: one .tar.gz of a real run, secrets redacted, every file capped.

A real headless run (a rank that writes 3 MiB to stderr then raises through ``@record``,
with secrets in its environment) is bundled by the real CLI in a child process; the archive
is opened and read member by member. A running run's environment is read from /proc.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from rankvisor.engine.control.status import (
    effective_state,
    process_start_time,
    read_status,
    write_status,
)
from rankvisor.engine.entry.bundle import make_bundle
from rankvisor.engine.forensics.environ import REDACTED, is_secret

from tests.conftest import BIN, PYTHON, wait_until
from tests.control.runs import Supervisors

pytestmark = pytest.mark.processes

ROOT = Path(__file__).parents[2]
SECRET = "hunter2-do-not-leak"


def _cli(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankvisor.tui.cli", *argv],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=cwd,
    )


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name.split("/", 1)[1]] = f.read()
        return out


def _spew_then_raise(tmp_path: Path) -> Path:
    script = tmp_path / "spew.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from rankvisor.engine.errors import record\n"
        "@record\n"
        "def main():\n"
        "    for i in range(30000):\n"
        "        sys.stderr.write(f'line {i:06d} ' + 'x' * 90 + '\\n')\n"
        "    sys.stderr.write('LAST LINE\\n')\n"
        "    print('hello from stdout', flush=True)\n"
        "    if os.environ['RANK'] == '1':\n"
        f"        open({str(tmp_path / 'rank1.done')!r}, 'w').close()\n"
        "        return\n"
        f"    while not os.path.exists({str(tmp_path / 'rank1.done')!r}):\n"
        "        time.sleep(0.01)  # rank 1 is done before rank 0 fails (no teardown)\n"
        "    raise ValueError('the bundle test raised')\n"
        "main()\n"
    )
    return script


def test_a_bundle_of_a_finished_run_holds_its_files_capped_and_no_secret(
    tmp_path: Path
) -> None:
    secrets = {"HF_TOKEN": SECRET, "my_db_password": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET,
               "SOME_CREDENTIALS_FILE": SECRET, "PLAIN_SETTING": "visible"}
    run = _cli("run", "--headless", "--nproc-per-node", "2", "--log-dir",
               str(tmp_path / "logs"), str(_spew_then_raise(tmp_path)), env=secrets)
    assert run.returncode == 1, run.stderr
    (run_dir,) = (tmp_path / "logs").iterdir()
    (run_dir / "stacks").mkdir()
    (run_dir / "stacks" / "20260101-000000.txt").write_text("rank 0: main <- <module>\n")
    out = tmp_path / "out.tar.gz"

    done = _cli("bundle", str(run_dir), "-o", str(out), "--max-log-mb", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{out}  (") and "secrets redacted" in done.stdout
    assert "kept the last 1 MiB of: attempt_0/0/stderr.log" in done.stdout

    files = _members(out)
    for name in ("status.json", "events.ndjson", "manifest.json", "stacks/20260101-000000.txt",
                 "env/rank0.json", "env/rank1.json"):
        assert name in files, sorted(files)
    for rank in (0, 1):
        for name in ("stdout.log", "stderr.log", "env.json"):
            assert f"attempt_0/{rank}/{name}" in files, sorted(files)
    assert "attempt_0/0/error.json" in files
    assert not any(name.endswith(".idx") for name in files)

    # The size cap: the end of the 3 MiB stderr, starting at a whole line.
    stderr = files["attempt_0/0/stderr.log"]
    assert (run_dir / "attempt_0/0/stderr.log").stat().st_size > 2 << 20
    assert len(stderr) <= 1 << 20 and stderr.startswith(b"line ")
    assert stderr.endswith(b"ValueError: the bundle test raised\n")
    assert files["attempt_0/1/stderr.log"].endswith(b"line 029999 " + b"x" * 90 + b"\nLAST LINE\n")
    assert json.loads(files["attempt_0/0/error.json"])["message"]["message"].startswith(
        "ValueError: the bundle test raised")
    status = json.loads(files["status.json"])
    assert status["ranks"][0]["exit_cause"]["code"] == "exception"

    # No secret anywhere; names kept, values redacted; the rest as it was.
    assert not [name for name, data in files.items() if SECRET.encode() in data]
    env = json.loads(files["env/rank0.json"])
    assert env["source"] == "env.json" and env["rank"] == 0
    for name in secrets:
        assert env["env"][name] == (REDACTED if is_secret(name) else "visible"), name
    assert env["env"]["RANK"] == "0" and env["env"]["WORLD_SIZE"] == "2"

    manifest = json.loads(files["manifest.json"])
    # Issue 22: the line typed (not the rank's python3 -u ...), where, and honest counts.
    assert manifest["command"][:3] == ["rankvisor", "run", "--headless"]
    assert manifest["command"][-1].endswith("spew.py") and manifest["attempt"] == 0
    assert manifest["rank_command"][-1].endswith("spew.py") and manifest["cwd"]
    size = out.stat().st_size
    assert f"({size / 1024:.1f} KiB, {len(files)} files;" in done.stdout, done.stdout
    assert manifest["versions"]["python"] == sys.version.split()[0]
    assert set(manifest["versions"]) == {"rankvisor", "torch", "python"}
    truncated = {f["name"]: f for f in manifest["files"] if f["truncated"]}
    assert set(truncated) == {"attempt_0/0/stderr.log", "attempt_0/1/stderr.log"}
    assert truncated["attempt_0/0/stderr.log"]["included"] == len(stderr)


def _environ_bytes(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def test_a_running_ranks_environment_is_read_from_proc(
    tmp_path: Path, supervisors: Supervisors
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "attempt_0" / "0").mkdir(parents=True)
    rank = subprocess.Popen(
        [PYTHON, str(BIN / "ticker.py")] if (BIN / "ticker.py").exists() else ["sleep", "60"],
        env={"PATH": os.environ["PATH"], "API_KEY": SECRET, "NCCL_DEBUG": "INFO"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        # Until its exec, /proc shows the environment of the test that forked it.
        wait_until(lambda: SECRET.encode() in _environ_bytes(rank.pid), timeout=30)
        live = supervisors.live()
        status: dict[str, Any] = {
            "schema": 1, "run_id": "live", "run_dir": str(run_dir), "socket": "",
            "supervisor_pid": live.pid, "supervisor_start": process_start_time(live.pid),
            "state": "running", "attempt": 0, "finished": False, "exitcode": None,
            "ranks": [{"rank": 0, "pid": rank.pid, "state": "running"}],
        }
        write_status(str(run_dir), status)
        assert read_status(str(run_dir)) is not None
        bundle = make_bundle(str(run_dir), str(tmp_path / "b.tar.gz"))
        # What the bundle saw, should it not have read /proc (seen once in a full run).
        seen = (effective_state(read_status(str(run_dir)) or {}), len(_environ_bytes(rank.pid)))
    finally:
        rank.kill()
        rank.wait()
    assert bundle.environments == {0: "proc"}, seen
    env = json.loads(_members(tmp_path / "b.tar.gz")["env/rank0.json"])
    assert env["source"] == "proc"
    assert env["env"]["API_KEY"] == REDACTED and env["env"]["NCCL_DEBUG"] == "INFO"


def test_the_default_name_is_in_the_current_directory_and_bad_sizes_are_refused(
    tmp_path: Path
) -> None:
    run_dir = tmp_path / "logs" / "job_1234abcd"
    (run_dir / "attempt_0" / "0").mkdir(parents=True)
    (run_dir / "attempt_0" / "0" / "stdout.log").write_text("hi\n")
    write_status(str(run_dir), {"schema": 1, "run_id": "job", "state": "finished",
                                "finished": True, "attempt": 0, "ranks": []})
    done = _cli("bundle", str(run_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (made,) = tmp_path.glob("rankvisor-job_1234abcd-*.tar.gz")
    assert _members(made)["attempt_0/0/stdout.log"] == b"hi\n"
    assert not list(tmp_path.glob("*.part"))
    bad = _cli("bundle", str(run_dir), "--max-log-mb", "0", cwd=tmp_path)
    assert bad.returncode == 2 and "--max-log-mb must be more than 0" in bad.stderr
