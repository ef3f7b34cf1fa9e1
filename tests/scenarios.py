"""Scenarios for the scripted engine (``engine.testing.ScriptedSupervisor``): fixed runs,
scripts and tracebacks shared by the UI tests and the screenshots.

Everything here is fixed (pids from ``BASE_PID``, times from ``EPOCH``), so a picture of it is
the same on every machine. When a scenario is given a directory, what it writes there (an
error.json) is what the real rank would have written; give the ScriptedSupervisor
``write_files=True`` and the output it emits lands in the ranks' log files too, so views that
read the disk (zoomed scrollback, filtered logs) see the same bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

from rankvisor.engine.events import Event, RankOutput, RankStateChanged, RankStats, SupervisorNotice
from rankvisor.engine.forensics.collectives import Verdict
from rankvisor.engine.forensics.exit_cause import ExitFacts, classify
from rankvisor.engine.forensics.stacks import Frame, RankStack, StackDump, ThreadStack, merge
from rankvisor.engine.handle import RankInfo, RunInfo
from rankvisor.engine.states import RankState
from rankvisor.engine.testing import (
    BASE_PID,
    EPOCH,
    RELEASE,
    Answer,
    Checkpoint,
    Prompt,
    ScriptedFailure,
    ScriptItem,
    rank_paths,
)

if TYPE_CHECKING:
    from rankvisor.engine.errors import ProcessFailure
    from rankvisor.engine.result import RunProcsResult

__all__ = [
    "PDB_WHERE",
    "pdb_prompt",
    "pdb_script",
    "recorded_collectives",
    "recorded_stacks",
    "TRACEBACK",
    "failure_script",
    "suspect_script",
    "running_script",
    "scripted_info",
    "play_rounds",
    "straggler_script",
    "training_lines",
    "write_timeline_files",
]


def scripted_info(
    nprocs: int = 4,
    *,
    run_dir: str | os.PathLike[str] = "/nonexistent/rankvisor/run_0",
    name: str = "trainer",
    run_id: str = "demo-1",
    term_timeout_s: float = 30.0,
    stdout_filters: tuple[str, ...] = ("epoch",),
    stderr_filters: tuple[str, ...] = ("WARNING",),
    stdin: str = "null",
) -> RunInfo:
    """A run of ``nprocs`` ranks, all STARTING, with their files under ``run_dir`` (their
    stdin: ``RunInfo.stdin``; "pipe" lets ``SendInput`` reach them)."""
    run_dir = str(run_dir)
    ranks = tuple(
        RankInfo(r, RankState.STARTING, BASE_PID + r, 0, 0, *rank_paths(run_dir, 0, r, None))
        for r in range(nprocs)
    )
    return RunInfo(
        name=name,
        nprocs=nprocs,
        run_id=run_id,
        log_dir=run_dir,
        attempt=0,
        term_timeout_s=term_timeout_s,
        command=("python", "train.py", "--epochs", "3"),
        filtered_stdout_path=f"{run_dir}/attempt_0/filtered_stdout.log" if stdout_filters else "",
        filtered_stderr_path=f"{run_dir}/attempt_0/filtered_stderr.log" if stderr_filters else "",
        stdout_filters=stdout_filters,
        stderr_filters=stderr_filters,
        log_line_prefixes={r: f"[{name}{r}]:" for r in range(nprocs)},
        ranks=ranks,
        stdin=stdin,
    )


def training_lines(rank: int, steps: int, *, start: int = 0) -> Iterator[str]:
    """Deterministic training-log lines, with ANSI colour and markup-like text in them."""
    for step in range(start, start + steps):
        loss = 2.5 / (1 + 0.05 * step) + 0.01 * rank
        if step % 10 == 0:
            yield f"\x1b[36mepoch {step // 10}\x1b[0m starting, lr=3.0e-04"
        yield f"step {step:5d} | loss {loss:.4f} | \x1b[32m{412 - rank:d} samples/s\x1b[0m"


def _stats(rank: int, cpu: Sequence[float], rss: int, numa: int | None = 0) -> list[Event]:
    return [
        RankStats(
            rank,
            BASE_PID + rank,
            "running",
            value,
            rss,
            12,
            2,
            (rank,),
            rank,
            numa,
            10.0 + i,
            EPOCH + i,
        )
        for i, value in enumerate(cpu)
    ]


def running_script(
    nprocs: int = 4, *, steps: int = 40, with_stats: bool = True
) -> list[ScriptItem]:
    """Every rank starts, runs and logs; rank 0 draws a progress bar; nothing ends."""
    items: list[ScriptItem] = []
    for r in range(nprocs):
        items.append(
            RankStateChanged(r, RankState.STARTING, RankState.RUNNING, BASE_PID + r, t=EPOCH)
        )
    for r in range(nprocs):
        lines = list(training_lines(r, steps - (r % 3)))
        if r == 1:
            lines.insert(3, "[rank1]: [bold]x[/bold] [link=http://a]b[/link] is log text")
        items.append(RankOutput(r, "stdout", tuple(lines)))
        # The duplicate filters ("epoch" on stdout, "WARNING" on stderr) copy lines, prefixed.
        epochs = tuple(f"[trainer{r}]:{line}" for line in lines if "epoch" in line)
        items.append(RankOutput(r, "filtered_stdout", epochs))
        if r % 2 == 1:
            # A step it has passed (17 in the usual 40-step runs): the warning is about the past.
            warning = (
                f"UserWarning: rank {r}: WARNING grad norm 1e4 clipped (step {min(17, steps - 3)})"
            )
            items.append(RankOutput(r, "stderr", (warning,)))
            items.append(RankOutput(r, "filtered_stderr", (f"[trainer{r}]:{warning}",)))
    items.append(RankOutput(0, "stdout", (), partial=" 62%|██████▏   | 62/100 [00:31<00:19]"))
    if with_stats:
        for r in range(nprocs):
            shape = [40 + ((r * 7 + i * 13) % 60) for i in range(24)]
            items.extend(
                _stats(r, shape, (900 + 37 * r) * 1024 * 1024, numa=r * 2 // max(1, nprocs))
            )
    return items


LAGGING_RANK = 5
"""``straggler_script``'s rank that keeps writing but falls behind its peers' steps."""
SILENT_RANK = 6
"""``straggler_script``'s rank that stops writing half way."""


def straggler_script(nprocs: int = 8, *, rounds: int = 12) -> list[ScriptItem]:
    """Every rank starts; then ``rounds`` checkpoints, at each of which every rank logs one
    step line: the others 10 steps a round, ``LAGGING_RANK`` 6 (it falls behind the median
    step), ``SILENT_RANK`` nothing after half the rounds (silent while its peers write).
    The test advances its clock by a second before each ``advance()``, so every rank's usual
    gap between lines is one second."""
    items: list[ScriptItem] = []
    for r in range(nprocs):
        items.append(
            RankStateChanged(r, RankState.STARTING, RankState.RUNNING, BASE_PID + r, t=EPOCH)
        )
        cpu = [40 + ((r * 7 + i * 13) % 55) for i in range(16)]
        items.extend(_stats(r, cpu, (800 + 29 * r) << 20))
    for i in range(1, rounds + 1):
        items.append(Checkpoint(f"round {i}"))
        for r in range(nprocs):
            if r == SILENT_RANK and i > rounds // 2:
                continue
            step = 6 * i if r == LAGGING_RANK else 10 * i + r % 2
            loss = 2.5 / (1 + 0.01 * step)
            items.append(RankOutput(r, "stdout", (f"step {step:5d} | loss {loss:.4f}",)))
    return items


async def play_rounds(
    pilot: Any, engine: Any, advance_clock: Any, rounds: int = 12, *, seconds: float = 1.0
) -> None:
    """Play ``straggler_script``'s rounds on the app of ``pilot``: the app's clock moves
    ``seconds`` before each round, and each round is drawn before the next (rank 0 writes a
    line every round: the wait is for its count)."""
    import time

    app = pilot.app
    for i in range(1, rounds + 1):
        advance_clock(seconds)
        engine.advance()
        deadline = time.monotonic() + 10
        while app.run_view.ranks[0].lines_seen < i:
            if time.monotonic() > deadline:
                raise AssertionError(f"round {i} was not drawn")
            await pilot.pause(0.02)
    await pilot.pause(0.1)


TRACEBACK = """Traceback (most recent call last):
  File "/job/train.py", line 88, in <module>
    main()
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/\
errors/__init__.py", line 357, in wrapper
    return f(*args, **kwargs)
  File "/job/train.py", line 81, in main
    loss = train_step(model, batch, step)
  File "/job/train.py", line 52, in train_step
    raise FloatingPointError(f"loss is nan at step {step} [rank{rank}]")
FloatingPointError: loss is nan at step 23 [rank2]"""


def failure_script(run_dir: str | os.PathLike[str] | None = None) -> list[ScriptItem]:
    """4 ranks: rank 2 raises through ``@record`` (error.json), ranks 0 and 1 then fail on a
    broken collective without error.json, rank 3 keeps running.

    With ``run_dir`` the error.json of rank 2 is written there (as the real rank would)."""
    items = running_script(4, steps=24)
    info = scripted_info(4, run_dir=run_dir or "/nonexistent/rankvisor/run_0")
    error_file = info.ranks[2].error_file
    data: dict[str, Any] = {
        "message": {
            "message": "FloatingPointError: loss is nan at step 23 [rank2]",
            "extraInfo": {"py_callstack": TRACEBACK, "timestamp": str(int(EPOCH + 42))},
        }
    }
    if run_dir is not None:
        Path(error_file).parent.mkdir(parents=True, exist_ok=True)
        Path(error_file).write_text(json.dumps(data))
    root = ScriptedFailure(
        2, BASE_PID + 2, 1, error_file, data, data["message"]["message"], int(EPOCH + 42)
    )
    items += [
        RankOutput(2, "stderr", tuple(TRACEBACK.splitlines())),
        RankStateChanged(
            2,
            RankState.RUNNING,
            RankState.FAILED,
            BASE_PID + 2,
            exitcode=1,
            failure=cast("ProcessFailure", root),
            t=EPOCH + 42,
            exit_cause=classify(ExitFacts(1, message=root.message)),
        ),
    ]
    collective = (
        "Traceback (most recent call last):",
        '  File "/job/train.py", line 49, in train_step',
        "    dist.all_reduce(grads)",
        "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:29500",
    )
    for r, delay in ((0, 1), (1, 2)):
        failure = ScriptedFailure(
            r, BASE_PID + r, 1, info.ranks[r].error_file, {}, "", int(EPOCH + 42 + delay)
        )
        items += [
            RankOutput(r, "stderr", collective),
            RankStateChanged(
                r,
                RankState.RUNNING,
                RankState.FAILED,
                BASE_PID + r,
                exitcode=1,
                failure=cast("ProcessFailure", failure),
                t=EPOCH + 42 + delay,
                exit_cause=classify(ExitFacts(1, stderr_tail="\n".join(collective))),
            ),
        ]
    items.append(
        SupervisorNotice("rank 2 failed (exit 1): FloatingPointError: loss is nan", "error")
    )
    return items


SUSPECT_REASON = (
    "rank 3: silent 6.1 s before the first failure; last line: "
    "UserWarning: rank 3: WARNING data loader worker has not answered (stalled)"
)


def suspect_script(run_dir: str | os.PathLike[str] | None = None) -> list[ScriptItem]:
    """``failure_script``, but rank 3 had stalled before it (a last warning, then nothing)
    and the run ends with the supervisor naming rank 3 the suspect (rank 2 stays torch's
    root cause)."""
    from rankvisor.engine.events import RunFinished, Suspect
    from rankvisor.engine.testing import ScriptedResult

    items = failure_script(run_dir)
    stall = "UserWarning: rank 3: WARNING data loader worker has not answered (stalled)"
    # Before rank 2's failure: rank 3's last line.
    at = next(i for i, x in enumerate(items) if isinstance(x, RankStateChanged) and x.rank == 2)
    items.insert(at, RankOutput(3, "stderr", (stall,)))
    info = scripted_info(4, run_dir=run_dir or "/nonexistent/rankvisor/run_0")
    items.append(
        RankStateChanged(3, RankState.RUNNING, RankState.SIGNALLED, BASE_PID + 3, exitcode=-9,
                         signal_name="SIGKILL", caused_by_us=True, t=EPOCH + 55)
    )
    failures = {
        x.rank: x.failure for x in items
        if isinstance(x, RankStateChanged) and x.failure is not None
    }
    result = ScriptedResult(
        failures=failures,
        stdouts={r.rank: r.stdout_path for r in info.ranks},
        stderrs={r.rank: r.stderr_path for r in info.ranks},
    )
    suspect = Suspect(
        3, SUSPECT_REASON, (3,), (SUSPECT_REASON,), "silence",
        first_failure_ns=int((EPOCH + 42) * 1e9), last_line=stall, last_line_stream="stderr",
        last_line_no=0, last_output_ns=int((EPOCH + 36) * 1e9),
    )
    items.append(RunFinished(cast("RunProcsResult", result), 0, 2, suspect))
    return items


def write_timeline_files(run_dir: str | os.PathLike[str]) -> None:
    """The logs of ``suspect_script``'s run, with arrival indexes at fixed times: ranks
    0-2 write a step line each second from EPOCH, rank 3 stops at EPOCH + 36 with its stall
    warning, rank 2 raises at EPOCH + 42 and ranks 0 and 1 fail in the collective after."""
    import struct

    from rankvisor.engine.rundir.arrival import MAGIC, arrival_path

    info = scripted_info(4, run_dir=run_dir)
    sec = 1_000_000_000
    base = int(EPOCH * sec)
    written: dict[tuple[int, int], list[str]] = {}
    records: dict[int, list[tuple[int, int, int]]] = {r: [] for r in range(4)}

    def put(rank: int, stream: int, t_s: float, *lines: str) -> None:
        got = written.setdefault((rank, stream), [])
        got.extend(lines)
        records[rank].append((stream, len(got), base + int(t_s * sec)))

    for step in range(40):
        for r in range(4):
            if r == 3 and step >= 36:
                continue
            put(r, 0, step + r * 0.01, f"step {step:3d} | loss {2.0 / (step + 1):.4f}")
    put(3, 1, 36.02, "UserWarning: rank 3: WARNING data loader worker has not answered (stalled)")
    put(2, 1, 42.0, *TRACEBACK.splitlines())
    for r, delay in ((0, 1), (1, 2)):
        put(r, 1, 42 + delay, "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed "
            "by peer [10.0.0.2]:29500")
    for r in range(4):
        out, err = info.ranks[r].stdout_path, info.ranks[r].stderr_path
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        for stream, path in ((0, out), (1, err)):
            Path(path).write_text("".join(x + "\n" for x in written.get((r, stream), [])))
        with open(arrival_path(out, err), "wb") as f:
            f.write(MAGIC)
            for stream, end, t in records[r]:
                f.write(struct.pack("<Qq", end << 1 | stream, t))


_DEMO = "/home/user/rankvisor/tui/demo_job.py"
_RECORD = "/home/user/.venv/lib/python3.11/site-packages/torch/distributed/elastic/" \
    "multiprocessing/errors/__init__.py"


def recorded_stacks(nprocs: int = 4, stalled: int = 3) -> StackDump:
    """A dump recorded from ``rankvisor demo`` (``rankvisor stack --json`` while rank 3 was
    stalled, the others polling their all_reduce), with fixed pids, paths and time: rank
    ``stalled`` in ``_stall``, the others in ``_train``'s wait loop."""
    tail = (Frame("record.<locals>.wrap.<locals>.wrapper", _RECORD, 367),
            Frame("main", _DEMO, 169), Frame("<module>", _DEMO, 182))
    ranks = []
    for r in range(nprocs):
        if r == stalled:
            frames = (Frame("_stall", _DEMO, 78), Frame("_train", _DEMO, 113), *tail)
        else:
            frames = (Frame("_train", _DEMO, 136), *tail)
        pid = BASE_PID + r
        ranks.append(RankStack(r, pid, (ThreadStack(pid, "MainThread", frames, main=True),),
                               dumped_pid=pid))
    return StackDump(EPOCH + 75.25, tuple(ranks), merge(ranks), reason="asked")


def recorded_collectives(nprocs: int = 3, skipped: int = 1, at: int = 5) -> dict[str, Any]:
    """``ReadCollectives``' answer recorded from tests/bin/fr_gloo_job.py --skip 1
    --heartbeat (3 gloo ranks; rank 1 never entered all_reduce #5, the others wait in it),
    for ``nprocs`` ranks: rank ``skipped``'s last was #``at - 1``, every other rank's is #``at``
    and its last completed #``at - 1``; gloo reports no start."""
    def coll(seq: int) -> dict[str, Any]:
        return {"op": "all_reduce", "seq": seq, "sizes": [[4]]}

    ranks = [{"rank": r, "groups": [{
        "pg": "0", "desc": "default_pg",
        "last_enqueued": coll(at - 1 if r == skipped else at), "last_started": None,
        "last_completed": coll(at - 1)}]} for r in range(nprocs)]
    entered = tuple(r for r in range(nprocs) if r != skipped)
    verdict = Verdict("0", "default_pg", "all_reduce", at, entered, (skipped,),
                      {skipped: at - 1})
    return {"ranks": ranks, "verdicts": [verdict.to_json()], "source": "live", "path": ""}


PDB_WHERE = "train.py:52 in train_step"
"""Where ``pdb_script``'s rank stopped, as the engine words it."""


def pdb_prompt(rank: int = 0, *, since: float = EPOCH + 30) -> Prompt:
    """``rank`` at pdb's prompt in ``train_step``: ``p x`` prints 41, ``p loss`` a tensor,
    ``n`` steps a line, ``c`` goes on (the rank is released); anything else is an error."""
    return Prompt(
        rank,
        "(Pdb) ",
        PDB_WHERE,
        since=since,
        answers={
            "p x": Answer(("41",)),
            "p loss": Answer(("tensor(2.0312, grad_fn=<AddBackward0>)",)),
            "n": Answer(("> /job/train.py(53)train_step()", "-> loss.backward()")),
            "c": RELEASE,
        },
        otherwise=Answer(("*** NameError: name is not defined",)),
    )


def pdb_script(nprocs: int = 4, *, rank: int = 0, steps: int = 24) -> list[ScriptItem]:
    """Every rank trains (``running_script``); ``rank`` has hit ``breakpoint()`` in
    ``train_step``: pdb's ``> file(line)function()`` and ``-> source`` lines, then its
    ``(Pdb)`` prompt, waiting for a person (the run's stdin must be "pipe" to answer)."""
    items = running_script(nprocs, steps=steps)
    # rank 0's progress bar is not drawn at a breakpoint
    items = [x for x in items if not (isinstance(x, RankOutput) and x.partial)]
    items.append(RankOutput(rank, "stdout", (
        "> /job/train.py(52)train_step()", "-> loss = model(batch).sum() + x",
    )))
    items.append(pdb_prompt(rank))
    return items
