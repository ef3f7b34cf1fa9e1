"""Common secrets stay out of a bundle (issue 23, case 11).

``GITHUB_PAT``, ``DATABASE_URL=postgres://u:pw@h/db``, ``MY_PASSWD`` and
``SLACK_WEBHOOK_URL`` used to reach env/rank*.json and each incarnation's env.json;
``--api-key sk-...`` and ``--password=...`` reached manifest.json and events.ndjson. The run
here is made on disk as a supervisor leaves it (a status, a record whose run line holds the
command, an env.json per rank written before these rules), and bundled by the real code.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

from rankvisor.engine.control import wire
from rankvisor.engine.entry.bundle import make_bundle
from rankvisor.engine.forensics.environ import is_secret, write_rank_env
from rankvisor.engine.forensics.redaction import redact_argv
from rankvisor.engine.states import RankState

from tests.control.runs import Supervisors, make_run, run_info, state_dir, supervisors
from tests.reliability.cli_runs import private_state_dir

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
    for rank in (0, 1):
        d = run_dir / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        # As an older rankvisor recorded it: none of these was redacted then.
        (d / "env.json").write_text(json.dumps({"env": ENV, "added": []}))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    write_rank_env(str(fresh), {}, inherited=ENV)  # what is recorded from now on
    assert not any(leak in (fresh / "env.json").read_text() for leak in LEAKS)

    out = tmp_path / "b.tar.gz"
    make_bundle(entry.run_dir, str(out))
    with tarfile.open(out, "r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                   for m in tar.getmembers()}
    assert {"manifest.json", "events.ndjson", "env/rank0.json",
            "attempt_0/0/env.json"} <= set(members)
    for name, data in members.items():
        text = data.decode("utf-8", "replace")
        assert not [leak for leak in LEAKS if leak in text], (name, text[:500])
    env0 = json.loads(members["env/rank0.json"])["env"]
    assert env0["PATH"] == "/usr/bin:/bin" and env0["GITHUB_PAT"] == "<redacted>"
    manifest = json.loads(members["manifest.json"])
    assert manifest["command"][:3] == ["python", "train.py", "--api-key"]
    assert "packed as they are" in manifest["redacted"]
    assert os.path.getsize(out) > 0
