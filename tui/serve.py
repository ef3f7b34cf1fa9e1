"""``rankvisor serve``: the same app in a browser, through textual-serve.

    rankvisor serve [--host 127.0.0.1] [--port 8000] [--public-url URL] [demo | run ARGS...]

Each browser session starts its own app process, and so its own run (``demo`` by default);
closing the tab ends that app, which shuts its ranks down as quitting would. The server
listens on 127.0.0.1 unless ``--host`` says otherwise: whoever can reach the port can signal
and restart the ranks, so a non-loopback host prints a warning.

The session process is ``python -m tui.serve --session ARGS``: it builds the run with the
CLI's own parsers and runs the TUI even though its stdout is not a terminal (textual-serve
gives it a pipe and a web driver).
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import sys
from typing import Sequence

__all__ = ["main", "session_command"]

PROG = "rankvisor serve"


def session_command(args: Sequence[str]) -> str:
    """The shell command textual-serve runs for each browser session."""
    return shlex.join([sys.executable, "-m", "tui.serve", "--session", *args])


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the rankvisor TUI in a browser (one run per browser session).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    p.add_argument("--public-url", default=None, help="URL the browser uses, behind a proxy")
    p.add_argument(
        "job",
        nargs=argparse.REMAINDER,
        help="what each session runs: 'demo' (default) or 'run' with run's arguments",
    )
    return p


def _session(argv: list[str]) -> int:
    """Inside a browser session: build the run like the CLI does and run the TUI on it."""
    from engine.supervisor.headless import run_interactive
    from engine.supervisor.run_config import ConfigError
    from tui.run import run_tui
    from tui.run_args import parse_job

    command = argv.pop(0) if argv and argv[0] in ("run", "demo") else "run"
    try:
        config, _headless = parse_job(command, argv)
    except ConfigError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    return run_interactive(config, run_tui)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``rankvisor serve ...`` calls this with the arguments after ``serve``)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--session"]:
        return _session(args_in[1:])
    args = _parser().parse_args(args_in)
    job = list(args.job) or ["demo"]
    if job[:1] == ["--"]:
        job = job[1:] or ["demo"]
    try:
        from textual_serve.server import Server
    except ImportError:
        print(
            f"{PROG}: error: textual-serve is not installed (pip install 'rankvisor[web]')",
            file=sys.stderr,
        )
        return 2
    if not _is_loopback(args.host):
        print(
            f"{PROG}: warning: listening on {args.host}: anyone who can reach port {args.port} "
            "can signal and restart these ranks",
            file=sys.stderr,
        )
    server = Server(
        session_command(job),
        host=args.host,
        port=args.port,
        title="rankvisor",
        public_url=args.public_url,
    )
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
