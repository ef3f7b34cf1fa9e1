"""``rankvisor bundle``: one ``.tar.gz`` of a run for a bug report or a colleague.

What goes in, under one top folder named after the run:

- the run's own files: ``status.json``, ``events.ndjson``, ``supervisor.log``,
  ``on_failure.log``, the filtered logs, and anything else at the top of the run directory;
- ``stacks/``: the stack dumps taken during the run, when there are any;
- ``collectives/``: the Flight Recorder captures, each rank's dump as torch wrote it, and
  the same for ``torchfrtrace`` (``collectives/torchfrtrace``: ``torchfrtrace DIR --prefix
  rank_``), when the ranks served them;
- the current attempt's directory (``attempt_<n>/``): every rank's ``stdout.log``,
  ``stderr.log``, ``error.json`` and recorded ``env.json``, earlier incarnations
  (``restart_<k>/``) included; ``stdin.log`` (the lines a person typed, a password at an
  ``input()`` prompt perhaps) only when asked (``include_stdin``);
- ``env/rank<r>.json``: each rank's environment, read from ``/proc/<pid>/environ`` while the
  rank runs, else the ``env.json`` recorded at its spawn; secrets redacted either way;
- ``manifest.json``: the command line typed and its directory, the rank's command line,
  the rankvisor, torch and Python versions, the machine, and each file's size on disk and
  in the bundle.

Every member goes through one ``Redactor`` (``engine.forensics.redaction``): the secrets
learnt from the run's command lines (status.json's, the record's) and the ranks'
environments are replaced wherever they stand, in the ranks' logs too. The archive and its
members are owner-only (0600): a run dir of 0700 does not become readable through its bundle.

Every file is capped (``max_file_bytes``, 10 MiB by default): a log keeps its end, where a
failure is; ``events.ndjson`` keeps its first line (the run as it started) and its end.
Reads files only; never signals or stops anything, so it is safe on a running run.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import sys
import tarfile
from dataclasses import dataclass, field
from typing import Any, Final

from .. import clock
from ..control.status import current_attempt, effective_state, read_status
from ..forensics.environ import ENV_FILE, is_secret, read_rank_env, redact
from ..forensics.redaction import Redactor, redact_argv, redact_record_line
from ..logfile.stdin_log import STDIN_FILE
from ..process.proc_table import read_environ
from ..rundir.atomic import atomic_file
from ..rundir.regular_file import open_regular

__all__ = ["DEFAULT_MAX_FILE_BYTES", "Bundle", "default_bundle_path", "make_bundle"]

DEFAULT_MAX_FILE_BYTES: Final = 10 << 20

_SKIP: Final = (".idx",)
"""Index files (the arrival index): rebuilt from the logs, and meaningless without them."""

_MODE: Final = 0o600
"""The archive's mode and its members': what a run dir holds is its owner's."""

_ALIVE: Final = frozenset(("starting", "running", "terminating", "restarting"))


@dataclass
class Bundle:
    """What ``make_bundle`` wrote."""

    path: str
    files: list[dict[str, Any]] = field(default_factory=list)
    """One entry per file put in: ``name`` (in the archive), ``size`` (on disk),
    ``included`` (bytes in the archive), ``truncated``."""
    environments: dict[int, str] = field(default_factory=dict)
    """rank -> where its environment came from: "proc", "env.json" or "none"."""
    entries: int = 0
    """Members of the archive: the files, each rank's environment and the manifest."""

    @property
    def truncated(self) -> list[str]:
        return [f["name"] for f in self.files if f["truncated"]]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:80] or "run"


def default_bundle_path(run_dir: str, directory: str = ".") -> str:
    """``./rankvisor-<run dir name>-<YYYYmmdd-HHMMSS>.tar.gz``."""
    stamp = clock.local_stamp("%Y%m%d-%H%M%S")
    name = _slug(os.path.basename(os.path.normpath(run_dir)))
    return os.path.join(directory, f"rankvisor-{name}-{stamp}.tar.gz")


def _read_capped(path: str, cap: int, keep_first_line: bool = False) -> tuple[bytes, int]:
    """The file's bytes (its end when it is larger than ``cap``), and its size on disk."""
    with open_regular(path) as f:  # a FIFO or a link to /dev/zero in a run dir: refused
        size = os.fstat(f.fileno()).st_size
        if size <= cap:
            return f.read(cap), size
        head = b""
        if keep_first_line:
            head = f.readline(cap // 2)
        f.seek(max(len(head), size - (cap - len(head))))
        tail = f.read(cap - len(head))
    # A line cut in half at the start would mislead: start at the next whole line.
    cut = tail.find(b"\n")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut + 1:]
    return head + tail, size


def _learn_env(redactor: Redactor, env: dict[str, str]) -> None:
    redactor.learn(v for k, v in env.items() if is_secret(k))
    redactor.learn(v for v in env.values() if "://" in v)  # a URL's password


def _redact_env_file(data: bytes, redactor: Redactor | None = None) -> bytes:
    """An incarnation's env.json with today's redaction (nothing of it if it does not parse:
    an environment is not packed unread); its secrets are learnt by ``redactor``."""
    try:
        record = json.loads(data)
        env = {str(k): str(v) for k, v in record["env"].items()}
        if redactor is not None:
            _learn_env(redactor, env)
        record["env"] = redact(env)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return b'{"env": null, "note": "not packed: it did not parse"}\n'
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def _redact_status(data: bytes) -> bytes:
    """status.json with its command line (as typed) redacted; as it is when it does not
    parse (the ``Redactor`` still goes over it)."""
    try:
        status = json.loads(data)
        status["command"] = redact_argv(list(status["command"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        return data
    return (json.dumps(status, indent=1) + "\n").encode()


def _run_info(run_dir: str) -> dict[str, Any]:
    """The run as it started: the first line of events.ndjson (the wire form of RunInfo)."""
    try:
        with open_regular(os.path.join(run_dir, "events.ndjson")) as f:
            first = json.loads(f.readline(1 << 22) or b"{}")
    except (OSError, ValueError):
        return {}
    run = first.get("run") if isinstance(first, dict) else None
    return run if isinstance(run, dict) else {}


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _rank_dirs(attempt_dir: str, rank: int) -> list[str]:
    """The rank's incarnation directories in the attempt, the current (last) one last."""
    base = os.path.join(attempt_dir, str(rank))
    restarts = []
    try:
        for name in os.listdir(base):
            if name.startswith("restart_") and name[8:].isdigit():
                restarts.append(int(name[8:]))
    except OSError:
        return []
    return [base] + [os.path.join(base, f"restart_{k}") for k in sorted(restarts)]


def _environment(
    attempt_dir: str, rank: int, rank_status: dict[str, Any], live: bool, redactor: Redactor
) -> tuple[dict[str, str] | None, str]:
    """The rank's environment, redacted, and where it came from; its secrets are learnt."""
    pid = rank_status.get("pid")
    if live and isinstance(pid, int) and rank_status.get("state") in _ALIVE:
        env = read_environ(pid)
        if env is not None:
            _learn_env(redactor, env)
            return redact(env), "proc"
    for d in reversed(_rank_dirs(attempt_dir, rank)):
        if os.path.exists(os.path.join(d, ENV_FILE)):
            env = read_rank_env(d)
            if env is not None:
                return env, ENV_FILE
    return None, "none"


def make_bundle(
    run_dir: str,
    out_path: str | None = None,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    include_stdin: bool = False,
) -> Bundle:
    """Write the bundle of the run in ``run_dir`` to ``out_path`` (default:
    ``default_bundle_path``); returns what went in. The ranks' ``stdin.log`` files are left
    out unless ``include_stdin`` (then redacted as every member is).

    Raises:
        FileNotFoundError: ``run_dir`` is not a directory.
        OSError: the bundle could not be written.
    """
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"no run directory at {run_dir}")
    run_dir = os.path.abspath(run_dir)
    out_path = out_path or default_bundle_path(run_dir)
    status = read_status(run_dir)
    live = status is not None and effective_state(status) == "running"
    attempt = current_attempt(run_dir, status)
    top = _slug(os.path.basename(run_dir))
    bundle = Bundle(path=out_path)
    out_abs = os.path.abspath(out_path)

    sources: list[str] = []  # paths relative to run_dir
    for entry in sorted(os.listdir(run_dir)):
        full = os.path.join(run_dir, entry)
        # A dot file is a writer's temporary or status.json's spare (rundir.atomic): not
        # the run's record.
        if not entry.startswith(".") and os.path.isfile(full) and not os.path.islink(full):
            sources.append(entry)
    for sub in (["stacks", "collectives"]
                + ([f"attempt_{attempt}"] if attempt is not None else [])):
        base = os.path.join(run_dir, sub)
        for root, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                if not os.path.islink(full):
                    sources.append(os.path.relpath(full, run_dir))

    left_out = [] if include_stdin else [
        rel for rel in sources if os.path.basename(rel) == STDIN_FILE]
    sources = [rel for rel in sources if rel not in left_out]

    # What the run knows to be secret, learnt before anything is packed.
    redactor = Redactor()
    run = _run_info(run_dir)
    for command in ((status or {}).get("command"), run.get("command")):
        if isinstance(command, list):
            redactor.learn_argv(command)
    ranks = status.get("ranks") if status else None
    ranks = [r for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []
    attempt_dir = os.path.join(run_dir, f"attempt_{attempt}")
    if not ranks and attempt is not None:
        try:
            numbers = sorted(int(n) for n in os.listdir(attempt_dir) if n.isdigit())
        except OSError:
            numbers = []
        ranks = [{"rank": n} for n in numbers]
    environments: dict[int, dict[str, str]] = {}
    for r in ranks:
        rank = r.get("rank")
        if not isinstance(rank, int):
            continue
        env, source = _environment(attempt_dir, rank, r, live, redactor)
        bundle.environments[rank] = source
        if env is not None:
            environments[rank] = env
    for rel in sources:
        if os.path.basename(rel) == ENV_FILE:
            try:
                _redact_env_file(_read_capped(os.path.join(run_dir, rel), max_file_bytes)[0],
                                 redactor)
            except OSError:
                pass

    with atomic_file(out_path, _MODE) as out, tarfile.open(fileobj=out, mode="w:gz") as tar:
        now = clock.wall()

        def add(name: str, data: bytes) -> int:
            data = redactor.text(data)
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = int(now)
            info.mode = _MODE
            tar.addfile(info, io.BytesIO(data))
            bundle.entries += 1
            return len(data)

        for rel in sources:
            full = os.path.join(run_dir, rel)
            if rel.endswith(_SKIP) or os.path.abspath(full) == out_abs:
                continue
            try:
                data, size = _read_capped(full, max_file_bytes,
                                          keep_first_line=rel == "events.ndjson")
            except OSError:
                continue  # removed meanwhile (a running run), or unreadable: left out
            if rel == "events.ndjson":  # the run lines carry the command line
                data = b"".join(redact_record_line(ln) for ln in data.splitlines(True))
            elif rel == "status.json":  # the command line as typed
                data = _redact_status(data)
            elif os.path.basename(rel) == ENV_FILE:  # recorded under older, laxer rules
                data = _redact_env_file(data)
            included = add(rel, data)
            bundle.files.append({"name": rel, "size": size, "included": included,
                                 "truncated": len(data) < size})

        for rank, env in environments.items():
            source = bundle.environments[rank]
            add(f"env/rank{rank}.json", (json.dumps(
                {"rank": rank, "source": source, "env": env}, indent=1) + "\n").encode())

        def redacted(command: object) -> object:
            return redact_argv(command) if isinstance(command, list) else command

        manifest = {
            "created": now,
            "run_dir": run_dir,
            "run_id": (status or {}).get("run_id") or run.get("run_id"),
            "attempt": attempt,
            "state": effective_state(status) if status else None,
            # The line a person typed (status.json has it since it was recorded), and the
            # rank's own; where it was typed.
            "command": redacted((status or {}).get("command") or run.get("command")),
            "rank_command": redacted(run.get("command")),
            "cwd": (status or {}).get("cwd"),
            "nprocs": run.get("nprocs"),
            "versions": {
                "rankvisor": _version("rankvisor"),
                "torch": _version("torch"),
                "python": sys.version.split()[0],
            },
            "machine": {
                "system": platform.system(),
                "release": platform.release(),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            },
            "max_file_bytes": max_file_bytes,
            "files": bundle.files,
            "left_out": left_out,
            "environments": {str(k): v for k, v in sorted(bundle.environments.items())},
            "redacted": "environment variables whose names contain TOKEN, KEY, SECRET, "
                        "PASSWORD, PASSWD, CREDENTIAL or WEBHOOK, or have PAT or AUTH "
                        "as a word (any case); a URL's password; the value of a "
                        "--*key, --*token, --*secret or --*password flag; and each of "
                        "these values wherever it stands in any file, the ranks' logs "
                        "included; the lines typed to the ranks (stdin.log) are left out "
                        "unless asked for (--with-stdin)",
        }
        add("manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
    return bundle
