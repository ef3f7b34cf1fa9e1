"""Common secrets stay out of a bundle (issue 23, case 11; issues 35.1, 35.5, 36.3).

``GITHUB_PAT``, ``DATABASE_URL=postgres://u:pw@h/db``, ``MY_PASSWD`` and
``SLACK_WEBHOOK_URL`` used to reach env/rank*.json and each incarnation's env.json;
``--api-key sk-...`` and ``--password=...`` reached manifest.json and events.ndjson. The run
here is made on disk as a supervisor leaves it (a status, a record whose run line holds the
command, an env.json per rank written before these rules), and bundled by the real code.

Then (issues 35 and 36): status.json kept the typed command whole; the archive and its
members were 0644, so a 0700 run dir's contents became anyone's; stdin.log (a password typed
at an ``input()`` prompt) was 0644 and packed as it was; a rank printing its arguments put
the key in its stdout.log.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest
from rankvisor.engine.control import wire
from rankvisor.engine.entry.bundle import make_bundle
from rankvisor.engine.forensics.environ import is_secret, write_rank_env
from rankvisor.engine.forensics.redaction import redact_argv
from rankvisor.engine.logfile.stdin_log import StdinEntry, append_entry
from rankvisor.engine.states import RankState

from tests.control.runs import Supervisors, make_run, run_info, state_dir, supervisors
from tests.reliability.cli_runs import private_state_dir

pytestmark = pytest.mark.processes

__all__ = ["private_state_dir", "state_dir", "supervisors"]  # fixtures, used by name

LEAKS = ("ghp_leak1", "pw-leak2", "passwd-leak3", "hooks.slack.com/leak4", "sk-leak5",
         "pass-leak6", "tok-leak7")
ENV = {
    "GITHUB_PAT": "ghp_leak1",
    "DATABASE_URL": "postgres://u:pw-leak2@h/db",
    "MY_PASSWD": "passwd-leak3",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/leak4",
    "PATH": "/usr/bin:/bin",
    "PYTHONPATH": "/src",
    "NCCL_DEBUG": "INFO",
}
COMMAND = ["python", "train.py", "--api-key", "sk-leak5", "--password=pass-leak6",
           "--hf_token", "tok-leak7", "--lr", "0.1", "--db", "mysql://me:pw-leak2@db/x"]


def test_names_and_flags_that_hold_secrets() -> None:
    for name in ("GITHUB_PAT", "MY_PASSWD", "SLACK_WEBHOOK_URL", "HTTP_AUTH", "OAUTH_CLIENT",
                 "api_key", "HF_TOKEN"):
        assert is_secret(name), name
    for name in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "AUTHOR", "NCCL_DEBUG", "COMPAT"):
        assert not is_secret(name), name
    assert redact_argv(COMMAND) == [
        "python", "train.py", "--api-key", "<redacted>", "--password=<redacted>",
        "--hf_token", "<redacted>", "--lr", "0.1", "--db", "mysql://me:<redacted>@db/x"]


def test_a_bundle_holds_none_of_them(supervisors: Supervisors, tmp_path: Path) -> None:
    pid, start = supervisors.dead()
    entry = make_run(tmp_path, "job", pid=pid, start=start)
    run_dir = Path(entry.run_dir)
    info = run_info("job", entry.run_dir, [RankState.RUNNING, RankState.RUNNING])
    run = wire.run_info_to_wire(info)
    run["command"] = COMMAND
    with open(run_dir / "events.ndjson", "wb") as f:
        f.write(wire.encode_message({"t": "run", "run": run}))
        f.write(wire.encode_message({"t": "run", "run": run}))
    status = json.loads((run_dir / "status.json").read_text())
    status["command"] = ["rankvisor", "run", "--nproc-per-node", "2", *COMMAND[1:]]
    (run_dir / "status.json").write_text(json.dumps(status))
    (run_dir / "supervisor.log").write_text(
        "started: python train.py --password=pass-leak6 --db mysql://me:pw-leak2@db/x\n")
    for rank in (0, 1):
        d = run_dir / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        # As an older rankvisor recorded it: none of these was redacted then.
        (d / "env.json").write_text(json.dumps({"env": ENV, "added": []}))
        # A rank that prints its arguments and its environment.
        (d / "stdout.log").write_text(
            "Namespace(api_key='sk-leak5', hf_token='tok-leak7', lr=0.1)\n"
            f"token is {ENV['GITHUB_PAT']}, hook {ENV['SLACK_WEBHOOK_URL']}\nstep 1\n")
        append_entry(str(d / "stdin.log"), StdinEntry(1.0, "sk-leak5"))
        append_entry(str(d / "stdin.log"), StdinEntry(2.0, "y"))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    write_rank_env(str(fresh), {}, inherited=ENV)  # what is recorded from now on
    assert not any(leak in (fresh / "env.json").read_text() for leak in LEAKS)

    out = tmp_path / "b.tar.gz"
    old_umask = os.umask(0o022)
    try:
        make_bundle(entry.run_dir, str(out))
    finally:
        os.umask(old_umask)
    assert os.stat(out).st_mode & 0o777 == 0o600
    members = _members(out)
    assert {"manifest.json", "events.ndjson", "status.json", "supervisor.log",
            "env/rank0.json", "attempt_0/0/env.json", "attempt_0/0/stdout.log"} <= set(members)
    assert not [name for name in members if name.endswith("stdin.log")]
    _no_leak(members)
    env0 = json.loads(members["env/rank0.json"])["env"]
    assert env0["PATH"] == "/usr/bin:/bin" and env0["GITHUB_PAT"] == "<redacted>"
    manifest = json.loads(members["manifest.json"])
    assert manifest["command"][:2] == ["rankvisor", "run"]
    assert manifest["left_out"] == ["attempt_0/0/stdin.log", "attempt_0/1/stdin.log"]
    assert json.loads(members["status.json"])["command"][4:6] == ["train.py", "--api-key"]
    stdout = members["attempt_0/0/stdout.log"].decode()
    assert "lr=0.1" in stdout and "step 1" in stdout  # the rest of the log as it was

    # Asked for, the typed lines come, redacted as every member is.
    with_stdin = make_bundle(entry.run_dir, str(tmp_path / "s.tar.gz"), include_stdin=True)
    members = _members(Path(with_stdin.path))
    _no_leak(members)
    typed = [json.loads(line)["text"] for line in members["attempt_0/0/stdin.log"].splitlines()]
    assert typed == ["<redacted>", "y"]


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        for m in tar.getmembers():
            assert m.mode == 0o600, (m.name, oct(m.mode))
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar.getmembers()}


def _no_leak(members: dict[str, bytes]) -> None:
    for name, data in members.items():
        text = data.decode("utf-8", "replace")
        assert not [leak for leak in LEAKS if leak in text], (name, text[:500])


def test_stdin_log_is_owner_only(tmp_path: Path) -> None:
    old_umask = os.umask(0)
    try:
        append_entry(str(tmp_path / "stdin.log"), StdinEntry(1.0, "hunter2"))
    finally:
        os.umask(old_umask)
    assert os.stat(tmp_path / "stdin.log").st_mode & 0o777 == 0o600
