"""``rankvisor mcp`` driven by the MCP SDK's own client (``mcp.client.stdio``) against real
runs of a real supervisor process (``rankvisor run -D``, ``rankvisor demo -D``)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.debug.test_input_cli import START_S, Runs, cli, runs

__all__ = ["runs"]  # a fixture, used by name

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

pytestmark = pytest.mark.processes

MUTATING_CALLS = [
    ("send_to_rank", {"rank": 0, "line": "p x"}),
    ("signal", {"ranks": [0], "signal": "SIGUSR1"}),
    ("terminate", {"ranks": [0]}),
    ("restart", {"rank": 0}),
]


class Agent:
    """One MCP session with ``rankvisor mcp``: ``call`` returns (is_error, text or JSON)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, name: str, **arguments: Any) -> tuple[bool, Any]:
        result = await self.session.call_tool(name, arguments,
                                              read_timeout_seconds=START_S * 4)
        error = bool(getattr(result, "is_error", getattr(result, "isError", False)))
        text = result.content[0].text
        return error, text if error else json.loads(text)


def _params(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "rankvisor.tui", "mcp", *args],
                                 env=dict(os.environ))


async def _session(args: tuple[str, ...], body: Any) -> None:
    async with stdio_client(_params(*args)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await body(Agent(session))


async def test_an_agent_answers_pdb_through_the_mcp_server(runs: Runs) -> None:
    run_dir = runs.start("bp_job.py", 2)

    async def body(agent: Agent) -> None:
        names = {t.name for t in (await agent.session.list_tools()).tools}
        assert {"list_runs", "run_status", "ranks_at_prompt", "read_logs", "search_logs",
                "stacks", "collectives", "send_to_rank", "wait_for", "bundle", "signal",
                "terminate", "restart"} <= names
        error, found = await agent.call("wait_for", event="prompt", timeout=START_S)
        assert not error and found["happened"], found
        assert [r["rank"] for r in found["ranks"]] == [0]
        assert found["ranks"][0]["prompt"] == "(Pdb) "
        error, answer = await agent.call("send_to_rank", rank=0, line="p x", confirm=True)
        assert not error, answer
        assert answer["output"] == "41" and answer["at_prompt"], answer
        error, logs = await agent.call("read_logs", rank=0, max_lines=5)
        assert not error and "(Pdb) 41" in logs["lines"], logs
        error, hits = await agent.call("search_logs", pattern=r"^\(Pdb\) 41$")
        assert not error and [(m["rank"], m["stream"]) for m in hits["matches"]] == [
            (0, "stdout")], hits
        error, answer = await agent.call("send_to_rank", rank=0, line="c", confirm=True,
                                         timeout=START_S)
        assert not error, answer
        error, end = await agent.call("wait_for", event="end", timeout=START_S)
        assert not error and end["happened"] and end["exitcode"] == 0, end
        error, status = await agent.call("run_status")
        assert status["state"] == "finished" and status["exitcode"] == 0, status

    await _session(("--allow-control", run_dir), body)
    # The lines went as typed ones do: into rank 0's stdin.log, in order.
    typed = [json.loads(x)["text"] for x in
             (Path(run_dir) / "attempt_0" / "0" / "stdin.log").read_text().splitlines()]
    assert typed == ["p x", "c"]


async def test_every_mutating_tool_is_refused_without_the_flag_or_confirm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(state))

    async def read_only(agent: Agent) -> None:
        for name, arguments in MUTATING_CALLS:
            error, text = await agent.call(name, **arguments, confirm=True)
            assert error and "mcp --allow-control" in text, (name, text)

    async def unconfirmed(agent: Agent) -> None:
        for name, arguments in MUTATING_CALLS:
            error, text = await agent.call(name, **arguments)
            assert error and "confirm: true" in text, (name, text)
        error, runs_now = await agent.call("list_runs")
        assert not error and runs_now == {"runs": []}

    await _session((), read_only)
    await _session(("--allow-control",), unconfirmed)


async def test_run_status_names_the_demo_s_suspect(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("RANKVISOR_STATE_DIR", str(state))
    monkeypatch.setenv("DEMO_STALL_STEP", "10")
    done = cli("demo", "-D", "--log-dir", str(tmp_path / "logs"), "--term-timeout", "2",
               "--no-collectives")
    assert done.returncode == 0, done.stderr
    run_dir = re.search(r"goes on in (\S+)", done.stdout)[1]  # type: ignore[index]

    async def body(agent: Agent) -> None:
        error, end = await agent.call("wait_for", event="end", timeout=4 * START_S)
        assert not error and end["happened"], end
        error, status = await agent.call("run_status", run=run_dir)
        assert not error, status
        assert status["suspect"]["rank"] == 3, status["suspect"]
        assert status["suspect"]["reason"].startswith("rank 3: silent ")
        assert status["root_cause"]["rank"] == 2
        assert {r["rank"]: r["state"] for r in status["ranks"]}[2] == "failed"

    try:
        await _session((), body)
    finally:
        cli("stop", run_dir, "--timeout", "1")
