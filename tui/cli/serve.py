"""``rankvisor serve``: the TUI in a browser, through textual-serve, behind a door.

    rankvisor serve [--host 127.0.0.1] [--port 8000] [--public-url URL] [--max-viewers 3]
                    [--control] [RUN | demo | run ARGS...]

What each browser session shows:

* ``RUN`` (a run dir, a log dir or a run id, as ``attach`` takes it): a viewer of that run,
  the session process being ``attach RUN_DIR``. Every session watches the same run; closing
  a tab ends that viewer only, and the run goes on. Viewers are read-only (every command is
  refused with a message) unless ``--control``. A finished (or stale) run is shown from its
  files, read-only. A RUN that names nothing: one line, exit 3.
* nothing: this user's newest running run, as above; with none running, the demo, as below.
* ``demo`` or ``run ARGS...``: each session starts a run of its own; closing the tab ends
  that session's run as quitting would.

Whoever can open a session watches the run (and with ``--control`` or a run of its own can
signal, terminate and restart ranks), and any web page open in a browser on this machine can
reach 127.0.0.1, so (``tui.serve_door``, reached through ``app_seam``, has the details):

* serve prints, once at start, what each session shows and the URL to open; the URL holds a
  secret token made for this start (``?token=...``), without which the page and the
  websocket get 403;
* a websocket (or any request with an Origin header) from another origin than the served
  URL's (``--public-url``, else ``http://HOST:PORT``) gets 403, and no session starts;
* at most ``--max-viewers`` sessions run at once (3 by default); one more gets 503;
* SIGTERM/SIGINT of serve quits every session as its own quit would (a viewer lets go of
  its run; a session's own run is terminated); no session outlives serve, even a SIGKILLed
  one: the session process asks the kernel to SIGKILL it when serve dies
  (``engine.process.die_with_parent``); a run of its own is then removed by that run's guard,
  a run it only watched goes on.

The server listens on 127.0.0.1 unless ``--host`` says otherwise; a non-loopback host prints
a warning that says what reaching the port allows. The session process is
``python -P -m rankvisor.tui.cli.serve --session --serve-pid PID ARGS`` (on Python 3.10,
``-c`` code that drops the working directory from ``sys.path`` first): never a ``rankvisor``,
``engine.py`` or ``tui.py`` of the directory serve runs in, while PYTHONPATH still applies.
ARGS is ``attach RUN_DIR [--read-only]`` for a viewer (``tui.cli.attach`` without its
terminal check: textual-serve gives the session a pipe and a web driver), else the job,
built with the CLI's own parsers; the session runs the app through ``app_seam``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .app_seam import app_runner, browser_door

if TYPE_CHECKING:
    from .command import Subcommand

__all__ = [
    "DEFAULT_MAX_VIEWERS",
    "NO_SUCH_RUN",
    "Plan",
    "main",
    "plan_sessions",
    "python_module_argv",
    "serve_command",
    "session_command",
    "viewer_session_args",
]

PROG = "rankvisor serve"

DEFAULT_MAX_VIEWERS = 3
"""Sessions at once unless ``--max-viewers`` says otherwise: each one is a TUI process (and,
for ``demo`` and ``run``, a whole run)."""

NO_SUCH_RUN = 3
"""Exit status when RUN names no run, as the other commands on runs."""

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
    own ``rankvisor.py`` (or a module named like one that ours import) would shadow it.
    PYTHONPATH keeps working.

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
    argv = [*python_module_argv("rankvisor.tui.cli.serve"), "--session", "--serve-pid", str(pid),
            *args]
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


def _parser(*, one_run: bool = False) -> argparse.ArgumentParser:
    """serve's parser; ``one_run``: RUN alone, so that options may follow it (``serve RUN
    --control``), where ``demo``/``run`` take everything after them as the job's."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Serve the rankvisor TUI in a browser: a viewer of a run (read-only "
        "unless --control), or with 'demo' / 'run ARGS...' a new run per browser session.",
        epilog="RUN: a run dir, a log dir or a run id (default: your newest running run; "
        "with none running, the demo). Closing a tab ends that viewer; the run goes on.",
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
        help=f"browser sessions at once (default: {DEFAULT_MAX_VIEWERS})",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="viewers of RUN may signal, terminate and restart its ranks (default: "
        "read-only, every command refused); a demo or run session always controls its own run",
    )
    if one_run:
        p.add_argument("job", nargs="?", metavar="RUN")
        return p
    p.add_argument(
        "job",
        nargs=argparse.REMAINDER,
        metavar="RUN | demo | run ARGS",
        help="what each session shows: a viewer of RUN, or a new run ('demo', 'run' with "
        "run's arguments)",
    )
    return p


@dataclass(frozen=True)
class Plan:
    """What every browser session of this serve runs, and how to say so."""

    session_args: list[str]
    """The session process's arguments after ``--session --serve-pid PID``."""
    shows: str
    """For the announce line: what a session shows."""
    reach: str
    """For the non-loopback warning: what whoever opens a session can do."""


def viewer_session_args(run_dir: str, *, control: bool) -> list[str]:
    """A session that is ``attach RUN_DIR``: read-only unless ``control``.

    The run dir, not the id the person typed: every session must open that very run, even
    if a newer one with the same id starts meanwhile.
    """
    return ["attach", run_dir] if control else ["attach", run_dir, "--read-only"]


def plan_sessions(job: Sequence[str], *, control: bool) -> Plan:
    """Resolve serve's positional arguments into what each session runs.

    Raises:
        engine.control.registry.NoSuchRun: a RUN that names no run.
        ValueError: more than one RUN (the message says what to write instead).
    """
    from ...engine.control import registry

    job = list(job)
    if job[:1] == ["--"]:
        job = job[1:]
    if job[:1] in (["demo"], ["run"]):
        return Plan(job, f"a run of its own: {shlex.join(job)}",
                    "signal, terminate and restart the ranks of every session's run")
    if len(job) > 1:
        raise ValueError(
            f"give one RUN, not {len(job)} arguments (a new run per browser session: "
            f"{PROG} run ARGS...)"
        )
    if job:
        entry = registry.resolve(job[0], running_only=False)
    else:
        try:
            entry = registry.resolve(None, running_only=True)
        except registry.NoSuchRun:
            return Plan(["demo"], "a run of its own: demo (none of your runs is running)",
                        "signal, terminate and restart the ranks of every session's run")
    state, _ = registry.entry_state(entry)
    named = f"run {entry.run_id} ({entry.run_dir})"
    if state != "running":
        return Plan(viewer_session_args(entry.run_dir, control=False),
                    f"the record of {named}, {state}, read-only",
                    f"read the record of {named}")
    if control:
        return Plan(viewer_session_args(entry.run_dir, control=True),
                    f"a viewer of {named}, with control (signal, terminate, restart)",
                    f"signal, terminate and restart the ranks of {named}")
    return Plan(viewer_session_args(entry.run_dir, control=False),
                f"a viewer of {named}, read-only", f"watch {named} and its output")


def _session(argv: list[str]) -> int:
    """Inside a browser session: ``attach RUN_DIR``, or build the run like the CLI does and
    run the TUI on it."""
    if argv[:1] == ["--serve-pid"] and len(argv) >= 2:
        # First of all: die with serve, even SIGKILLed (and at once if it is already gone).
        from ...engine.process import die_with_parent

        die_with_parent(int(argv[1]))
        argv = argv[2:]
    if argv[:1] == ["attach"]:
        from .attach import main as attach_main

        # A viewer: closing the tab (textual-serve's "quit") ends this process only; the
        # run goes on in its supervisor process.
        return attach_main(argv[1:], need_terminal=False)
    from ...engine.entry.headless import run_interactive
    from ...engine.supervisor.run_config import ConfigError
    from .run_args import parse_job

    command = argv.pop(0) if argv and argv[0] in ("run", "demo") else "run"
    try:
        config = parse_job(command, argv).config
    except ConfigError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    return run_interactive(config, app_runner().run_tui)


def _announce(url: str, plan: Plan, max_viewers: int) -> None:
    # Plain print, flushed, one line for the URL: a terminal must not wrap it, and whoever
    # started serve (a script, a test) reads it from our stdout.
    print(
        f"{PROG}: each browser session shows {plan.shows} (at most {max_viewers} at once)\n"
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
    if args.job[:1] not in ([], ["demo"], ["run"], ["--"]):
        parser = _parser(one_run=True)
        args = parser.parse_args(args_in)
        args.job = [args.job]
    try:
        door = browser_door()
    except ImportError:
        print(
            f"{PROG}: error: textual-serve is not installed (pip install 'rankvisor[web]')",
            file=sys.stderr,
        )
        return 2
    public_url = (args.public_url or _default_public_url(args.host, args.port)).rstrip("/")
    if door.origin_of(public_url) is None:
        parser.error(f"--public-url must be an http:// or https:// URL, not {args.public_url!r}")
    from ...engine.control.registry import NoSuchRun

    try:
        plan = plan_sessions(args.job, control=args.control)
    except ValueError as e:
        parser.error(str(e))
    except NoSuchRun as e:
        hint = f" (a new run per browser session: {PROG} run ARGS...)" if args.job else ""
        print(f"{PROG}: {e}{hint}", file=sys.stderr)
        return NO_SUCH_RUN
    if not _is_loopback(args.host):
        print(
            f"{PROG}: warning: listening on {args.host}: anyone who can reach port {args.port} "
            f"and learns the URL (plain http sends it in clear) can {plan.reach}; browsers "
            f"must use {public_url} (set --public-url to the address they use)",
            file=sys.stderr,
        )
    token = secrets.token_urlsafe(32)
    server = door.DoorServer(
        session_command(plan.session_args),
        host=args.host,
        port=args.port,
        public_url=public_url,
        token=token,
        max_viewers=args.max_viewers,
        announce=lambda: _announce(f"{public_url}/?token={token}", plan, args.max_viewers),
    )
    server.serve()
    return 0


def serve_command(_sub: Subcommand, argv: list[str]) -> int:
    """The ``serve`` row of the table."""
    return int(main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
