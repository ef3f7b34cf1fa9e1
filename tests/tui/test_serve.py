"""``rankvisor serve``: loopback by default, a door (origin, token, viewer cap), and session
processes that never import from the user's working directory.

The real server, its sessions and what SIGKILL leaves behind are tested in
tests/reliability/test_serve_door.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tui import serve

ROOT = Path(__file__).resolve().parents[2]


def test_session_command_execs_the_tui_module_with_the_job() -> None:
    command = serve.session_command(
        ["run", "--nproc-per-node", "2", "train.py", "--lr", "1e-3"], serve_pid=123
    )
    # exec: the shell becomes the app, so the app is serve's child and dies with serve.
    assert command.startswith("exec ")
    assert "tui.serve --session --serve-pid 123 run --nproc-per-node 2 train.py --lr 1e-3" in (
        command
    )
    if sys.version_info >= (3, 11):
        assert " -P -m tui.serve " in command


@pytest.mark.parametrize("safe_path", [True, False], ids=["dash-P", "dash-c"])
def test_python_children_never_import_from_the_working_directory(
    tmp_path: Path, safe_path: bool
) -> None:
    if safe_path and sys.version_info < (3, 11):
        pytest.skip("-P is new in Python 3.11")
    marker = tmp_path / "imported"
    for name in ("engine.py", "tui.py"):
        (tmp_path / name).write_text(
            f"open({str(marker)!r}, 'a').write(__name__)\nraise RuntimeError('hostile')\n"
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # PYTHONPATH still applies

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    # The hostile directory bites a plain ``python -m``...
    plain = run([sys.executable, "-m", "tui.serve"])
    assert plain.returncode != 0 and marker.read_text() == "tui"
    marker.unlink()
    # ...and not the way rankvisor starts its own Python children.
    ours = run(serve.python_module_argv("tui.serve", safe_path=safe_path))
    assert ours.returncode == 0, ours.stderr
    assert "usage: rankvisor serve" in ours.stdout and not marker.exists()


def test_default_host_is_loopback() -> None:
    args = serve._parser().parse_args([])
    assert args.host == "127.0.0.1" and serve._is_loopback(args.host)
    assert args.max_viewers == serve.DEFAULT_MAX_VIEWERS
    assert serve._is_loopback("localhost") and serve._is_loopback("::1")
    assert not serve._is_loopback("0.0.0.0") and not serve._is_loopback("example.org")
    assert serve._default_public_url("::1", 8000) == "http://[::1]:8000"


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_max_viewers_is_a_positive_count(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        serve._parser().parse_args(["--max-viewers", value])
    assert exit_info.value.code == 2 and "--max-viewers" in capsys.readouterr().err


def test_public_url_must_be_http(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("textual_serve")
    with pytest.raises(SystemExit):
        serve.main(["--public-url", "ftp://example.org"])
    assert "--public-url must be an http" in capsys.readouterr().err


def test_origin_of_normalises_what_browsers_send() -> None:
    door = pytest.importorskip("tui.serve_door")
    assert door.origin_of("http://127.0.0.1:8000") == ("http", "127.0.0.1", 8000)
    assert door.origin_of("https://Example.ORG/rv/") == ("https", "example.org", 443)
    assert door.origin_of("http://[::1]:80") == door.origin_of("http://[::1]")
    for bad in ("null", "", "file:///x", "http://h:99999", "http://h:x", "ws://h:1"):
        assert door.origin_of(bad) is None, bad


def test_door_checks(tmp_path: Path) -> None:
    door = pytest.importorskip("tui.serve_door")
    server = door.DoorServer(
        "true", host="127.0.0.1", port=8000, public_url="http://127.0.0.1:8000",
        token="s3cret", max_viewers=2,
    )
    assert server.origin_allowed("http://127.0.0.1:8000")
    for origin in (None, "null", "http://127.0.0.1:8001", "http://localhost:8000",
                   "https://127.0.0.1:8000", "http://evil.example.com"):
        assert not server.origin_allowed(origin), origin
    assert server.token_matches("s3cret")
    for token in (None, "", "s3cre", "s3cret ", "S3CRET", "s3crét"):
        assert not server.token_matches(token), token
    with pytest.raises(ValueError):
        door.DoorServer("true", host="h", port=1, public_url="ftp://h", token="t", max_viewers=1)


def test_non_loopback_host_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    door = pytest.importorskip("tui.serve_door")
    started: list[door.DoorServer] = []
    monkeypatch.setattr(door.DoorServer, "serve", lambda self, debug=False: started.append(self))
    assert serve.main(["--host", "0.0.0.0", "--port", "9001", "--max-viewers", "2"]) == 0
    assert "anyone who can reach port 9001" in capsys.readouterr().err
    (server,) = started
    assert server.host == "0.0.0.0" and server.port == 9001 and server.max_viewers == 2
    assert server.command.endswith("--session --serve-pid %d demo" % os.getpid())
    assert server.public_url == "http://0.0.0.0:9001"
