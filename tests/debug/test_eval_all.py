"""``rankvisor debug RUN --all --eval EXPR``: one value from every rank at a pdb prompt, on a
real supervisor process with real ranks; and its rules (the odd ranks, the pdb line) as
tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rankvisor.engine.entry.rank_eval import eval_line, odd_ranks
from rankvisor.tui.cli.mcp_tools import bounded

from tests.debug.test_input_cli import Runs, cli, runs, waiting

pytestmark = pytest.mark.processes

__all__ = ["runs"]  # a fixture, used by name


@pytest.mark.parametrize(("values", "odd"), [
    ({0: "41", 1: "41", 2: "7", 3: "41"}, [2]),
    ({0: "1", 1: "1", 2: "2", 3: "3"}, [2, 3]),
    ({0: "1", 1: "2"}, []),  # a tie: no majority
    ({0: "1", 1: "1", 2: "2", 3: "2"}, []),
    ({0: "x"}, []),
    ({}, []),
])
def test_the_odd_ranks_differ_from_the_majority(values: dict[int, str], odd: list[int]) -> None:
    assert odd_ranks(values) == odd


@pytest.mark.parametrize("expr", ["", "   ", "x\ny", "a\rb"])
def test_an_expression_is_one_line(expr: str) -> None:
    with pytest.raises(ValueError):
        eval_line(expr)


@pytest.mark.parametrize(("answer", "cut"), [
    ({"lines": ["a"] * 10}, False),
    ({"lines": ["x" * 1000] * 200}, True),
    ({"text": "y" * 200_000, "n": 3}, True),
])
def test_answers_are_bounded(answer: dict[str, object], cut: bool) -> None:
    out = bounded(answer, cap=64 << 10)
    assert len(json.dumps(out, ensure_ascii=False).encode()) <= 64 << 10
    assert out.get("truncated", False) is cut


def test_eval_on_every_rank_marks_the_one_that_differs(runs: Runs) -> None:
    run_dir = runs.start("eval_job.py", 4)
    waiting(run_dir, (0, 1, 2, 3))
    done = cli("debug", run_dir, "--all", "--eval", "x", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["values"] == {"0": "41", "1": "41", "2": "7", "3": "41"}
    assert out["odd"] == [2] and out["not_at_prompt"] == []
    # A tensor is summarised: the same on every rank, so nothing odd.
    done = cli("debug", run_dir, "--all", "--eval", "t")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    assert rows[0] == "RANK  VALUE"
    assert rows[1:5] == [f"{r:<4}  Tensor shape=(2, 3) dtype=torch.float32 norm=2.44949"
                         for r in range(4)]
    assert rows[5] == "every rank has the same value"
    # Each rank's line went into its stdin.log, as a single send would.
    for rank in range(4):
        log = Path(run_dir) / "attempt_0" / str(rank) / "stdin.log"
        texts = [json.loads(x)["text"] for x in log.read_text().splitlines()]
        assert texts == [eval_line("x"), eval_line("t")]
    assert cli("input", run_dir, "all", "c").returncode == 0
    assert cli("wait", run_dir).returncode == 0
