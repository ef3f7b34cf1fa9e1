"""``rankvisor serve``: loopback by default, one app process per browser session."""

from __future__ import annotations

import pytest

from tui import serve


def test_session_command_runs_the_tui_module_with_the_job() -> None:
    command = serve.session_command(["run", "--nproc-per-node", "2", "train.py", "--lr", "1e-3"])
    assert "-m tui.serve --session run --nproc-per-node 2 train.py --lr 1e-3" in command


def test_default_host_is_loopback() -> None:
    args = serve._parser().parse_args([])
    assert args.host == "127.0.0.1" and serve._is_loopback(args.host)
    assert serve._is_loopback("localhost") and serve._is_loopback("::1")
    assert not serve._is_loopback("0.0.0.0") and not serve._is_loopback("example.org")


def test_non_loopback_host_warns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[tuple[str, str, int]] = []

    class FakeServer:
        def __init__(self, command: str, host: str, port: int, **kwargs: object) -> None:
            started.append((command, host, port))

        def serve(self) -> None:
            pass

    import textual_serve.server

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    assert serve.main(["--host", "0.0.0.0", "--port", "9001"]) == 0
    assert "anyone who can reach port 9001" in capsys.readouterr().err
    ((command, host, port),) = started
    assert host == "0.0.0.0" and port == 9001 and command.endswith("--session demo")
