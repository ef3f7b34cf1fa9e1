"""Regenerate the SVG screenshots in this folder (README.md and the pages of docs/ show them).

    python screenshots/make_screenshots.py [--size 120x36] [--out screenshots]

Each scene is the app on the scripted engine (``engine.testing.ScriptedSupervisor``) playing a
scenario of ``tests/scenarios.py`` (the repository root goes on ``sys.path`` for it), driven
headless through Textual's Pilot, so the pictures show fixed pids and times and come out the
same on every machine. The snapshot tests (tests/tui/test_snapshots.py) draw the same scenes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rankvisor.engine.events import RankStateChanged, SupervisorNotice  # noqa: E402
from rankvisor.engine.handle import TerminateRanks  # noqa: E402
from rankvisor.engine.states import RankState  # noqa: E402
from rankvisor.engine.testing import BASE_PID, Prompt, ScriptedSupervisor  # noqa: E402
from rankvisor.tui.app import RankvisorApp, make_app  # noqa: E402

from tests.scenarios import (  # noqa: E402
    failure_script,
    pdb_script,
    play_rounds,
    recorded_collectives,
    recorded_stacks,
    running_script,
    scripted_info,
    straggler_script,
    suspect_script,
    write_timeline_files,
)

Scene = Callable[[Path], tuple[RankvisorApp, Callable[..., Awaitable[None]] | None]]


async def _settle(pilot) -> None:  # type: ignore[no-untyped-def]
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause(0.05)


def grid(tmp: Path) -> tuple[RankvisorApp, None]:
    """4 ranks training: one pane each, coloured by state."""
    return make_app(ScriptedSupervisor(scripted_info(4), running_script(4))), None


def countdown(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """Rank 3 got SIGTERM: its pane counts down to SIGKILL; rank 1 had exited cleanly."""
    clock = [1000.0]
    script = [
        *running_script(4),
        RankStateChanged(1, RankState.RUNNING, RankState.SUCCEEDED, BASE_PID + 1, exitcode=0),
    ]
    engine = ScriptedSupervisor(scripted_info(4), script, clock=lambda: clock[0])
    app = make_app(engine, clock=lambda: clock[0])

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("l", "j")
        engine.execute(TerminateRanks((3,)))
        clock[0] += 12.4
        await _settle(pilot)
        pilot.app._tick()

    return app, drive


def errors(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """The error view: root cause first, with its error.json traceback."""
    app = make_app(ScriptedSupervisor(scripted_info(4), failure_script()))

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("e")
        await _settle(pilot)

    return app, drive


def failed_grid(tmp: Path) -> tuple[RankvisorApp, None]:
    """The grid after rank 2 failed first: ROOT CAUSE on its pane."""
    return make_app(ScriptedSupervisor(scripted_info(4), failure_script())), None


def zoom_search(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """Rank 2 zoomed: its stdout.log from disk, 'epoch 2' found and highlighted."""
    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp / "zoom"), running_script(4, steps=120), write_files=True
    )

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("j", "enter")
        await _settle(pilot)
        await pilot.press("slash", *"epoch 2", "enter")
        await _settle(pilot)

    return make_app(engine), drive


def filtered(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """filtered_stdout.log and filtered_stderr.log of the run, live."""
    engine = ScriptedSupervisor(
        scripted_info(4, run_dir=tmp / "filtered"), running_script(4), write_files=True
    )

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("f")
        await _settle(pilot)

    return make_app(engine), drive


def ranks_32(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """32 ranks: tiles beside the selected rank's pane."""
    app = make_app(ScriptedSupervisor(scripted_info(32), running_script(32, steps=6)))

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press(*["j"] * 5)
        await _settle(pilot)

    return app, drive


def help_screen(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """The keys (?)."""
    app = make_app(ScriptedSupervisor(scripted_info(4), running_script(4)))

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("question_mark")

    return app, drive


def detach(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """q on a run that has a supervisor process of its own: detach (the default) or end it."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), detachable=True)
    app = make_app(engine)

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("q")

    return app, drive


def timeline(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """The timeline (a): every rank's lines as they arrived, opened at the suspect's last line
    (rank 3 stalled), the first-failure rule, rank 2's traceback and the knock-on errors."""
    run_dir = tmp / "timeline"
    write_timeline_files(run_dir)
    app = make_app(ScriptedSupervisor(scripted_info(4, run_dir=run_dir), suspect_script()))

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("a")
        await _settle(pilot)

    return app, drive


def errors_suspect(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """The error view of a hang: rank 3 went silent first (SUSPECT, with its evidence), then
    rank 2 gave up waiting and raised (torch's root cause), the others fell as knock-ons."""
    run_dir = tmp / "errors-suspect"
    write_timeline_files(run_dir)
    app = make_app(ScriptedSupervisor(scripted_info(4, run_dir=run_dir), suspect_script()))

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("e")
        await _settle(pilot)

    return app, drive


def stacks(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """S: torch's Flight Recorder says rank 3 never entered the all_reduce its peers wait in
    (the verdict, a row per rank); below, every rank's stack merged, rank 3's (stalled in
    its data loader) first."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), stacks=recorded_stacks(),
                                collectives=recorded_collectives(4, skipped=3))
    app = make_app(engine)

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("S")
        await _settle(pilot)

    return app, drive


def stragglers(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """8 ranks: rank 5 falls behind the median step, rank 6 goes silent; the strip above the
    ranks and their borders mark them."""
    clock = [1000.0]

    def advance(seconds: float) -> None:
        clock[0] += seconds

    engine = ScriptedSupervisor(scripted_info(8), straggler_script(8), clock=lambda: clock[0])
    app = make_app(engine, clock=lambda: clock[0])

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await play_rounds(pilot, engine, advance, 12)

    return app, drive


def debug(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """Rank 0 at a pdb prompt (breakpoint() in train_step), rank 2 asking a question
    (input()); the input line (i) open on rank 0: "p x" answered 41, "p loss" a tensor, "c"
    being typed."""
    script = [*pdb_script(4), Prompt(2, "checkpoint exists, overwrite? [y/N] ")]
    engine = ScriptedSupervisor(scripted_info(4, stdin="pipe"), script)
    app = make_app(engine)

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("i")
        await _settle(pilot)
        for line in ("p x", "p loss"):
            await pilot.press(*line, "enter")
            await _settle(pilot)
        await pilot.press("c")
        await _settle(pilot)
        pilot.app._tick()

    return app, drive


def cluster(tmp: Path) -> tuple[RankvisorApp, None]:
    """One viewer on node01 with every rank of a 2 x 2 job: node02's ranks in the same grid,
    each pane titled with its node and host (the engine's ``ClusterHandle`` hands the app
    global ranks and their places; here the scripted engine does)."""
    places = {r: f"node {r // 2} (node0{r // 2 + 1})" for r in range(4)}
    info = dataclasses.replace(scripted_info(4), node="node 0 of 2 (node01), every node's ranks",
                               rank_places=places)
    script = [*running_script(4),
              SupervisorNotice("node 1 (node02): connected through its door "
                               "10.213.7.2:41327", "information")]
    return make_app(ScriptedSupervisor(info, script)), None


def header_80(tmp: Path) -> tuple[RankvisorApp, Callable[..., Awaitable[None]]]:
    """80x24 after a hang: the header keeps the counts, the run's state and its clock beside
    the suspect and the root cause (the run's name gives way)."""
    app = make_app(ScriptedSupervisor(scripted_info(4), suspect_script()))

    async def drive(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot)

    return app, drive


SIZES: dict[str, tuple[int, int]] = {"header-80": (80, 24)}
"""Scenes drawn at a size of their own, whatever ``--size`` says."""


LS_NOW = 1_780_000_000.0
"""The clock ``ls`` reads in its screenshot (its durations and dates never move)."""


def ls_screenshot(out: Path, tmp: Path) -> Path:
    """``rankvisor ls`` over five runs of a day's work: newest first, each with when it
    started, how long it ran, how it ended and its command (a running run, a failed one, a
    stale one whose supervisor was killed, a demo, a success)."""
    import io
    import os
    import time
    from contextlib import redirect_stdout

    from rankvisor.engine import clock
    from rankvisor.engine.control import registry
    from rankvisor.engine.control.status import process_start_time, write_status
    from rankvisor.tui.cli import main as cli_main
    from rich.console import Console
    from rich.text import Text

    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ["RANKVISOR_STATE_DIR"] = str(tmp / "ls-state")
    runs = [  # (run id, started ago, lasted, state, exit code, command)
        ("3f6c2d0e-5d41-4b1e-9a57-0d7c1c2b9e11", 754, None, "running", None,
         ["rankvisor", "run", "--nproc-per-node", "8", "train.py", "--config", "llama-7b.yaml"]),
        ("b0e9d7a4-1c3f-4f0e-8d6e-2a9f4c5b7d22", 3_900, 612, "finished", 1,
         ["rankvisor", "run", "--nproc-per-node", "4", "train.py", "--lr", "3e-4"]),
        ("e51a7f20-9b8c-4d3e-a1f2-6c7d8e9f0a33", 9_000, 2_710, "stale", None,
         ["rankvisor", "run", "--nproc-per-node", "4", "-m", "trainer.ddp", "--epochs", "3"]),
        ("7c2b4e61-0f9d-4a8b-b3c5-8e1d2f3a4b44", 86_400, 34, "finished", 1,
         ["rankvisor", "demo"]),
        ("1d8e3f92-7a6b-4c5d-9e0f-1a2b3c4d5e55", 90_000, 3_605, "finished", 0,
         ["rankvisor", "run", "--nproc-per-node", "2", "finetune.py", "--data", "sft.jsonl"]),
    ]
    me, my_start = os.getpid(), process_start_time(os.getpid()) or 0
    for run_id, ago, lasted, state, code, command in runs:
        run_dir = Path("/work/runs") / f"{run_id}_{run_id[:8]}"
        real_dir = tmp / "ls-runs" / run_dir.name
        real_dir.mkdir(parents=True)
        started = LS_NOW - ago
        ranks = [{"rank": r, "state": "running" if state == "running" else "succeeded"}
                 for r in range(int(command[3]) if command[1] == "run" else 4)]
        write_status(str(real_dir), {
            "schema": 1, "run_id": run_id, "run_dir": str(run_dir), "socket": "",
            "supervisor_pid": me, "supervisor_start": my_start if state == "running" else 1,
            "state": "finished" if state == "finished" else "running",
            "finished": state == "finished", "exitcode": code, "attempt": 0, "ranks": ranks,
            "started": started, "updated": started + (lasted or 0), "command": command,
            "cwd": "/work/project",
        })
        entry = registry.register(run_id, str(real_dir), f"/tmp/{run_id[:8]}.sock",
                                  supervisor_pid=me, started=started)
        assert entry.run_dir == str(real_dir)
    buf = io.StringIO()
    # The listing reads the engine's one clock: a running run's duration is counted to LS_NOW.
    with redirect_stdout(buf), clock.using(clock.FakeClock(wall=LS_NOW)):
        cli_main(["ls"])
    text = buf.getvalue().replace(str(tmp / "ls-runs"), "/work/runs")
    width = max(len(line) for line in text.splitlines()) + 2
    console = Console(record=True, width=width, file=io.StringIO(), color_system="truecolor")
    console.print(Text("$ rankvisor ls", "bold"))
    console.print(Text(text.rstrip("\n")), highlight=False, soft_wrap=True)
    path = out / "ls.svg"
    console.save_svg(str(path), title="rankvisor ls")
    return path


SCENES: dict[str, Scene] = {
    "grid": grid,
    "countdown": countdown,
    "failed-grid": failed_grid,
    "errors": errors,
    "zoom-search": zoom_search,
    "filtered": filtered,
    "ranks-32": ranks_32,
    "help": help_screen,
    "detach": detach,
    "errors-suspect": errors_suspect,
    "timeline": timeline,
    "stacks": stacks,
    "stragglers": stragglers,
    "debug": debug,
    "cluster": cluster,
    "header-80": header_80,
}


async def shoot(name: str, scene: Scene, size: tuple[int, int], out: Path, tmp: Path) -> Path:
    app, drive = scene(tmp)
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        if drive is not None:
            await drive(pilot)
        await _settle(pilot)
        path = app.save_screenshot(f"{name}.svg", path=str(out))
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="120x36", help="terminal size, COLSxROWS")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent))
    parser.add_argument("scenes", nargs="*", choices=[*SCENES, "ls", []], help="default: all")
    args = parser.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rankvisor-shots-") as tmp:
        for name in args.scenes or [*SCENES, "ls"]:
            if name == "ls":
                print(ls_screenshot(out, Path(tmp)))
                continue
            size = SIZES.get(name, (cols, rows))
            path = asyncio.run(shoot(name, SCENES[name], size, out, Path(tmp)))
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
