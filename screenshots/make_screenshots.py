"""Regenerate the SVG screenshots in this folder (the README shows them).

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
    """S: every rank's stack merged; the odd rank (3, stalled in its data loader) first."""
    engine = ScriptedSupervisor(scripted_info(4), running_script(4), stacks=recorded_stacks())
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
    parser.add_argument("scenes", nargs="*", choices=[*SCENES, []], help="default: all")
    args = parser.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rankvisor-shots-") as tmp:
        for name in args.scenes or SCENES:
            path = asyncio.run(shoot(name, SCENES[name], (cols, rows), out, Path(tmp)))
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
