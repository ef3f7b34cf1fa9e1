"""``rankvisor mcp [RUN]``: a Model Context Protocol server on stdio, for a coding agent that
debugs a run beside a person (``claude mcp add rankvisor -- rankvisor mcp``).

It is one more viewer of the run's control socket, under the same rules (same uid; read-only
unless ``--allow-control``); the tools are ``mcp_tools``'s. The SDK (PyPI ``mcp``, the
``rankvisor[mcp]`` extra) is imported only here, when the command runs: ``rankvisor --help``
and every other command work without it. mcp 2's ``MCPServer`` and mcp 1's ``FastMCP`` take
the same tools.
"""

from __future__ import annotations

import json
from typing import Any

from .command import EXIT_REFUSED, EXIT_USAGE, Subcommand, say
from .mcp_tools import MUTATING, ToolRefused, Tools, bounded, clean

__all__ = ["mcp_command"]

MISSING = "the MCP server needs the mcp package: pip install 'rankvisor[mcp]'"

_HELP = {
    "list_runs": "Every run of this user, newest first: run_id, state, ranks, exit code, run_dir.",
    "run_status": "A run's state: each rank's state, pid, step, exit cause, prompt; the root "
                  "cause and rankvisor's suspect with its evidence.",
    "ranks_at_prompt": "The ranks waiting for input (a pdb prompt, input()): prompt, where.",
    "read_logs": "Lines of one rank's stdout or stderr. cursor: a byte offset from an "
                 "earlier answer's next_cursor (omit it for the last max_lines lines).",
    "search_logs": "A regular expression over the ranks' stdout and stderr (the last 32 MiB "
                   "of each): rank, stream, line number, text.",
    "stacks": "Every running rank's Python stack (py-spy, never pausing a rank), merged: "
              "the ranks whose stack differs come first.",
    "collectives": "Each rank's last collectives from torch's Flight Recorder, and the "
                   "verdicts (which rank did not enter one).",
    "wait_for": "Wait until event happens: prompt (a rank waits for input), failure, "
                "suspect, end (the run finished); or timeout seconds pass.",
    "bundle": "Write one .tar.gz of the run for a bug report (logs, errors, stacks, status); "
              "returns its path.",
    "send_to_rank": "Send one line to a rank's stdin (a pdb command: 'p x', 'bt', 'c') and "
                    "return what it printed until its next prompt. Needs --allow-control "
                    "and confirm: true.",
    "signal": "Send a signal (SIGUSR1, 10) to ranks. Needs --allow-control and confirm: true.",
    "terminate": "Terminate ranks (all when omitted) with SIGTERM, then SIGKILL. Needs "
                 "--allow-control and confirm: true.",
    "restart": "Restart one rank, or every rank (a new attempt) when rank is omitted. Needs "
               "--allow-control and confirm: true.",
}


def _sdk() -> tuple[Any, type[Exception]]:
    """The SDK's server class and the error a tool raises for the model to read."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError

        return MCPServer, ToolError
    except ImportError:
        from mcp.server.fastmcp import FastMCP  # mcp 1
        from mcp.server.fastmcp.exceptions import ToolError as Error1

        return FastMCP, Error1


def build_server(tools: Tools) -> Any:
    """The server, its tools bound to ``tools``.

    Raises:
        ImportError: the mcp package is missing.
    """
    import anyio.to_thread

    server_class, tool_error = _sdk()
    server = server_class("rankvisor", log_level="WARNING", instructions=(
        "rankvisor supervises the ranks of a distributed (torch.distributed) job. Start from "
        "run_status (its suspect names the rank that most likely started a failure), then "
        "stacks, collectives and read_logs. Ranks are global ranks."))

    async def call(name: str, **kwargs: Any) -> str:
        try:
            answer = await anyio.to_thread.run_sync(lambda: getattr(tools, name)(**kwargs))
        except ToolRefused as e:
            raise tool_error(str(clean(str(e)))) from None
        return json.dumps(bounded(clean(answer)), ensure_ascii=False)

    async def list_runs() -> str:
        return await call("list_runs")

    async def run_status(run: str | None = None) -> str:
        return await call("run_status", run=run)

    async def ranks_at_prompt(run: str | None = None) -> str:
        return await call("ranks_at_prompt", run=run)

    async def read_logs(rank: int = 0, stream: str = "stdout", cursor: int | None = None,
                        max_lines: int = 200, run: str | None = None) -> str:
        return await call("read_logs", rank=rank, stream=stream, cursor=cursor,
                          max_lines=max_lines, run=run)

    async def search_logs(pattern: str, ranks: list[int] | None = None,
                          run: str | None = None) -> str:
        return await call("search_logs", pattern=pattern, ranks=ranks, run=run)

    async def stacks(ranks: list[int] | None = None, run: str | None = None) -> str:
        return await call("stacks", ranks=ranks, run=run)

    async def collectives(run: str | None = None) -> str:
        return await call("collectives", run=run)

    async def wait_for(event: str, timeout: float = 30.0, run: str | None = None) -> str:
        return await call("wait_for", event=event, timeout=timeout, run=run)

    async def bundle(run: str | None = None, output: str | None = None) -> str:
        return await call("bundle", run=run, output=output)

    async def send_to_rank(rank: int, line: str, confirm: bool = False, timeout: float = 10.0,
                           run: str | None = None) -> str:
        return await call("send_to_rank", rank=rank, line=line, confirm=confirm,
                          timeout=timeout, run=run)

    async def signal(ranks: list[int], signal: str, confirm: bool = False,
                     run: str | None = None) -> str:
        return await call("signal", ranks=ranks, signal=signal, confirm=confirm, run=run)

    async def terminate(ranks: list[int] | None = None, confirm: bool = False,
                        timeout_s: float | None = None, run: str | None = None) -> str:
        return await call("terminate", ranks=ranks, confirm=confirm, timeout_s=timeout_s,
                          run=run)

    async def restart(rank: int | None = None, confirm: bool = False,
                      run: str | None = None) -> str:
        return await call("restart", rank=rank, confirm=confirm, run=run)

    for fn in (list_runs, run_status, ranks_at_prompt, read_logs, search_logs, stacks,
               collectives, wait_for, bundle, send_to_rank, signal, terminate, restart):
        words = _HELP[fn.__name__]
        if fn.__name__ in MUTATING and not tools.allow_control:
            words += " (This server was started read-only: refused.)"
        server.add_tool(fn, name=fn.__name__, description=words)
    return server


def mcp_command(sub: Subcommand, argv: list[str]) -> int:
    """``rankvisor mcp [RUN] [--allow-control]``: serve until the client closes stdin."""
    p = sub.parser()
    p.add_argument("run", nargs="?", metavar="RUN",
                   help="a run dir, log dir or run id (default: each tool's run, else your "
                        "newest run)")
    p.add_argument("--allow-control", action="store_true",
                   help="let the agent act on ranks (send_to_rank, signal, terminate, "
                        "restart), each call with confirm: true; read-only without it")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        server = build_server(Tools(args.run, allow_control=args.allow_control))
    except ImportError:
        say(sub.name, MISSING)
        return EXIT_REFUSED
    try:
        server.run()
    except KeyboardInterrupt:
        return 130
    return 0
