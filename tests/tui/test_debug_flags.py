"""``run``'s debugging flags: ``--post-mortem [RANKS]`` before the script, ``--debugpy
RANKS[:BASEPORT]``, ``--debugpy-wait``, and their one-line refusals (not a Python rank, a
Python without debugpy, ports out of range)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from rankvisor.engine.supervisor import debug_options as dbg
from rankvisor.engine.supervisor.debug_options import DebugOptions, debugpy_banner, vscode_launch
from rankvisor.engine.supervisor.run_config import ConfigError
from rankvisor.tui.cli.run_args import parse_job

from tests.conftest import BIN

pytestmark = pytest.mark.processes

SCRIPT = str(BIN / "say.py")


def _debug(*argv: str):
    return parse_job("run", [*argv]).config


def test_post_mortem_takes_its_ranks_optionally_before_the_script(tmp_path: Path) -> None:
    log = f"--log-dir={tmp_path}"
    every = _debug(log, "--nproc-per-node", "3", "--post-mortem", SCRIPT, "--post-mortem", "x")
    assert every.debug == DebugOptions(post_mortem=frozenset({0, 1, 2}))
    # The script's own arguments are its own, even one spelled like ours.
    assert every.args[-2:] == ("--post-mortem", "x")
    some = _debug(log, "--nproc-per-node", "4", "--post-mortem", "1,3", SCRIPT)
    assert some.debug is not None and some.debug.post_mortem == {1, 3}
    assert _debug(log, "--post-mortem", "--nproc-per-node", "2", SCRIPT).debug.post_mortem == {
        0, 1,
    }
    assert _debug(log, SCRIPT).debug is None
    # The ranks it wraps run under the bootstrap; what a person reads stays the same. Every
    # other Python rank does too, for its worker server, unless --no-collectives.
    assert some.launch_argv(1)[1:3] == ("-u", "-c") and some.argv(1)[1] == "-u"
    assert some.launch_argv(0)[1:3] == ("-u", "-c")
    plain = _debug(log, "--nproc-per-node", "4", "--post-mortem", "1,3", "--no-collectives",
                   SCRIPT)
    assert plain.launch_argv(0) == plain.argv(0) and plain.launch_argv(1)[1:3] == ("-u", "-c")


def test_debugpy_ranks_and_base_port(tmp_path: Path) -> None:
    config = _debug(f"--log-dir={tmp_path}", "--nproc-per-node", "2", "--debugpy", "0-1:6100",
                    "--debugpy-wait", SCRIPT)
    debug = config.debug
    assert debug == DebugOptions(debugpy=frozenset({0, 1}), debugpy_port=6100, debugpy_wait=True)
    assert debug.env(1) == {"RANKVISOR_DEBUGPY": "127.0.0.1:6101", "RANKVISOR_DEBUGPY_WAIT": "1"}
    launch = vscode_launch(debug, "/srv/job")
    assert [c["connect"]["port"] for c in launch["configurations"]] == [6100, 6101]
    assert launch["compounds"][0]["configurations"] == [
        c["name"] for c in launch["configurations"]
    ]
    json.dumps(launch)  # a launch.json
    banner = debugpy_banner(debug, "/runs/r/launch.json", host="gpu7")
    assert "rank 0 on 127.0.0.1:6100, rank 1 on 127.0.0.1:6101" in banner
    assert banner.endswith("ssh -L 6100:127.0.0.1:6100 -L 6101:127.0.0.1:6101 gpu7")


@pytest.mark.parametrize(("argv", "words"), [
    (["--post-mortem", "--no-python", "/bin/true"], "debugs Python ranks; true is not Python"),
    (["--nproc-per-node", "2", "--post-mortem", "2", SCRIPT], "names rank 2, but ranks are 0..1"),
    (["--nproc-per-node", "2", "--debugpy", "all:65535", SCRIPT], "--debugpy port 65535"),
    (["--debugpy", "0:x", SCRIPT], "'x' is not a port"),
    (["--debugpy-wait", SCRIPT], "--debugpy-wait needs --debugpy RANKS"),
    (["--post-mortem", "-m"], None),
])
def test_what_cannot_work_is_refused_in_one_line(
    tmp_path: Path, argv: list[str], words: str | None
) -> None:
    if words is None:
        with pytest.raises(SystemExit):
            _debug(f"--log-dir={tmp_path}", *argv)
        return
    with pytest.raises(ConfigError) as e:
        _debug(f"--log-dir={tmp_path}", *argv)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_debugpy_without_debugpy_is_refused_with_the_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        dbg.importlib.util, "find_spec",
        lambda name, *a: None if name.split(".")[0] == "debugpy" else real(name, *a),
    )
    with pytest.raises(ConfigError) as e:
        _debug(f"--log-dir={tmp_path}", "--debugpy", "0", SCRIPT)
    assert str(e.value) == (
        "--debugpy needs debugpy in the ranks' Python: pip install 'rankvisor[debug]'"
    )


def test_another_python_is_asked_in_a_subprocess(tmp_path: Path) -> None:
    assert dbg.missing_modules(sys.executable, ["json", "no_such_module_here"]) == [
        "no_such_module_here"
    ]
    # Another interpreter (PYTHON_EXEC) answers for itself: one run with -I (no
    # environment, no user site, no editable installs' paths) finds no rankvisor.
    isolated = tmp_path / "python3"
    isolated.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    isolated.chmod(0o755)
    assert dbg.missing_modules(str(isolated), ["json", "rankvisor.engine", "debugpy"]) == [
        "rankvisor.engine", "debugpy",
    ]
    assert dbg.missing_modules("/bin/false", ["json"]) == ["json"]  # not a Python at all


def test_headless_post_mortem_from_the_command_line(tmp_path: Path) -> None:
    """``rankvisor run --headless --post-mortem 1``: the ranks share the terminal's stdin
    (here a pipe), ``p y`` prints 7, ``c`` ends rank 1; the exit code is the one without the
    flag, and the report names rank 1 as the root cause either way."""
    import subprocess

    job = str(BIN / "post_mortem_job.py")

    def run(*flags: str, answers: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rankvisor.tui", "run", "--headless", f"--log-dir={tmp_path}",
             "--nproc-per-node", "2", *flags, job],
            input=answers, capture_output=True, text=True, timeout=120,
        )

    plain = run()
    held = run("--post-mortem", "1", answers="p y\nc\n")
    assert held.returncode == plain.returncode == 1
    assert "(Pdb) 7" in held.stdout
    for done in (plain, held):
        assert "root cause: rank 1" in (done.stdout + done.stderr).lower().replace("  ", " ")


async def test_the_debugpy_lines_stay_where_a_person_finds_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: the attach lines came only as one notice, joined by newline marks, gone from
    the notice line at the next one. Now: a notice a line in the app, once on the terminal
    at start, and a ``debugpy`` section of ``rankvisor status``."""
    from rankvisor.engine.events import SupervisorNotice
    from rankvisor.engine.states import RankState
    from rankvisor.engine.supervisor.debug_options import write_launch
    from rankvisor.engine.testing import ScriptedSupervisor
    from rankvisor.tui.app import make_app
    from rankvisor.tui.cli import main
    from rankvisor.tui.cli.launch import say_debugpy

    from tests.control.runs import make_run
    from tests.scenarios import running_script, scripted_info

    job = parse_job("run", [f"--log-dir={tmp_path}", "--nproc-per-node", "2",
                            "--debugpy", "0-1:6100", SCRIPT])
    debug = job.config.debug
    entry = make_run(tmp_path, "dbg", pid=os.getpid(), states=[RankState.RUNNING] * 2)
    launch = write_launch(debug, entry.run_dir, "/srv/job")
    banner = debugpy_banner(debug, launch, host="gpu7")
    # In the app: a notice a line, the newest on the notice line, none with a mark.
    engine = ScriptedSupervisor(scripted_info(2), [*running_script(2),
                                                   SupervisorNotice(banner, "warning")])
    app = make_app(engine)
    async with app.run_test(size=(120, 36)):
        notices = [n.message for n in app.notices]
    assert notices[-3:] == banner.splitlines()
    assert not any("\u2424" in n for n in notices)
    # Once on the terminal at start (stderr, left there when the app's screen goes).
    say_debugpy(job, entry.run_dir)
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and f"{launch}\n" in err and "-L 6101:127.0.0.1:6101" in err
    # And for as long as the run dir is kept: `rankvisor status`.
    assert main(["status", entry.run_dir]) == 0
    out = capsys.readouterr().out
    section = out[out.index("  debugpy\n"):].splitlines()
    assert section[1] == "    debugpy: rank 0 on 127.0.0.1:6100, rank 1 on 127.0.0.1:6101"
    assert section[2].endswith(launch)
    assert section[3].startswith("    from a laptop: ssh -L 6100:127.0.0.1:6100 -L 6101:")
