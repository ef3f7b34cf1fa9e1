"""``rankvisor serve``: the same app in a browser, through textual-serve, behind a door.

    rankvisor serve [--host 127.0.0.1] [--port 8000] [--public-url URL] [--max-viewers 3]
                    [demo | run ARGS...]

Each browser session starts its own app process, and so its own run (``demo`` by default);
closing the tab ends that app, which shuts its ranks down as quitting would. Whoever can open
a session can signal and restart the ranks, and any web page open in a browser on this
machine can reach 127.0.0.1, so (``tui.serve_door`` has the details):

* serve prints, once at start, the URL to open; it holds a secret token made for this start
  (``?token=...``), without which the page and the websocket get 403;
* a websocket (or any request with an Origin header) from another origin than the served
  URL's (``--public-url``, else ``http://HOST:PORT``) gets 403, and no app starts;
* at most ``--max-viewers`` sessions run at once (3 by default); one more gets 503;
* SIGTERM/SIGINT of serve quits every session as its own quit would; no session outlives
  serve, even a SIGKILLed one: the session app asks the kernel to SIGKILL it when serve dies
  (``engine.process.die_with_parent``), and its run's guard then removes its ranks.

The server listens on 127.0.0.1 unless ``--host`` says otherwise; a non-loopback host prints
a warning. The session process is ``python -P -m tui.serve --session --serve-pid PID ARGS``
(on Python 3.10, ``-c`` code that drops the working directory from ``sys.path`` first): never
the user's ``engine.py`` or ``tui.py`` from the directory serve runs in, while PYTHONPATH still
applies. It builds the run with the CLI's own parsers and runs the TUI even though its stdout
is not a terminal (textual-serve gives it a pipe and a web driver).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import shlex
import sys
from typing import Sequence

__all__ = ["DEFAULT_MAX_VIEWERS", "main", "python_module_argv", "session_command"]

PROG = "rankvisor serve"

DEFAULT_MAX_VIEWERS = 3
"""Sessions at once unless ``--max-viewers`` says otherwise: each one is a whole run."""

_DROP_CWD_AND_RUN = (
    "import sys; "
    "sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]; "
    "import runpy; "
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
)
"""Python 3.10 has no ``-P``: ``-c`` puts '' (the working directory) first on ``sys.path``;
drop it before anything else is imported, then run the module as ``-m`` would."""


def python_module_argv(module: str, *, safe_path: bool | None = None) -> list[str]:
    """argv running ``module`` with this interpreter, never importing from the working dir.

    ``python -m`` puts the working directory first on ``sys.path``, where a training repo's
    own ``engine.py`` or ``tui.py`` would shadow ours. PYTHONPATH keeps working.

    Args:
        module: the module to run as ``__main__``.
        safe_path: use ``-P`` (default: on Python 3.11+, which has it) rather than the
            ``-c`` arrangement.
    """
    if safe_path is None:
        safe_path = sys.version_info >= (3, 11)
    if safe_path:
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", _DROP_CWD_AND_RUN.format(module=module)]


def session_command(args: Sequence[str], serve_pid: int | None = None) -> str:
    """The shell command textual-serve runs for each browser session.

    ``exec``: the shell replaces itself with Python, so the session app is serve's own child
    and its death signal follows serve (``serve_pid``, default this process).
    """
    pid = os.getpid() if serve_pid is None else serve_pid
    argv = [*python_module_argv("tui.serve"), "--session", "--serve-pid", str(pid), *args]
    return "exec " + shlex.join(argv)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def _default_public_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address needs brackets in a URL
    return f"http://{shown}:{port}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the rankvisor TUI in a browser (one run per browser session).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    p.add_argument(
        "--public-url",
        default=None,
        help="URL the browser uses, behind a proxy; only its origin may open sessions "
        "(default: http://HOST:PORT)",
    )
    p.add_argument(
        "--max-viewers",
        type=_positive_int,
        default=DEFAULT_MAX_VIEWERS,
        metavar="N",
        help=f"browser sessions (each one a run) at once (default: {DEFAULT_MAX_VIEWERS})",
    )
    p.add_argument(
        "job",
        nargs=argparse.REMAINDER,
        help="what each session runs: 'demo' (default) or 'run' with run's arguments",
    )
    return p


def _session(argv: list[str]) -> int:
    """Inside a browser session: build the run like the CLI does and run the TUI on it."""
    if argv[:1] == ["--serve-pid"] and len(argv) >= 2:
        # First of all: die with serve, even SIGKILLed (and at once if it is already gone).
        from engine.process import die_with_parent

        die_with_parent(int(argv[1]))
        argv = argv[2:]
    from engine.supervisor.headless import run_interactive
    from engine.supervisor.run_config import ConfigError
    from tui.run import run_tui
    from tui.run_args import parse_job

    command = argv.pop(0) if argv and argv[0] in ("run", "demo") else "run"
    try:
        config = parse_job(command, argv).config
    except ConfigError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    return run_interactive(config, run_tui)


def _announce(url: str, job: Sequence[str], max_viewers: int) -> None:
    # Plain print, flushed, one line for the URL: a terminal must not wrap it, and whoever
    # started serve (a script, a test) reads it from our stdout.
    print(
        f"{PROG}: each browser session runs: {shlex.join(job)} (at most {max_viewers} at once)\n"
        "Open this URL (its token is new at every start; keep it to yourself):\n"
        f"    {url}\n"
        "Press Ctrl+C to quit.",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``rankvisor serve ...`` calls this with the arguments after ``serve``)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--session"]:
        return _session(args_in[1:])
    parser = _parser()
    args = parser.parse_args(args_in)
    job = list(args.job) or ["demo"]
    if job[:1] == ["--"]:
        job = job[1:] or ["demo"]
    try:
        from tui.serve_door import DoorServer, origin_of
    except ImportError:
        print(
            f"{PROG}: error: textual-serve is not installed (pip install 'rankvisor[web]')",
            file=sys.stderr,
        )
        return 2
    public_url = (args.public_url or _default_public_url(args.host, args.port)).rstrip("/")
    if origin_of(public_url) is None:
        parser.error(f"--public-url must be an http:// or https:// URL, not {args.public_url!r}")
    if not _is_loopback(args.host):
        print(
            f"{PROG}: warning: listening on {args.host}: anyone who can reach port {args.port} "
            "and learns the URL (plain http sends it in clear) can signal and restart these "
            f"ranks; browsers must use {public_url} (set --public-url to the address they use)",
            file=sys.stderr,
        )
    token = secrets.token_urlsafe(32)
    server = DoorServer(
        session_command(job),
        host=args.host,
        port=args.port,
        public_url=public_url,
        token=token,
        max_viewers=args.max_viewers,
        announce=lambda: _announce(f"{public_url}/?token={token}", job, args.max_viewers),
    )
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
